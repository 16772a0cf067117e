from sqlalchemy import Engine, text


def test_m5_database_is_real_postgresql_and_migrated(engine: Engine) -> None:
    with engine.connect() as conn:
        version = conn.execute(text("select current_setting('server_version_num')::int")).scalar()
        tables = conn.execute(
            text("select count(*) from pg_tables where schemaname = 'alkstore'")
        ).scalar()
    assert version is not None and version >= 130000
    assert tables == 3  # jobs, dead_jobs, alkstore_alembic_version
