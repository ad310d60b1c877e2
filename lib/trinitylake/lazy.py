"""Imports deferred to their first use, for the start-up of the `tlake` command.

``tlake --help`` and a command on a local lakehouse need neither the storage clients (fsspec,
botocore, obstore), delta-rs nor Spark, and ``--help`` not even pyarrow; a module that imports
them at its top makes every command pay for them (0.8 s of CPU measured before this module).
A module binds such a name to a stand-in instead::

    if TYPE_CHECKING:
        import pyarrow as pa
    else:
        pa = lazy.module("pyarrow", globals(), "pa")

The first attribute read (``pa.table``) imports the module, puts it in the namespace in place of
the stand-in (later reads cost nothing) and answers. ``lazy.attr`` does the same for one name of a
module (``from m import f``) that is only called or read from (``f(...)``, ``C.create(...)``): not
for a class named in ``isinstance`` or ``except``, which needs the class itself. ``lazy.value``
stands for an object made by a function (a module-level console) until it is first used.

This module imports nothing from the package: every layer may use it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, MutableMapping
from typing import Any

_UNSET: Any = object()


class _Deferred:
    __slots__ = ("_alias", "_attr", "_factory", "_module", "_namespace", "_value")

    def __init__(self, module: str, attr: str | None, namespace: MutableMapping[str, object] | None,
                 alias: str | None, factory: Callable[[], object] | None = None) -> None:
        self._module, self._attr, self._namespace, self._alias = module, attr, namespace, alias
        self._factory, self._value = factory, _UNSET

    def _resolve(self) -> Any:
        value = self._value
        if value is not _UNSET:  # a name imported from the namespace keeps this stand-in: made once
            return value
        if self._factory is not None:
            value = self._factory()
        else:
            value = importlib.import_module(self._module)
            if self._attr is not None:
                value = getattr(value, self._attr)
        self._value = value
        ns, alias = self._namespace, self._alias
        if ns is not None and alias is not None and ns.get(alias) is self:
            ns[alias] = value  # the next read of the name finds the real object
        return value

    def __getattr__(self, name: str) -> Any:
        return getattr(self._resolve(), name)

    def __call__(self, *args: object, **kwargs: object) -> Any:
        return self._resolve()(*args, **kwargs)

    def __repr__(self) -> str:
        what = f"{self._module}.{self._attr}" if self._attr else self._module
        return f"<deferred {what}>"


def module(name: str, namespace: MutableMapping[str, object] | None = None, alias: str | None = None) -> Any:
    """A stand-in for module `name` that imports it on the first attribute read (and then
    rebinds `alias` in `namespace`, the caller's ``globals()``, to the module itself)."""
    return _Deferred(name, None, namespace, alias)


def attr(module_name: str, name: str, namespace: MutableMapping[str, object] | None = None,
         alias: str | None = None) -> Any:
    """A stand-in for ``from module_name import name`` that imports on the first call or
    attribute read (and then rebinds `alias`, default `name`, in `namespace`)."""
    return _Deferred(module_name, name, namespace, alias or name)


def value(factory: Callable[[], object], namespace: MutableMapping[str, object] | None = None, alias: str | None = None,
          what: str = "value") -> Any:
    """A stand-in for ``factory()``, made on the first call or attribute read (and then bound
    to `alias` in `namespace`); a name imported elsewhere keeps the stand-in, which makes the
    object once and forwards to it."""
    return _Deferred(what, None, namespace, alias, factory)
