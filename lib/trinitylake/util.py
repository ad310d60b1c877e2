"""Small helpers shared by the CLI, the jobs, the config loader and the Spark engines."""

from __future__ import annotations

import re
import sys
from typing import TYPE_CHECKING, TypeAlias

from trinitylake import lazy
from trinitylake.errors import ValidationError

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession as ClassicSession
    from pyspark.sql.connect.session import SparkSession as ConnectSession
else:  # `tlake --help` imports this module, and no pyarrow
    pa = lazy.module("pyarrow", globals(), "pa")

#: A job's Spark session: classic (py4j) or a Spark Connect client; the two classes share no
#: base, so code that works on both is typed against their union.
Session: TypeAlias = "ClassicSession | ConnectSession"

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


def is_connect_session(spark: object) -> bool:
    """True for a Spark Connect client session (``pyspark.sql.connect``: no SparkContext, no
    RDDs). By module name, so that asking never imports pyspark."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def refuse_pandas_for_pyarrow() -> None:
    """Spare a process of ours (the CLI, a spark-submit job) pyarrow's import of pandas.

    pyarrow imports pandas (0.4-0.9 s here) the first time it converts a Python list
    (``pa.array``, ``Table.from_pylist``, typed or not), to tell pandas objects and missing
    values from plain ones, in lists that are never pandas objects here. A failed import costs
    it nothing: it answers "no pandas" and tries again at the next conversion. So a finder
    refuses ``pandas`` while pyspark (which needs it) is not imported; from pyspark's first
    import on, pandas imports as usual. Call it at the start of a process we own: a library
    caller's process is left alone (pandas objects may be handed to pyarrow there).
    """

    if "pandas" not in sys.modules and _RefusePandas not in sys.meta_path:
        sys.meta_path.insert(0, _RefusePandas)


class _RefusePandas:
    """The module finder of `refuse_pandas_for_pyarrow`."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:

        if (name == "pandas" or name.startswith("pandas.")) and "pyspark" not in sys.modules:
            raise ImportError("pandas is not imported in this process until pyspark is")
        return None


def pandas_back_for_pyarrow() -> None:
    """Undo `refuse_pandas_for_pyarrow` (before a Spark session starts): pyarrow, which took
    pandas for absent, imports it now and treats pandas objects as such again."""

    if _RefusePandas not in sys.meta_path:
        return
    sys.meta_path.remove(_RefusePandas)

    try:  # a conversion that needs pandas makes pyarrow import it (again)
        pa.table({"x": pa.array([], pa.int64())}).to_pandas()
    except ImportError:  # pandas is not installed: nothing to undo
        pass

