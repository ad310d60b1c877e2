"""Job configuration: defaults, YAML, environment, flags, errors, parsing (trinitylake.config)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
import yaml

from trinitylake.config import (
    DEFAULT_MAX_VERSION_AGE_MS,
    DEFAULT_MIN_VERSIONS_TO_KEEP,
    JOB_OPTIONS,
    ExportConfig,
    JobConfig,
    OrphansConfig,
    env_var_names,
    format_timestamp,
    load_job_config,
    parse_duration,
    parse_timestamp,
)
from trinitylake.errors import ConfigError, TrinityLakeError, UnsafeOperationError
from trinitylake.job_flags import job_command, parse_job_args
from trinitylake.jobs.expire.rules import effective_retention
from trinitylake.jobs.orphans.rules import effective_orphan_min_age
from trinitylake.jobs.registry import JOB_NAMES as JOBS

CONF_DIR = Path(__file__).resolve().parent.parent / "conf"
NOW = parse_timestamp("2026-11-23T12:00:00Z")
DAY = 86_400_000
REQUIRED = {"export": {"name": "weekly-20261122", "target": "/tmp/tl-exports/weekly-20261122"}}


def load(job: str, conf_path: str | Path | None = None, env: dict[str, str] | None = None, **overrides):
    overrides.setdefault("lakehouse", "/tmp/tl-lh")
    for key, value in REQUIRED.get(job, {}).items():
        overrides.setdefault(key, value)
    return load_job_config(job, str(conf_path) if conf_path else None, overrides, env or {}, now_ms=NOW)


def write(tmp_path: Path, text: str, name: str = "job.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# ---- the table ---------------------------------------------------------------------------


def test_every_job_has_the_common_options_first():
    common = ["lakehouse", "master", "control_uri", "storage_options", "spark_conf", "remote", "execution",
              "local_max_items", "driver_max_rows", "threads", "local_threads", "reference_time", "run_id"]
    for job in JOBS:
        assert list(JOB_OPTIONS[job])[: len(common)] == common
        assert "log_level" in JOB_OPTIONS[job]
        for opt in JOB_OPTIONS[job].values():
            assert opt.help and opt.name.islower()


def test_job_specific_options():
    assert set(JOB_OPTIONS["walk"]) >= {"versions", "output", "batch_size", "parallelism"}
    assert set(JOB_OPTIONS["expire"]) >= {
        "max_version_age", "min_versions_to_keep", "clock_skew_margin", "dry_run",
        "delete_batch_size", "max_retries", "compact_control_table",
    }  # fmt: skip
    assert set(JOB_OPTIONS["orphans"]) >= {
        "older_than", "unsafe_min_age", "dry_run", "delete_batch_size", "max_retries", "prefix_mismatch",
    }  # fmt: skip
    assert set(JOB_OPTIONS["export"]) >= {
        "name", "target", "version", "as_of", "mode", "depth", "batch_size", "verify_checksum",
    }  # fmt: skip


# ---- defaults ----------------------------------------------------------------------------


def test_common_defaults_and_derived_values():
    cfg = load("walk")
    assert isinstance(cfg, JobConfig) and cfg.job == "walk"
    assert cfg.lakehouse == "file:///tmp/tl-lh"
    assert cfg.master == "local[*]"
    assert cfg.control_uri == "file:///tmp/tl-lh/_control"
    assert cfg.storage_options == {} and cfg.spark_conf == {}
    assert cfg.reference_time == NOW
    assert cfg.run_id.startswith("walk-20261123T120000Z-")
    assert cfg.log_level == "INFO"
    assert cfg.sources["reference_time"] == "derived" and not cfg.explicit("reference_time")
    assert cfg.sources["master"] == "default" and cfg.explicit("lakehouse")


def test_walk_defaults():
    cfg = load("walk", run_id="r1")
    assert cfg.versions == "retained"
    assert cfg.output == "file:///tmp/tl-lh/_maintenance/walk/r1"
    assert (cfg.batch_size, cfg.parallelism) == (256, 0)


def test_expire_defaults():
    cfg = load("expire")
    assert cfg.max_version_age is None and cfg.min_versions_to_keep is None
    assert cfg.clock_skew_margin == 10 * 60_000
    assert (cfg.dry_run, cfg.delete_batch_size, cfg.max_retries, cfg.compact_control_table) == (False, 1000, 5, True)


def test_orphans_defaults():
    cfg = load("orphans")
    assert isinstance(cfg, OrphansConfig)
    assert cfg.older_than is None
    assert (cfg.unsafe_min_age, cfg.dry_run, cfg.delete_batch_size, cfg.max_retries) == (False, False, 1000, 5)
    assert cfg.prefix_mismatch == "error"


def test_export_defaults():
    cfg = load("export")
    assert isinstance(cfg, ExportConfig)
    assert (cfg.name, cfg.target) == ("weekly-20261122", "file:///tmp/tl-exports/weekly-20261122")
    assert cfg.version is None and cfg.as_of is None
    assert (cfg.mode, cfg.depth, cfg.batch_size, cfg.verify_checksum) == ("full", 1, 1024, True)


def test_uris_are_normalized():
    cfg = load("orphans", lakehouse="s3a://bucket//lh/", control_uri="s3n://bucket/ctl/")
    assert (cfg.lakehouse, cfg.control_uri) == ("s3://bucket/lh", "s3://bucket/ctl")


# ---- layers and precedence ---------------------------------------------------------------


def test_yaml_file_layer(tmp_path):
    conf = write(tmp_path, "older_than: 3d\ndry_run: true\nstorage_options:\n  anon: true\n")
    cfg = load("orphans", conf)
    assert (cfg.older_than, cfg.dry_run, cfg.storage_options) == (3 * DAY, True, {"anon": True})
    assert cfg.sources["older_than"] == "file" and cfg.conf_path == str(conf)


def test_empty_yaml_file_is_all_defaults(tmp_path):
    a = load("expire", write(tmp_path, "# nothing\n"), run_id="r")
    b = load("expire", run_id="r")
    assert a == b


def test_precedence_default_file_env_override(tmp_path):
    conf = write(tmp_path, "older_than: 3d\nmax_retries: 2\ndelete_batch_size: 500\nprefix_mismatch: ignore\n")
    env = {"TLAKE_ORPHANS_MAX_RETRIES": "3", "TLAKE_ORPHANS_DELETE_BATCH_SIZE": "250"}
    cfg = load("orphans", conf, env, delete_batch_size=100)
    assert cfg.unsafe_min_age is False  # default
    assert cfg.older_than == 3 * DAY and cfg.prefix_mismatch == "ignore"  # file
    assert cfg.max_retries == 3  # env over file
    assert cfg.delete_batch_size == 100  # override over env over file
    assert [cfg.sources[k] for k in ("unsafe_min_age", "older_than", "max_retries", "delete_batch_size")] == [
        "default", "file", "env", "overrides",
    ]  # fmt: skip


def test_env_names():
    assert env_var_names("orphans", "dry_run") == ("TLAKE_ORPHANS_DRY_RUN",)
    assert env_var_names("export", "lakehouse") == ("TLAKE_EXPORT_LAKEHOUSE", "TLAKE_LAKEHOUSE")


def test_env_generic_and_job_specific_lakehouse():
    cfg = load_job_config("walk", env={"TLAKE_LAKEHOUSE": "s3://b/generic"}, now_ms=NOW)
    assert cfg.lakehouse == "s3://b/generic" and cfg.sources["lakehouse"] == "env"
    env = {"TLAKE_LAKEHOUSE": "s3://b/generic", "TLAKE_WALK_LAKEHOUSE": "s3://b/walk"}
    assert load_job_config("walk", env=env, now_ms=NOW).lakehouse == "s3://b/walk"
    assert load_job_config("expire", env=env, now_ms=NOW).lakehouse == "s3://b/generic"


def test_env_values_are_text(tmp_path):
    env = {
        "TLAKE_ORPHANS_DRY_RUN": "true",
        "TLAKE_ORPHANS_OLDER_THAN": "36h",
        "TLAKE_ORPHANS_STORAGE_OPTIONS": '{"endpoint_url": "http://127.0.0.1:9000", "anon": false}',
        "TLAKE_SPARK_CONF": "spark.sql.shuffle.partitions=4,spark.ui.enabled=false",
        "TLAKE_ORPHANS_REFERENCE_TIME": "2026-11-22T03:00:00Z",
        "TLAKE_OTHER_THING": "ignored: not a job prefix",
        "TLAKE_EXPIRE_DRY_RUN": "ignored: another job",
    }
    cfg = load("orphans", env=env)
    assert cfg.dry_run is True and cfg.older_than == 36 * 3_600_000
    assert cfg.storage_options == {"endpoint_url": "http://127.0.0.1:9000", "anon": False}
    assert cfg.spark_conf == {"spark.sql.shuffle.partitions": "4", "spark.ui.enabled": "false"}
    assert cfg.reference_time == parse_timestamp("2026-11-22T03:00:00Z")


def test_empty_env_var_counts_as_unset():
    assert load("orphans", env={"TLAKE_ORPHANS_DRY_RUN": ""}).dry_run is False


def test_env_null_resets_a_nullable_option(tmp_path):
    conf = write(tmp_path, "older_than: 3d\n")
    assert load("orphans", conf, {"TLAKE_ORPHANS_OLDER_THAN": "null"}).older_than is None


def test_maps_merge_across_layers(tmp_path):
    conf = write(tmp_path, "storage_options: {endpoint_url: 'http://a', anon: false}\nspark_conf: {spark.x: 1}\n")
    cfg = parse_job_args(
        "walk",
        [
            "--lakehouse",
            "/tmp/tl-lh",
            "--conf",
            str(conf),
            "--storage-option",
            "anon=true",
            "--spark-conf",
            "spark.y=2",
        ],
        env={"TLAKE_SPARK_CONF": '{"spark.x": "3"}'},
        now_ms=NOW,
    )
    assert cfg.storage_options == {"endpoint_url": "http://a", "anon": True}
    assert cfg.spark_conf == {"spark.x": "3", "spark.y": "2"}


def test_none_override_means_not_given(tmp_path):
    conf = write(tmp_path, "dry_run: true\n")
    assert load("orphans", conf, dry_run=None).dry_run is True
    assert load("orphans", conf, **{"dry-run": False}).dry_run is False  # dashes accepted


def test_config_is_frozen_picklable_and_round_trips():
    cfg = load("orphans", storage_options={"client_kwargs": {"region_name": "x"}}, older_than="2d")
    with pytest.raises(AttributeError):
        cfg.dry_run = True
    with pytest.raises(TypeError):
        cfg.storage_options["anon"] = True
    assert pickle.loads(pickle.dumps(cfg)) == cfg
    data = cfg.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert set(data) == set(JOB_OPTIONS["orphans"])
    assert load_job_config("orphans", overrides=data, env={}, now_ms=NOW) == cfg
    assert cfg["older_than"] == 2 * DAY
    with pytest.raises(KeyError):
        cfg["nope"]


def test_walk_versions_forms(tmp_path):
    assert load("walk", versions="retained").versions == "retained"
    assert load("walk", versions="3, 1,2,3").versions == (1, 2, 3)
    assert load("walk", versions=[5, 4]).versions == (4, 5)
    assert load("walk", write(tmp_path, "versions: [7, 8]\n")).versions == (7, 8)
    assert load("walk", versions=9).to_dict()["versions"] == [9]


def test_export_optional_fields():
    cfg = load("export", version="12", mode="PARTIAL", depth=2)
    assert (cfg.version, cfg.mode, cfg.depth) == (12, "partial", 2)
    assert load("export", as_of="2026-11-01").as_of == parse_timestamp("2026-11-01T00:00:00Z")


# ---- errors: each names the key and where it came from -------------------------------------


@pytest.mark.parametrize(
    ("job", "key", "value", "fragment"),
    [
        ("walk", "batch_size", 0, "must be >= 1"),
        ("walk", "parallelism", -1, "must be >= 0"),
        ("walk", "versions", "1,x", "retained"),
        ("walk", "versions", [-1], ">= 0"),
        ("walk", "versions", ",", "empty"),
        ("walk", "log_level", "LOUD", "DEBUG"),
        ("walk", "run_id", "a/b", "letters"),
        ("walk", "lakehouse", "s3://b/../x", ".."),
        ("walk", "storage_options", "not-a-pair", "KEY=VALUE"),
        ("walk", "spark_conf", {"spark.x": [1]}, "scalar"),
        ("walk", "reference_time", "yesterday", "ISO-8601"),
        ("expire", "max_version_age", "7 days", "duration"),
        ("expire", "clock_skew_margin", -5, "negative"),
        ("expire", "min_versions_to_keep", 0, ">= 1"),
        ("expire", "dry_run", "maybe", "true or false"),
        ("expire", "dry_run", 1, "true or false"),
        ("expire", "delete_batch_size", 1001, "<= 1000"),
        ("expire", "compact_control_table", None, None),  # None override = not given: no error
        ("orphans", "older_than", True, "duration"),
        ("orphans", "prefix_mismatch", "delete", "error, ignore"),
        ("orphans", "max_retries", -1, ">= 0"),
        ("export", "mode", "everything", "full, partial, minimal"),
        ("export", "name", "12345", "all digits"),
        ("export", "name", "bad name", "letters"),
        ("export", "version", "latest", "integer"),
        ("export", "depth", -1, ">= 0"),
        ("export", "batch_size", 1.5, "integer"),
    ],
)
def test_bad_override_values_name_the_key(job, key, value, fragment):
    if fragment is None:
        load(job, **{key: value})
        return
    with pytest.raises(ConfigError) as err:
        load(job, **{key: value})
    msg = str(err.value)
    assert f"'{key}'" in msg and job in msg and fragment in msg


def test_bad_yaml_value_names_file_and_key(tmp_path):
    conf = write(tmp_path, "older_than: soon\n")
    with pytest.raises(ConfigError, match=rf"'older_than' in {conf}.*bad value for orphans option 'older_than'"):
        load("orphans", conf)


def test_unknown_yaml_key_names_file_and_key(tmp_path):
    conf = write(tmp_path, "dry_run: true\ndryrun: true\n")
    with pytest.raises(ConfigError, match=rf"'dryrun' in {conf}: unknown orphans option 'dryrun'"):
        load("orphans", conf)


def test_option_of_another_job_is_unknown(tmp_path):
    with pytest.raises(ConfigError, match="unknown walk option 'older_than'"):
        load("walk", write(tmp_path, "older_than: 3d\n"))


def test_duplicate_yaml_key(tmp_path):
    conf = write(tmp_path, "dry_run: false\ndry_run: true\n")
    with pytest.raises(ConfigError, match=rf"{conf}.*duplicate key 'dry_run'"):
        load("orphans", conf)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("- a\n- b\n", "mapping"), ("a: [unclosed\n", "not valid YAML"), ("dry_run:\n", "must not be null")],
)
def test_malformed_yaml_names_the_file(tmp_path, text, fragment):
    conf = write(tmp_path, text)
    with pytest.raises(ConfigError, match=fragment) as err:
        load("orphans", conf)
    assert str(conf) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"orphans config file .*nope\.yaml does not exist"):
        load("orphans", tmp_path / "nope.yaml")


def test_a_file_shipped_with_spark_submit_files_is_found_by_its_base_name(tmp_path, monkeypatch, caplog):
    """A cluster-mode driver's container has ``./expire.yaml`` (spark-submit --files), not the
    submitting machine's ``conf/expire.yaml``: the base name in the working directory is read,
    and a log line says so."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "dry_run: true\nmax_version_age: 2d\n", "expire.yaml")
    for given in ("conf/expire.yaml", "/opt/repo/conf/expire.yaml", "expire.yaml"):
        caplog.clear()
        with caplog.at_level("WARNING", logger="trinitylake.config"):
            cfg = load("expire", given)
        assert (cfg.dry_run, cfg.max_version_age, cfg.sources["dry_run"]) == (True, 2 * DAY, "file")
        assert cfg.conf_path == "expire.yaml"
        said = [r.getMessage() for r in caplog.records]
        if given == "expire.yaml":
            assert said == []  # the file named is the file read
        else:
            assert len(said) == 1 and f"{given} is not on this machine; reading expire.yaml" in said[0]
    # A bad value in the shipped file names the file that was read.
    write(tmp_path, "dry_run: maybe\n", "expire.yaml")
    with pytest.raises(ConfigError, match=r"'dry_run' in expire\.yaml"):
        load("expire", "conf/expire.yaml")


