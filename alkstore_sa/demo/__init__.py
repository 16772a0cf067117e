"""The application ``alkstore demo`` runs: a shop that emails a receipt per order.

It ships inside the package, so the demo works from any install (a wheel
too), and it is written to be read: start with ``receipts.py``.  The command
around it (the database, the progress bar, the report) is
``alkstore_sa/cli/_demo.py``.
"""
