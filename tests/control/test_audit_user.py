"""The user an audit row names (`records.default_user`, the auditor's and reconcile's):
getpass's answer, looked up once per user environment."""

from __future__ import annotations

import getpass

from trinitylake.control import records


def test_the_user_follows_the_environment_and_the_password_file_is_read_once(monkeypatch) -> None:
    for name in records._USER_VARS:
        monkeypatch.delenv(name, raising=False)
    calls: list[int] = []
    real = getpass.getuser

    def counting() -> str:
        calls.append(1)
        return real()

    monkeypatch.setattr(getpass, "getuser", counting)
    records._user_of.cache_clear()
    first = records.default_user()
    assert [records.default_user() for _ in range(5)] == [first] * 5 and len(calls) == 1
    monkeypatch.setenv("USER", "alice")
    assert records.default_user() == "alice"  # a changed environment is a new answer, not the cached one
    monkeypatch.delenv("USER")
    assert records.default_user() == first