def test_an_existing_path_wins_over_a_shipped_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "dry_run: true\n", "orphans.yaml")
    (tmp_path / "conf").mkdir()
    write(tmp_path / "conf", "dry_run: false\n", "orphans.yaml")
    cfg = load("orphans", "conf/orphans.yaml")
    assert (cfg.dry_run, cfg.conf_path) == (False, "conf/orphans.yaml")


def test_a_conf_path_found_nowhere_names_both_places(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as err:
        load("walk", "conf/walk.yaml")
    assert str(err.value) == (f"walk config file conf/walk.yaml does not exist, nor is walk.yaml in the working "
                              f"directory {tmp_path} (where spark-submit --files puts it)")
    with pytest.raises(ConfigError, match=r"^walk config file walk\.yaml does not exist$"):
        load("walk", "walk.yaml")


def test_unknown_env_var_for_the_job():
    with pytest.raises(ConfigError, match="TLAKE_ORPHANS_DRYRUN sets unknown orphans option 'dryrun'"):
        load("orphans", env={"TLAKE_ORPHANS_DRYRUN": "true"})


def test_bad_env_value_names_the_variable():
    with pytest.raises(ConfigError, match="environment variable TLAKE_EXPIRE_MAX_RETRIES.*'max_retries'"):
        load("expire", env={"TLAKE_EXPIRE_MAX_RETRIES": "many"})


def test_unknown_override_key():
    with pytest.raises(ConfigError, match="override 'olderthan': unknown orphans option 'olderthan'"):
        load("orphans", olderthan="3d")


def test_unknown_job():
    with pytest.raises(ConfigError, match="unknown job 'vacuum'"):
        load_job_config("vacuum", env={})


@pytest.mark.parametrize(("job", "missing"), [("walk", "lakehouse"), ("export", "name"), ("export", "target")])
def test_required_options(job, missing):
    overrides = {"lakehouse": "/tmp/tl-lh", **REQUIRED.get(job, {})}
    overrides.pop(missing)
    with pytest.raises(ConfigError, match=rf"{job} option '{missing}' is required: pass --{missing}"):
        load_job_config(job, overrides=overrides, env={}, now_ms=NOW)


def test_required_error_names_the_conf_file(tmp_path):
    conf = write(tmp_path, "lakehouse: null\n")
    with pytest.raises(ConfigError, match=rf"'lakehouse' is required \(config file {conf}\)"):
        load_job_config("walk", str(conf), env={}, now_ms=NOW)


def test_export_version_and_as_of_are_exclusive():
    with pytest.raises(ConfigError, match="'version' and 'as_of' are mutually exclusive"):
        load("export", version=3, as_of="2026-11-01")


@pytest.mark.parametrize("target", ["/tmp/tl-lh", "/tmp/tl-lh/exports/w1", "/tmp"])
def test_export_target_must_not_overlap_the_lakehouse(target):
    with pytest.raises(ConfigError, match="'target'.*overlaps the lakehouse"):
        load("export", target=target)
    load("export", target="/tmp/tl-lh-exports/w1")  # a sibling with a common prefix is fine


def test_future_reference_time_is_refused():
    load("orphans", reference_time=NOW + 5 * 60_000)  # within the clock-skew tolerance
    with pytest.raises(ConfigError, match="'reference_time'.*later than this machine's clock"):
        load("orphans", reference_time=NOW + DAY)


def test_config_errors_are_trinitylake_errors():
    assert issubclass(ConfigError, TrinityLakeError)


# ---- durations and timestamps --------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("7d", 7 * DAY),
        ("36h", 36 * 3_600_000),
        ("10m", 600_000),
        ("90s", 90_000),
        ("500ms", 500),
        ("1w", 7 * DAY),
        ("1d12h", 36 * 3_600_000),
        ("1.5h", 5_400_000),
        (" 2H ", 7_200_000),
        ("0", 0),
        (0, 0),
    ],
)
def test_parse_duration(text, ms):
    assert parse_duration(text) == ms


