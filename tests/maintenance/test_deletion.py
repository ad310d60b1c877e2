"""Batch deletes with retries (a flaky storage stands in for throttling)."""

from __future__ import annotations

from trinitylake.storage import Storage
from trinitylake.storage.delete_retries import delete_with_retries


class Flaky:
    """Fails the first `fail_times` requests for `bad` keys (fault injection)."""

    def __init__(self, inner: Storage, bad: set[str], fail_times: int, raise_instead: bool = False):
        self.inner, self.bad, self.left, self.raise_instead = inner, bad, fail_times, raise_instead
        self.requests: list[list[str]] = []

    def delete(self, paths):
        paths = list(paths)
        self.requests.append(paths)
        if self.left > 0:
            self.left -= 1
            if self.raise_instead:
                raise ConnectionError("SlowDown")
            ok = [p for p in paths if p not in self.bad]
            self.inner.delete(ok)
            return [(p, "SlowDown: reduce your request rate") for p in paths if p in self.bad]
        return self.inner.delete(paths)


def _files(tmp_path, n):
    st = Storage(str(tmp_path))
    for i in range(n):
        st.write(f"f{i}", b"x")
    return st, [f"f{i}" for i in range(n)]


def test_failed_keys_are_retried_until_they_go(tmp_path):
    st, keys = _files(tmp_path, 6)
    flaky = Flaky(st, {"f1", "f4"}, fail_times=2)
    slept = []
    deleted, failures = delete_with_retries(flaky, keys, max_retries=5, sleep=slept.append)
    assert (deleted, failures) == (6, [])
    assert flaky.requests[1] == ["f1", "f4"] and len(flaky.requests) == 3
    assert len(slept) == 2 and all(0 < s <= 30 for s in slept)
    assert not list(st.list(""))


def test_retries_are_bounded_and_failures_reported(tmp_path):
    st, keys = _files(tmp_path, 3)
    flaky = Flaky(st, {"f2"}, fail_times=100)
    deleted, failures = delete_with_retries(flaky, keys, max_retries=2, sleep=lambda s: None)
    assert deleted == 2 and [p for p, _ in failures] == ["f2"] and "SlowDown" in failures[0][1]
    assert len(flaky.requests) == 3


def test_a_failed_request_is_retried_whole_and_missing_files_count_as_deleted(tmp_path):
    st, keys = _files(tmp_path, 2)
    flaky = Flaky(st, set(), fail_times=1, raise_instead=True)
    assert delete_with_retries(flaky, keys + ["never-existed"], sleep=lambda s: None) == (3, [])
    assert delete_with_retries(st, [], sleep=lambda s: None) == (0, [])
