"""`tlake report`: a self-contained HTML page about the lakehouse (see `trinitylake.report`)."""

from __future__ import annotations

import json

import click

from trinitylake.cli.common import Ctx, handle_errors
from trinitylake.report import generate_report


def register(cli: click.Group) -> None:
    @cli.command()
    @click.option("--out", "out_path", default="report.html", show_default=True, type=click.Path(dir_okay=False),
                  help="HTML file to write")
    @click.option("--max-versions", type=click.IntRange(min=1), default=200, show_default=True,
                  help="walk reachable files of at most the newest N versions")
    @click.option("--json", "as_json", is_flag=True, help="print the summary numbers as JSON")
    @click.pass_obj
    @handle_errors
    def report(ctx: Ctx, out_path: str, max_versions: int, as_json: bool) -> None:
        """Write an HTML report: versions over time, job runs, files and bytes per version, Iceberg tables."""

        s = generate_report(ctx.lakehouse(), out_path, max_versions=max_versions)
        if as_json:
            click.echo(json.dumps(s, indent=2, default=str))
            return
        capped = f", newest {s['reach_versions']} walked" if s["reach_capped"] else ""
        click.echo(
            f"wrote {s['path']}: versions {s['oldest_version']}..{s['latest_version']}{capped}, "
            f"{s['job_runs']} job run(s), {s['namespaces']} namespace(s), {s['tables']} table(s)"
        )
