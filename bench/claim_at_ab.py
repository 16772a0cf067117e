"""``enqueue_many`` at revision 0007 against head, A/B: ``python -m bench.claim_at_ab``.

Written for S3's generated ``claim_at`` column (0008; gone since 0016, so it
now measures what 0008-0016 together cost an enqueue).  Two schemas of one
embedded server, one at revision 0007 (before S3) and one at head; rounds of
``enqueue_many`` (1,000 jobs x 20) alternate between
them in ABBA order, the table truncated after each, so the machine's drift
hits both alike.  Prints the medians and their ratio (head / 0007).
"""

from __future__ import annotations

import argparse
import statistics
import time

from alembic import command
from sqlalchemy import create_engine

from alkstore_sa import Store
from alkstore_sa._extras.server import start_embedded
from alkstore_sa.migrations._config import alembic_config

BEFORE = "alkstore_0007_hot_heartbeats"


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.claim_at_ab")
    parser.add_argument("--rounds", type=int, default=40)
    args = parser.parse_args()
    server = start_embedded("alkstore-claim-at-ab-")
    try:
        url = server.url(server.maintenance_db)
        command.upgrade(alembic_config(url=url, schema="before"), BEFORE)
        command.upgrade(alembic_config(url=url, schema="after"), "head")
        engine = create_engine(url, pool_size=2)
        times: dict[str, list[float]] = {"before": [], "after": []}
        payloads = [b"x" * 64] * 1000
        for r in range(args.rounds):
            for schema in ("before", "after") if r % 2 == 0 else ("after", "before"):
                queue = Store(engine, schema=schema).queue("e")
                t0 = time.perf_counter()
                for _ in range(20):
                    queue.enqueue_many(payloads)
                times[schema].append(time.perf_counter() - t0)
                with engine.begin() as conn:
                    conn.exec_driver_sql(f"TRUNCATE {schema}.jobs")  # our own literal names
        before, after = (statistics.median(times[k][2:]) for k in ("before", "after"))
        print(f"20,000 jobs enqueued: 0007 {before:.4f} s, head {after:.4f} s (medians)")
        print(f"head / 0007: {after / before:.3f}")
        engine.dispose()
    finally:
        server.stop()


if __name__ == "__main__":
    main()
