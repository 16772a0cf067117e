"""The receipts app that ``alkstore demo`` runs: a shop that emails a receipt per order.

What it shows, in the order a reader meets it:

* ``place_order``: the order row and its "send receipt" job are written in ONE
  transaction (``enqueue(..., session=session)``). If the order rolls back, so
  does the job -- and its wake-up notification: no receipt for a phantom order,
  no order that never gets its receipt.
* ``send_receipt``: a session-scoped handler ``(job, session)``. It marks the
  order sent through the session the worker opened; that write and the job's
  ack commit together or not at all (Q28), so a receipt is never marked
  sent for a job that will run again, nor run again once marked sent.
* Trouble, as real mail servers make it: some domains greylist the first
  attempt ("451 try again later": ``RetryJob`` with a short delay), and one
  address does not exist ("550": ``FailJob``, the job is dead-lettered with
  the reason, for a person to look at).

The ``Stats`` hooks exist only so the demo can report its numbers.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import DateTime, Engine, MetaData, String, func, select
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from alkstore_sa import FailJob, Job, QueueOpts, RetryJob, Store, Worker

SHOP_SCHEMA = "alkstore_demo_shop"
QUEUE = "receipts"
GREYLISTING = "greylist.example"  # answers 451 to a first delivery attempt
BOUNCING = "bounce.invalid"  # has no such mailbox: 550


class Base(DeclarativeBase):
    metadata = MetaData(schema=SHOP_SCHEMA)


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(String(100))
    email: Mapped[str] = mapped_column(String(200))
    total_cents: Mapped[int]
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
    receipt_sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


@dataclass
class Stats:
    """Handler-side observations (thread-safe: handlers run in a thread pool)."""

    first_start: dict[int, float] = field(default_factory=dict)  # job id -> perf_counter
    retried: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    on_first_start: Callable[[], None] | None = None

    def started(self, job: Job) -> None:
        if job.attempts == 1:  # wake latency is about the first delivery only
            now = time.perf_counter()
            with self.lock:
                self.first_start.setdefault(job.id, now)
            if self.on_first_start is not None:
                self.on_first_start()

    def retry(self) -> None:
        with self.lock:
            self.retried += 1


@dataclass(frozen=True)
class Customer:
    name: str
    email: str
    total_cents: int


def customers(n: int) -> Iterator[Customer]:
    """A deterministic stream of shoppers: 1 in 25 greylisted, exactly one bouncing."""
    bouncer = n // 2
    for i in range(n):
        if i == bouncer:
            domain = BOUNCING
        elif i % 25 == 7:
            domain = GREYLISTING
        else:
            domain = "mail.example"
        yield Customer(f"customer {i}", f"c{i}@{domain}", 500 + (i * 37) % 9500)


class ReceiptsApp:
    """The shop: its tables, its queue, its handler and its worker."""

    def __init__(self, engine: Engine, store: Store, *, send_time: float = 0.002) -> None:
        self.engine = engine
        self.store = store
        self.receipts = store.queue(QUEUE, QueueOpts(max_attempts=5, visibility_timeout=30))
        self.send_time = send_time  # the SMTP round trip we pretend to make
        self.stats = Stats()

    def create_tables(self) -> None:
        # The shop's own tables; alkstore's come from `alkstore migrate`.
        with self.engine.begin() as conn:
            conn.exec_driver_sql(f'CREATE SCHEMA IF NOT EXISTS "{SHOP_SCHEMA}"')
            Base.metadata.create_all(conn)

    def place_order(self, customer: Customer) -> int:
        """Write the order and its receipt job in one transaction; returns the job id."""
        with Session(self.engine) as session, session.begin():
            order = Order(
                customer=customer.name, email=customer.email, total_cents=customer.total_cents
            )
            session.add(order)
            session.flush()  # assigns order.id
            payload = json.dumps({"order_id": order.id}).encode()
            return self.receipts.enqueue(payload, session=session)

    def send_receipt(self, job: Job, session: Session) -> None:
        """Send one receipt; the worker commits our writes with the ack."""
        self.stats.started(job)
        order_id = json.loads(job.payload)["order_id"]
        order = session.get(Order, order_id)
        if order is None:
            raise FailJob(f"order {order_id} does not exist")
        if order.receipt_sent_at is not None:
            return  # already sent and committed: ack again, send nothing twice
        domain = order.email.rpartition("@")[2]
        if domain == BOUNCING:
            raise FailJob(f"550 5.1.1 no such mailbox: {order.email}")
        if domain == GREYLISTING and job.attempts == 1:
            self.stats.retry()
            raise RetryJob("451 4.7.1 greylisted, try again later", delay=0.25)
        time.sleep(self.send_time)
        order.receipt_sent_at = func.now()

    def worker(self, concurrency: int) -> Worker:
        # A delayed retry's wake-up comes before it is due; the re-poll picks it
        # up, so poll a little more often than the 1 s default for a snappy demo.
        return Worker(
            {self.receipts: self.send_receipt}, concurrency=concurrency, poll_interval=0.25
        )

    def orders_sent(self) -> int:
        with Session(self.engine) as session:
            query = select(func.count()).where(Order.receipt_sent_at.is_not(None))
            return int(session.scalar(query) or 0)