@pytest.mark.parametrize("bad", ["", "7", "604800000", 5, "d", "7 days", "7y", "-1d", "1d-", -1, True, None, [1], 1.5])
def test_parse_duration_rejects(bad):
    with pytest.raises(ValueError):
        parse_duration(bad)


def test_a_bare_number_is_milliseconds_only_from_a_python_caller():
    assert parse_duration(250, bare_ms=True) == 250
    with pytest.raises(ValueError, match="has no unit"):
        parse_duration("250", bare_ms=True)  # text is a user's: it needs its unit


@pytest.mark.parametrize(
    ("value", "iso"),
    [
        ("2026-11-22T03:00:00Z", "2026-11-22T03:00:00.000Z"),
        ("2026-11-22T03:00:00+00:00", "2026-11-22T03:00:00.000Z"),
        ("2026-11-22T04:00:00+01:00", "2026-11-22T03:00:00.000Z"),
        ("2026-11-22T03:00:00", "2026-11-22T03:00:00.000Z"),  # naive = UTC
        ("2026-11-22 03:00:00.250", "2026-11-22T03:00:00.250Z"),
        ("2026-11-22", "2026-11-22T00:00:00.000Z"),
        ("1795316400000", "2026-11-22T03:00:00.000Z"),
        (1795316400000, "2026-11-22T03:00:00.000Z"),
    ],
)
def test_parse_timestamp(value, iso):
    assert format_timestamp(parse_timestamp(value)) == iso


