"""Bad input: a clear typed error, and nothing copied."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trinitylake.config import load_job_config
from trinitylake.errors import (
    AlreadyExistsError,
    ConfigError,
    InvalidURIError,
    StorageError,
    UnsafeOperationError,
    ValidationError,
    VersionExpiredError,
    VersionNotFoundError,
)
from trinitylake.format.paths import root_name
from trinitylake.jobs.export.job import run_export
from trinitylake.runs.results import JobResult
from trinitylake.storage import Storage

from .conftest import populate

pytestmark = pytest.mark.spark


def _raw_cfg(name: str, target: str, **kw) -> SimpleNamespace:
    """A config that skipped the config loader's own checks (the job must check again)."""
    base = {"name": name, "target": target, "version": None, "as_of": None, "mode": "full", "depth": 1,
            "batch_size": 8, "verify_checksum": True, "run_id": "test-run", "with_tables": False,
            "table_snapshots": "all"}
    return SimpleNamespace(**{**base, **kw})


def _files(path) -> list[str]:
    return sorted(str(p.relative_to(path)) for p in path.rglob("*")) if path.exists() else []


@pytest.fixture
def lh(make_lakehouse):
    lh = make_lakehouse()
    populate(lh, namespaces=1, tables=4, alters=1, drops=0)
    return lh


def test_bad_targets_are_refused_before_anything_is_written(spark, lh, tmp_path):
    def attempt(cfg, exc, match=None):
        with pytest.raises(exc, match=match):
            run_export(spark, lh, cfg, JobResult("export", "r", lh.uri))

    versions = lh.latest_version()
    # A non-empty target that holds no export of this lakehouse.
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "data.csv").write_text("a,b\n")
    attempt(_raw_cfg("e1", str(foreign)), ValidationError, "not empty")
    assert _files(foreign) == ["data.csv"]
    # A target inside the lakehouse, or containing it (the config loader refuses it too).
    attempt(_raw_cfg("e1", lh.uri + "/exports/e1"), UnsafeOperationError, "inside")
    attempt(_raw_cfg("e1", str(tmp_path)), UnsafeOperationError, "contains")
    with pytest.raises(ConfigError, match="overlaps"):
        load_job_config("export", overrides={"lakehouse": lh.uri, "name": "e1", "target": lh.uri + "/x"}, env={})
    # Invalid URIs and names.
    attempt(_raw_cfg("e1", str(tmp_path / "a") + "/../b"), InvalidURIError)
    attempt(_raw_cfg("e1", "s3:///no-bucket"), InvalidURIError)
    attempt(_raw_cfg("42", str(tmp_path / "n")), ValidationError, "digits")
    attempt(_raw_cfg("bad name", str(tmp_path / "n")), ValidationError)
    attempt(_raw_cfg("e1", str(tmp_path / "n"), mode="sideways"), ValidationError)
    # Versions that are not there.
    attempt(_raw_cfg("e1", str(tmp_path / "v"), version=versions + 5), VersionNotFoundError, "does not exist yet")
    lh.storage.delete([root_name(1)])  # as if expiration removed version 1
    attempt(_raw_cfg("e1", str(tmp_path / "v"), version=1), VersionNotFoundError, "expired")
    attempt(_raw_cfg("e1", str(tmp_path / "v"), as_of=1), VersionNotFoundError)
    assert not (tmp_path / "n").exists() and not (tmp_path / "v").exists()
    assert lh.latest_version() == versions and not lh.definition().exported_snapshots


def test_a_version_below_the_floor_is_refused_before_anything_is_copied(spark, lh, tmp_path):
    """Expire commits oldest_retained_version before it deletes: while it deletes, the root of an
    expired version is still there, and exporting it would copy files that are disappearing."""
    v = lh.latest_version()

    def raise_floor(d) -> None:
        d.oldest_retained_version = v

    txn = lh.begin()
    txn.mutate_definition(raise_floor, "expire committed its floor, deletes pending")
    txn.commit()
    target = tmp_path / "t"
    with pytest.raises(VersionExpiredError, match=f"export 'e1': version {v - 1} is expired"):
        run_export(spark, lh, _raw_cfg("e1", str(target), version=v - 1), JobResult("export", "r", lh.uri))
    assert _files(target) == [] and not lh.definition().exported_snapshots
    # The floor itself (and what is newer) is still exported.
    r = run_export(spark, lh, _raw_cfg("e2", str(tmp_path / "ok"), version=v), JobResult("export", "r", lh.uri))
    assert r.status == "succeeded"


def test_name_clashes_and_conflicting_exports(spark, run, lh, tmp_path):
    v = lh.latest_version()
    run(lh, str(tmp_path / "a"), "a")
    # The name is taken (for another target, or another version at the same target).
    with pytest.raises(AlreadyExistsError, match="already exists"):
        run(lh, str(tmp_path / "b"), "a")
    assert not (tmp_path / "b").exists()
    # The target holds an export of another lakehouse.
    other = lh.__class__.create(str(tmp_path / "other"), order=4, node_max_bytes=4096, audit=False)
    other.create_namespace("x")
    with pytest.raises(ValidationError, match="another lakehouse"):
        run(other, str(tmp_path / "a"), "o1")
    # Another export of the same version but another mode would need a different root file there.
    with pytest.raises(AlreadyExistsError, match="different root file"):
        run(lh, str(tmp_path / "a"), "m1", mode="minimal", version=v)
    assert not Storage(str(tmp_path / "a")).exists("_export/m1/export.json")
    assert set(lh.definition().exported_snapshots) == {"a"}


def test_unfinished_export_with_other_options_is_not_mixed_up(spark, run, lh, tmp_path):
    from tests.support.faults import FaultSpec, injected

    v = lh.latest_version()
    target = str(tmp_path / "t")
    # The target refuses every copied file (a permanent fault at the storage): the plan is
    # persisted, nothing is copied, the export stays unfinished.
    refused = FaultSpec(permanent_paths=r"^(?!_export/)", permanent_ops=("create_exclusive",))
    with injected(refused), pytest.raises(StorageError):
        run(lh, target, "e", batch_size=2)
    assert Storage(target).exists("_export/e/plan/_plan.json")
    lh.create_namespace("later")
    with pytest.raises(ValidationError, match="unfinished|already holds an export named"):
        run(lh, target, "e", version=lh.latest_version())
    # Without a version, the same options continue the unfinished export of v.
    r = run(lh, target, "e")
    assert r.details["version"] == v and r.details["resumed"]
