"""Expire, orphans and export SIGKILLed at every crash point (and mid-delete / mid-copy through
the storage seam, `tests.support.killer`), then re-run; the oracle checks after the kill and
after the re-run. Local files, and the S3 (moto) server for expire and orphans, also under
injected transient storage faults (503 SlowDown, resets, timeouts; some after the operation
took effect).

Every case runs in CI: the jobs stay on the driver (no Spark JVM), so a case costs one Python
process start plus a small lakehouse.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.maintenance.helpers import build_history, build_history_on_s3
from tests.oracle import Oracle
from tests.support.faults import FaultSpec, install, uninstall
from tests.support.jobs import AHEAD_MS, TTL_MS, run_local
from trinitylake.format.paths import hashed_path, root_name
from trinitylake.lakehouse import Lakehouse
from trinitylake.storage import Storage

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KEEP = 4
OLD_S = 7200
KILLS: list[tuple[str, str, int, float]] = []  # (job and storage, kill point, files deleted or copied, seconds)
_T0 = [0.0]


@pytest.fixture(autouse=True)
def _clock():
    _T0[0] = time.perf_counter()


def _record(what: str, point: str, files: int) -> None:
    KILLS.append((what, point, files, time.perf_counter() - _T0[0]))

# (label, TLAKE_TEST_CRASH_AT point or None, killer arguments)
EXPIRE_KILLS = [
    ("after_plan", "expire_after_plan", []),
    ("commit before its root", "before_root", []),
    ("commit after its root", "after_root", []),
    ("after_commit", "expire_after_commit", []),
    ("before_delete", "expire_before_delete", []),
    ("first delete half done", None, ["--op", "delete", "--nth", "1", "--when", "half"]),
    ("mid_delete (after the deepest level)", "expire_mid_delete", []),
    ("third delete before it ran", None, ["--op", "delete", "--nth", "3", "--when", "before"]),
    ("before_roots", "expire_before_roots", []),
]
ORPHAN_KILLS = [
    ("between plan and delete", ["--op", "delete", "--nth", "1", "--when", "before"]),
    ("first delete half done", ["--op", "delete", "--nth", "1", "--when", "half"]),
    ("after the second delete", ["--op", "delete", "--nth", "2", "--when", "after"]),
]


@pytest.fixture(scope="module", autouse=True)
def _figures(ledger):
    yield
    by: dict[str, list[tuple[str, int, float]]] = {}
    for what, point, n, sec in KILLS:
        by.setdefault(what, []).append((point, n, sec))
    for what, runs in sorted(by.items()):
        ledger.add("oracle", f"SIGKILL and re-run: {what}", trials=len(runs), faults=len(runs),
                   seconds=sum(sec for _, _, sec in runs), points=sorted({p for p, _, _ in runs}),
                   files=sum(n for _, n, _ in runs))


def _kill(job: str, args: list[str], *, crash_at: str | None = None, killer: list[str] = (), env: dict | None = None):
    """Run `job` in its own process; it must die by SIGKILL."""
    e = {**os.environ, "PYTHONPATH": os.pathsep.join((ROOT, os.environ.get("PYTHONPATH", ""))), **(env or {})}
    if crash_at:
        e["TLAKE_TEST_CRASH_AT"] = crash_at
    cmd = [sys.executable, "-m", "tests.support.killer", *(killer or ["--op", "none", "--nth", "0"]), job, *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=e, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, f"{job} was not killed (rc {proc.returncode}): {proc.stderr[-3000:]}"


def _lakehouse(uri: str, seed: int, s3_server=None) -> Lakehouse:
    shape = {"order": 4, "node_max_bytes": 4096, "txn_ttl_millis": TTL_MS}
    if s3_server is not None:  # what is killed is the job on S3, not the commits before it
        return build_history_on_s3(s3_server.client, uri, s3_server.storage_options, seed=seed, ops=26, **shape)
    lh = Lakehouse.create(uri, audit=False, **shape)
    build_history(lh, seed=seed, ops=26)
    return lh


def _expire_args(uri: str, tmp_path, **extra) -> list[str]:
    args = ["--lakehouse", uri, "--execution", "local", "--max-version-age", "0", "--clock-skew-margin", "0",
            "--min-versions-to-keep", str(KEEP), "--reference-time", str(int(time.time() * 1000) + AHEAD_MS),
            "--delete-batch-size", "3", "--control-uri", str(tmp_path / "control")]
    for k, v in extra.items():
        args += [f"--{k.replace('_', '-')}", str(v)]
    return args


def _expire_case(lh: Lakehouse, o: Oracle, tmp_path, crash_at, killer, label: str, options=None, env=None) -> None:
    latest, _ = o.latest()
    expired = list(range(0, latest + 1 - KEEP))
    expired_files = o.version_files(expired)
    owned, snap = o.owned_files(), o.snapshot()
    _kill("expire", _expire_args(lh.uri, tmp_path), crash_at=crash_at, killer=killer, env=env)
    assert o.problems(snap) == [], "a killed expire must leave every retained version readable"
    assert not (owned - o.owned_files()) & o.live_files()
    floor = o.latest()[1].oldest_retained_version
    assert floor in (0, expired[-1] + 1)
    # A re-run: the killed run's commit (if it landed) is one more version to keep.
    res = run_local("expire", lh.uri, storage_options=options, min_versions_to_keep=KEEP + (floor > 0),
                    delete_batch_size=3)
    assert res.status == "succeeded" and res.counts["failed"] == 0
    assert o.problems(snap) == []
    _, d = o.latest()
    assert d.oldest_retained_version == expired[-1] + 1
    deleted = owned - o.owned_files()
    assert deleted == expired_files - o.live_files()
    assert not {root_name(v) for v in expired} & o.owned_files()
    _record(f"expire ({'S3' if options else 'local'})", label, len(deleted))


@pytest.mark.parametrize("label,crash_at,killer", EXPIRE_KILLS, ids=[k[0] for k in EXPIRE_KILLS])
def test_expire_killed_and_rerun(tmp_path, label, crash_at, killer):
    lh = _lakehouse(str(tmp_path / "lh"), seed=31)
    _expire_case(lh, Oracle(lh.uri), tmp_path, crash_at, killer, label)


def _plant_local(lh: Lakehouse, base: str) -> tuple[set[str], set[str]]:
    """Old orphans (planted, and the staged files of an abandoned transaction) and young ones."""
    old, young = set(), set()
    for i in range(7):
        rel = hashed_path(f"node-00000000-0000-4000-8000-{i:012d}.arrow")
        (old if i < 6 else young).add(rel)
    txn = lh.begin()
    txn.create_table(lh.view().list_namespaces()[0], "abandoned")
    staged = {p for p in txn.writes.values() if p}
    del txn  # its writer died: never committed, never rolled back (a rollback deletes what it staged)
    for rel in old | young:
        os.makedirs(os.path.dirname(os.path.join(base, rel)), exist_ok=True)
        with open(os.path.join(base, rel), "wb") as f:
            f.write(b"orphan")
    t = time.time() - OLD_S
    for rel in old | staged:
        os.utime(os.path.join(base, rel), (t, t))
    return old | staged, young


@pytest.mark.parametrize("label,killer", ORPHAN_KILLS, ids=[k[0] for k in ORPHAN_KILLS])
def test_orphans_killed_and_rerun(tmp_path, label, killer):
    lh = _lakehouse(str(tmp_path / "lh"), seed=32)
    o = Oracle(lh.uri)
    old, young = _plant_local(lh, str(tmp_path / "lh"))
    owned, snap = o.owned_files(), o.snapshot()
    live = o.live_files()
    args = ["--lakehouse", lh.uri, "--execution", "local", "--delete-batch-size", "2", "--reference-time",
            str(int(time.time() * 1000)), "--control-uri", str(tmp_path / "control")]
    _kill("orphans", args, killer=killer)
    assert o.problems(snap) == [] and not (owned - o.owned_files()) & (live | young)
    res = run_local("orphans", lh.uri, reference_time=int(time.time() * 1000), delete_batch_size=2)
    assert res.status == "succeeded"
    deleted = owned - o.owned_files()
    assert deleted == old - live and old - live, "exactly the old unreachable format-owned files"
    assert o.problems(snap) == [] and young <= o.owned_files()
    _record("orphans (local)", label, len(deleted))


EXPORT_KILLS = [
    ("first target file created", None, ["--op", "create_exclusive", "--nth", "1", "--when", "after"]),
    ("second target file created", None, ["--op", "create_exclusive", "--nth", "2", "--when", "after"]),
    ("record commit before its root", "before_root", []),
    ("record commit after its root", "after_root", []),
]


@pytest.mark.parametrize("mode", ["full", "minimal"])
@pytest.mark.parametrize("label,crash_at,killer", EXPORT_KILLS, ids=[k[0] for k in EXPORT_KILLS])
def test_export_killed_and_rerun(tmp_path, label, crash_at, killer, mode):
    lh = _lakehouse(str(tmp_path / "lh"), seed=33)
    o = Oracle(lh.uri)
    version = o.latest()[0] - 3
    target = str(tmp_path / "exp")
    owned, snap = o.owned_files(), o.snapshot()
    args = ["--lakehouse", lh.uri, "--execution", "local", "--name", "e1", "--target", target, "--version",
            str(version), "--mode", mode, "--depth", "1", "--control-uri", str(tmp_path / "control")]
    if killer:
        killer = [*killer, "--root", Storage(target).root]
    _kill("export", args, crash_at=crash_at, killer=killer)
    assert o.problems(snap) == [] and o.owned_files() >= owned, "an export never deletes from its source"
    res = run_local("export", lh.uri, name="e1", target=target, version=version, mode=mode, depth=1)
    assert res.status == "succeeded"
    now = o.snapshot()
    assert now.exports["e1"] == snap.versions[version], "the export reads exactly as its source version"
    exported = o.reach([o.live_roots()["export:e1"]])
    in_target = {u for u in exported if u.startswith(Storage(target).root)}
    assert in_target and all(o.files.exists(u) for u in exported)
    _, d = o.latest()
    # Pinned exactly when the export still references source files (never for a full one).
    refs_source = bool(exported - in_target)
    assert (d.exported_snapshot_pins.get("e1") == version) == refs_source and not (mode == "full" and refs_source)
    _record(f"export {mode} (local)", label, len(in_target))


# ---- S3 ------------------------------------------------------------------------------------------
@pytest.mark.s3
@pytest.mark.parametrize("label,crash_at,killer", [EXPIRE_KILLS[3], EXPIRE_KILLS[5], EXPIRE_KILLS[8]],
                         ids=["after_commit", "delete half done", "before_roots"])
def test_expire_killed_and_rerun_on_s3(tmp_path, s3_server, s3_bucket, label, crash_at, killer):
    opts = s3_server.storage_options
    lh = _lakehouse(f"{s3_bucket}/lh", seed=34, s3_server=s3_server)
    o = Oracle(lh.uri, s3_client=s3_server.client)
    _expire_case(lh, o, tmp_path, crash_at, killer, label, options=opts,
                 env={"TLAKE_S3_ENDPOINT_URL": s3_server.endpoint_url})


def _plant_s3(s3_server, uri: str) -> set[str]:
    bucket, _, prefix = uri[5:].partition("/")
    out = set()
    for i in range(6):
        rel = hashed_path(f"node-00000000-0000-4000-8000-{i:012d}.arrow")
        s3_server.client.put_object(Bucket=bucket, Key=f"{prefix}/{rel}", Body=b"orphan")
        out.add(rel)
    return out


@pytest.mark.s3
@pytest.mark.parametrize("label,killer", ORPHAN_KILLS[:2], ids=[k[0] for k in ORPHAN_KILLS[:2]])
def test_orphans_killed_and_rerun_on_s3(tmp_path, s3_server, s3_bucket, label, killer):
    opts = s3_server.storage_options
    lh = _lakehouse(f"{s3_bucket}/lh", seed=35, s3_server=s3_server)
    o = Oracle(lh.uri, s3_client=s3_server.client)
    planted = _plant_s3(s3_server, lh.uri)
    owned, snap, live = o.owned_files(), o.snapshot(), o.live_files()
    # S3 sets LastModified itself: "now" lies ahead instead, so every file is past the floor.
    ref = int(time.time() * 1000) + AHEAD_MS
    args = ["--lakehouse", lh.uri, "--execution", "local", "--delete-batch-size", "2", "--reference-time", str(ref),
            "--control-uri", str(tmp_path / "control")]
    _kill("orphans", args, killer=killer, env={"TLAKE_S3_ENDPOINT_URL": s3_server.endpoint_url})
    assert o.problems(snap) == [] and not (owned - o.owned_files()) & live
    res = run_local("orphans", lh.uri, storage_options=opts, reference_time=ref, delete_batch_size=2)
    assert res.status == "succeeded"
    deleted = owned - o.owned_files()
    assert deleted == owned - live and planted <= deleted
    assert o.problems(snap) == []
    _record("orphans (S3)", label, len(deleted))


@pytest.mark.s3
@pytest.mark.parametrize("job", ["expire", "orphans"])
def test_jobs_under_transient_s3_faults_match_the_oracle(s3_server, s3_bucket, ledger, job):
    """503 SlowDown, resets, timeouts and EIO on every storage operation of the job (some after
    the operation took effect); the job succeeds once and deletes exactly the oracle's set."""
    opts = s3_server.storage_options
    lh = _lakehouse(f"{s3_bucket}/lh", seed=36, s3_server=s3_server)
    o = Oracle(lh.uri, s3_client=s3_server.client)
    planted = _plant_s3(s3_server, lh.uri) if job == "orphans" else set()
    latest, _ = o.latest()
    expired = list(range(0, latest + 1 - KEEP))
    expired_files = o.version_files(expired)
    owned, snap = o.owned_files(), o.snapshot()
    t0 = time.perf_counter()
    injector = install(FaultSpec(transient_rate=0.15, after_share=0.3, max_consecutive=2, seed=5))
    try:
        if job == "expire":
            res = run_local("expire", lh.uri, storage_options=opts, min_versions_to_keep=KEEP, delete_batch_size=3)
        else:
            res = run_local("orphans", lh.uri, storage_options=opts, delete_batch_size=2,
                            reference_time=int(time.time() * 1000) + AHEAD_MS)
    finally:
        uninstall()
    faults = sum(n for k, n in injector.counts.items() if k.startswith("transient:"))
    assert res.status == "succeeded" and faults > 0
    assert o.problems(snap) == []
    deleted = owned - o.owned_files()
    live = o.live_files()
    if job == "expire":
        assert deleted == expired_files - live and o.latest()[1].oldest_retained_version == expired[-1] + 1
    else:
        assert deleted == owned - live and planted <= deleted
    ledger.add("oracle", f"{job} under transient S3 faults (exact deleted set)", trials=1, faults=faults,
               seconds=time.perf_counter() - t0, files_deleted=len(deleted))


