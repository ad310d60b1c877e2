"""Configuration of the maintenance jobs (walk, expire, orphans, export).

One table, :data:`JOB_OPTIONS`, declares every option of every job with its type, default,
help text and validation. Everything else is derived from it: the command-line flags
(`trinitylake.job_flags`, on click), the environment variables, the YAML files in ``conf/`` and the
frozen :class:`JobConfig` a job receives.

Precedence, lowest first::

    defaults < YAML file (--conf) < environment (TLAKE_<JOB>_<KEY>) < overrides (CLI flags)

Every unknown key and every bad value raises :class:`~trinitylake.errors.ConfigError` naming
the file, variable or flag and the key, before any work starts.

Values are normalized once, here: durations become integer milliseconds (a file, a variable or a
flag writes them with a unit, ``36h``: a bare number is refused; a Python caller's int is
milliseconds), timestamps integer
epoch milliseconds (UTC), URIs their canonical spelling (``s3a://`` = ``s3://``, local paths
``file:///abs``). Null defaults that have an obvious resolution are resolved at load time so
that the config a job logs is the config it ran with: ``run_id`` is generated,
``reference_time`` becomes the wall clock, ``control_uri`` ``<lakehouse>/_control`` and the
walk ``output`` ``<lakehouse>/_maintenance/walk/<run_id>``. Nulls that depend on the
lakehouse itself (``max_version_age``, ``min_versions_to_keep``, ``older_than``) stay null;
the jobs' rules resolve them once the job has read the lakehouse definition
(`trinitylake.jobs.expire.rules.effective_retention`,
`trinitylake.jobs.orphans.rules.effective_orphan_min_age`).

Example:
    >>> cfg = load_job_config("orphans", overrides={"lakehouse": "s3a://bucket/lh", "dry_run": True}, env={})
    >>> cfg.lakehouse, cfg.control_uri, cfg.dry_run, cfg.prefix_mismatch
    ('s3://bucket/lh', 's3://bucket/lh/_control', True, 'error')
    >>> parse_duration("36h")
    129600000

This module is pure Python plus PyYAML: it imports neither pyspark nor click, so the CLI,
the Spark jobs, Airflow tooling and the tests can all use it.
"""

from __future__ import annotations

import logging
import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, ClassVar

import yaml

from trinitylake.errors import ConfigError
from trinitylake.json_data import FrozenDict, JsonObject
from trinitylake.options import COMMON_OPTIONS, ENV_PREFIX, JOB_OPTIONS, Option, env_var_names
from trinitylake.redact import redact_text
from trinitylake.storage.options import check_storage_options
from trinitylake.storage.uri import parse_uri
from trinitylake.values import (
    EPOCH,
    format_duration,
    format_timestamp,
    parse_duration,
    parse_timestamp,
)

__all__ = [
    "COMMON_OPTIONS",
    "DEFAULT_MAX_VERSION_AGE_MS",
    "DEFAULT_MIN_VERSIONS_TO_KEEP",
    "JOB_OPTIONS",
    "ExpireConfig",
    "ExportConfig",
    "FrozenDict",
    "JobConfig",
    "Option",
    "OrphansConfig",
    "WalkConfig",
    "env_var_names",
    "format_duration",
    "format_timestamp",
    "load_job_config",
    "parse_duration",
    "parse_timestamp",
]


#: Used by expire when ``max_version_age`` is null and the lakehouse definition has none.
DEFAULT_MAX_VERSION_AGE_MS = 7 * 24 * 3600 * 1000
#: Used by expire when ``min_versions_to_keep`` is null and the lakehouse definition has none.
DEFAULT_MIN_VERSIONS_TO_KEEP = 3
#: How far ``reference_time`` may lie ahead of this machine's clock (clock skew between the
#: orchestrator and the driver). Further ahead would make young files look old to the
#: destructive jobs, so it is refused.
MAX_FUTURE_REFERENCE_MS = 10 * 60 * 1000

