"""One chaos worker process: a ``Worker`` (or ``AsyncWorker``) over one queue.

Run as ``python tests/chaos/_worker_main.py '<json config>'``; it works until
SIGTERM (graceful: ``run()`` returns) or SIGKILL (nothing returns).  Every
handler run is first logged in ``chaos_runs`` through a separate engine in
autocommit (so the log survives kills and rollbacks); a session-scoped
handler then writes its effect to ``chaos_effects`` in the handler's
session, which commits with the ack or not at all (Q28).  On a
graceful exit it prints one JSON line with its pool's state.  With
``"result": true`` a handler returns ``b"done:" + payload``: the result a
job stamped with ``keep_completed`` keeps (R1/R2).
"""

# ruff: noqa: E402 -- the SIGTERM handler below must come before the slow imports
from __future__ import annotations

import signal

from tests.chaos import _early_stop

# SIGTERM may land while this process is still importing (~0.7 s on a
# loaded box): remembered, and handed to the worker once it exists.
_early_stop.install()

import faulthandler

# SIGUSR1 writes every thread's stack to the log: the harness sends it to a
# worker that does not stop, so a hang says where it hangs.
faulthandler.register(signal.SIGUSR1, all_threads=True)

import asyncio
import json
import logging
import os
import random
import resource
import socket
import sys
import time
from typing import Any

from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session

from alkstore_sa import AsyncStore, AsyncWorker, Job, QueueOpts, Store, Worker

DONE = text(
    "INSERT INTO chaos_done (job_id, attempt, pid, port, at) "
    "VALUES (:job_id, :attempt, :pid, :port, :at)"
)
RUN = text("INSERT INTO chaos_runs (job_id, attempt, pid) VALUES (:job_id, :attempt, :pid)")
EFFECT = text("INSERT INTO chaos_effects (job_id, attempt, pid) VALUES (:job_id, :attempt, :pid)")


def _row(job: Job) -> dict[str, Any]:
    return {"job_id": job.id, "attempt": job.attempts, "pid": os.getpid()}


def _engine_kw(cfg: dict[str, Any]) -> dict[str, Any]:
    return {
        "pool_size": cfg.get("pool_size", 5),
        "max_overflow": cfg.get("max_overflow", 10),
        "pool_timeout": cfg.get("pool_timeout", 30),
        "pool_pre_ping": True,
        # Lets the test count this pool's server connections in pg_stat_activity.
        "connect_args": (
            {"server_settings": {"application_name": f"chaos-pool-{os.getpid()}"}}
            if "+asyncpg" in cfg["url"]
            else {"application_name": f"chaos-pool-{os.getpid()}"}
        ),
    }


def _worker_kw(cfg: dict[str, Any]) -> dict[str, Any]:
    return {
        "concurrency": cfg.get("concurrency", 8),
        "poll_interval": cfg.get("poll_interval", 0.5),
        "shutdown_timeout": cfg.get("shutdown_timeout", 5),
        "worker_id": f"chaos-{os.getpid()}",
    }


def _client_port(dbapi: Any) -> int:
    """The local TCP port of a psycopg connection (0 on a unix socket).

    Behind the chaos proxy it names the connection there: the proxy records
    each cut with the client's port, so a rerun can be traced to a cut on
    the connection whose ack transaction it was.
    """
    fd = dbapi.driver_connection.pgconn.socket
    with socket.socket(fileno=os.dup(fd)) as sock:
        name = sock.getsockname()
    return int(name[1]) if isinstance(name, tuple) else 0


def _tune(cfg: dict[str, Any]) -> None:
    """Shorter detection bounds than production's, so a scenario runs in seconds."""
    from alkstore_sa.worker import _listener, _producer

    if "claim_timeout" in cfg:
        _producer.CLAIM_TIMEOUT = cfg["claim_timeout"]
    if "liveness_interval" in cfg:
        _listener.LIVENESS_INTERVAL = cfg["liveness_interval"]
    if "liveness_timeout" in cfg:
        _listener.LIVENESS_TIMEOUT = cfg["liveness_timeout"]


