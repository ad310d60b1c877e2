"""`make demo`: a demo lakehouse on the local filesystem, then every maintenance job on Spark.

Builds a lakehouse with a few hundred tables and a few hundred versions (creates, alters,
drops, a rollback), then a few real Iceberg tables with rows written through the PyIceberg
catalog (`trinitylake.iceberg.TrinityLakeCatalog`, warehouse under the lakehouse), plants orphan
files, and runs walk, expire (dry run, then real), orphan cleanup, the tables' snapshot expiry
and orphan removal (``tables_expire``, ``tables_orphans``) and a full export with tables on Spark
``local[*]``, reads the tables back from the source and from the export, then prints
``tlake show`` and writes an HTML report. The few hundred tables of the first part are
placeholders (their metadata pointers name no file); the ``shop`` tables are real. The demo
lakehouse uses a 2-second transaction TTL so that versions become old enough to expire within
the demo; production lakehouses keep the default of 3 days.
"""

from __future__ import annotations

import os
import random
import shlex
import shutil
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import click
import pyarrow as pa
from pyiceberg.catalog import Catalog, load_catalog
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trinitylake.cli import cli
from trinitylake.errors import TrinityLakeError
from trinitylake.format.paths import hashed_path
from trinitylake.job_flags import parse_job_args
from trinitylake.jobs.runner import run_job as run
from trinitylake.lakehouse import Lakehouse
from trinitylake.lakehouse.context import AuditContext
from trinitylake.report import generate_report
from trinitylake.rest_catalog.demo import serve_and_query

if TYPE_CHECKING:
    from trinitylake.format.definitions import LakehouseDef

console = Console()

DEMO_TTL_MS = 2000


def build(uri: str, tables: int, seed: int = 7) -> Lakehouse:

    rnd = random.Random(seed)

    lh = Lakehouse.create(uri, order=16, node_max_bytes=64 * 1024, txn_ttl_millis=DEMO_TTL_MS,
                          context=AuditContext("demo"))

    def set_retention(d: LakehouseDef) -> None:
        d.maximum_version_age_millis = 3000
        d.minimum_versions_to_keep = 40

    t = lh.begin()
    t.mutate_definition(set_retention, "set retention: max age 3 s, keep 40 versions")
    t.commit(command="demo: set retention")
    namespaces = [f"ns{i}" for i in range(8)]
    t = lh.begin()
    for ns in namespaces:
        t.create_namespace(ns, {"owner": f"team-{ns}"})
    t.commit(command="demo: create namespaces")
    created: list[tuple[str, str]] = []
    # Batches of creates as multi-operation transactions, with single-table commits between,
    # so the history has both shapes.
    i = 0
    while i < tables:
        ns = rnd.choice(namespaces)
        if rnd.random() < 0.3:
            t = lh.begin()
            for _ in range(min(6, tables - i)):
                name = f"t{i:04d}"
                t.create_table(ns, name, metadata_location=f"file:///warehouse/{ns}/{name}/metadata/v1.metadata.json")
                created.append((ns, name))
                i += 1
            t.commit(command="demo: create tables")
        else:
            name = f"t{i:04d}"
            lh.create_table(ns, name, metadata_location=f"file:///warehouse/{ns}/{name}/metadata/v1.metadata.json")
            created.append((ns, name))
            i += 1
    for n, (ns, name) in enumerate(rnd.sample(created, k=min(60, len(created)))):
        t = lh.begin()
        t.alter_table(ns, name, metadata_location=f"file:///warehouse/{ns}/{name}/metadata/v{n + 2}.metadata.json")
        t.commit(command="demo: alter table")
    dropped = rnd.sample(created, k=min(25, len(created)))
    for ns, name in dropped:
        lh.drop_table(ns, name)
    latest = lh.latest_version()
    lh.rollback(latest - 3)
    return lh


#: The demo's Iceberg tables: name -> rows of the first snapshot (``shop.orders`` gets a second).
ICEBERG_TABLES = {"shop.customers": 40, "shop.orders": 200, "shop.lines": 600}


