"""`tlake`: the command-line interface over the same library the jobs use. One module per
command group (`app`: the group, the lakehouse, namespace and table commands; `txn`, `show`,
`jobs`, `export`, `report`, `control`), all on click, sharing `common`."""

from trinitylake.cli.app import cli, console_main, main

__all__ = ["cli", "console_main", "main"]
