"""G1: a step becomes claimable once every step it comes after has been acked."""

from __future__ import annotations

from typing import Any

from .._wf_sizes import SIZES
from ._wf import SyncWorkflow, ack_all, claim_ids


def test_g1_diamond_runs_in_order(qs: Any) -> None:
    q = qs.queue("g1")
    wf = SyncWorkflow(qs, "diamond")
    a = wf.add_job(q, b"a")
    b = wf.add_job(q, b"b", after=[a])
    c = wf.add_job(q, b"c", after=[a])
    d = wf.add_job(q, b"d", after=[b, c])
    run = wf.defer()
    ids = run.job_ids
    assert ack_all(q) == [ids[a]]
    assert ack_all(q) == sorted([ids[b], ids[c]])
    assert ack_all(q) == [ids[d]]
    assert ack_all(q) == []
    status = qs.workflow(run.id)
    assert status.total == 4 and status.completed == 4 and status.finished


def test_g1_a_waiting_step_is_pending_with_waiting_on(qs: Any) -> None:
    q = qs.queue("g1w")
    wf = SyncWorkflow(qs, "waiting")
    a = wf.add_job(q, b"a")
    b = wf.add_job(q, b"b")
    c = wf.add_job(q, b"c", after=[a, b])
    run = wf.defer()
    ids = run.job_ids
    job = q.get_job(ids[c])
    assert (job.status, job.waiting_on, job.workflow_id) == (
        "pending",
        (ids[a], ids[b]),
        run.id,
    )
    assert job.payload == b"c"
    assert q.get_job(ids[a]).waiting_on == ()
    assert q.get_job(ids[a]).workflow_id == run.id
    assert q.stats().due == 2  # a waiting step is no row a claim reads
    handles = {h.id: h for h in q.claim_batch("w", 10)}
    assert set(handles) == {ids[a], ids[b]}
    assert handles[ids[a]].ack()
    assert q.get_job(ids[c]).waiting_on == (ids[b],)
    assert q.claim_batch("w", 10) == []
    assert handles[ids[b]].ack()
    assert [h.id for h in q.claim_batch("w", 10)] == [ids[c]]
    assert q.get_job(ids[c]).waiting_on == ()


def test_g1_a_chain_runs_one_step_at_a_time(qs: Any) -> None:
    q = qs.queue("g1c")
    wf = SyncWorkflow(qs, "chain")
    steps = [wf.add_job(q, b"0")]
    for i in range(1, SIZES.chain + 1):
        steps.append(wf.add_job(q, str(i).encode(), after=[steps[-1]]))
    run = wf.defer()
    for step in steps:
        assert claim_ids(q) == [run.job_ids[step]]
        assert q.ack_batch([run.job_ids[step]]) == 1  # Q22's batch ack promotes too
    assert q.claim_batch("w", 10) == []
    assert qs.workflow(run.id).finished


def test_g1_steps_across_queues_and_kept_results(qs: Any) -> None:
    from alkstore_sa import EnqueueOpts

    first, second = qs.queue("g1k1"), qs.queue("g1k2")
    wf = SyncWorkflow(qs, "kept")
    a = wf.add_job(first, b"a", opts=EnqueueOpts(keep_completed=60))
    b = wf.add_job(second, b"b", after=[a])
    run = wf.defer()
    [h] = first.claim_batch("w", 1)
    assert h.ack(b"result of a")  # R1: the kept ack promotes as any ack does
    [hb] = second.claim_batch("w", 1)
    assert hb.id == run.job_ids[b]
    kept = first.get_job(run.job_ids[a])  # a fan-in step reads its upstream's result
    assert (kept.status, kept.result, kept.workflow_id) == ("completed", b"result of a", run.id)


def test_g1_fan_in_runs_once_under_concurrent_acks(qs: Any) -> None:
    from concurrent.futures import ThreadPoolExecutor

    q = qs.queue("g1f")
    wf = SyncWorkflow(qs, "fan")
    root = wf.add_job(q, b"root")
    middle = [wf.add_job(q, b"m", after=[root]) for _ in range(SIZES.fan)]
    last = wf.add_job(q, b"last", after=middle)
    run = wf.defer()
    assert ack_all(q) == [run.job_ids[root]]
    handles = q.claim_batch("w", SIZES.fan + 100)
    assert len(handles) == SIZES.fan
    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(lambda h: h.ack(), handles))
    assert [h.id for h in q.claim_batch("w", 10)] == [run.job_ids[last]]
    assert qs.workflow(run.id).pending == 0


def test_g1_rollback_of_defer_in_a_session_writes_nothing(engine: Any) -> None:
    from sqlalchemy import text

    from alkstore_sa import Store, Workflow

    with Store(engine) as store:
        q = store.queue("g1r")
        wf = Workflow(store, name="rolled back")
        a = wf.add_job(q, b"a")
        wf.add_job(q, b"b", after=[a])
        with engine.connect() as conn:
            run = wf.defer(session=conn)
            assert store.workflow(run.id) is None  # not committed: not seen outside
            conn.rollback()
        assert store.workflow(run.id) is None
        with engine.connect() as conn:
            for table in ("jobs", "workflows", "workflow_steps", "workflow_edges"):
                assert conn.execute(text(f"SELECT count(*) FROM alkstore.{table}")).scalar() == 0


def _fetch(url: str) -> int:
    return len(url)


def _parse(doc: int, strict: bool = False) -> int:
    return doc


def test_g1_task_steps_carry_their_envelope_and_check_arguments(store: Any) -> None:
    import pytest

    from alkstore_sa import Tasks, Workflow

    tasks = Tasks(store)
    fetch = tasks.task(queue="g1t")(_fetch)
    parse = tasks.task(queue="g1t")(_parse)
    wf = Workflow(store, name="tasks")
    a = wf.add(fetch, url="https://example.com")
    b = wf.add(parse, after=[a], doc=1)
    with pytest.raises(TypeError, match="doc"):
        wf.add(parse, after=[a], doc="one")  # V6: checked as task.defer checks it
    run = wf.defer()
    q = store.queue("g1t")
    [h] = q.claim_batch("w", 5)
    assert b'"task": "' in h.payload or b'"task":"' in h.payload
    assert h.ack()
    [h] = q.claim_batch("w", 5)
    assert h.id == run.job_ids[b]


def test_g1_promotion_commits_with_a_session_ack(engine: Any) -> None:
    from alkstore_sa import Store, Workflow

    with Store(engine) as store:
        q = store.queue("g1sa")
        wf = Workflow(store, name="session ack")
        a = wf.add_job(q, b"a")
        b = wf.add_job(q, b"b", after=[a])
        run = wf.defer()
        [h] = q.claim_batch("w", 1)
        with engine.connect() as conn:
            assert h.ack(session=conn)
            assert q.claim_batch("w", 1) == []  # promoted in the ack's transaction: unseen
            conn.commit()
        assert [x.id for x in q.claim_batch("w", 1)] == [run.job_ids[b]]


async def test_g1_rollback_of_an_async_defer_writes_nothing(async_engine: Any) -> None:
    from sqlalchemy.ext.asyncio import AsyncSession

    from alkstore_sa import AsyncStore, Workflow

    store = AsyncStore(async_engine)
    q = store.queue("g1ar")
    wf = Workflow(store, name="async rollback")
    wf.add_job(q, b"a")
    async with AsyncSession(async_engine) as session:
        run = await wf.defer(session=session)
        await session.rollback()
    assert await store.workflow(run.id) is None
    assert await q.get_job(run.job_ids[next(iter(run.job_ids))]) is None