def _pause(cfg: dict[str, Any]) -> float:
    return random.uniform(0, cfg.get("work_ms", 0)) / 1000


def _opts(cfg: dict[str, Any]) -> QueueOpts | None:
    """The worker's queue options (``"queue_opts"``: QueueOpts fields), such as
    its retry curve (Q17), which the worker's queue handle, not the row, holds."""
    return QueueOpts(**cfg["queue_opts"]) if "queue_opts" in cfg else None


def _result(cfg: dict[str, Any], job: Job) -> bytes | None:
    """The handler's return value: the kept job's result, when asked for (R2)."""
    return b"done:" + job.payload if cfg.get("result") else None


def run_sync(cfg: dict[str, Any]) -> dict[str, Any]:
    engine = create_engine(cfg["url"], **_engine_kw(cfg))
    # The ledger goes straight to the server (the queue's traffic may go
    # through the chaos proxy): what it records is never cut.
    ledger_url = cfg.get("record_url", cfg["url"])
    recorder = create_engine(ledger_url, pool_size=2, isolation_level="AUTOCOMMIT")

    def record(job: Job) -> None:
        with recorder.connect() as conn:
            conn.execute(RUN, _row(job))

    def session_handler(job: Job, session: Session) -> bytes | None:
        record(job)
        time.sleep(_pause(cfg))
        session.execute(EFFECT, _row(job))
        if cfg.get("done"):
            port = _client_port(session.connection().connection)
            with recorder.connect() as conn:
                conn.execute(DONE, {**_row(job), "port": port, "at": time.time()})
        return _result(cfg, job)

    def plain_handler(job: Job) -> bytes | None:
        record(job)
        time.sleep(_pause(cfg))
        return _result(cfg, job)

    store = Store(engine)
    queue = store.queue(cfg["queue"], _opts(cfg))
    handler = session_handler if cfg.get("session", True) else plain_handler
    worker = Worker({queue: handler}, **_worker_kw(cfg))
    _early_stop.hand_to(worker)
    worker.run()
    report = {"checkedout": engine.pool.checkedout(), "pool": engine.pool.status()}
    engine.dispose()
    recorder.dispose()
    return report


async def run_async(cfg: dict[str, Any]) -> dict[str, Any]:
    engine = create_async_engine(cfg["url"], **_engine_kw(cfg))
    ledger_url = cfg.get("record_url", cfg["url"])
    recorder = create_async_engine(ledger_url, pool_size=2, isolation_level="AUTOCOMMIT")

    async def record(job: Job) -> None:
        async with recorder.connect() as conn:
            await conn.execute(RUN, _row(job))

    async def session_handler(job: Job, session: AsyncSession) -> bytes | None:
        await record(job)
        await asyncio.sleep(_pause(cfg))
        await session.execute(EFFECT, _row(job))
        if cfg.get("done"):
            conn = await session.connection()
            port = _client_port(conn.sync_connection.connection)
            async with recorder.connect() as rec:
                await rec.execute(DONE, {**_row(job), "port": port, "at": time.time()})
        return _result(cfg, job)

    async def plain_handler(job: Job) -> bytes | None:
        await record(job)
        await asyncio.sleep(_pause(cfg))
        return _result(cfg, job)

    store = AsyncStore(engine)
    queue = store.queue(cfg["queue"], _opts(cfg))
    handler = session_handler if cfg.get("session", True) else plain_handler
    worker = AsyncWorker({queue: handler}, **_worker_kw(cfg))
    _early_stop.hand_to(worker)
    await worker.run()
    report = {"checkedout": engine.sync_engine.pool.checkedout()}
    await engine.dispose()
    await recorder.dispose()
    return report


def main() -> None:
    cfg = json.loads(sys.argv[1])
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s",
    )
    _tune(cfg)
    report = asyncio.run(run_async(cfg)) if cfg.get("async") else run_sync(cfg)
    usage = resource.getrusage(resource.RUSAGE_SELF)
    report["cpu_s"] = round(usage.ru_utime + usage.ru_stime, 2)
    print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
