"""Runnable examples: ``alkstore worker examples.tasks:worker``.

The demo's receipts app ships inside the package (``alkstore demo`` runs it from
any install): ``alkstore_sa/demo/receipts.py``.
"""
