"""Flask + alkstore_sa: an order and its receipt job commit in one transaction.

    export ALKSTORE_DATABASE_URL=postgresql+psycopg://user:pass@localhost/shop
    flask --app examples.flask_app.app init-db            # alkstore's tables and `orders`
    flask --app examples.flask_app.app run                # the web app
    alkstore worker examples.flask_app.app:tasks          # the worker (another terminal)

See README.md next to this file.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from typing import Any

import click
from flask import Flask, abort, g, request
from sqlalchemy import DateTime, String, create_engine, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

import alkstore_sa
from alkstore_sa import FailJob, QueueOpts, Store, Tasks

SCHEMA = os.environ.get("ALKSTORE_SCHEMA") or "alkstore"

# One engine for the app's own rows and for the queue, so that an order and
# its job can share a transaction.  Size the pool for the web server's threads
# plus what a worker in this process would hold (docs/integrations.md).
engine = create_engine(os.environ["ALKSTORE_DATABASE_URL"], pool_size=10, max_overflow=10)
store = Store(engine, schema=SCHEMA)
tasks = Tasks(store)


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(254))
    receipted_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


# An explicit name: the default (module.qualname) would differ between the web
# app's import path and the worker's.
@tasks.task(queue="receipts", opts=QueueOpts(max_attempts=5), name="shop.send_receipt")
def send_receipt(session: Session, order_id: int) -> None:
    """Session-scoped: the receipt mark commits together with the job's ack."""
    order = session.get(Order, order_id)
    if order is None:
        raise FailJob(f"order {order_id} does not exist")  # retrying would not help
    if order.receipted_at is not None:
        return  # already done by an earlier attempt
    # ... send the email here (an exception retries the job later) ...
    order.receipted_at = datetime.now(UTC)


def init_db() -> None:
    """alkstore's tables (its Alembic revisions), then the app's own."""
    alkstore_sa.migrate(engine, schema=SCHEMA)
    Base.metadata.create_all(engine)


app = Flask(__name__)


@app.cli.command("init-db")
def init_db_command() -> None:
    init_db()
    click.echo("database ready")


def db() -> Session:
    """This request's session (one per request, closed at teardown)."""
    if "db" not in g:
        g.db = Session(engine)
    return g.db  # type: ignore[no-any-return]


@app.teardown_appcontext
def close_db(exc: BaseException | None) -> None:
    session = g.pop("db", None)
    if session is not None:
        session.close()  # rolls back whatever the view did not commit


def order_json(order: Order) -> dict[str, Any]:
    return {"id": order.id, "email": order.email, "receipted": order.receipted_at is not None}


@app.post("/orders")
def create_order() -> tuple[dict[str, Any], int]:
    session = db()
    order = Order(email=request.get_json()["email"])
    session.add(order)
    session.flush()  # assigns order.id
    job_id = send_receipt.configure(session=session).defer(order_id=order.id)
    if request.args.get("fail"):
        # Anything raised before the commit rolls back the order *and* its job.
        abort(500, "payment declined (simulated)")
    session.commit()
    return {**order_json(order), "job_id": job_id}, 201


@app.get("/orders/<int:order_id>")
def get_order(order_id: int) -> dict[str, Any]:
    order = db().get(Order, order_id)
    if order is None:
        abort(404)
    return order_json(order)


@app.get("/healthz")
def healthz() -> dict[str, str]:
    db().execute(text("SELECT 1"))
    return {"status": "ok"}
