"""Checks, before anything else is imported, that this interpreter has the job's packages.

A cluster's Python often lacks them (spark-submit without ``--archives`` of the environment
``make dist`` packs): the job then stops with one line naming every missing package instead of
a traceback about the first one. This module imports nothing but the standard library, so that
it runs where the dependencies are absent. That ``trinitylake`` itself is absent only the entry
file (``jobs/<job>.py``) can notice; it says so in the same one-line shape (:data:`HINT`).
"""

from __future__ import annotations

import importlib.util
import sys

# import name -> distribution name (what to pip install)
REQUIRED = {
    "yaml": "pyyaml",
    "pyarrow": "pyarrow",
    "deltalake": "deltalake",
    "mmh3": "mmh3",
    "fsspec": "fsspec",
    "s3fs": "s3fs",
    "click": "click",
    "rich": "rich",
    "tenacity": "tenacity",
    "google.protobuf": "protobuf",
}

#: How to get them, the end of the line (the entry files repeat it for a missing trinitylake).
HINT = (
    "(ship the environment from `make dist` with spark-submit --archives dist/trinitylake-env.tar.gz#env, "
    "or pip install the wheel)"
)


def missing() -> list[str]:
    """The distributions of :data:`REQUIRED` this interpreter cannot import, in table order."""
    out = []
    for module, dist in REQUIRED.items():
        try:
            spec = importlib.util.find_spec(module)
        except ModuleNotFoundError:  # the parent package of a dotted name is absent
            spec = None
        # A namespace package (no origin) is only a folder of that name somewhere on sys.path:
        # under spark-submit, Spark's JARs on PYTHONPATH hold google/protobuf/*.proto, which is
        # not the protobuf package.
        if spec is None or spec.origin in (None, "namespace"):
            out.append(dist)
    return out


def require(job: str) -> None:
    """Exit with status 2 and one line on stderr when packages are missing."""
    absent = missing()
    if absent:
        sys.stderr.write(f"tlake {job}: missing Python packages on {sys.executable}: {', '.join(absent)} {HINT}\n")
        sys.exit(2)
