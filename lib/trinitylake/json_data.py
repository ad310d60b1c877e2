"""Names for the JSON-shaped data the library passes between its layers: a job's result
details, the arguments of an audit row, the answers of `describe`, a plan's summary, a config
mapping read from YAML.

Their values are JSON values (strings, numbers, flags, None, and lists and objects of them).
The names say what the data is; its fields are documented where it is made (the job's result,
`trinitylake.control.records`, ...). Python's type system could spell a JSON value as a union,
but every read of a field would then need a cast, so the values stay open.
"""

from __future__ import annotations

from typing import Any, NoReturn

#: One JSON object: string keys, JSON values.
JsonObject = dict[str, Any]
#: One JSON value (a string, number, flag, None, or a list or object of them).
JsonValue = Any


class FrozenDict(dict[str, Any]):
    """A read-only dict (map options and ``sources``); picklable, unlike ``MappingProxyType``."""

    def _readonly(self, *args: object, **kwargs: object) -> NoReturn:
        raise TypeError("job configuration maps are read-only; pass overrides to load_job_config instead")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _readonly

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[JsonObject]]:
        return (FrozenDict, (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=lambda kv: kv[0])))
