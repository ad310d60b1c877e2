"""Typed values of the job options: durations, timestamps, booleans, URIs, maps of
``KEY=VALUE`` pairs. Each parser takes a raw value (YAML, an environment variable, a flag or a
Python caller) and returns the normalized value, or raises ValueError with a one-line reason
(`trinitylake.config` adds where the value came from and which key it was).

Durations are integer milliseconds, written with a unit (``36h``, ``1d12h``, ``500ms``; a bare
number is refused); timestamps integer epoch milliseconds, UTC (ISO 8601, a date, or epoch
milliseconds).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime, timedelta
from typing import TYPE_CHECKING, Any

from trinitylake import lazy
from trinitylake.errors import InvalidURIError
from trinitylake.json_data import JsonObject
from trinitylake.redact import redact_value
from trinitylake.storage.uri import normalize_uri

if TYPE_CHECKING:
    import yaml
else:  # only a value given as text needs it, not `tlake --help`
    yaml = lazy.module("yaml", globals(), "yaml")

NULL_WORDS = frozenset({"null", "none", "~"})
_TRUE_WORDS = frozenset({"true", "yes", "on", "1"})
_FALSE_WORDS = frozenset({"false", "no", "off", "0"})
_DURATION_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}
_DURATION_TOKEN = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_DURATION_FULL = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d|w))+")
_SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# ---- value parsers ------------------------------------------------------------------------
# Each takes a raw value (from YAML, the environment, a flag or a Python caller) and returns
# the normalized value or raises ValueError with a one-line reason; the loader adds where the
# value came from and which key it was.


def parse_duration(value: object, *, bare_ms: bool = False) -> int:
    """Parse a duration into integer milliseconds.

    Accepts ``"7d"``, ``"36h"``, ``"10m"``, ``"90s"``, ``"500ms"``, ``"1w"``, compounds such as
    ``"1d12h"`` and decimals such as ``"1.5h"``. A duration needs its unit: a bare number
    (``5``, ``"5"``) is refused, because ``--older-than 5`` meant 5 ms to the machine and 5 days
    to its user. Zero is the one number without a unit (it is zero in every unit). With
    `bare_ms` (a Python caller's int, e.g. ``JobConfig.to_dict()`` passed back), an int is
    milliseconds; text never is.

    Raises:
        ValueError: not a duration, a number without a unit, or negative.

    Example:
        >>> parse_duration("10m"), parse_duration("1d12h"), parse_duration("500ms"), parse_duration(0)
        (600000, 129600000, 500, 0)
        >>> parse_duration(250, bare_ms=True)
        250
        >>> parse_duration("5")
        Traceback (most recent call last):
        ...
        ValueError: duration '5' has no unit: write 5s, 5m, 5h or 5d (or 5ms); a bare number is refused
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"expected a duration such as 7d, 36h, 10m, 90s or 500ms, got {value!r}")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"duration must not be negative, got {value}")
        if value == 0 or bare_ms:
            return value
        raise ValueError(_no_unit(str(value)))
    if isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        if re.fullmatch(r"\d+(?:\.\d+)?", text):
            if float(text) == 0:
                return 0
            raise ValueError(_no_unit(text))
        if _DURATION_FULL.fullmatch(text):
            total = sum(float(n) * _DURATION_UNITS_MS[u] for n, u in _DURATION_TOKEN.findall(text))
            return int(round(total))
    raise ValueError(f"expected a duration such as 7d, 36h, 10m, 90s or 500ms, got {value!r}")


def _no_unit(number: str) -> str:
    return (f"duration {number!r} has no unit: write {number}s, {number}m, {number}h or {number}d (or {number}ms); "
            "a bare number is refused")


def format_duration(ms: int) -> str:
    """Shortest exact spelling of a duration, e.g. ``604800000`` -> ``"7d"``."""
    for unit in ("w", "d", "h", "m", "s"):
        size = _DURATION_UNITS_MS[unit]
        if ms and ms % size == 0:
            return f"{ms // size}{unit}"
    return f"{ms}ms"


