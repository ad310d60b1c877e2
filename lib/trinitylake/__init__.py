"""TrinityLake: reference Python implementation of the TrinityLake lakehouse format."""

import time as _time

__version__ = "0.1.0"

# When this process first imported the package. `tlake` dates its command from here (see
# `trinitylake.cli.main`): a distributed transaction's lease is checked against the time a
# command was started, not after its imports, which take seconds on a busy machine.
PROCESS_STARTED_MS = int(_time.time() * 1000)
