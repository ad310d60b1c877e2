"""`tlake show`: history from the control table, grouped by txn_seq, newest first."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trinitylake.cli.common import TIMESTAMP, Ctx, handle_errors
from trinitylake.control import build_history, reconcile
from trinitylake.json_data import JsonObject
from trinitylake.report.data import KEY_METRICS
from trinitylake.report.svg import fmt_metric

if TYPE_CHECKING:
    from datetime import datetime

    from trinitylake.control import HistoryEntry

console = Console(width=None if sys.stdout.isatty() else 160)

_STATE_STYLE = {"deleted": "magenta", "dry_run": "cyan", "failed": "red", "recovered": "yellow", "running": "blue",
                "read": "dim", "partial": "yellow"}
_NAME_MAX = 28  # a metric name longer than this is cut, with an ellipsis saying so
_METRICS_MAX = 8  # metrics shown per row; the rest are counted (all of them in --json)


def ellipsize(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, the last one an ellipsis when anything was cut."""
    return text if len(text) <= limit else text[: max(limit - 1, 0)] + "…"


def metrics_text(metrics: dict[str, float]) -> str:
    """`name=value` lines with readable units (KiB/MiB, s) and integer counts."""

    # What a run did (deleted, copied, candidates) first, then the rest by name.
    rank = {k: i for i, k in enumerate(KEY_METRICS)}
    items = sorted(((k, v) for k, v in metrics.items() if not k.startswith("status_")),
                   key=lambda kv: (rank.get(kv[0], len(rank)), kv[0]))
    lines = [f"{ellipsize(k, _NAME_MAX)}={fmt_metric(k, v)}" for k, v in items[:_METRICS_MAX]]
    if len(items) > _METRICS_MAX:
        lines.append(f"… {len(items) - _METRICS_MAX} more (--json)")
    return "\n".join(lines)


def _render(entries: list[dict]) -> None:
    t = Table("txn_seq", "state", "command", "time (UTC)", "version", "changes", "metrics", title="lakehouse history (newest first)")
    for e in entries:
        metrics = metrics_text(e["metrics"])
        state = e.get("state") or e["record_type"]
        style = _STATE_STYLE.get(state)
        changes = "\n".join(e["changes"][:6]) + (f"\n… {len(e['changes']) - 6} more" if len(e["changes"]) > 6 else "")
        if e.get("error"):
            changes = (changes + "\n" if changes else "") + f"[red]{escape(e['error'][:120])}[/red]"
        if e.get("corrupt"):
            changes = (changes + "\n" if changes else "") + f"[red]corrupt: {escape(e['corrupt'][:160])}[/red]"
        seq = "" if e["txn_seq"] is None else str(e["txn_seq"])
        if e.get("commit_seqs"):
            seq += "\n(commit " + ", ".join(str(s) for s in e["commit_seqs"]) + ")"
        t.add_row(
            seq,
            f"[{style}]{state}[/{style}]" if style else state,
            escape(e.get("label") or e["command"]),
            (e.get("ended_at") or e.get("started_at") or "")[:23],
            "" if e["version"] is None else str(e["version"]),
            changes,
            metrics,
        )
    console.print(t)


def version_note(r: JsonObject) -> str:
    """The note of one `tlake versions` row: ``rollback to v2 (from v4)``, or ``corrupt: <typed
    error>`` for a root that cannot be read."""
    if r.get("corrupt"):
        return f"corrupt: {r['corrupt']}"
    src, to = r.get("rollback_from_version"), r.get("rollback_to_version")
    if src is None:
        return ""
    return f"rollback to v{to} (from v{src})" if to is not None else f"rollback (from v{src})"


def render_versions(rows: list[JsonObject]) -> None:
    """`tlake versions` as a table, oldest first."""
    t = Table("version", "created at (UTC)", "txn_seq", "changes", "note")
    for r in rows:
        note = version_note(r)
        t.add_row(str(r["version"]), r["created_at"] or "", str(r["txn_seq"] or ""),
                  str(r["changes"]) if r["changes"] is not None else "?" if r.get("changes_error") else "",
                  f"[red]{escape(note)}[/red]" if r.get("corrupt") else escape(note))
    console.print(t)


