"""The control package stays engine-agnostic: no Spark, no CLI, no lakehouse layer."""

from __future__ import annotations

import subprocess
import sys


def test_control_imports_no_spark_click_or_lakehouse():
    code = (
        "import sys, trinitylake.control\n"
        "bad = [m for m in ('pyspark', 'click', 'trinitylake.lakehouse', 'trinitylake.cli') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