log = logging.getLogger("trinitylake.config")

# ---- the loaded configuration -------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """Base of the frozen per-job configs (:class:`WalkConfig`, :class:`ExpireConfig`, ...):
    the options every job has (`COMMON_OPTIONS`).

    Each option is a typed attribute (``cfg.dry_run``); ``cfg.sources[key]`` says where its
    value came from (``default``, ``derived``, ``file``, ``env`` or ``cli``/``overrides``).
    The fields mirror `trinitylake.options` (names, order and types; :func:`check_config_classes`
    runs at import and fails on drift). Options with a derived default (``run_id``,
    ``reference_time``, ``control_uri``, walk's ``output``) are never null once loaded.
    """

    job: ClassVar[str] = ""

    lakehouse: str
    master: str
    control_uri: str
    storage_options: Mapping[str, Any]
    spark_conf: Mapping[str, str]
    remote: str | None
    execution: str
    local_max_items: int
    driver_max_rows: int
    threads: int
    local_threads: int
    reference_time: int
    run_id: str
    control_engine: str
    control_table: str | None
    log_level: str
    keep_runs: int
    keep_runs_max_age: int
    sources: Mapping[str, str] = field(default_factory=FrozenDict, repr=False, compare=False)
    conf_path: str | None = field(default=None, repr=False, compare=False)

    @classmethod
    def options(cls) -> Mapping[str, Option]:
        return JOB_OPTIONS[cls.job]

    def __getitem__(self, key: str) -> Any:
        if key not in JOB_OPTIONS[self.job]:
            raise KeyError(key)
        return getattr(self, key)

    @property
    def is_dry_run(self) -> bool:
        """The ``dry_run`` option of a job that has one (expire, orphans, the tables' jobs); False otherwise."""
        return bool(getattr(self, "dry_run", False))

    def explicit(self, key: str) -> bool:
        """True if a file, the environment or a flag set ``key`` (not a default)."""
        return self.sources.get(key) not in ("default", "derived")

    def to_dict(self) -> JsonObject:
        """All options as JSON-safe values (ms for durations and timestamps), in option order.

        Passing the result back as ``overrides`` reproduces the same config.
        """
        return {key: _to_plain(getattr(self, key)) for key in JOB_OPTIONS[self.job]}


@dataclass(frozen=True, kw_only=True)
class WalkConfig(JobConfig):
    """Frozen configuration of the walk job (see ``JOB_OPTIONS['walk']``)."""

    job: ClassVar[str] = "walk"

    versions: str | tuple[int, ...]
    output: str
    batch_size: int
    parallelism: int


@dataclass(frozen=True, kw_only=True)
class ExpireConfig(JobConfig):
    """Frozen configuration of the expire job (see ``JOB_OPTIONS['expire']``)."""

    job: ClassVar[str] = "expire"

    max_version_age: int | None
    min_versions_to_keep: int | None
    clock_skew_margin: int
    dry_run: bool
    delete_batch_size: int
    max_retries: int
    compact_control_table: bool


@dataclass(frozen=True, kw_only=True)
class OrphansConfig(JobConfig):
    """Frozen configuration of the orphans job (see ``JOB_OPTIONS['orphans']``)."""

    job: ClassVar[str] = "orphans"

    older_than: int | None
    unsafe_min_age: bool
    dry_run: bool
    max_candidates: int | None
    delete_batch_size: int
    max_retries: int
    prefix_mismatch: str


@dataclass(frozen=True, kw_only=True)
class ExportConfig(JobConfig):
    """Frozen configuration of the export job (see ``JOB_OPTIONS['export']``)."""

    job: ClassVar[str] = "export"

    name: str
    target: str
    target_storage_options: Mapping[str, Any]
    version: int | None
    as_of: int | None
    mode: str
    depth: int
    batch_size: int
    verify_checksum: bool
    with_tables: bool
    table_snapshots: str
    if_exists: str


@dataclass(frozen=True, kw_only=True)
class TablesExpireConfig(JobConfig):
    """Frozen configuration of the tables' snapshot expiry (see ``JOB_OPTIONS['tables_expire']``)."""

    job: ClassVar[str] = "tables_expire"

    older_than: int | None
    unsafe_min_age: bool
    retain_last: int | None
    tables: str | None
    batch_size: int
    dry_run: bool
    delete_batch_size: int


@dataclass(frozen=True, kw_only=True)
class TablesOrphansConfig(JobConfig):
    """Frozen configuration of the tables' orphan removal (see ``JOB_OPTIONS['tables_orphans']``)."""

    job: ClassVar[str] = "tables_orphans"

    older_than: int
    unsafe_min_age: bool
    tables: str | None
    dry_run: bool
    prefix_mismatch: str
    equal_schemes: str | None
    equal_authorities: str | None
    delete_batch_size: int


def _to_plain(value: object) -> Any:
    if isinstance(value, Mapping):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_to_plain(v) for v in value]
    return value


def config_classes() -> dict[str, type[JobConfig]]:
    """``job -> config class``: the `JobConfig` subclasses, each naming its job in ``job``. The
    list of jobs itself is `trinitylake.jobs.registry` (which checks that they agree)."""
    return {cls.job: cls for cls in JobConfig.__subclasses__()}

#: The type of a loaded value of each option kind (`Option.kind`); a nullable option whose
#: null is not resolved at load time adds ``| None``.
KIND_TYPES: Mapping[str, str] = MappingProxyType({
    "uri": "str", "text": "str", "id": "str", "export_name": "str", "int": "int", "bool": "bool",
    "duration": "int", "timestamp": "int", "versions": "str | tuple[int, ...]",
    "storage_options": "Mapping[str, Any]", "spark_conf": "Mapping[str, str]", "choice": "str",
})
#: Nullable options that load time always resolves (see `_resolve`): never null in a config.
DERIVED_OPTIONS: frozenset[str] = frozenset({"reference_time", "run_id", "control_uri", "output"})
_BOOKKEEPING_FIELDS = ("sources", "conf_path")


def expected_field_type(opt: Option) -> str:
    """The annotation the config classes must give `opt` (see :data:`KIND_TYPES`)."""
    base = KIND_TYPES[opt.kind]
    return f"{base} | None" if opt.nullable and opt.name not in DERIVED_OPTIONS else base


def config_drift() -> list[str]:
    """Differences between the config classes and the option table (empty when they agree):
    the jobs, each class's option fields (names, order) and their annotated types."""
    problems: list[str] = []
    classes = config_classes()
    if sorted(classes) != sorted(JOB_OPTIONS):
        problems.append(f"config classes for {sorted(classes)}, but JOB_OPTIONS has {sorted(JOB_OPTIONS)}")
    for job, cls in classes.items():
        if cls.job != job:
            problems.append(f"{cls.__name__}.job is {cls.job!r}, not {job!r}")
        opts = JOB_OPTIONS.get(job, {})
        names = [f.name for f in fields(cls) if f.name not in _BOOKKEEPING_FIELDS]
        if sorted(names) != sorted(opts):
            problems.append(f"{cls.__name__} fields {sorted(set(names) ^ set(opts))} differ from JOB_OPTIONS[{job!r}]")
        for f in fields(cls):
            if f.name in opts and str(f.type) != expected_field_type(opts[f.name]):
                problems.append(f"{cls.__name__}.{f.name} is typed {f.type}, but option kind "
                                f"{opts[f.name].kind!r} loads as {expected_field_type(opts[f.name])}")
    return problems


def check_config_classes() -> None:
    """Raise if the config classes drifted from `trinitylake.options` (runs at import)."""
    problems = config_drift()
    if problems:
        raise TypeError("job config classes do not match trinitylake.options: " + "; ".join(problems))


check_config_classes()


# ---- loading ------------------------------------------------------------------------------


@dataclass
class _Layer:
    """One source of values. ``label(key)`` names a key for error messages."""

    source: str  # file, env, cli, overrides
    values: dict[str, Any]
    label: Callable[[str], str]


def _job_options(job: str) -> Mapping[str, Option]:
    if job not in JOB_OPTIONS:
        raise ConfigError(f"unknown job {job!r}; expected one of {', '.join(JOB_OPTIONS)}")
    return JOB_OPTIONS[job]


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if key in seen:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def shipped_conf_path(job: str, conf_path: str) -> str:
    """The YAML file to read for ``--conf conf_path``: the path itself when it exists; else a
    file of its base name in the working directory, where ``spark-submit --files`` puts what it
    ships (a YARN or Kubernetes driver container of cluster deploy mode gets ``./expire.yaml``,
    not the submitting machine's ``conf/expire.yaml``), said in a log line.

    Raises:
        ConfigError: neither exists; the message names both.
    """
    if os.path.exists(conf_path):
        return conf_path
    shipped = os.path.basename(conf_path)
    if shipped and os.path.abspath(shipped) != os.path.abspath(conf_path) and os.path.isfile(shipped):
        # A warning, not info: it is logged before the job configures logging, and it says that
        # another file than the one named is read.
        log.warning("%s config file %s is not on this machine; reading %s from the working directory %s "
                    "(shipped by spark-submit --files)", job, conf_path, shipped, os.getcwd())
        return shipped
    nor = (f", nor is {shipped} in the working directory {os.getcwd()} (where spark-submit --files puts it)"
           if shipped and os.path.abspath(shipped) != os.path.abspath(conf_path) else "")
    raise ConfigError(f"{job} config file {conf_path} does not exist{nor}")


def _file_layer(job: str, conf_path: str) -> _Layer:
    try:
        with open(conf_path, encoding="utf-8") as f:
            data = yaml.load(f, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except FileNotFoundError:
        raise ConfigError(f"{job} config file {conf_path} does not exist") from None
    except OSError as e:
        raise ConfigError(f"{job} config file {conf_path} cannot be read: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{job} config file {conf_path} is not valid YAML: {e}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"{job} config file {conf_path} must hold a mapping of option: value, not {type(data).__name__}"
        )
    return _Layer("file", {str(k): v for k, v in data.items()}, lambda key: f"'{key}' in {conf_path}")


def _env_layer(job: str, env: Mapping[str, str]) -> _Layer:
    opts = _job_options(job)
    values: dict[str, Any] = {}
    names: dict[str, str] = {}
    # Generic names first (TLAKE_LAKEHOUSE), then the job-specific ones override them.
    for generic in (True, False):
        for key in opts:
            candidates = env_var_names(job, key)
            var = candidates[-1] if generic else candidates[0]
            if generic and len(candidates) == 1:
                continue
            if env.get(var, "").strip():
                values[key] = env[var]
                names[key] = var
    prefix = f"{ENV_PREFIX}_{job.upper()}_"
    known = {env_var_names(job, key)[0] for key in opts}
    for var, val in env.items():
        if var.startswith(prefix) and var not in known and val.strip():
            raise ConfigError(
                f"environment variable {var} sets unknown {job} option {var[len(prefix) :].lower()!r}; "
                f"known: {', '.join(opts)}"
            )
    return _Layer("env", values, lambda key: f"environment variable {names[key]}")


def _merge(job: str, layers: Sequence[_Layer]) -> tuple[JsonObject, dict[str, str]]:
    opts = _job_options(job)
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    given_options: dict[str, list[tuple[str, Any]]] = {}  # storage options as each layer gave them
    for key, opt in opts.items():
        merged[key] = _parse_or_raise(job, opt, opt.default, lambda k: f"default of '{k}'")
        sources[key] = "default"
    for layer in layers:
        for key, raw in layer.values.items():
            if key not in opts:
                raise ConfigError(f"{layer.label(key)}: unknown {job} option {key!r}; known: {', '.join(opts)}")
            opt = opts[key]
            # A Python caller's int duration is milliseconds; a file's, a variable's or a flag's
            # bare number is refused (a duration is written with its unit).
            value = _parse_or_raise(job, opt, raw, layer.label, bare_ms=layer.source == "overrides")
            if opt.kind == "storage_options":
                given_options.setdefault(key, []).append((layer.label(key), value))
            if opt.is_map:
                merged[key] = {**merged[key], **value}
            else:
                merged[key] = value
            sources[key] = layer.source
    for key, given in given_options.items():
        merged[key] = _checked_storage_options(job, key, given, merged)
    return merged, sources


def _checked_storage_options(job: str, key: str, given: list[tuple[str, Any]], merged: JsonObject) -> JsonObject:
    """A storage options option checked layer by layer (an error names the file, variable or
    flag) against the store it is for: the lakehouse's, or an export's target's (an S3 store
    knows its keys, `trinitylake.storage.options.check_storage_options`; an unknown store is
    taken as S3), then merged in the form every client is mapped from."""
    where = merged.get("target") if key == "target_storage_options" else merged.get("lakehouse")
    try:
        scheme = parse_uri(str(where)).scheme if where else "s3"
    except ValueError:
        scheme = "s3"  # the URI's own error is told where it is checked
    out: dict[str, Any] = {}
    for label, value in given:
        try:
            checked = check_storage_options(value, f"{label}: bad value for {job} option {key!r}", scheme=scheme)
        except ConfigError as e:
            raise ConfigError(redact_text(str(e))) from None
        kwargs = {**(out.get("client_kwargs") or {}), **(checked.get("client_kwargs") or {})}
        out = {**out, **checked, **({"client_kwargs": kwargs} if kwargs else {})}
    return out


def _parse_or_raise(job: str, opt: Option, raw: object, label: Callable[[str], str], *, bare_ms: bool = False) -> Any:
    try:
        return opt.parse(raw, bare_ms=bare_ms)
    except ValueError as e:
        raise ConfigError(redact_text(f"{label(opt.name)}: bad value for {job} option {opt.name!r}: {e}")) from None


def _resolve(job: str, merged: JsonObject, sources: dict[str, str], where: str, now_ms: int) -> None:
    """Check required keys and cross-key rules; fill in derived defaults."""
    opts = JOB_OPTIONS[job]
    for key, opt in opts.items():
        if opt.required and merged[key] is None:
            envs = " or ".join(env_var_names(job, key))
            raise ConfigError(
                f"{job} option {key!r} is required{where}: pass {opt.cli_flag}, set {envs}, or put '{key}:' "
                f"in the --conf file"
            )
    lakehouse = merged["lakehouse"].rstrip("/")

    def derive(key: str, value: object) -> None:
        if merged[key] is None:
            merged[key] = value
            sources[key] = "derived"

    derive("reference_time", now_ms)
    if merged["reference_time"] > now_ms + MAX_FUTURE_REFERENCE_MS:
        raise ConfigError(
            f"{job} option 'reference_time'{where} is {format_timestamp(merged['reference_time'])}, later than this "
            f"machine's clock ({format_timestamp(now_ms)}) by more than {format_duration(MAX_FUTURE_REFERENCE_MS)}; "
            f"a future reference time would make young files look old"
        )
    derive("run_id", f"{job}-{datetime.fromtimestamp(now_ms / 1000, UTC):%Y%m%dT%H%M%SZ}-{uuid.uuid4().hex[:8]}")
    derive("control_uri", f"{lakehouse}/_control")
    if job == "walk":
        derive("output", f"{lakehouse}/_maintenance/walk/{merged['run_id']}")
    if job == "export":
        if merged["version"] is not None and merged["as_of"] is not None:
            raise ConfigError(f"export options 'version' and 'as_of' are mutually exclusive{where}; give one")
        target = merged["target"].rstrip("/")
        if _contains(lakehouse, target) or _contains(target, lakehouse):
            raise ConfigError(
                f"export option 'target'{where} ({target}) overlaps the lakehouse ({lakehouse}); an export must "
                f"live outside the source, or orphan cleanup of one would delete files of the other"
            )


def _contains(parent: str, child: str) -> bool:
    return child == parent or child.startswith(parent + "/")


def load_job_config(
    job: str,
    conf_path: str | None = None,
    overrides: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    now_ms: int | None = None,
) -> JobConfig:
    """Load the configuration of one job.

    Args:
        job: ``walk``, ``expire``, ``orphans`` or ``export``.
        conf_path: a YAML file of ``option: value`` (e.g. ``conf/orphans.yaml``), or None (the
            built-in defaults, which the files in ``conf/`` spell out). A path that does not
            exist is looked for by its base name in the working directory, where
            ``spark-submit --files`` ships it (:func:`shipped_conf_path`).
        overrides: the strongest layer, e.g. command-line values. Keys may use ``-`` or ``_``;
            a None value means "not given" (pass the string ``"null"`` to force a null).
        env: the environment to read ``TLAKE_<JOB>_<KEY>`` (and ``TLAKE_<KEY>`` for the common
            options) from; defaults to ``os.environ``. Empty variables count as unset.
        now_ms: the wall clock in epoch ms (for tests); defaults to the current time.

    Returns:
        The frozen config of the job (a :class:`JobConfig` subclass).

    Raises:
        ConfigError: unknown job, unreadable or malformed file, unknown key, bad value, a
            missing required option or conflicting options; the message names the file,
            variable or flag and the key.
    """
    return _load(job, conf_path, _overrides_layer(job, overrides, "overrides"), env, now_ms)


def _overrides_layer(job: str, overrides: Mapping[str, object] | None, source: str) -> _Layer:
    values = {str(k).replace("-", "_"): v for k, v in (overrides or {}).items() if v is not None}
    if source == "cli":
        opts = _job_options(job)
        return _Layer(source, values, lambda key: f"command-line flag {opts[key].cli_flag}" if key in opts else key)
    return _Layer(source, values, lambda key: f"override '{key}'")


def _load(
    job: str, conf_path: str | None, overrides: _Layer, env: Mapping[str, str] | None, now_ms: int | None
) -> JobConfig:
    _job_options(job)
    layers = []
    if conf_path is not None:
        conf_path = shipped_conf_path(job, conf_path)
        layers.append(_file_layer(job, conf_path))
    layers.append(_env_layer(job, os.environ if env is None else env))
    layers.append(overrides)
    merged, sources = _merge(job, layers)
    now = now_ms if now_ms is not None else (datetime.now(UTC) - EPOCH) // timedelta(milliseconds=1)
    _resolve(job, merged, sources, f" (config file {conf_path})" if conf_path else "", now)
    frozen: dict[str, Any] = {k: FrozenDict(v) if isinstance(v, dict) else v for k, v in merged.items()}
    return config_classes()[job](**frozen, sources=FrozenDict(sources), conf_path=conf_path)


def job_options(job: str) -> Mapping[str, Option]:
    """The options of `job` (ConfigError for an unknown job)."""
    return _job_options(job)


def load_from_flags(job: str, conf_path: str | None, flags: Mapping[str, object], env: Mapping[str, str] | None = None,
                    now_ms: int | None = None) -> JobConfig:
    """The config of a job run from its command line: the ``--conf`` YAML layer and the flags
    given (`trinitylake.job_flags` parses them), over the environment and the defaults."""
    return _load(job, conf_path, _overrides_layer(job, flags, "cli"), env, now_ms)
