"""Walk roots: which root node files a reachability walk starts from, and what was left out.

Every retained version (or the versions asked for), the root of every *pinned* export recorded
in the latest lakehouse definition, every pinned version, and the running roots of live
distributed transactions (see :func:`walk_input`). The walk itself is
`trinitylake.treewalk.reach` (rules, one-file reader, reference walk) and
`trinitylake.treewalk.walker`.

**Only exports that can reach source files are walked.** The walk exists to find the source
files something still needs. An export is walked when it is pinned
(``exported_snapshot_pins[name]``): partial and minimal exports that stopped above the bottom
of the tree hold absolute URIs into the source, and those files stay live. An unpinned export
is *self-contained*: its tree names no source file, so the walk neither reads nor sizes it, and
sends no request to it at all (not even a probe of its root); `WalkInput.self_contained_exports`
names it, and the jobs report it as "self-contained, not walked".

Why an unpinned export cannot reach a source file (`trinitylake.jobs.export`): the export job
records a pin exactly when its plan counted a pointer rewritten *into the source*
(``pin = V if mode != "full" and external > 0``, `jobs.export.job._commit`), and ``external``
counts every such pointer of every planned file (`jobs.export.rules.NodeRefs.external`:
`_repoint` answers INTO_SOURCE only for a pointer to a source file that is *not* copied). A full
export copies every node and every definition it reaches (``copies_node`` and ``copies_odfs``
are always true in full mode), so each pointer to a source file becomes INSIDE (a relative path
into the export) and ``external`` stays 0 whatever the tree holds; a partial export that
reached the bottom of the tree is the same. The lakehouse definition's pointer of the exported
root is made relative too (an absolute one outside the source is refused). Whether a pointer
names a source file is decided by `Storage.relative`, which compares the same canonical URIs
(scheme aliases folded, ``.`` and duplicate slashes dropped) as the walk's keys
(`reach.Locator`), so what the walk would key as a source file the export copied.
What stays absolute in a full export is a pointer that was already an absolute URI outside the
source (FOREIGN: kept as it is, neither copied nor followed): not a source file by the same
rule. The one residue is such a pointer naming a source file through *another authority* (a
bucket alias): the export copied it verbatim from the exported source version's tree, where
the orphans job's prefix-mismatch guard (`jobs.orphans.rules.mismatch_key`) still sees it while
that version is retained; once that version has expired, the export's copy of the pointer is
no longer seen (walking every full export used to catch it, at the price of reading every
export whole). A pin of an expired version cannot be recorded (`lakehouse.roots.check_new_pins`),
so no export comes to need source files later.
Commits made later *to* an export are not walked either way (only the recorded root is).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trinitylake.errors import TrinityLakeError, UnsafeOperationError, VersionNotFoundError
from trinitylake.format.paths import root_name, root_version
from trinitylake.lakehouse import distributed
from trinitylake.treewalk.reach import Reader

if TYPE_CHECKING:
    from trinitylake.lakehouse.lakehouse import Lakehouse

log = logging.getLogger(__name__)


@dataclass
class WalkInput:
    """The roots of a walk and what was left out of it, with the reason."""

    roots: list[tuple[int, str]]
    retained_versions: list[int] = field(default_factory=list)
    #: Walked exports (pinned: they may reference source files): name -> root URI.
    export_roots: dict[str, str] = field(default_factory=dict)
    #: Exports left out because they reference no source file (unpinned): name -> root URI.
    #: Neither read nor probed (see the module doc).
    self_contained_exports: dict[str, str] = field(default_factory=dict)
    pinned_versions: dict[str, int] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    txn_running_roots: list[str] = field(default_factory=list)  # of live distributed transactions


def walk_input(
    lakehouse: Lakehouse,
    versions: Sequence[int] | None = None,
    *,
    latest: int | None = None,
    min_version: int | None = None,
) -> WalkInput:
    """The default roots of a walk: every retained version (or `versions`), the root of every
    pinned export recorded in the latest lakehouse definition, and every pinned version.
    Unpinned exports are self-contained (see the module doc): recorded in
    ``self_contained_exports``, not walked, and no request is sent to them.

    `min_version` overrides the definition's ``oldest_retained_version`` (expire uses it to
    walk the versions it is about to keep).

    A pinned export's missing root is skipped with a warning when the source version it was
    taken from is still readable (partial and minimal exports reference source files only from
    that version's tree, which the walk then covers). It is an error when a pinned version's
    root and its export's root are both gone: the source files that export needs cannot be
    enumerated.

    Raises:
        VersionNotFoundError: an explicitly requested version does not exist.
        UnsafeOperationError: a pinned export whose references cannot be enumerated.
    """
    latest = lakehouse.latest_version() if latest is None else latest
    d = lakehouse.load_root(latest).lakehouse_def
    listed = set(lakehouse.listed_versions()) | {latest}
    inp = WalkInput(roots=[])
    if versions is None:
        floor = d.oldest_retained_version if min_version is None else min_version
        inp.retained_versions = sorted(v for v in listed if floor <= v <= latest)
    else:
        missing = sorted(v for v in versions if v not in listed)
        if missing:
            raise VersionNotFoundError(
                f"versions {missing} do not exist in {lakehouse.uri} (available: {_ranges(sorted(listed))})"
            )
        inp.retained_versions = sorted(set(versions))
    inp.roots = [(v, root_name(v)) for v in inp.retained_versions]
    if versions is not None:
        return inp
    reader = Reader(lakehouse.storage.root, lakehouse.storage.options)
    pins = {name: int(v) for name, v in d.exported_snapshot_pins.items()}
    walked = set(inp.retained_versions)
    for name, v in sorted(pins.items()):
        if v in walked:
            inp.pinned_versions[name] = v
        elif v in listed:
            inp.pinned_versions[name] = v
            inp.roots.append((v, root_name(v)))
            walked.add(v)
    for name, uri in sorted(d.exported_snapshots.items()):
        pinned = pins.get(name)
        if pinned is None:
            # Self-contained: no source file is reachable from it (module doc), so nothing of
            # it is read, sized or even probed.
            inp.self_contained_exports[name] = uri
            continue
        try:
            version = root_version(uri)
        except TrinityLakeError:
            raise UnsafeOperationError(
                f"exported snapshot {name!r} points at {uri!r}, which is not a root node file; "
                "the files it references cannot be enumerated"
            ) from None
        if reader.exists(uri):
            inp.export_roots[name] = uri
            inp.roots.append((version, uri))
            continue
        if pinned in walked:
            inp.warnings.append(
                f"export {name!r}: root {uri} is missing; its source version {pinned} is walked instead"
            )
        else:
            raise UnsafeOperationError(
                f"export {name!r} pins version {pinned}, but neither that version's root nor the export's root "
                f"{uri} exists: the source files the export still references cannot be enumerated"
            )
    for name, v in sorted(pins.items()):
        if name not in inp.pinned_versions and name not in inp.export_roots:
            raise UnsafeOperationError(
                f"export {name!r} pins version {v}, whose root is missing, and the export has no readable root"
            )
    # Live distributed transactions: their running roots reach the definitions they staged,
    # which may be older than the orphan age floor (a lease renewed by every stage).
    for begin_version, path in distributed.live_running_roots(lakehouse):
        inp.roots.append((begin_version, path))
        inp.txn_running_roots.append(path)
    for w in inp.warnings:
        log.warning(w)
    return inp


def _ranges(vs: list[int]) -> str:
    if not vs:
        return "none"
    out, start, prev = [], vs[0], vs[0]
    for v in vs[1:] + [None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(out)
