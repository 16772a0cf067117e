"""FastAPI + alkstore_sa: an order and its receipt job commit in one transaction.

    export ALKSTORE_DATABASE_URL=postgresql+asyncpg://user:pass@localhost/shop
    uvicorn examples.fastapi_app.app:app                  # the web app
    alkstore worker examples.fastapi_app.app:tasks        # the worker (another terminal)

See README.md next to this file for installing the schema.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, FastAPI, HTTPException
from pydantic import BaseModel
from sqlalchemy import DateTime, String, text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from alkstore_sa import AsyncStore, AsyncWorker, FailJob, JobDeadError, QueueOpts, Tasks

# One engine for the app's own rows and for the queue, so that an order and
# its job can share a transaction.  Size the pool for the web requests plus
# what a worker in this process would hold (docs/integrations.md).
engine = create_async_engine(os.environ["ALKSTORE_DATABASE_URL"], pool_size=10, max_overflow=10)
Sessions = async_sessionmaker(engine, expire_on_commit=False)
store = AsyncStore(engine, schema=os.environ.get("ALKSTORE_SCHEMA") or "alkstore")
tasks = Tasks(store)


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(254))
    receipted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


# An explicit name: the default (module.qualname) would differ between
# `uvicorn app:app` run from this directory and the worker's import path.
@tasks.task(queue="receipts", opts=QueueOpts(max_attempts=5), name="shop.send_receipt")
async def send_receipt(session: AsyncSession, order_id: int) -> None:
    """Session-scoped: the receipt mark commits together with the job's ack."""
    order = await session.get(Order, order_id)
    if order is None:
        raise FailJob(f"order {order_id} does not exist")  # retrying would not help
    if order.receipted_at is not None:
        return  # already done by an earlier attempt
    # ... send the email here (an exception retries the job later) ...
    order.receipted_at = datetime.now(UTC)


class Quote(BaseModel):
    order_total_cents: int
    shipping_cents: int


# R1-R3: a job that keeps its result (for 10 minutes) so the request that
# deferred it can await it.  The return annotation rebuilds a Quote.
@tasks.task(queue="quotes", opts=QueueOpts(keep_completed=600), name="shop.quote")
async def quote(items: int) -> Quote:
    shipping = 0 if items >= 10 else 499
    return Quote(order_total_cents=items * 1250 + shipping, shipping_cents=shipping)


async def get_session() -> AsyncIterator[AsyncSession]:
    """One session and one transaction per request: commit on success, else roll back."""
    async with Sessions() as session, session.begin():
        yield session


# scope="function": the commit runs before the response is sent, so a client
# never sees 201 for an order whose transaction then failed to commit.
SessionDep = Annotated[AsyncSession, Depends(get_session, scope="function")]


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    # The app's own table; alkstore's tables come from `alkstore migrate`.
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    # SHOP_WORKER_IN_APP=1 runs a worker inside the web process (small apps;
    # otherwise run `alkstore worker ...:tasks` on its own).  The server owns
    # the signals: on SIGTERM it ends the lifespan, which stops the worker
    # with up to shutdown_timeout for the jobs in flight.
    worker, running = None, None
    if os.environ.get("SHOP_WORKER_IN_APP") == "1":
        worker = AsyncWorker(tasks, concurrency=4, shutdown_timeout=20, handle_signals=False)
        running = asyncio.create_task(worker.run())
    try:
        yield
    finally:
        if worker is not None and running is not None:
            worker.stop()
            await running
        await store.close()
        await engine.dispose()


app = FastAPI(lifespan=lifespan)


class OrderIn(BaseModel):
    email: str


class OrderOut(BaseModel):
    id: int
    email: str
    receipted: bool
    job_id: int | None = None


@app.post("/orders", status_code=201)
async def create_order(body: OrderIn, session: SessionDep, fail: bool = False) -> OrderOut:
    order = Order(email=body.email)
    session.add(order)
    await session.flush()  # assigns order.id
    job_id = await send_receipt.configure(session=session).defer(order_id=order.id)
    if fail:
        # Anything raised after the defer rolls back the order *and* its job.
        raise HTTPException(status_code=500, detail="payment declined (simulated)")
    return OrderOut(id=order.id, email=order.email, receipted=False, job_id=job_id)


@app.post("/quotes")
async def create_quote(items: int, timeout: float = 5.0) -> Quote:
    """Enqueue, then await the result: a worker computes it (R3's ``task.result``).

    The job commits before we wait (no session here), so a worker can see it.
    """
    job_id = await quote.defer(items=items)
    try:
        result: Quote = await quote.result(job_id, timeout=timeout)
    except TimeoutError:
        # The job stays queued and its result is kept when it runs: a client
        # may come back for it (GET /quotes/{job_id}).
        raise HTTPException(status_code=504, detail=f"quote {job_id} not ready yet") from None
    except JobDeadError as dead:
        raise HTTPException(
            status_code=502, detail=f"quote failed: {dead.job.last_error}"
        ) from None
    return result


@app.get("/orders/{order_id}", response_model_exclude_none=True)
async def get_order(order_id: int, session: SessionDep) -> OrderOut:
    order = await session.get(Order, order_id)
    if order is None:
        raise HTTPException(status_code=404, detail="no such order")
    return OrderOut(id=order.id, email=order.email, receipted=order.receipted_at is not None)


@app.get("/healthz")
async def healthz(session: SessionDep) -> dict[str, str]:
    await session.execute(text("SELECT 1"))
    return {"status": "ok"}


# The dashboard under /queues when the `web` extra is installed.  Put your own
# `auth=` on it before exposing it (docs/web.md).
try:
    from alkstore_sa.web import create_app as create_dashboard
except ImportError:  # pragma: no cover - the extra is optional
    pass
else:
    app.mount("/queues", create_dashboard(store, read_only=True))
