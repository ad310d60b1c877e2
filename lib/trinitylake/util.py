"""Small helpers shared by the CLI, the jobs, the config loader and the Spark engines."""

from __future__ import annotations

import re
from typing import Any

from trinitylake.errors import ValidationError

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?\s*$")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}


def parse_duration_ms(value: str | int | float) -> int:
    """'7d', '36h', '10m', '90s', '500ms', '1w' or a number of milliseconds -> milliseconds."""
    if isinstance(value, bool):
        raise ValidationError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        return int(value)
    m = _DURATION_RE.match(str(value))
    if not m:
        raise ValidationError(f"cannot parse duration {value!r}; use e.g. 7d, 36h, 10m, 90s, 500ms")
    return int(float(m.group(1)) * _UNIT_MS[m.group(2) or "ms"])


def is_connect_session(spark: Any) -> bool:
    """True for a Spark Connect client session (``pyspark.sql.connect``: no SparkContext, no
    RDDs). By module name, so that asking never imports pyspark."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
