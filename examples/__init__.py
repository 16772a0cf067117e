"""Runnable examples.

- ``examples.tasks``: the smallest worker definition (``alkstore worker examples.tasks:worker``).
- ``examples.fastapi_app``: FastAPI on asyncpg, an order and its task in one transaction.
- ``examples.flask_app``: the same on Flask and psycopg.

The demo's receipts app ships inside the package (``alkstore demo`` runs it from
any install): ``alkstore_sa/demo/receipts.py``.
"""