@pytest.mark.s3
@pytest.mark.parametrize("job", ["expire", "orphans"])
def test_keys_a_bulk_delete_refuses_are_failures_and_a_rerun_finishes(s3_server, s3_bucket, ledger, monkeypatch, job):
    """S3 answers a DeleteObjects with per-key errors (which s3fs's own bulk delete drops): the
    job must count those keys as not deleted (fail, typed), delete nothing live, and a re-run
    without the refusals must leave exactly the oracle's set deleted."""
    import s3fs

    from trinitylake.jobs.runner import JobFailedError

    opts = s3_server.storage_options
    lh = _lakehouse(f"{s3_bucket}/lh", seed=37, s3_server=s3_server)
    o = Oracle(lh.uri, s3_client=s3_server.client)
    planted = _plant_s3(s3_server, lh.uri) if job == "orphans" else set()
    latest, _ = o.latest()
    expired_files = o.version_files(range(0, latest + 1 - KEEP))
    owned, snap = o.owned_files(), o.snapshot()
    refused: list[str] = []
    original = s3fs.S3FileSystem.call_s3

    def refusing(self, method, *args, **kw):
        if method != "delete_objects":
            return original(self, method, *args, **kw)
        objs = kw["Delete"]["Objects"]
        victim, rest = objs[0], objs[1:]  # the first key of every request is refused
        out = dict(original(self, method, *args, **{**kw, "Delete": {**kw["Delete"], "Objects": rest}}) if rest else {})
        out["Errors"] = [*(out.get("Errors") or []), {"Key": victim["Key"], "Code": "AccessDenied", "Message": "injected"}]
        refused.append(victim["Key"])
        return out

    # The I/O engine sends the bulk deletes first: S3 deletes the other keys of its request and
    # refuses the first, which obstore raises (naming no other key); the request then goes again
    # through botocore, whose answer names the refused keys.
    import obstore

    from trinitylake.storage import object_io
    engine_delete = obstore.delete_async

    async def engine_refusing(store, keys):
        if len(keys) > 1:
            await engine_delete(store, keys[1:])
        raise OSError(f"Failed to delete object {keys[0]}: AccessDenied: injected")

    ref = int(time.time() * 1000) + AHEAD_MS
    kw = {"min_versions_to_keep": KEEP} if job == "expire" else {"reference_time": ref}
    monkeypatch.setattr(s3fs.S3FileSystem, "call_s3", refusing)
    monkeypatch.setattr(object_io.obstore, "delete_async", engine_refusing)
    with pytest.raises(JobFailedError) as err:
        run_local(job, lh.uri, storage_options=opts, delete_batch_size=3, max_retries=1, **kw)
    monkeypatch.setattr(s3fs.S3FileSystem, "call_s3", original)
    monkeypatch.setattr(object_io.obstore, "delete_async", engine_delete)
    assert refused and "could not be deleted" in str(err.value)
    left = o.owned_files()
    assert {k.split("/", 1)[1] for k in refused} <= left, "a refused key was counted as deleted and is gone"
    assert o.problems(snap) == []
    run_local(job, lh.uri, storage_options=opts, delete_batch_size=3,
              **({"min_versions_to_keep": KEEP + 1} if job == "expire" else kw))
    deleted = owned - o.owned_files()
    assert deleted == ((expired_files if job == "expire" else owned) - o.live_files())
    assert planted <= deleted and o.problems(snap) == []
    ledger.add("oracle", f"{job}: S3 refuses single keys of a bulk delete (per-key errors), then a re-run",
               trials=1, faults=len(refused), seconds=time.perf_counter() - _T0[0], files_deleted=len(deleted))
