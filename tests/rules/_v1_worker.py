"""One worker process for the V1 tests: ``python tests/rules/_v1_worker.py '<json>'``.

Config: url, kind ("sync", or an async face: "async" / "asyncpg"), queues,
concurrency.  A job whose payload is ``hold`` sleeps for a minute (so it is
in flight); any other returns at once.  SIGTERM stops it gracefully.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from typing import Any

from sqlalchemy import make_url

from alkstore_sa import AsyncStore, AsyncWorker, Job, Store, Worker


def main(cfg: dict[str, Any]) -> None:
    url = make_url(cfg["url"])
    kw = {"concurrency": cfg["concurrency"], "poll_interval": 0.2, "shutdown_timeout": 1}
    if cfg["kind"] == "sync":

        def work(job: Job) -> None:
            if job.payload == b"hold":
                time.sleep(60)

        with Store.from_url(url) as store:
            Worker({store.queue(q): work for q in cfg["queues"]}, **kw).run()
        return

    async def awork(job: Job) -> None:
        if job.payload == b"hold":
            await asyncio.sleep(60)

    async def run() -> None:
        driver = "postgresql+asyncpg" if cfg["kind"] == "asyncpg" else "postgresql+psycopg"
        astore = AsyncStore.from_url(url.set(drivername=driver))
        try:
            await AsyncWorker({astore.queue(q): awork for q in cfg["queues"]}, **kw).run()
        finally:
            await astore.close()

    asyncio.run(run())


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
