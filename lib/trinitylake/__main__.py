"""`python -m trinitylake ...` is the `tlake` CLI, ending as the console script does
(`trinitylake.cli.app.console_main`: no interpreter finalization under the object-store
client's native threads)."""

from trinitylake.cli import console_main

console_main()
