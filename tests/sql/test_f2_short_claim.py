"""F2: the short limited claim (``flow_claim.claim_concurrency``), used when ``concurrency``
is a queue's only limit, claims exactly what the general limited claim claims.

One queue holds every kind of row a claim looks at -- live claims filling
slots, a lapsed claim with attempts left (a reclaim counts as a claim, F5),
a lapsed claim at its last attempt (buried, Q12), due rows of several
priorities, an expired row, a row not due yet -- and each statement runs in
a transaction rolled back after it, so both see the same rows.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from alkstore_sa import EnqueueOpts, Limits, Rate, Store
from alkstore_sa._db import flow
from alkstore_sa._db.execute import fetch
from alkstore_sa._db.sql import flow_claim
from alkstore_sa.store import queue_parts

QUEUE = "f2-short"


def _queue_of_every_kind(store: Store, engine: Engine) -> Any:
    q = store.queue(QUEUE)
    ids = [q.enqueue(b"p%d" % p, EnqueueOpts(priority=p)) for p in (0, 5, 0, 9, 5, 0, 0, 1)]
    held = q.claim_batch("w-live", 3)  # the three highest: live claims
    assert len(held) == 3
    with engine.begin() as conn:
        lapsed = [ids[0], ids[2]]  # claimed, then past their deadlines
        conn.execute(
            text(
                "UPDATE alkstore.jobs SET status = 'processing', attempts = 1,"
                " worker_id = 'w-gone', claim_deadline = now() - interval '1 s',"
                " deadline_floor = now() - interval '1 s'"
                " WHERE id = ANY(:ids)"
            ),
            {"ids": lapsed},
        )
        conn.execute(  # the second one at its last attempt: buried by the claim
            text("UPDATE alkstore.jobs SET max_attempts = 1 WHERE id = :i"), {"i": ids[2]}
        )
    q.enqueue(b"expired", EnqueueOpts(expires_in=0.001))
    q.enqueue(b"later", EnqueueOpts(delay=3600))
    q.set_limits(Limits(concurrency=6))
    return q


def _claimed(engine: Engine, q: Any, statement: Any, n: int) -> tuple[list[int], list[int]]:
    """The ids ``statement`` claims and the ids it buries, rolled back afterwards."""
    _, core = queue_parts(q)
    params = {
        "p_queue": QUEUE,
        "p_worker_id": "w-new",
        "p_n": n,
        **flow._limit_values(Limits(concurrency=6)),
    }
    with engine.connect() as conn:
        rows = fetch(conn, core.address, statement, params)
        dead = conn.execute(text("SELECT id FROM alkstore.dead_jobs ORDER BY id")).scalars()
        claimed, buried = [r[0] for r in rows], list(dead)
        conn.rollback()
    return claimed, buried


@pytest.mark.parametrize("n", [1, 2, 3, 10])
def test_f2_the_short_claim_takes_and_buries_what_the_general_one_does(
    store: Store, engine: Engine, n: int
) -> None:
    q = _queue_of_every_kind(store, engine)
    general = _claimed(engine, q, flow_claim.claim_limited(), n)
    short = _claimed(engine, q, flow_claim.claim_concurrency(), n)
    assert short == general
    # 6 slots, 3 live: at most 3, the reclaim among them; one row buried.
    assert len(general[0]) == min(n, 3) and len(general[1]) == 1


def test_f2_a_queue_limited_by_concurrency_alone_claims_with_the_short_statement(
    store: Store,
) -> None:
    address = queue_parts(store.queue(QUEUE))[1].address

    def statement(limits: Limits) -> Any:
        return flow._claim_call(address, "w", 10, limits, None)[0]

    assert statement(Limits(concurrency=5)) is flow_claim.claim_concurrency(False)
    for other in (
        Limits(concurrency=5, group_concurrency=1),
        Limits(concurrency=5, rate=Rate(10, per=1)),
        Limits(concurrency=5, group_rate=Rate(10, per=1)),
        Limits(group_concurrency=1),
        Limits(),
    ):
        assert statement(other) is flow_claim.claim_limited(False)


def test_f2_the_short_claim_settles_on_a_generic_plan_untold(database_url: Any) -> None:
    """Inside the settings row's lock planning is lock time: the short claim goes in
    one round trip without ``plan_cache_mode = force_generic_plan`` and PostgreSQL
    still settles on its generic plan (as it does for the unlimited claim, Q8)."""
    engine = create_engine(database_url, pool_size=1, max_overflow=0)  # one connection
    try:
        q = Store(engine).queue(QUEUE)
        q.set_limits(Limits(concurrency=50))
        q.enqueue_many([b"x"] * 14)
        for _ in range(14):  # psycopg prepares at the 5th run, PostgreSQL decides after 5 more
            assert len(q.claim_batch("w", 1)) == 1
        with engine.connect() as conn:
            plans = conn.execute(
                text(
                    "SELECT generic_plans, statement FROM pg_prepared_statements "
                    "WHERE statement LIKE '%UPDATE alkstore.jobs SET status=%'"
                )
            ).all()
    finally:
        engine.dispose()
    assert len(plans) == 1 and plans[0].generic_plans > 0, plans
    assert "ranked" not in plans[0].statement  # the short claim, not the general one