def hidden_note(hidden: list[HistoryEntry]) -> str | None:
    """The line saying what the default view left out, e.g. ``3 rows hidden (2 walks, 1 dry
    run): --all shows them``; None when nothing was hidden."""
    if not hidden:
        return None
    kinds: dict[str, int] = {}
    for e in hidden:
        kind = "dry run" if e.state == "dry_run" else e.command.split()[0] if e.command.split() else "read"
        kinds[kind] = kinds.get(kind, 0) + 1
    what = ", ".join(f"{n} {k}{'' if n == 1 else 's'}" for k, n in sorted(kinds.items(), key=lambda kv: (-kv[1], kv[0])))
    return f"{len(hidden)} row{'' if len(hidden) == 1 else 's'} hidden ({what}): --all shows them"


def register(cli: click.Group) -> None:
    @cli.command()
    @click.option("--all", "include_reads", is_flag=True,
                  help="include runs that changed nothing (walks, dry runs); --job lists them anyway")
    @click.option("--since", type=TIMESTAMP, default=None,
                  help="only entries at or after TIMESTAMP (ISO-8601, epoch ms), or this long ago (1h, 7d)")
    @click.option("--namespace", default=None, help="only entries that changed this namespace or its tables")
    @click.option("--table", "table_name", default=None, help="only entries that changed NS.TABLE (or TABLE)")
    @click.option("--job", default=None, help="every run of this job/command (dry runs included) and the commits they made")
    @click.option("--limit", type=click.IntRange(min=1), default=None, help="show at most N entries (the newest)")
    @click.option("--version", "version", type=int, default=None, help="explain one version")
    @click.option("--json", "as_json", is_flag=True, help="print JSON")
    @click.pass_obj
    @handle_errors
    def show(ctx: Ctx, include_reads: bool, since: datetime | None, namespace: str | None, table_name: str | None,
             job: str | None, limit: int | None, version: int | None, as_json: bool) -> None:
        """History of transactions and job runs, newest first, mapped to versions by txn_seq.

        State: committed (made a version), deleted (removed files), dry_run, read (changed
        nothing), failed, recovered (its version landed but its writer's row was lost), running."""

        lh = ctx.lakehouse()
        infos = lh.version_infos() if version is None else [lh.version_info(version)]
        records = []
        if lh.auditor.enabled and lh.auditor.control.exists():
            # `show` reconciles versions whose audit row was lost (writer killed after commit);
            # a corrupt root says nothing to reconcile from.
            if version is None:
                reconcile(lh.auditor.control, [i for i in infos if i.corrupt is None])
            records = lh.auditor.control.records()
        if version is not None:
            records = [r for r in records if r.version_after == version or (infos[0].txn_seq is not None and r.txn_seq == infos[0].txn_seq)]
        since_t = since

        def history(reads: bool, lim: int | None) -> list[HistoryEntry]:
            return build_history(records, infos, include_reads=reads, since=since_t, namespace=namespace,
                                 table=table_name, job=job, limit=lim)

        entries = history(include_reads or version is not None, limit)
        out = [e.to_dict() for e in entries]
        if version is not None:
            out = [e for e in out if e["version"] == version] or out
        if as_json:
            click.echo(json.dumps(out))
            return
        _render(out)
        if not include_reads and version is None and job is None:
            shown = {id(e) for e in entries}
            every = history(True, None)
            # Read-only runs between the oldest row shown and the newest one (all of them
            # without --limit): what the rows above would have held with --all.
            oldest_shown = entries[-1].txn_seq if limit is not None and entries else None
            hidden = [e for e in every if e.read_only and id(e) not in shown
                      and (oldest_shown is None or (e.txn_seq is not None and e.txn_seq > oldest_shown))]
            note = hidden_note(hidden)
            if note:
                click.echo(note)