def test_parse_timestamp_from_yaml_types(tmp_path):
    conf = write(tmp_path, "reference_time: 2026-11-22T03:00:00Z\nas_of: 2026-11-20\n")
    cfg = load("export", conf)
    assert format_timestamp(cfg.reference_time) == "2026-11-22T03:00:00.000Z"
    assert format_timestamp(cfg.as_of) == "2026-11-20T00:00:00.000Z"


@pytest.mark.parametrize("bad", ["22/11/2026", "now", "", -5, True, None, 1.5])
def test_parse_timestamp_rejects(bad):
    with pytest.raises(ValueError):
        parse_timestamp(bad)


# ---- command line --------------------------------------------------------------------------


def test_job_command_has_a_flag_per_option():
    for job in JOBS:
        flags = {s for p in job_command(job).params for s in (*p.opts, *p.secondary_opts)}
        assert "--conf" in flags
        for opt in JOB_OPTIONS[job].values():
            assert opt.cli_flag in flags, (job, opt.name)
            if opt.kind == "bool":
                assert "--no-" + opt.cli_flag[2:] in flags


def test_flags_round_trip():
    argv = [
        "--lakehouse", "s3://bucket/lh",
        "--master", "local[2]",
        "--control-uri", "s3://bucket/ctl",
        "--storage-option", "endpoint_url=http://127.0.0.1:9000",
        "--storage-option", "client_kwargs.region_name=eu-west-1",
        "--storage-option", "anon=false",
        "--spark-conf", "spark.sql.shuffle.partitions=4",
        "--spark-conf", "spark.jars.packages=a,b",
        "--remote", "sc://spark.example:15002",
        "--execution", "distributed",
        "--local-max-items", "5000",
        "--driver-max-rows", "100000",
        "--threads", "4",
        "--local-threads", "2",
        "--reference-time", "2026-11-22T03:00:00+00:00",
        "--run-id", "orphans-2026-11-22",
        "--control-engine", "spark",
        "--control-table", "main.ops.ctl",
        "--log-level", "debug",
        "--keep-runs", "3",
        "--keep-runs-max-age", "7d",
        "--older-than", "3d",
        "--unsafe-min-age",
        "--dry-run",
        "--max-candidates", "5000",
        "--delete-batch-size", "200",
        "--max-retries", "1",
        "--prefix-mismatch", "ignore",
    ]  # fmt: skip
    cfg = parse_job_args("orphans", argv, env={}, now_ms=NOW)
    assert cfg.to_dict() == {
        "lakehouse": "s3://bucket/lh",
        "master": "local[2]",
        "control_uri": "s3://bucket/ctl",
        "storage_options": {
            "endpoint_url": "http://127.0.0.1:9000",
            "client_kwargs": {"region_name": "eu-west-1"},
            "anon": False,
        },
        "spark_conf": {"spark.sql.shuffle.partitions": "4", "spark.jars.packages": "a,b"},
        "remote": "sc://spark.example:15002",
        "execution": "distributed",
        "local_max_items": 5000,
        "driver_max_rows": 100000,
        "threads": 4,
        "local_threads": 2,
        "reference_time": parse_timestamp("2026-11-22T03:00:00Z"),
        "run_id": "orphans-2026-11-22",
        "control_engine": "spark",
        "control_table": "main.ops.ctl",
        "log_level": "DEBUG",
        "keep_runs": 3,
        "keep_runs_max_age": 7 * DAY,
        "older_than": 3 * DAY,
        "unsafe_min_age": True,
        "dry_run": True,
        "max_candidates": 5000,
        "delete_batch_size": 200,
        "max_retries": 1,
        "prefix_mismatch": "ignore",
    }
    assert all(cfg.sources[k] == "cli" for k in cfg.to_dict())


