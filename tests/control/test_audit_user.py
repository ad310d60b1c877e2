"""The user an audit row names: getpass's answer, looked up once per user environment."""

from __future__ import annotations

import getpass

from trinitylake.lakehouse import audit


def test_the_user_follows_the_environment_and_the_password_file_is_read_once(monkeypatch) -> None:
    for name in audit._USER_VARS:
        monkeypatch.delenv(name, raising=False)
    calls: list[int] = []
    real = getpass.getuser

    def counting() -> str:
        calls.append(1)
        return real()

    monkeypatch.setattr(getpass, "getuser", counting)
    audit._user_of.cache_clear()
    first = audit._user()
    assert [audit._user() for _ in range(5)] == [first] * 5 and len(calls) == 1
    monkeypatch.setenv("USER", "alice")
    assert audit._user() == "alice"  # a changed environment is a new answer, not the cached one
    monkeypatch.delenv("USER")
    assert audit._user() == first
