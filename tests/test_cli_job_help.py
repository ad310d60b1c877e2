"""`tlake <job> --help` is one help text: click's format, each option once, every job option listed."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from trinitylake.cli import cli
from trinitylake.job_flags import job_command


@pytest.mark.parametrize("job", ["walk", "expire", "orphans"])
def test_one_help_text_per_job(job):
    out = CliRunner().invoke(cli, [job, "--help"]).output
    assert out.lower().count("usage:") == 1  # no second (argparse) usage block
    assert sum("--lakehouse" in line for line in out.splitlines()) <= 1
    assert sum(line.lstrip().startswith("--master") for line in out.splitlines()) == 1
    for param in job_command(job).params:
        flags = [f for f in param.opts if f.startswith("--")]
        if flags and flags[0] not in ("--lakehouse", "--control-uri", "--storage-option", "--master", "--help"):
            assert flags[0] in out, f"{job} --help lacks {flags[0]}"