def test_only_given_flags_override(tmp_path):
    conf = write(tmp_path, "dry_run: true\nolder_than: 5d\n")
    cfg = parse_job_args("orphans", ["--lakehouse", "/tmp/tl-lh", "--conf", str(conf)], env={}, now_ms=NOW)
    assert (cfg.dry_run, cfg.older_than) == (True, 5 * DAY)
    cfg = parse_job_args(
        "orphans", ["--lakehouse", "/tmp/tl-lh", "--conf", str(conf), "--no-dry-run"], env={}, now_ms=NOW
    )
    assert cfg.dry_run is False and cfg.sources["dry_run"] == "cli"


def test_walk_and_export_flags():
    walk = parse_job_args(
        "walk", ["--lakehouse", "/tmp/tl-lh", "--versions", "1,2,3", "--batch-size", "64"], env={}, now_ms=NOW
    )
    assert (walk.versions, walk.batch_size) == ((1, 2, 3), 64)
    export = parse_job_args(
        "export",
        ["--lakehouse", "/tmp/tl-lh", "--name", "w1", "--target", "/tmp/tl-x/w1", "--version", "4", "--mode",
         "minimal", "--no-verify-checksum"],
        env={},
        now_ms=NOW,
    )  # fmt: skip
    assert (export.version, export.mode, export.verify_checksum) == (4, "minimal", False)


