"""Checks, before anything else is imported, that this interpreter has the job's packages.

A cluster's Python often lacks them (spark-submit without ``--archives`` of the environment
``make dist`` packs): the job then stops with one line naming every missing package instead of
a traceback about the first one.
"""

import importlib.util
import sys

# import name -> distribution name (what to pip install)
REQUIRED = {
    "trinitylake": "trinitylake",
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


def missing() -> list[str]:
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
    """Exit with status 2 and one line when packages are missing."""
    absent = missing()
    if absent:
        sys.stderr.write(
            f"tlake {job}: missing Python packages on {sys.executable}: {', '.join(absent)} "
            "(ship the environment from `make dist` with spark-submit --archives dist/trinitylake-env.tar.gz#env, "
            "or pip install the wheel)\n"
        )
        sys.exit(2)
