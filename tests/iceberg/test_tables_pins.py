"""Pinned versions, pinned exports and live distributed transactions around the tables'
maintenance (`tlake tables expire-snapshots`, `tlake tables remove-orphans`): whatever a pinned
version, a pinned export's root or a live transaction's roots point at stays readable, and once
the pin or the transaction is gone the next run deletes it.

Every check is the tests' own: the lakehouse side (which roots keep table metadata, and which
metadata file each table of each root points at) is read by the lakehouse oracle's reader
(`tests.oracle.tables`), the table side by `tests.iceberg.table_oracle` (JSON and its own Avro
reader), and each retained pointer's current snapshot is read back through PyIceberg's
`StaticTable` (no lakehouse code on that path) with the rows recorded when it was written.
"""

from __future__ import annotations

import json
import os

from click.testing import CliRunner

from tests.iceberg import table_oracle as O
from tests.iceberg.conftest import SCHEMA, ids, rows
from tests.iceberg.tables_setup import expire_lakehouse, open_catalog, plant
from tests.oracle.expect import floor, latest_version, oracle_for
from tests.oracle.tables import table_roots
from tests.support.jobs import run_local
from trinitylake.cli.app import cli
from trinitylake.lakehouse import Lakehouse

TABLE = "s.a"


class Hist:
    """A lakehouse with one table overwritten three times: the rows each metadata file's current
    snapshot reads, the version each overwrite made, and every metadata file ever current."""

    def __init__(self, uri: str):
        self.uri = uri
        Lakehouse.create(uri, audit=False, txn_ttl_millis=1000)
        self.cat = open_catalog(uri)
        self.rows: dict[str, list[int]] = {}  # local metadata path -> ids of its current snapshot
        self.version_of: dict[tuple[int, ...], int] = {}  # rows written -> version made
        self.metadata_files: set[str] = set()
        self.data_of: dict[tuple[int, ...], list[str]] = {}  # rows written -> their data files
        self.cat.create_namespace("s")
        self.cat.create_table(TABLE, schema=SCHEMA)
        self.record()
        for batch in ([1, 2], [3], [4]):
            self.cat.load_table(TABLE).overwrite(rows(batch))
            t = self.cat.load_table(TABLE)
            self.data_of[tuple(batch)] = [O.local(f.file.file_path) for f in t.scan().plan_files()]
            self.version_of[tuple(batch)] = self.record()

    def record(self) -> int:
        t = self.cat.load_table(TABLE)
        loc = O.local(t.metadata_location)
        self.rows[loc] = ids(t)
        self.metadata_files |= {loc} | O.log_of(O.metadata(loc))
        return latest_version(oracle_for(self.uri))


def check(h: Hist, phase: str) -> set[str]:
    """The oracle's live set exists, nothing else any metadata ever reached does, and every
    retained pointer's current snapshot reads the rows it was written with. Returns the live set."""
    current = [O.current_metadata(h.uri)[TABLE]]
    assert current == [O.local(h.cat.load_table(TABLE).metadata_location)], phase
    h.metadata_files.add(current[0])
    problems, live = O.live_problems(h.uri, current, O.ever_reached(h.metadata_files))
    assert not problems, f"{phase}: {problems}"
    from pyiceberg.table import StaticTable

    for loc, label in sorted(O.retained_metadata(h.uri).items()):
        want = h.rows.get(loc)
        if want is not None:
            got = sorted(StaticTable.from_metadata(loc).scan().to_arrow().column("id").to_pylist())
            assert got == want, f"{phase}: {label} ({loc}) reads {got}, written with {want}"
    return live