def add_iceberg_tables(uri: str) -> dict[str, int]:
    """Create the demo's Iceberg tables with rows through the PyIceberg catalog on the lakehouse
    at `uri` (warehouse ``<lakehouse>/warehouse``), append a second snapshot to ``shop.orders``,
    and return the rows each table should hold."""

    cat = iceberg_catalog(uri)
    cat.create_namespace("shop", {"owner": "demo"})
    expected: dict[str, int] = {}
    for name, n in ICEBERG_TABLES.items():
        data = pa.table({"id": pa.array(range(n), pa.int64()),
                         "amount": pa.array([round(i * 1.25, 2) for i in range(n)], pa.float64()),
                         "region": pa.array([("eu", "us", "apac")[i % 3] for i in range(n)], pa.string())})
        cat.create_table(name, schema=data.schema).append(data)
        expected[name] = n
    more = pa.table({"id": pa.array(range(200, 250), pa.int64()), "amount": pa.array([9.5] * 50, pa.float64()),
                     "region": pa.array(["eu"] * 50, pa.string())})
    cat.load_table("shop.orders").append(more)
    expected["shop.orders"] += more.num_rows
    return expected


def iceberg_catalog(uri: str) -> Catalog:
    return load_catalog("demo", **{"py-catalog-impl": "trinitylake.iceberg.TrinityLakeCatalog", "lakehouse": uri})


def show_iceberg_tables(uri: str, expected: dict[str, int], title: str) -> int:
    """Print the demo's Iceberg tables as read back through the catalog at `uri` (rows,
    snapshots, metadata file); 1 when a table's rows differ from `expected`."""

    cat = iceberg_catalog(uri)
    t = Table("table", "rows", "snapshots", "current snapshot", "metadata", title=title)
    rc = 0
    for name, want in expected.items():
        tbl = cat.load_table(name)
        n = tbl.scan().to_arrow().num_rows
        snap = tbl.metadata.current_snapshot_id
        t.add_row(name, f"{n}" if n == want else f"[red]{n} (expected {want})[/red]", str(len(tbl.metadata.snapshots)),
                  str(snap), os.path.relpath(tbl.metadata_location.removeprefix("file://"), uri))
        rc |= int(n != want)
    console.print(t)
    return rc


def plant_orphans(root: Path, young: bool) -> list[Path]:

    old = time.time() - 40 * 86400
    out = []
    names = (
        [("node-00000000-0000-4000-8000-000000000new.arrow", None)]
        if young
        else [("node-00000000-0000-4000-8000-00000000dead.arrow", old),
              ("demo-ghost-00000000-0000-4000-8000-00000000beef.binpb", old)]
    )
    for name, age in names:
        p = root / hashed_path(name)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"planted by the demo")
        if age:
            os.utime(p, (age, age))
        out.append(p)
    return out


#: The `tlake` words of a job whose command is not its name.
_CLI_WORDS = {"tables_expire": ["tables", "expire-snapshots"], "tables_orphans": ["tables", "remove-orphans"]}


def command_line(job: str, args: list[str]) -> str:
    """The `tlake` command that runs `job` with `args` as the demo runs it in process (what the
    demo prints before each job, so that a reader can run it again; tests run each of them)."""
    rest = list(args)
    group: list[str] = []
    if "--lakehouse" in rest:  # the lakehouse is the `tlake` group's own option
        i = rest.index("--lakehouse")
        group = rest[i:i + 2]
        del rest[i:i + 2]
    return shlex.join(["tlake", *group, *_CLI_WORDS.get(job, [job]), *rest])


def demo_jobs(lh_dir: str, export_dir: str, master: str) -> list[tuple[str, list[str]]]:
    """The jobs of `make demo` in their order, with their arguments."""
    common = ["--lakehouse", lh_dir, "--master", master]
    return [
        ("walk", common),
        # The same walk forced onto Spark executors: the answer must not depend on where it ran.
        ("walk", [*common, "--execution", "distributed"]),
        ("expire", [*common, "--dry-run", "--clock-skew-margin", "1s"]),
        ("expire", [*common, "--clock-skew-margin", "1s"]),
        ("orphans", common),
        # The tables' own maintenance: snapshots expire (what a retained version still reads is
        # deferred), and an old file under a table that nothing references goes.
        ("tables_expire", [*common, "--older-than", "2s", "--retain-last", "1"]),
        ("tables_orphans", common),
        ("export", [*common, "--name", "demo-full", "--target", export_dir, "--with-tables"]),
    ]


