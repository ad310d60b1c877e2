"""The command line of a job, on click: ``--conf PATH`` plus one flag per option of the job.

The flags are derived from the option table (`trinitylake.config.JOB_OPTIONS`), the one place
where an option's name, type, default and help are written; ``spark-submit jobs/<job>.py
--help`` and ``tlake <job> --help`` both print them from here. Booleans get ``--x/--no-x``;
maps are repeatable ``KEY=VALUE`` flags (``--storage-option``, ``--spark-conf``). Every flag
defaults to "not given", so only the flags on the command line become overrides (precedence:
defaults < ``--conf`` YAML < ``TLAKE_<JOB>_<KEY>`` variables < flags).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import click

from trinitylake.config import JobConfig, Option, job_options, load_from_flags
from trinitylake.errors import ConfigError
from trinitylake.json_data import JsonObject, JsonValue
from trinitylake.values import METAVARS


def _default_text(opt: Option) -> str:
    if opt.required:
        return "required"
    if opt.default is None:
        return "null"
    if isinstance(opt.default, bool):
        return "true" if opt.default else "false"
    if isinstance(opt.default, dict):
        return "none"
    return str(opt.default)


def option_param(opt: Option) -> click.Option:
    """The click flag of one job option."""
    help_text = f"{opt.help} [default: {_default_text(opt)}]"
    if opt.kind == "duration":
        help_text += " With its unit: 500ms, 90s, 10m, 36h, 7d (a bare number is refused)."
    if opt.kind == "bool":
        return click.Option([f"{opt.cli_flag}/--no-{opt.cli_flag[2:]}", opt.name], default=None, help=help_text)
    if opt.is_map:
        return click.Option([opt.cli_flag, opt.name], multiple=True, metavar=METAVARS[opt.kind],
                            help=help_text + " Repeatable.")
    metavar = "|".join(opt.choices) if opt.kind == "choice" else METAVARS[opt.kind]
    return click.Option([opt.cli_flag, opt.name], metavar=metavar, help=help_text)


def job_command(job: str) -> click.Command:
    """The click command of `job` (parsing only: `parse_job_args` turns it into a config)."""
    params: list[click.Parameter] = [
        click.Option(["--conf"], metavar="PATH", help=f"YAML file of option: value (e.g. conf/{job}.yaml).")]
    params += [option_param(opt) for opt in job_options(job).values()]
    return click.Command(
        job, params=params,
        help=f"TrinityLake {job} job. Precedence: defaults < --conf file < TLAKE_{job.upper()}_<KEY> "
             f"environment variables < flags.",
        context_settings={"help_option_names": ["-h", "--help"]},
    )


def parse_job_args(
    job: str,
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    now_ms: int | None = None,
    prog: str | None = None,
) -> JobConfig:
    """Parse a job's command line (``sys.argv[1:]`` by default) into its config; `prog` is
    the command the user typed (``tlake orphans``), named in errors (default ``jobs/<job>.py``).

    ``--help`` prints the job's help and exits 0, as a command line does.

    Raises:
        ConfigError: bad or unknown flag, or any error of `trinitylake.config.load_job_config`.
    """
    prog = prog or f"jobs/{job}.py"
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        ctx = job_command(job).make_context(prog, args)
    except click.exceptions.Exit as e:  # --help: printed already
        raise SystemExit(e.exit_code) from None
    except click.UsageError as e:
        raise ConfigError(f"{prog}: {e.format_message()} (see {prog} --help)") from None
    flags = given_flags(ctx.params)
    conf_path = flags.pop("conf", None)
    return load_from_flags(job, conf_path, flags, env, now_ms)


def given_flags(params: Mapping[str, JsonValue]) -> JsonObject:
    """The flags given on a job's command line, from click's parsed values: a flag not given is
    left out (the lower layers decide), a repeated one is a list."""
    flags: dict[str, Any] = {}
    for name, value in params.items():
        if value is None or value == ():
            continue
        flags[name] = list(value) if isinstance(value, tuple) else value
    return flags