def test_expire_flags():
    cfg = parse_job_args(
        "expire",
        ["--lakehouse", "/tmp/tl-lh", "--max-version-age", "14d", "--min-versions-to-keep", "5",
         "--clock-skew-margin", "90s", "--no-compact-control-table"],
        env={},
        now_ms=NOW,
    )  # fmt: skip
    assert (cfg.max_version_age, cfg.min_versions_to_keep, cfg.clock_skew_margin) == (14 * DAY, 5, 90_000)
    assert cfg.compact_control_table is False


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--older-than", "soon"], "command-line flag --older-than: bad value for orphans option 'older_than'"),
        (["--bogus"], "No such option '--bogus'"),
        (["--older"], "No such option '--older'"),  # no abbreviations
        (["extra"], "unexpected extra argument (extra)"),
        (["--max-retries"], "Option '--max-retries' requires an argument"),
        (["--storage-option", "novalue"], "command-line flag --storage-option"),
    ],
)
def test_bad_flags_raise_config_error(argv, fragment):
    with pytest.raises(ConfigError) as err:
        parse_job_args("orphans", ["--lakehouse", "/tmp/tl-lh", *argv], env={}, now_ms=NOW)
    assert fragment in str(err.value)


def test_help_lists_defaults(capsys):
    with pytest.raises(SystemExit) as done:
        parse_job_args("expire", ["--help"], env={})
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "--clock-skew-margin DURATION" in out and "[default: 10m]" in out and "--no-dry-run" in out