def show_args(lh_dir: str) -> list[str]:
    """The `tlake` arguments of the history the demo prints near its end."""
    return ["--lakehouse", lh_dir, "show", "--limit", "12"]


def follow_ups(lh_dir: str, export_dir: str) -> list[str]:
    """The `tlake` commands the demo suggests at its end (tests run them)."""
    return [shlex.join(["tlake", "--lakehouse", lh_dir, "versions"]),
            shlex.join(["tlake", "--lakehouse", export_dir, "namespace", "list"])]


def run_job(job: str, args: list[str]) -> int:
    """Run one job in this process (the Spark session is shared) and print its summary, headed
    by the `tlake` command that does the same (`command_line`)."""
    line = command_line(job, args)
    console.rule(f"[bold]{escape(' '.join(['tlake', *_CLI_WORDS.get(job, [job])]))}")
    console.print(f"$ {escape(line)}", soft_wrap=True, highlight=False)  # whole, never cut: it can be run as printed
    t0 = time.time()
    try:
        result = run(job, parse_job_args(job, [*args, "--log-level", "WARNING"]))
    except TrinityLakeError as e:
        console.print(f"[red]{job} failed: {e}[/red]")
        return 1
    t = Table("measure", "value", title=f"{job}: {result.status} in {time.time() - t0:.1f} s (txn_seq {result.txn_seq})")
    keys = ("versions", "versions_expired", "versions_retained", "listed", "reachable", "candidates", "too_young",
            "deleted", "failed", "planned", "copied", "skipped", "verified", "node_reads", "unique_nodes",
            "table_pointers_iceberg", "table_pointers_other", "table_pointers_outside", "tables", "tables_copied",
            "table_files_copied", "snapshots_expired", "deferred")
    for k in keys:
        if k in result.counts:
            plain = k.startswith(("versions", "table", "snapshots")) or k in ("node_reads", "unique_nodes")
            t.add_row(k.replace("_", " ") if plain else f"files {k.replace('_', ' ')}", str(result.counts[k]))
    for k in ("reachable", "candidates", "deleted", "copied"):
        if k in result.bytes:
            t.add_row(f"bytes {k}", f"{result.bytes[k]:,}")
    t.add_row("seconds per phase", ", ".join(f"{k} {v:.1f}" for k, v in result.seconds.items()))
    places = sorted({p["where"] for p in result.details.get("execution", {}).values()})
    spark = result.details.get("spark", {})
    t.add_row("ran on", ("driver" if places == ["local"] else "Spark executors" if places == ["distributed"]
                         else "driver and Spark executors") + (f" (Spark {spark['mode']})" if spark.get("started") else
                                                               ", Spark not started"))
    if result.plan_location:
        t.add_row("plan", result.plan_location)
    console.print(t)
    return 0


@click.command(help=(__doc__ or "").splitlines()[0], context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--dir", "directory", default="demo-lakehouse", show_default=True,
              help="where to build the demo (deleted first)")
@click.option("--tables", type=int, default=300, show_default=True)
@click.option("--master", default="local[*]", show_default=True)
@click.option("--catalog-only", is_flag=True,
              help="only the Iceberg tables, served by `tlake catalog serve` and queried with Spark SQL")
def _command(directory: str, tables: int, master: str, catalog_only: bool) -> int:
    return catalog_demo(directory) if catalog_only else demo(directory, tables, master)


def catalog_demo(directory: str) -> int:
    """A lakehouse holding the demo's Iceberg tables under `directory` (deleted first), served
    over the Iceberg REST protocol and queried with Spark SQL; 0 when Spark's queries all ran."""
    base = Path(directory).resolve()
    if base.exists():
        shutil.rmtree(base)
    lh = Lakehouse.create(str(base / "lakehouse"))
    add_iceberg_tables(lh.uri)
    console.print(f"demo lakehouse with the shop tables: {lh.uri}")
    return serve_and_query(lh.uri)


def main(argv: list[str] | None = None) -> int:
    return int(_command.main(args=argv, prog_name="python -m trinitylake.demo", standalone_mode=False) or 0)


