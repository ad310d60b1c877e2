"""The tables' oracle (`tests.iceberg.table_oracle` on `tests.oracle.tables`) catches bugs
planted in the library's tables' maintenance, including the two that the oracle missed while
it took its retained versions and table pointers from the library itself (issue 55):

* the tables' live set ignores pinned versions (and pinned exports' roots), in expire-snapshots
  and in remove-orphans;
* the version listing that both the job and the old checks used hides the oldest retained
  version;
* table expire deletes files a retained lakehouse version reaches (its live set empty).

Each scenario runs twice, as it is and with the bug planted: clean, the oracle finds nothing
(the probe is not blind); planted, it names what went missing."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace
from typing import Any

import pytest

from tests.iceberg import table_oracle as O
from tests.iceberg.test_tables_pins import TABLE, Hist, raise_floor_past_a_pin, tables_cli
from tests.oracle.expect import floor, oracle_for
from tests.support.jobs import run_local

ROWS = (1, 2)  # the overwrite whose version the scenarios keep (pinned, or the oldest retained)


def problems(h: Hist) -> list[str]:
    current = [O.current_metadata(h.uri)[TABLE]]
    h.metadata_files.add(current[0])
    return O.live_problems(h.uri, current, O.ever_reached(h.metadata_files))[0]


def ignore_pins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: the tables' live set walks no pinned version and no pinned export's root."""
    from trinitylake.tables_maintenance import live as L

    real = L.walk_roots.walk_input

    def forgetful(*args: Any, **kwargs: Any) -> Any:
        inp = real(*args, **kwargs)
        inp.pinned_versions, inp.export_roots = {}, {}
        return inp

    monkeypatch.setattr(L, "walk_roots", SimpleNamespace(walk_input=forgetful))


def hide_version(monkeypatch: pytest.MonkeyPatch, version: int) -> None:
    """Planted: `Lakehouse.listed_versions` (what the job and the old checks list) drops `version`."""
    from trinitylake.lakehouse import Lakehouse

    real = Lakehouse.listed_versions
    monkeypatch.setattr(Lakehouse, "listed_versions", lambda self: [v for v in real(self) if v != version])


def empty_version_live(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planted: table expire keeps nothing for the retained lakehouse versions."""
    from trinitylake.tables_maintenance import run as R
    from trinitylake.tables_maintenance.live import VersionLive

    monkeypatch.setattr(R, "version_live", lambda *args, **kwargs: VersionLive())


@pytest.mark.parametrize("planted", [False, True], ids=["clean", "planted"])
def test_a_live_set_that_ignores_pinned_versions_is_caught(tmp_path, monkeypatch, planted):
    h = Hist(str(tmp_path / "lh"))
    pinned = h.version_of[ROWS]
    raise_floor_past_a_pin(h, pinned)
    if planted:
        ignore_pins(monkeypatch)
    tables_cli(h, "expire-snapshots", "--older-than", "0s", "--unsafe-min-age")
    monkeypatch.undo()
    found = problems(h)
    if not planted:
        assert found == []
    else:
        assert found and "missing" in found[0] and f"pin hold (version {pinned})" in found[0], found


@pytest.mark.parametrize("planted", [False, True], ids=["clean", "planted"])
def test_orphans_that_ignore_pinned_versions_are_caught(tmp_path, monkeypatch, planted):
    """What the pin deferred (expire-snapshots ran clean) is old enough for remove-orphans: only
    the pinned version's pointer keeps it."""
    h = Hist(str(tmp_path / "lh"))
    pinned = h.version_of[ROWS]
    raise_floor_past_a_pin(h, pinned)
    tables_cli(h, "expire-snapshots", "--older-than", "0s", "--unsafe-min-age")
    assert problems(h) == []
    location = O.local(h.cat.load_table(TABLE).metadata.location)
    old = time.time() - 10 * 86_400
    for d, _, names in os.walk(location):
        for n in names:
            os.utime(os.path.join(d, n), (old, old))
    if planted:
        ignore_pins(monkeypatch)
    tables_cli(h, "remove-orphans")
    monkeypatch.undo()
    found = problems(h)
    if not planted:
        assert found == []
    else:
        assert found and "missing" in found[0] and f"pin hold (version {pinned})" in found[0], found


@pytest.mark.parametrize("planted", [False, True], ids=["clean", "planted"])
def test_a_listing_that_hides_the_oldest_retained_version_is_caught(tmp_path, monkeypatch, planted):
    h = Hist(str(tmp_path / "lh"))
    oldest = h.version_of[ROWS]
    latest = max(h.version_of.values())
    assert run_local("expire", h.uri, min_versions_to_keep=latest - oldest + 1).status == "succeeded"
    assert floor(oracle_for(h.uri)) == oldest
    if planted:
        hide_version(monkeypatch, oldest)
    tables_cli(h, "expire-snapshots", "--older-than", "0s", "--unsafe-min-age")
    monkeypatch.undo()
    found = problems(h)
    if not planted:
        assert found == []
    else:
        assert found and "missing" in found[0] and f"version {oldest}" in " ".join(found), found


@pytest.mark.parametrize("planted", [False, True], ids=["clean", "planted"])
def test_an_expire_that_deletes_what_a_retained_version_reaches_is_caught(tmp_path, monkeypatch, planted):
    h = Hist(str(tmp_path / "lh"))
    if planted:
        empty_version_live(monkeypatch)
    tables_cli(h, "expire-snapshots", "--older-than", "0s", "--unsafe-min-age")
    monkeypatch.undo()
    found = problems(h)
    assert bool(found) == planted, found
