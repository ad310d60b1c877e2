"""What ``jobs/<job>.py`` runs: the dependency check, then the job with its outcome file.

The entry files import this module and nothing else of the project: in YARN or Kubernetes
cluster deploy mode the driver's container holds the main file alone (plus what ``--archives``
and ``--files`` ship), so whatever the job needs travels inside the ``trinitylake`` package of
the packed environment. This module imports only the standard library and
`trinitylake.jobs.preflight` until the check has passed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from trinitylake.jobs.preflight import require


def run(job: str, argv: Sequence[str] | None = None) -> int:
    """Run `job` as its entry file does (``sys.argv[1:]`` by default); returns the exit code
    (see `trinitylake.jobs.runner`). Missing packages: one line on stderr, then exit 2."""
    require(job)
    from trinitylake.jobs.outcome import main  # after the check: it imports the dependencies

    return main(job, list(sys.argv[1:] if argv is None else argv))