def demo(directory: str, tables: int, master: str) -> int:
    """Build the demo lakehouse under `directory` and run every job on it; 0 when all held."""
    a = SimpleNamespace(dir=directory, tables=tables, master=master)
    base = Path(a.dir).resolve()
    if base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True)
    lh_dir = base / "lakehouse"
    export_dir = base / "export-full"
    t0 = time.time()
    console.rule("[bold]building the demo lakehouse")
    lh = build(str(lh_dir), a.tables)
    versions = lh.latest_version() + 1
    latest_view = lh.view()
    n_tables = sum(len(latest_view.list_tables(ns)) for ns in latest_view.list_namespaces())
    console.print(f"{lh.uri}: {versions} versions, {n_tables} tables at the latest version "
                  f"({time.time() - t0:.1f} s)")
    t1 = time.time()
    console.rule("[bold]Iceberg tables through the PyIceberg catalog")
    rows = add_iceberg_tables(str(lh_dir))
    rc = show_iceberg_tables(str(lh_dir), rows, f"{len(rows)} Iceberg tables written with pyarrow under "
                             f"{lh_dir / 'warehouse'} ({time.time() - t1:.1f} s)")
    planted = plant_orphans(lh_dir, young=False)
    console.print(f"planted {len(planted)} orphan files 40 days old; waiting for the demo TTL to pass")
    time.sleep(max(0.0, (DEMO_TTL_MS + 3000) / 1000 - (time.time() - t0)) + 1.0)
    table_orphan: list[Path] = []
    young: list[Path] = []
    for job, args in demo_jobs(str(lh_dir), str(export_dir), a.master):
        if job == "orphans":
            young = plant_orphans(lh_dir, young=True)
            console.print("planted 1 new orphan file just now: younger than the floor, it must survive")
            planted += young
        if job == "tables_expire":
            table_orphan = plant_orphans(lh_dir / "warehouse" / "shop" / "orders" / "data", young=False)
        rc |= run_job(job, args)
        if job == "tables_orphans" and any(p.exists() for p in table_orphan):
            console.print("[red]the old orphan under shop.orders survived tables_orphans[/red]")
            rc |= 1
    # Maintenance left the tables' files alone; the export carried them: the exported tables'
    # metadata lies under the export (its path is shown relative to the export's root).
    rc |= show_iceberg_tables(str(lh_dir), rows, "the Iceberg tables after expire and orphan cleanup")
    rc |= show_iceberg_tables(str(export_dir), rows, f"the same tables read from the export at {export_dir}")
    # Last: Spark SQL through the catalog server inserts a row into shop.orders, which the
    # checks above count.
    rc |= serve_and_query(str(lh_dir))
    show = show_args(str(lh_dir))
    console.rule("[bold]tlake show")
    console.print(f"$ {escape(shlex.join(['tlake', *show]))}", soft_wrap=True, highlight=False)

    try:
        cli.main(args=show, prog_name="tlake", standalone_mode=False)
    except SystemExit as e:
        rc |= int(e.code or 0)
    out = base / "report.html"
    generate_report(Lakehouse.open(str(lh_dir)), str(out))
    console.print(f"HTML report: {out}")
    still = [p.name for p in planted if p.exists()]
    if still != [p.name for p in young]:
        console.print(f"[red]orphan cleanup did not behave as expected: planted files still present: {still} "
                      f"(only {[p.name for p in young]} should be)[/red]")
        rc |= 1
    else:
        console.print(f"orphan cleanup as expected: the {len(planted) - len(young)} old planted files are gone, "
                      "the one planted just now (younger than the floor) is kept")
    if rc:
        console.print(f"[red]demo FAILED after {time.time() - t0:.0f} s: a step above did not hold[/red]")
    else:
        console.print(f"[green]demo finished OK in {time.time() - t0:.0f} s: every step held; lakehouse at {lh_dir}, "
                      f"export at {export_dir}[/green]", soft_wrap=True)
    for line in follow_ups(str(lh_dir), str(export_dir)):
        console.print(f"try: .venv/bin/{escape(line)}", soft_wrap=True, highlight=False)
    return 1 if rc else 0


if __name__ == "__main__":
    sys.exit(main())
