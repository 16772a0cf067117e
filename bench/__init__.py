"""The alkstore_sa benchmark suite: ``python -m bench`` (see docs/benchmarks.md).

One run, one throwaway PostgreSQL, every case side by side with the raw
psycopg limit and pgqueuer, figures as a table and as JSON.
"""
