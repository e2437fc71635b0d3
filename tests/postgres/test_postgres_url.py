"""A postgresql:// URL: refused naming the extra without psycopg, opened by postgres()."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from runstore.exceptions import DatabaseOpenError, MissingExtra
from runstore.layers import DATA_READER, build, database_path_problem, postgres
from runstore.layers._open import POSTGRES_EXTRA, postgres_url
from runstore.services.errors import StorageFailure, StorageFailureKind


def _without_psycopg(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name in ("psycopg", "psycopg_pool") else real(name, *args)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize("url", ["postgresql://u:pw@h/db", "postgres://u:pw@h/db"])
def test_without_the_extra_a_url_is_refused_naming_it(
    monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    _without_psycopg(monkeypatch)
    assert postgres_url(url)
    assert database_path_problem(url) == POSTGRES_EXTRA
    assert "runstore[postgresql]" in POSTGRES_EXTRA
    with pytest.raises(MissingExtra, match=r"runstore\[postgresql\]"):
        postgres(url)


def test_with_the_extra_a_url_opens_the_postgresql_layer(postgres_dsn: str) -> None:
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(postgres_dsn)
    url = f"postgresql://{params['user']}:unused-pw@/{params['dbname']}?host={params['host']}"
    assert "unused-pw" not in (database_path_problem(url) or "")
    with build(postgres(url)) as c:
        assert c.get(DATA_READER).projects().unwrap() == ()


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://bob:hunter2@[::1/x",
        "mysql://bob:hunter2@h/x",
        "host=h user=bob password=hunter2 port=abc dbname",
    ],
)
def test_a_connection_string_psycopg_cannot_parse_is_refused_without_its_password(
    dsn: str,
) -> None:
    with pytest.raises(DatabaseOpenError) as raised:
        build(postgres(dsn)).__enter__()
    message = str(raised.value)
    assert "hunter2" not in message
    assert "cannot parse" in message
    error = raised.value.error
    assert isinstance(error, StorageFailure)
    assert error.kind is StorageFailureKind.CANT_OPEN
