"""A store takes only what it can drive fully: PostgreSQL through psycopg 3.

Refused before any connection is made (the engines below point nowhere).
"""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import create_engine
from sqlalchemy.ext.asyncio import create_async_engine

from alkstore_sa import AsyncStore, Store


def test_store_refuses_a_non_postgresql_engine() -> None:
    with pytest.raises(ValueError, match="PostgreSQL engine"):
        Store(create_engine("sqlite://"))


def test_store_refuses_another_postgresql_driver() -> None:
    # pg8000's dialect, given psycopg as its DBAPI module only so that it loads.
    engine = create_engine("postgresql+pg8000://u@nowhere/db", module=psycopg)
    with pytest.raises(ValueError, match="psycopg 3 driver"):
        Store(engine)


def test_store_refuses_an_async_engine_and_async_store_a_sync_one() -> None:
    with pytest.raises(TypeError, match="Engine"):
        Store(create_async_engine("postgresql+psycopg://u@nowhere/db"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="AsyncEngine"):
        AsyncStore(create_engine("postgresql+psycopg://u@nowhere/db"))  # type: ignore[arg-type]


def test_from_url_pins_psycopg_for_plain_postgresql_urls() -> None:
    store = Store.from_url("postgresql://u@nowhere/db")
    assert store.engine.dialect.driver == "psycopg"
    store.close()
