"""Security: nothing a name, a URI, a stored pointer or a planted file says can make the
library write, read or delete outside the lakehouse root.

* Names with path traversal, separators, absolute URIs, control characters, NUL, DEL,
  spaces or lone surrogates are refused with InvalidNameError (API and CLI), and nothing is
  written anywhere.
* URIs and paths with ``..`` are refused with InvalidURIError (storage, lakehouse, job config).
* Orphans and expire never delete a file outside the root: not through an absolute pointer
  in an expired version, not through a relative ``..`` pointer (the jobs refuse to run), not
  through a symlinked file or folder planted in the root, not foreign files in the root.
* Export targets inside the source, containing it, or equal to it are refused before anything
  is written.
"""

from __future__ import annotations

import os
import time
import uuid

import pytest
from click.testing import CliRunner

from trinitylake.config import load_job_config
from trinitylake.errors import (
    ConfigError,
    InvalidNameError,
    InvalidURIError,
    TrinityLakeError,
    UnsafeOperationError,
    ValidationError,
)
from trinitylake.format.keys import KeyCodec, validate_name
from trinitylake.format.paths import hashed_path, root_name
from trinitylake.jobs.export.target import check_locations
from trinitylake.lakehouse import Lakehouse
from trinitylake.storage import Storage

EVIL_NAMES = [
    "..", ".", "../x", "a/../b", "a/b", "/abs", "/etc/passwd", "s3://bucket/key", "file:///etc/passwd",
    "C:\\Windows", "a\\b", "a\x00b", "\x00", "a\nb", "a\rb", "a\tb", "\x1b[31m", "a b", " ", "a\x7f", "\x7f",
    "a\x1f", "", "a\udcff", "\udcff\udcfe", "x" * 101, "é" * 51,
]


def _snapshot(folder: str) -> dict[str, tuple[int, float]]:
    out = {}
    for d, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(d, f)
            st = os.lstat(p)
            out[p] = (st.st_size, st.st_mtime)
    return out


def test_names_with_path_traversal_are_refused(tmp_path, ledger) -> None:
    t0 = time.perf_counter()
    lh = Lakehouse.create(str(tmp_path / "lh"), audit=False)
    lh.create_namespace("ns")
    before = _snapshot(str(tmp_path))
    v0 = lh.latest_version()
    codec = KeyCodec()
    accepted = []
    attempts = 0
    for name in EVIL_NAMES:
        for attempt in (lambda n: validate_name(n, 100), codec.namespace_key, lambda n: codec.table_key("ns", n),
                        lambda n: codec.table_key(n, "t"), lh.create_namespace, lambda n: lh.create_table("ns", n),
                        lambda n: lh.create_table(n, "t"), lambda n: lh.view().namespace_exists(n)):
            attempts += 1
            try:
                attempt(name)
                accepted.append(name)
            except InvalidNameError:
                pass
    cli_attempts = 0
    from trinitylake.cli import cli

    runner = CliRunner()
    for name in EVIL_NAMES:
        if "\x00" in name or "\udcff" in name or "\udcfe" in name:
            continue  # cannot be a process argument (NUL) / is tested through the API above
        cli_attempts += 1
        r = runner.invoke(cli, ["--lakehouse", lh.uri, "--no-audit", "namespace", "create", name])
        # Refused as an invalid name (exit 1), or, for a name with a dot, as a usage error before
        # the lakehouse is touched (exit 2: no table under it could be named on a command line).
        if not ((r.exit_code == 1 and "InvalidNameError" in r.output)
                or (r.exit_code == 2 and "has a dot" in r.output)):
            accepted.append(f"cli:{name!r}:{r.exit_code}:{r.output[-200:]}")
    # Undecodable bytes on a real command line arrive as lone surrogates.
    import subprocess
    import sys

    tlake = os.path.join(os.path.dirname(sys.executable), "tlake")
    for raw in (b"..\xfe",):
        cli_attempts += 1
        r = subprocess.run([tlake, "--lakehouse", lh.uri, "--no-audit", "namespace", "create", raw],
                           capture_output=True, timeout=120)
        if not ((r.returncode == 1 and b"InvalidNameError" in r.stderr)
                or (r.returncode == 2 and b"has a dot" in r.stderr)):
            accepted.append(f"cli:{raw!r}:{r.returncode}:{r.stderr[-300:]!r}")
    escaped = {p: s for p, s in _snapshot(str(tmp_path)).items() if p not in before}
    ledger.add("security", "names with traversal, separators, URIs, control characters, NUL, surrogates",
               trials=attempts + cli_attempts, names=len(EVIL_NAMES), data_lost=len(accepted) + len(escaped),
               seconds=time.perf_counter() - t0)
    assert not accepted, accepted
    assert not escaped, f"files written by refused operations: {sorted(escaped)[:5]}"
    assert Lakehouse.open(lh.uri, audit=False).latest_version() == v0


