"""`if_exists`: what an export does when its name is already recorded with another version.

The scheduled DAG names its weekly export by day (``weekly-<YYYYMMDD>``) and exports the version
current at the run's logical date. A second run that day at another time (a manual trigger) asks
for a newer version under the same name: by default that is a permanent `AlreadyExistsError`;
with ``if_exists: keep`` the finished export counts as done, and nothing is copied or overwritten.
The files are compared byte for byte before and after, and the lakehouse's record by the
independent oracle.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from trinitylake.errors import AlreadyExistsError

from .conftest import latest_def, populate


def _now_ms() -> int:
    time.sleep(0.01)  # past the last commit's millisecond
    return int(time.time() * 1000)


def _snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.fixture
def lh(make_lakehouse):
    lh = make_lakehouse()
    populate(lh, namespaces=1, tables=4, alters=1, drops=0)
    return lh


def test_keep_counts_a_finished_export_of_another_version_as_done(run, lh, tmp_path):
    target = str(tmp_path / "weekly-20261129")
    first = run(lh, target, "weekly-20261129", if_exists="keep", as_of=_now_ms())
    assert first.status == "succeeded" and first.counts["copied"] > 0
    exported_version = first.details["version"]
    recorded = dict(latest_def(lh).exported_snapshots)
    before = _snapshot(Path(target))

    lh.create_namespace("later")  # a newer version, then a second run the same day
    assert lh.latest_version() > exported_version
    later = _now_ms()
    with pytest.raises(AlreadyExistsError, match="weekly-20261129"):
        run(lh, target, "weekly-20261129", as_of=later)  # the default: fail
    again = run(lh, target, "weekly-20261129", if_exists="keep", as_of=later)
    assert again.status == "succeeded"
    assert again.details["already_exported"] is True and again.details["version"] == exported_version
    assert again.counts["copied"] == 0
    assert _snapshot(Path(target)) == before  # nothing overwritten, nothing added
    assert dict(latest_def(lh).exported_snapshots) == recorded


def test_keep_never_claims_an_export_recorded_at_another_target(run, lh, tmp_path):
    run(lh, str(tmp_path / "a"), "weekly-1", as_of=_now_ms())
    lh.create_namespace("later")
    with pytest.raises(AlreadyExistsError, match="weekly-1"):
        run(lh, str(tmp_path / "b"), "weekly-1", if_exists="keep", as_of=_now_ms())
    assert not (tmp_path / "b").exists()


def test_keep_reruns_of_the_same_version_still_verify_and_finish(run, lh, tmp_path):
    """The same version under the same name is the export's own re-run (resume, verify), with or
    without keep: keep changes only the case that would otherwise fail."""
    target = str(tmp_path / "t")
    first = run(lh, target, "daily", if_exists="keep")
    version = first.details["version"]
    # A copied file lost at the target: the re-run of the same version restores it.
    victim = next(p for p in sorted(Path(target).rglob("*.binpb")))
    data = victim.read_bytes()
    victim.unlink()
    again = run(lh, target, "daily", if_exists="keep", version=version)
    assert again.status == "succeeded" and "already_exported" not in again.details
    assert victim.read_bytes() == data