# ---- resolution against the lakehouse ------------------------------------------------------


def test_effective_retention():
    cfg = load("expire")
    assert effective_retention(cfg, definition_max_age_ms=None, definition_min_versions=None) == (
        DEFAULT_MAX_VERSION_AGE_MS,
        DEFAULT_MIN_VERSIONS_TO_KEEP,
    )
    assert effective_retention(cfg, definition_max_age_ms=DAY, definition_min_versions=10) == (DAY, 10)
    cfg = load("expire", max_version_age="2d", min_versions_to_keep=1)
    assert effective_retention(cfg, definition_max_age_ms=DAY, definition_min_versions=10) == (2 * DAY, 1)


def test_effective_orphan_min_age_floor():
    ttl = 3 * DAY
    assert effective_orphan_min_age(load("orphans"), txn_ttl_ms=ttl) == ttl
    assert effective_orphan_min_age(load("orphans", older_than="5d"), txn_ttl_ms=ttl) == 5 * DAY
    with pytest.raises(UnsafeOperationError, match="below the lakehouse transaction TTL 3d"):
        effective_orphan_min_age(load("orphans", older_than="1h"), txn_ttl_ms=ttl)
    unsafe = load("orphans", older_than="1h", unsafe_min_age=True)
    assert effective_orphan_min_age(unsafe, txn_ttl_ms=ttl) == 3_600_000