def test_uris_with_dotdot_are_refused(tmp_path, ledger) -> None:
    t0 = time.perf_counter()
    (tmp_path / "lh").mkdir()
    s = Storage(str(tmp_path / "lh"))
    secret = tmp_path / "secret.txt"
    secret.write_bytes(b"keep")
    before = _snapshot(str(tmp_path))
    refused = 0
    attacks = [
        lambda: Storage(str(tmp_path / "lh") + "/../secret.txt"),
        lambda: Storage("s3://bucket/lake/../other"),
        lambda: Storage("s3://../x"),
        lambda: Storage("file:///a/b/../../etc"),
        lambda: s.read("../secret.txt"),
        lambda: s.read("a/../../secret.txt"),
        lambda: s.write("../secret.txt", b"overwritten"),
        lambda: s.create_exclusive("../evil.arrow", b"x"),
        lambda: s.delete(["../secret.txt"]),
        lambda: s.exists("../secret.txt"),
        lambda: s.info("x/../../secret.txt"),
        lambda: list(s.list("../")),
        lambda: s.list_dirs(".."),
        lambda: Lakehouse.create(str(tmp_path / "lh") + "/../lh2", audit=False),
        lambda: Lakehouse.open("file://" + str(tmp_path) + "/lh/../lh", audit=False),
        lambda: load_job_config("orphans", overrides={"lakehouse": str(tmp_path) + "/lh/.."}, env={}),
        lambda: load_job_config("export", overrides={"lakehouse": str(tmp_path / "lh"), "name": "e",
                                                     "target": str(tmp_path) + "/x/../lh/e"}, env={}),
        lambda: load_job_config("export", overrides={"lakehouse": str(tmp_path / "lh"), "name": "../e",
                                                     "target": str(tmp_path / "e")}, env={}),
    ]
    for attack in attacks:
        try:
            attack()
        except (InvalidURIError, ConfigError, ValidationError):
            refused += 1
    after = _snapshot(str(tmp_path))
    ledger.add("security", "URIs and paths with '..'", trials=len(attacks), data_lost=len(attacks) - refused
               + (after != before), seconds=time.perf_counter() - t0)
    assert refused == len(attacks)
    assert after == before and secret.read_bytes() == b"keep"