def tables_cli(h: Hist, *args: str) -> dict:
    res = CliRunner().invoke(cli, ["--lakehouse", h.uri, "tables", *args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.output)


def raise_floor_past_a_pin(h: Hist, version: int, pin: str = "hold") -> None:
    """A bare pin on `version` (no export), then the floor raised to the latest version by
    another writer, as an implementation that knows nothing of pins would commit it. The
    lakehouse's own expire stops at a pin; the walks still keep a listed pinned version below
    the floor (`trinitylake.treewalk.walk_roots`), and so must the tables' maintenance."""
    lh = Lakehouse.open(h.uri, audit=False)
    txn = lh.begin()
    txn.mutate_definition(lambda d: d.exported_snapshot_pins.__setitem__(pin, version), f"pin {version}")
    txn.commit()
    latest = lh.latest_version()
    txn = lh.begin()
    txn.mutate_definition(lambda d: setattr(d, "oldest_retained_version", latest), "floor raised elsewhere")
    txn.commit()


def test_a_pinned_export_keeps_its_versions_tables_until_it_is_dropped(tmp_path):
    h = Hist(str(tmp_path / "lh"))
    pinned = h.version_of[(1, 2)]
    res = run_local("export", h.uri, name="e1", target=str(tmp_path / "exports" / "e1"), version=pinned,
                    mode="minimal")
    assert res.status == "succeeded", res.error
    o = oracle_for(h.uri)
    assert o.latest()[1].exported_snapshot_pins == {"e1": pinned}
    # The lakehouse's own expire stops at the pin: the pinned version is still a retained one.
    assert run_local("expire", h.uri, min_versions_to_keep=1).status == "succeeded"
    assert floor(o) == pinned
    assert {r.label for r in table_roots(o)} >= {f"version {pinned}", f"pin e1 (version {pinned})", "export e1"}

    out = tables_cli(h, "expire-snapshots", "--older-than", "0s", "--unsafe-min-age")
    assert out["counts"]["snapshots_expired"] > 0 and out["counts"]["deferred"] > 0, out["counts"]
    check(h, "expire-snapshots with a pinned export")
    assert all(os.path.exists(p) for p in h.data_of[(1, 2)])  # the pinned version's current snapshot
    old = plant(os.path.join(O.local(h.cat.load_table(TABLE).metadata.location), "data"), "junk.parquet", 10)
    out = tables_cli(h, "remove-orphans")
    assert out["counts"]["deleted"] == 1 and not os.path.exists(old)
    check(h, "remove-orphans with a pinned export")

    # The export dropped (its pin with it): the next expiries delete what only the pin kept.
    res = CliRunner().invoke(cli, ["--lakehouse", h.uri, "export", "drop", "e1"])
    assert res.exit_code == 0, res.output
    assert run_local("expire", h.uri, min_versions_to_keep=1).status == "succeeded"
    out = tables_cli(h, "expire-snapshots", "--older-than", "0s", "--unsafe-min-age")
    assert out["counts"]["deleted"] > 0
    check(h, "expire-snapshots after the export was dropped")
    assert not any(os.path.exists(p) for p in h.data_of[(1, 2)])
    assert ids(h.cat.load_table(TABLE)) == [4]


def test_a_pinned_version_below_the_floor_keeps_its_tables(tmp_path):
    h = Hist(str(tmp_path / "lh"))
    pinned = h.version_of[(1, 2)]
    raise_floor_past_a_pin(h, pinned)
    o = oracle_for(h.uri)
    assert floor(o) > pinned and pinned in o.listed_versions()
    out = tables_cli(h, "expire-snapshots", "--older-than", "0s", "--unsafe-min-age")
    assert out["counts"]["snapshots_expired"] > 0, out["counts"]
    check(h, "expire-snapshots with a pin below the floor")
    assert all(os.path.exists(p) for p in h.data_of[(1, 2)])
    out = tables_cli(h, "remove-orphans")
    check(h, "remove-orphans with a pin below the floor")
    first = next(loc for loc, r in h.rows.items() if r == [1, 2])
    assert O.retained_metadata(h.uri)[first] == f"pin hold (version {pinned}): {TABLE}"


def test_a_live_distributed_transaction_keeps_what_its_roots_point_at_until_it_is_aborted(tmp_path):
    from trinitylake.lakehouse.distributed import DistributedTransaction

    h = Hist(str(tmp_path / "lh"))
    first = next(loc for loc, r in h.rows.items() if r == [1, 2])
    expire_lakehouse(h.uri)  # only the latest version is retained
    lh = Lakehouse.open(h.uri, audit=False)
    dtx = DistributedTransaction.begin(lh)
    dtx.stage(lambda t: t.alter_table("s", "a", metadata_location=first))  # staged, not committed
    labels = {r.label for r in table_roots(oracle_for(h.uri))}
    assert {f"txn {dtx.id} (running)", f"txn {dtx.id} (begin)"} <= labels, labels
    assert O.retained_metadata(h.uri)[first].startswith(f"txn {dtx.id} (running)")

    out = tables_cli(h, "expire-snapshots", "--older-than", "0s", "--unsafe-min-age")
    assert out["counts"]["snapshots_expired"] > 0 and out["counts"]["deferred"] > 0, out["counts"]
    check(h, "expire-snapshots with a live transaction")
    assert all(os.path.exists(p) for p in h.data_of[(1, 2)])
    tables_cli(h, "remove-orphans")
    check(h, "remove-orphans with a live transaction")

    dtx.abort()
    out = tables_cli(h, "expire-snapshots", "--older-than", "0s", "--unsafe-min-age")
    check(h, "expire-snapshots after the transaction was aborted")
    assert not any(os.path.exists(p) for p in h.data_of[(1, 2)])
    assert ids(h.cat.load_table(TABLE)) == [4]
