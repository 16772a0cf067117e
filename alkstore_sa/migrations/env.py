"""Alembic environment for alkstore_sa: ``ALKSTORE_DATABASE_URL=<url> alembic upgrade head``."""

from alkstore_sa.migrations._runner import run

run()
