"""D1 on a SQLAlchemy older than 2.0.50: asyncpg is refused, saying why.

Its adapter let asyncpg's InternalClientError (an operation cut off by a lost
connection) through unwrapped and pooled the broken connection, so Q30 would
not hold.  Runs on CI's oldest-SQLAlchemy leg; on a newer SQLAlchemy the
refusal is forced by pretending the version is older.
"""

from __future__ import annotations

import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import AsyncStore
from alkstore_sa._db import engines as _engines


def test_d1_asyncpg_on_sqlalchemy_before_2_0_50_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if _engines.sqlalchemy_version() >= _engines.ASYNCPG_MIN_SQLALCHEMY:
        monkeypatch.setattr(_engines, "sqlalchemy_version", lambda: (2, 0, 49))
    engine = create_async_engine("postgresql+asyncpg://u@nowhere/db")
    with pytest.raises(ValueError, match=r"needs SQLAlchemy >= 2\.0\.50"):
        AsyncStore(engine)
    # psycopg is unaffected by the asyncpg floor.
    AsyncStore(create_async_engine("postgresql+psycopg://u@nowhere/db"))
