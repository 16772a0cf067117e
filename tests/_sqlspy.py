"""Record every statement an engine sends, through SQLAlchemy's cursor events.

Used to prove two things about the package: a refused argument runs no SQL
(``spy.count`` does not move), and values travel as bound parameters (the
recorded statement text never contains them).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import Engine, event


class SqlSpy:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.statements: list[tuple[str, Any]] = []
        event.listen(engine, "before_cursor_execute", self._record)

    def _record(
        self,
        conn: Any,
        cursor: Any,
        statement: str,
        parameters: Any,
        context: Any,
        executemany: bool,
    ) -> None:
        self.statements.append((statement, parameters))

    @property
    def count(self) -> int:
        return len(self.statements)

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._record)

    @contextmanager
    def no_sql(self) -> Iterator[None]:
        """Fail if any statement is sent inside the block (even when it raises)."""
        before = self.count
        try:
            yield
        finally:
            sent = self.statements[before:]
            assert not sent, f"SQL ran before validation refused the call: {sent[:1]}"


def sync_engine_of(store: Any) -> Engine:
    """The sync ``Engine`` under a ``Store``, an ``AsyncStore`` or a test ``SyncView``."""
    target = getattr(store, "wrapped", store)
    engine = target.engine
    return getattr(engine, "sync_engine", engine)  # type: ignore[no-any-return]
