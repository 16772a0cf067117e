"""A job row held locked by another transaction, for statements that must wait on it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Engine, text


@contextmanager
def row_locked(engine: Engine, job_id: int) -> Iterator[None]:
    """``alkstore.jobs`` row ``job_id`` locked FOR UPDATE by another connection
    until the block ends."""
    done = threading.Event()
    locked = threading.Event()

    def hold() -> None:
        with engine.begin() as conn:
            lock = text("SELECT 1 FROM alkstore.jobs WHERE id = :i FOR UPDATE")
            conn.execute(lock, {"i": job_id})
            locked.set()
            done.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert locked.wait(10)
        yield
    finally:
        done.set()
        holder.join()
