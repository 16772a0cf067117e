"""Q30: a connection that answers "read-only transaction" (SQLSTATE 25006).

What a client meets in a failover: a pooled connection to a node that is
now a standby (or a primary made read-only).  ``pool_pre_ping`` passes it
(``SELECT 1`` works there) and the session stays read-only for life, so a
pool given it back would hand it out again and again.  The store and the
worker invalidate a connection of their own that answered 25006: the next
operation gets a new one and works once the database takes writes again.

The read-only sessions are real: ``ALTER DATABASE ... SET
default_transaction_read_only = on`` makes every new connection to the
test's database read-only until ``RESET`` (existing ones are left alone,
which is exactly the stale pooled connection of a failover).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import URL, Connection, Engine, create_engine, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from alkstore_sa import AsyncStore, Store
from alkstore_sa._db.sqlstate import sqlstate

from .. import _drivers
from .._workers import KINDS, handler, start_worker, wait_for, worker_class

SMALL_POOL = {"pool_size": 1, "max_overflow": 0, "pool_pre_ping": True}


class ReadOnly:
    """Switch the test database's new sessions read-only and back."""

    def __init__(self, url: URL) -> None:
        self.admin: Engine = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        self.name = self.admin.dialect.identifier_preparer.quote(str(url.database))

    def _admin(self) -> Connection:
        conn = self.admin.connect()
        conn.exec_driver_sql("SET default_transaction_read_only = off")  # this session only
        return conn

    def on(self) -> None:
        with self._admin() as conn:
            conn.exec_driver_sql(
                f"ALTER DATABASE {self.name} SET default_transaction_read_only = on"
            )

    def off(self) -> None:
        with self._admin() as conn:
            conn.exec_driver_sql(f"ALTER DATABASE {self.name} RESET default_transaction_read_only")

    def jobs(self) -> int:
        with self._admin() as conn:
            return int(conn.execute(text("SELECT count(*) FROM alkstore.jobs")).scalar_one())


@pytest.fixture
def read_only(database_url: URL) -> Iterator[ReadOnly]:
    ro = ReadOnly(database_url)
    try:
        yield ro
    finally:
        ro.off()
        ro.admin.dispose()


@pytest.mark.parametrize("kind", KINDS)
def test_q30_read_only_enqueue_raises_25006_and_the_next_one_gets_a_new_connection(
    kind: str, database_url: URL, read_only: ReadOnly
) -> None:
    read_only.on()
    if kind == "sync":
        engine = create_engine(database_url, **SMALL_POOL)
        queue: Any = Store(engine).queue("ro")

        def run(op: Any) -> Any:
            return op()

        dispose: Any = engine.dispose
    else:
        aengine = create_async_engine(_drivers.async_url(database_url, kind), **SMALL_POOL)
        queue = AsyncStore(aengine).queue("ro")

        def run(op: Any) -> Any:
            return asyncio.run(op())

        def dispose() -> None:
            asyncio.run(aengine.dispose())

    try:
        for op in (lambda: queue.enqueue(b"x"), queue.sweep_expired):  # autocommit, atomic
            with pytest.raises(DBAPIError) as raised:
                run(op)
            # SQLAlchemy's own error (Q30), its SQLSTATE saying what happened.
            assert sqlstate(raised.value.orig) == "25006"
        read_only.off()
        # The one-connection pool did not keep the read-only session: the next
        # enqueue opens a new connection, read-write.
        assert run(lambda: queue.enqueue(b"y")) > 0
        assert read_only.jobs() == 1  # the refused enqueue left nothing behind
    finally:
        dispose()


@pytest.mark.parametrize("kind", KINDS)
def test_q30_worker_claims_refused_read_only_back_off_and_recover(
    kind: str, database_url: URL, read_only: ReadOnly
) -> None:
    jobs = 20
    seed = create_engine(database_url, poolclass=NullPool)
    Store(seed).queue("ro").enqueue_many([b"%d" % i for i in range(jobs)])
    seed.dispose()
    read_only.on()  # every connection the worker opens from here is read-only
    done: list[int] = []
    lock = threading.Lock()

    def work(job: Any) -> None:
        with lock:
            done.append(job.id)

    running = start_worker(
        kind,
        database_url,
        lambda store: worker_class(kind)(
            {store.queue("ro"): handler(kind, work)}, poll_interval=0.05, handle_signals=False
        ),
        pool_size=2,
        max_overflow=0,
        pool_pre_ping=True,
    )
    try:
        # Claims fail with 25006: counted, backed off (B5), nothing ran.
        wait_for(lambda: running.worker.health().db_errors >= 1, timeout=10)
        assert done == []
        read_only.off()
        # The read-only connections were dropped, not pooled: the drain goes on.
        wait_for(lambda: len(done) == jobs, timeout=15)
        wait_for(lambda: read_only.jobs() == 0, timeout=10)
        assert running.worker.health().db_errors == 0
    finally:
        running.stop()
