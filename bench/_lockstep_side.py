"""One side of ``bench.lockstep``, run as a script with its checkout first on the path.

It imports nothing but that checkout's ``alkstore_sa`` (any revision back
to the first release): migrate its own database, then answer commands on
stdin, one line each -- ``fill N``, ``steps n k`` (k rounds of
``claim_batch(n)`` + ``ack_batch``; replies the wall seconds, this
process's CPU seconds, the jobs done and its server backend's CPU
seconds) -- so the caller can interleave two revisions a few milliseconds
apart.
"""

from __future__ import annotations

import os
import sys
import time

from sqlalchemy import create_engine, text


def _migrate(engine: object) -> None:
    try:  # the first releases: the CLI's migrate
        from alkstore_sa.cli._migrate import migrate  # type: ignore[import-not-found]

        migrate(engine, "alkstore")
    except ImportError:
        from alembic import command

        from alkstore_sa.migrations._config import alembic_config

        command.upgrade(alembic_config(url=engine.url), "head")  # type: ignore[attr-defined]


def _server_cpu(pid: int) -> float:
    """CPU seconds the server process ``pid`` has used (Linux ``/proc``; a server on
    another machine reads as 0)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    import alkstore_sa
    from alkstore_sa import Store

    engine = create_engine(sys.argv[1], pool_size=1, max_overflow=0)
    _migrate(engine)
    store = Store(engine)
    queue = store.queue("lockstep")
    warm = store.queue("lockstep-warmup")
    for _ in range(10):  # the statements prepared before anything is timed
        warm.claim_batch("w", 10)
        warm.ack_batch([1])
    with engine.connect() as conn:  # the pool's one connection: every step's backend
        backend = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
    print("ready", alkstore_sa.__file__, flush=True)
    for line in sys.stdin:
        cmd, *args = line.split()
        if cmd == "fill":
            queue.enqueue_many([b"x" * 50] * int(args[0]))
            with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
                conn.execute(text("VACUUM ANALYZE alkstore.jobs"))
            print("ok", flush=True)
        elif cmd == "steps":
            n, k = int(args[0]), int(args[1])
            server = _server_cpu(backend)
            wall, cpu, done = time.perf_counter(), time.process_time(), 0
            for _ in range(k):
                handles = queue.claim_batch("w", n)
                if handles:
                    queue.ack_batch([h.id for h in handles])
                done += len(handles)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            print("ok", wall, cpu, done, _server_cpu(backend) - server, flush=True)


if __name__ == "__main__":
    main()
