"""The dashboard's pages beside a 1,000,000-job queue (W2: the overview under 1 s).

``python -m bench.web_overview [--jobs N] [--rounds R]``: a fresh database
(embedded PostgreSQL, or ``ALKSTORE_DATABASE_URL``), one queue of N due jobs
(SQL-made, ``VACUUM (ANALYZE)``) plus a few small queues with processing and
dead rows, then each page fetched through the ASGI app R times: cold (a new
app, so no cached count) and warm (the same app again within its cache
window).  Prints the median and worst milliseconds per page.
"""

from __future__ import annotations

import argparse
import statistics
import time

from sqlalchemy import create_engine
from starlette.testclient import TestClient

from alkstore_sa import Store
from alkstore_sa.web import create_app

from ._db import migrate, open_database, vacuum

PAGES = ("/", "/queues/big", "/queues/big/jobs?status=due", "/queues/big/dead", "/workers")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    db = open_database()
    try:
        migrate(db)
        with db.connect() as conn:
            conn.execute(
                "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts, "
                "visibility_timeout) SELECT 'big', '\\x7b7d'::bytea, now() - interval '1 min', "
                "5, interval '30 s' FROM generate_series(1, %s)",
                (args.jobs,),
            )
        vacuum(db, "alkstore.jobs")
        engine = create_engine(db.sa_url(), pool_size=5)
        with Store(engine) as store:
            for name in ("small-a", "small-b"):
                q = store.queue(name)
                q.enqueue_many([b"x"] * 20)
                for h in q.claim_batch("bench-worker", 5):
                    h.fail("bench: dead")
                q.claim_batch("bench-worker", 5)
            print(f"{args.jobs:,} due jobs in queue 'big'; {args.rounds} rounds per page")
            print(f"{'page':<32}{'cold median':>12}{'cold max':>10}{'warm median':>13}")
            for page in PAGES:
                cold, warm = [], []
                for _ in range(args.rounds):
                    with TestClient(create_app(store)) as client:
                        started = time.perf_counter()
                        assert client.get(page).status_code == 200
                        cold.append((time.perf_counter() - started) * 1000)
                        started = time.perf_counter()
                        assert client.get(page).status_code == 200
                        warm.append((time.perf_counter() - started) * 1000)
                print(
                    f"{page:<32}{statistics.median(cold):>10.0f}ms{max(cold):>8.0f}ms"
                    f"{statistics.median(warm):>11.0f}ms"
                )
        engine.dispose()
    finally:
        db.drop()


if __name__ == "__main__":
    main()
