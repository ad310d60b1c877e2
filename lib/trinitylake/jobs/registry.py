"""One record per maintenance job: the only list a new job is added to.

A `JobSpec` names the job, its typed config class (`trinitylake.config`), its run function and
its result class (both as lazy ``"module:name"`` references, so reading the registry imports
neither Spark nor the job), and the one-line help of ``tlake <job>``. The runner
(`trinitylake.jobs.runner`), the CLI (`trinitylake.cli.jobs`) and the Python API
(`trinitylake.jobs.actions`) all read it. The option table (`trinitylake.options`) and the
config classes stay where they are, keyed by the job's name; :func:`registry_drift` checks
that all three name the same jobs (a test and the import below both run it).

A new job: its options in `trinitylake.options`, its config class in `trinitylake.config`,
its package ``trinitylake/jobs/<job>/`` (``rules.py``, ``job.py``), and one record here."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from trinitylake.config import (
    ExpireConfig,
    ExportConfig,
    JobConfig,
    OrphansConfig,
    TablesExpireConfig,
    TablesOrphansConfig,
    WalkConfig,
    config_classes,
)
from trinitylake.errors import ConfigError
from trinitylake.options import JOB_OPTIONS

if TYPE_CHECKING:
    from trinitylake.runs.results import JobResult


@dataclass(frozen=True)
class JobSpec:
    """One maintenance job.

    Attributes:
        name: the job's name (``tlake <name>``, ``jobs/<name>.py``, ``_maintenance/<name>/``).
        config: its typed configuration class.
        run: ``"module:function"`` of ``run_<job>(ex, lakehouse, cfg, result) -> JobResult``.
        help: one line for ``tlake <name> --help``.
        result: ``"module:class"`` of the result the Python API returns (`ActionResult`).
        command: ``tlake <name>`` is the generic job command (export has a group of its own).
    """

    name: str
    config: type[JobConfig]
    run: str
    help: str
    result: str
    command: bool = True

    def run_function(self) -> Callable[..., JobResult]:
        """The run function, imported now.

        Raises:
            ConfigError: it cannot be imported (e.g. pyspark is missing).
        """
        fn: Callable[..., JobResult] = _load(self.name, self.run)
        return fn

    def result_class(self) -> type:
        """The Python API's result class of this job, imported now."""
        return _load(self.name, self.result)


def _load(job: str, ref: str) -> Any:
    module, _, name = ref.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"job {job!r} is not available: cannot import {ref} ({e})") from e


_ACTIONS = "trinitylake.jobs.actions"

JOBS: tuple[JobSpec, ...] = (
    JobSpec("walk", WalkConfig, "trinitylake.jobs.walk.job:run_walk",
            "List every file reachable from the retained versions, pinned exports and pinned versions (read-only; "
            "a full export is self-contained and not walked).",
            f"{_ACTIONS}:WalkResult"),
    JobSpec("expire", ExpireConfig, "trinitylake.jobs.expire.job:run_expire",
            "Expire old versions (commit first), then delete the files only they reached.",
            f"{_ACTIONS}:ExpireResult"),
    JobSpec("orphans", OrphansConfig, "trinitylake.jobs.orphans.job:run_orphans",
            "Delete old format-owned files that no retained version, export or pin references.",
            f"{_ACTIONS}:OrphansResult"),
    JobSpec("export", ExportConfig, "trinitylake.jobs.export.job:run_export",
            "Copy a version (full, partial or minimal) to a target under a name.",
            f"{_ACTIONS}:ExportResult", command=False),
    # The Iceberg tables' own maintenance: commands of the `tlake tables` group.
    JobSpec("tables_expire", TablesExpireConfig, "trinitylake.jobs.tables_expire.job:run_tables_expire",
            "Expire old snapshots of the Iceberg tables, many tables per version; defer deleting what a retained "
            "version still reaches.", f"{_ACTIONS}:ActionResult", command=False),
    JobSpec("tables_orphans", TablesOrphansConfig, "trinitylake.jobs.tables_orphans.job:run_tables_orphans",
            "Delete old files under each Iceberg table's location that no live metadata reaches.",
            f"{_ACTIONS}:ActionResult", command=False),
)
BY_NAME: Mapping[str, JobSpec] = MappingProxyType({spec.name: spec for spec in JOBS})
#: The jobs' names, in display order.
JOB_NAMES: tuple[str, ...] = tuple(BY_NAME)


def job_spec(name: str) -> JobSpec:
    """The record of job `name`.

    Raises:
        ConfigError: there is no such job.
    """
    spec = BY_NAME.get(name)
    if spec is None:
        raise ConfigError(f"unknown job {name!r}; expected one of {', '.join(JOB_NAMES)}")
    return spec


def registry_drift() -> list[str]:
    """Differences between the registry, the option table and the config classes (empty when
    they agree)."""
    problems = []
    if list(JOB_OPTIONS) != list(JOB_NAMES):
        problems.append(f"the registry has {list(JOB_NAMES)}, but the option table {list(JOB_OPTIONS)}")
    if sorted(config_classes()) != sorted(JOB_NAMES):
        problems.append(f"the registry has {sorted(JOB_NAMES)}, but config classes exist for {sorted(config_classes())}")
    problems += [f"{s.name}: config class {s.config.__name__} is for {s.config.job!r}" for s in JOBS
                 if s.config.job != s.name]
    return problems


if registry_drift():
    raise TypeError("the job registry does not match trinitylake.options/config: " + "; ".join(registry_drift()))