# ---- the committed conf files ----------------------------------------------------------------


@pytest.mark.parametrize("job", JOBS)
def test_conf_file_loads_and_documents_every_option(job):
    path = CONF_DIR / f"{job}.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert list(data) == list(JOB_OPTIONS[job]), "conf file keys must list every option, in table order"
    text = path.read_text(encoding="utf-8")
    for key in data:
        line = text.splitlines().index(next(ln for ln in text.splitlines() if ln.startswith(f"{key}:")))
        assert text.splitlines()[line - 1].startswith("#"), f"{job}.yaml: {key} has no comment above it"
    cfg = load(job, path, run_id="r")
    defaults = load(job, run_id="r")
    assert cfg == defaults, "the conf files spell out the built-in defaults"


def test_conf_files_state_the_safety_model():
    for job in ("expire", "orphans"):
        text = (CONF_DIR / f"{job}.yaml").read_text(encoding="utf-8")
        assert "Safety model" in text and "dry_run: false" in text


def test_spark_defaults_conf():
    props = {}
    for line in (CONF_DIR / "spark-defaults.conf").read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, value = line.split(None, 1)
            props[key] = value.strip()
    assert int(props["spark.sql.shuffle.partitions"]) <= 64
    assert props["spark.ui.enabled"] == "false"
    assert props["spark.sql.execution.arrow.pyspark.enabled"] == "true"


# ---- the typed config classes against the option table (drift) ----------------------------


def test_config_classes_match_the_option_table():
    from dataclasses import fields as dc_fields

    from trinitylake.config import ExpireConfig, WalkConfig, config_drift, expected_field_type

    assert config_drift() == []
    classes = {"walk": WalkConfig, "expire": ExpireConfig, "orphans": OrphansConfig, "export": ExportConfig}
    for job, cls in classes.items():
        assert cls.job == job and issubclass(cls, JobConfig)
        typed = {f.name: str(f.type) for f in dc_fields(cls)}
        assert set(typed) - {"sources", "conf_path"} == set(JOB_OPTIONS[job])
        for key, opt in JOB_OPTIONS[job].items():
            assert typed[key] == expected_field_type(opt), (job, key)
        # Defaults: a config of only the required options holds each option's parsed default
        # (or, for a derived one, a value of the declared type).
        cfg = load(job)
        assert type(cfg) is cls
        for key, opt in JOB_OPTIONS[job].items():
            if cfg.sources[key] == "default":
                assert cfg[key] == opt.parse(opt.default), (job, key)
            else:
                assert cfg[key] is not None, (job, key)


def test_config_drift_is_reported(monkeypatch):
    import trinitylake.config as config
    from trinitylake.options import Option

    extra = Option(name="new_knob", kind="int", default=1, help="x")
    table = {job: dict(opts) for job, opts in JOB_OPTIONS.items()}
    table["orphans"]["new_knob"] = extra
    table["walk"]["batch_size"] = Option(name="batch_size", kind="bool", default=False, help="x")
    monkeypatch.setattr(config, "JOB_OPTIONS", table)
    problems = config.config_drift()
    assert any("OrphansConfig fields ['new_knob']" in p for p in problems), problems
    assert any("WalkConfig.batch_size is typed int" in p for p in problems), problems
    with pytest.raises(TypeError, match="do not match trinitylake.options"):
        config.check_config_classes()
