"""`python -m trinitylake ...` is the `tlake` CLI."""

from trinitylake.cli import main

main()
