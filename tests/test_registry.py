"""The job registry (trinitylake.jobs.registry): one record per job, in step with the option
table, the config classes, the CLI and the Python API."""

from __future__ import annotations

import pytest

from trinitylake.config import config_classes
from trinitylake.errors import ConfigError
from trinitylake.jobs.registry import JOB_NAMES, JOBS, job_spec, registry_drift
from trinitylake.options import JOB_OPTIONS


def test_every_job_has_one_record_in_step_with_options_and_configs():
    assert registry_drift() == []
    assert JOB_NAMES == ("walk", "expire", "orphans", "export", "tables_expire", "tables_orphans") == tuple(JOB_OPTIONS)
    for spec in JOBS:
        assert config_classes()[spec.name] is spec.config and spec.help
        module, _, fn = spec.run.partition(":")
        assert module == f"trinitylake.jobs.{spec.name}.job" and fn == f"run_{spec.name}"


def test_an_unknown_job_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown job 'vacuum'; expected one of walk, expire, orphans, export, tables_"):
        job_spec("vacuum")


def test_the_cli_has_a_command_per_job():
    import click

    from trinitylake.cli import cli

    # export through a group of its own, the tables' jobs through `tlake tables` (`command=False`);
    # the group loads the commands of their own modules when asked for them (`cli.app._Group`).
    ctx = click.Context(cli)
    assert {s.name for s in JOBS if s.command} | {"export"} <= set(cli.list_commands(ctx))
    tables = cli.get_command(ctx, "tables")
    assert isinstance(tables, click.Group)
    assert {"expire-snapshots", "remove-orphans"} <= set(tables.commands)