def parse_timestamp(value: object) -> int:
    """Parse a timestamp into integer epoch milliseconds (UTC).

    Accepts ISO-8601 (``2026-11-22T03:00:00Z``, ``2026-11-22T03:00:00+01:00``,
    ``2026-11-22``; naive means UTC), a ``datetime``/``date`` (YAML gives those), or an int
    (or digit string) of epoch milliseconds.

    Raises:
        ValueError: not a timestamp.

    Example:
        >>> parse_timestamp("2026-11-22T00:00:00Z"), parse_timestamp("2026-11-22"), parse_timestamp(1795305600000)
        (1795305600000, 1795305600000, 1795305600000)
    """
    if isinstance(value, bool) or value is None:
        raise ValueError(f"expected an ISO-8601 timestamp or epoch milliseconds, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"epoch milliseconds must not be negative, got {value}")
        return value
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return int(text)
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise ValueError(
                f"expected an ISO-8601 timestamp (e.g. 2026-11-22T03:00:00Z) or epoch milliseconds, got {text!r}"
            ) from None
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return (value - EPOCH) // timedelta(milliseconds=1)
    if isinstance(value, date):
        return (datetime(value.year, value.month, value.day, tzinfo=UTC) - EPOCH) // timedelta(milliseconds=1)
    raise ValueError(f"expected an ISO-8601 timestamp or epoch milliseconds, got {value!r}")


def format_timestamp(ms: int) -> str:
    """ISO-8601 UTC spelling of epoch milliseconds, e.g. ``2026-11-22T00:00:00.000Z``."""
    return (EPOCH + timedelta(milliseconds=ms)).strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


def _parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS | _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS
    raise ValueError(f"expected true or false, got {value!r}")


def _parse_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError(f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[+-]?\d+", value.strip()):
        return int(value.strip())
    raise ValueError(f"expected an integer, got {value!r}")


def _parse_versions(value: object) -> str | tuple[int, ...]:
    if isinstance(value, str):
        text = value.strip()
        if text.lower() == "retained":
            return "retained"
        items: Iterable[Any] = [p for p in text.split(",") if p.strip()]
    elif isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    elif isinstance(value, list | tuple):
        items = value
    else:
        raise ValueError(f"expected 'retained' or a list of version numbers, got {value!r}")
    versions = []
    for item in items:
        try:
            v = _parse_int(item)
        except ValueError:
            raise ValueError(f"expected 'retained' or a list of version numbers, got {value!r}") from None
        if v < 0:
            raise ValueError(f"version numbers are >= 0, got {v}")
        versions.append(v)
    if not versions:
        raise ValueError("the list of versions is empty; give 'retained' or at least one version")
    return tuple(sorted(set(versions)))


def _split_pairs(value: object) -> list[tuple[str, Any]]:
    """Key/value pairs from a mapping, a JSON object string, 'k=v,k=v' or a list of 'k=v'."""
    if isinstance(value, Mapping):
        return [(str(k), v) for k, v in value.items()]
    if isinstance(value, str):
        text = value.strip()
        if not text:
            return []
        if text.startswith("{"):
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise ValueError(f"not a JSON object: {e.msg}") from None
            if not isinstance(obj, dict):
                raise ValueError("expected a JSON object")
            return [(str(k), v) for k, v in obj.items()]
        value = text.split(",")
    if isinstance(value, list | tuple):
        pairs = []
        for item in value:
            if not isinstance(item, str) or "=" not in item or not item.split("=", 1)[0].strip():
                raise ValueError(f"expected KEY=VALUE, got {item!r}")
            key, _, val = item.partition("=")
            pairs.append((key.strip(), _TextValue(val.strip())))
        return pairs
    raise ValueError(f"expected a mapping of KEY: VALUE, got {value!r}")


class _TextValue(str):
    """A map value that arrived as text (flag or env): storage options get it YAML-typed."""


def _parse_storage_options(value: object) -> JsonObject:
    """fsspec options. Text values are typed (``true`` -> True, ``8`` -> 8); a dotted key
    from text (``client_kwargs.endpoint_url=...``) becomes a nested mapping. The keys and
    values are checked once the store is known, by the one checker of storage options
    (`trinitylake.config` calls `trinitylake.storage.options.check_storage_options` for an S3
    lakehouse or target: an unknown key is refused, naming the known ones; ``region`` goes where
    each client takes it)."""
    out: dict[str, Any] = {}
    for key, val in _split_pairs(value):
        if isinstance(val, _TextValue):
            val = _type_text(val)
            parts = key.split(".")
        else:
            parts = [key]
        target = out
        for part in parts[:-1]:
            nested = target.setdefault(part, {})
            if not isinstance(nested, dict):
                raise ValueError(f"storage option {part!r} is both a value and a mapping")
            target = nested
        target[parts[-1]] = _json_safe_value(val, key)
    return out


def _type_text(text: str) -> Any:
    """``true`` -> True, ``8`` -> 8, ``1.5`` -> 1.5, ``null`` -> None; anything else stays text."""
    try:
        typed = yaml.safe_load(text) if text else ""
    except yaml.YAMLError:
        return str(text)
    return typed if typed is None or isinstance(typed, bool | int | float) else str(text)


def _parse_spark_conf(value: object) -> dict[str, str]:
    """Spark properties; every value becomes a string (``true``, ``8``, ``4g``)."""
    out: dict[str, str] = {}
    for key, val in _split_pairs(value):
        if isinstance(val, Mapping | list | tuple) or val is None:
            raise ValueError(f"Spark property {key!r} needs a scalar value, got {redact_value(val, key)!r}")
        out[key] = ("true" if val else "false") if isinstance(val, bool) else str(val)
    return out


def _json_safe_value(val: object, key: str) -> Any:
    if val is None or isinstance(val, bool | int | str):
        return str(val) if isinstance(val, str) else val
    if isinstance(val, float):
        if not math.isfinite(val):
            raise ValueError(f"{key!r} must be a finite number")
        return val
    if isinstance(val, Mapping):
        return {str(k): _json_safe_value(v, f"{key}.{k}") for k, v in val.items()}
    if isinstance(val, list | tuple):
        return [_json_safe_value(v, key) for v in val]
    raise ValueError(f"value of {key!r} is not JSON-like: {redact_value(val, key)!r}")


def _parse_uri(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a URI or path, got {value!r}")
    try:
        return normalize_uri(value.strip())
    except InvalidURIError as e:
        raise ValueError(str(e)) from None


def _parse_id(value: object) -> str:
    if not isinstance(value, str) or not _SAFE_ID.fullmatch(value):
        raise ValueError(
            f"expected 1-128 characters of letters, digits, '.', '_' or '-' starting with a letter or digit, "
            f"got {value!r}"
        )
    return value


def _parse_export_name(value: object) -> str:
    name = _parse_id(value)
    if name.isdigit():
        raise ValueError(f"an export name must not be all digits ({name!r} would read as a version number)")
    return name


def parse_text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"expected a non-empty string, got {value!r}")
    return value.strip()


PARSERS: dict[str, Callable[[Any], Any]] = {
    "uri": _parse_uri,
    "text": parse_text,
    "id": _parse_id,
    "export_name": _parse_export_name,
    "int": _parse_int,
    "bool": _parse_bool,
    "duration": parse_duration,
    "timestamp": parse_timestamp,
    "versions": _parse_versions,
    "storage_options": _parse_storage_options,
    "spark_conf": _parse_spark_conf,
    "choice": parse_text,
}
METAVARS = {
    "uri": "URI",
    "text": "TEXT",
    "id": "ID",
    "export_name": "NAME",
    "int": "N",
    "duration": "DURATION",
    "timestamp": "TIMESTAMP",
    "versions": "retained|V1,V2,...",
    "storage_options": "KEY=VALUE",
    "spark_conf": "KEY=VALUE",
}