@pytest.mark.spark
def test_jobs_never_delete_outside_the_root(spark, tmp_path, ledger, scale) -> None:
    from tests.reliability._jobs import run

    t0 = time.perf_counter()
    old = time.time() - 3600
    outside = tmp_path / "outside"
    # Files outside the root named like files the format owns.
    bait = {
        "definition": outside / hashed_path(f"ns-evil-{uuid.uuid4()}.binpb"),
        "node": outside / hashed_path(f"node-{uuid.uuid4()}.arrow"),
        "root": outside / root_name(1),
        "linked": outside / "linked-target.arrow",
        "in_linked_dir": outside / "dir" / "00000000-node-x.arrow",
    }
    for p in bait.values():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"must survive")
        os.utime(p, (old, old))
    lh = Lakehouse.create(str(tmp_path / "lh"), order=4, node_max_bytes=4096, txn_ttl_millis=1000, audit=False)
    lh.create_namespace("ns")
    for i in range(6):
        lh.create_table("ns", f"t{i}")
    # A version whose table points at the outside definition by absolute URI; later dropped,
    # so only expired versions reference it.
    txn = lh.begin()
    txn.create_table("ns", "evil")
    txn.writes[txn.codec.table_key("ns", "evil")] = "file://" + str(bait["definition"])
    txn.commit()
    lh.drop_table("ns", "evil")
    for i in range(6, 9):
        lh.create_table("ns", f"t{i}")
    root = lh.storage._fs_path("")
    # Planted in the root: a symlinked file and a symlinked hash folder (old, format-owned
    # names), and foreign files the format does not own.
    link = os.path.join(root, hashed_path(f"node-{uuid.uuid4()}.arrow"))
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(bait["linked"], link)
    free = next(f"{i:04b}" for i in range(16) if not os.path.exists(os.path.join(root, f"{i:04b}")))
    os.symlink(outside / "dir", os.path.join(root, free))  # a first-level hash folder that leads outside
    foreign = [os.path.join(root, "notes.txt"), os.path.join(root, "0000", "README.md"),
               os.path.join(root, "table_data", "part-0.parquet"), os.path.join(root, "_lakehouse_def_evil.binpb")]
    for f in foreign:
        os.makedirs(os.path.dirname(f), exist_ok=True)
        with open(f, "wb") as fh:
            fh.write(b"not ours")
        os.utime(f, (old, old))
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            if not os.path.islink(p):
                os.utime(p, (old, old))
    time.sleep(1.1)

    expire, _ = run(spark, "expire", lh.uri)
    assert expire.status == "succeeded" and expire.counts["versions_expired"] > 0
    orphans, _ = run(spark, "orphans", lh.uri, older_than="1s")
    assert orphans.status == "succeeded"
    survived = [p.exists() and p.read_bytes() == b"must survive" for p in bait.values()]
    survived += [os.path.exists(f) for f in foreign] + [os.path.islink(link)]

    # A relative pointer that climbs out of the root: reading it is refused, and the jobs
    # refuse to run rather than guess what it means (nothing is deleted).
    txn = lh.begin()
    txn.create_table("ns", "climber")
    txn.writes[txn.codec.table_key("ns", "climber")] = "../outside/" + hashed_path(f"ns-x-{uuid.uuid4()}.binpb")
    txn.commit()
    with pytest.raises(InvalidURIError):
        Lakehouse.open(lh.uri, audit=False).view().load_table("ns", "climber")
    planted = lh.storage._fs_path(hashed_path(f"node-{uuid.uuid4()}.arrow"))
    os.makedirs(os.path.dirname(planted), exist_ok=True)
    with open(planted, "wb") as fh:
        fh.write(b"orphan")
    os.utime(planted, (old, old))
    refusals = 0
    for job, kw in (("orphans", {"older_than": "1s"}), ("expire", {}))[: 2 if scale.name == "full" else 1]:
        with pytest.raises(TrinityLakeError) as e:
            run(spark, job, lh.uri, **kw)
        assert isinstance(e.value.__cause__, UnsafeOperationError), e.value
        refusals += 1
    survived += [os.path.exists(planted)] + [p.exists() for p in bait.values()]
    lost = survived.count(False)
    ledger.add("security", "jobs never delete outside the root (pointers, symlinks, foreign files, '..')",
               trials=len(survived) + refusals, data_lost=lost, seconds=time.perf_counter() - t0,
               expire_deleted=expire.counts.get("deleted"), orphans_deleted=orphans.counts.get("deleted"))
    assert lost == 0, survived


@pytest.mark.spark
def test_export_targets_are_validated(spark, tmp_path, ledger) -> None:
    from tests.reliability._jobs import run

    t0 = time.perf_counter()
    lh = Lakehouse.create(str(tmp_path / "src" / "lh"), audit=False)
    lh.create_namespace("ns")
    before = _snapshot(str(tmp_path))
    v = lh.latest_version()
    targets = [lh.uri, lh.uri + "/exports/e1", str(tmp_path / "src"), str(tmp_path), "file:///"]
    refused = 0
    for t in targets:
        with pytest.raises(TrinityLakeError) as e:
            check_locations(lh.uri, t)
        assert isinstance(e.value, UnsafeOperationError)
        with pytest.raises(TrinityLakeError) as e:  # refused by the job config, or by the job itself
            run(spark, "export", lh.uri, name="e1", target=t)
        assert isinstance(e.value, ConfigError) or isinstance(e.value.__cause__, UnsafeOperationError), e.value
        refused += 1
    after = _snapshot(str(tmp_path))
    unchanged = after == before and Lakehouse.open(lh.uri, audit=False).latest_version() == v
    ledger.add("security", "export targets inside, containing or equal to the source", trials=len(targets),
               data_lost=(len(targets) - refused) + (not unchanged), seconds=time.perf_counter() - t0)
    assert unchanged, sorted(set(after) ^ set(before))[:5]
