"""`alkstore jobs` / `stats` on rows written by anyone: shown, escaped, never a traceback."""

from __future__ import annotations

from sqlalchemy import URL, create_engine, text

from .test_cli import alkstore


def _insert(url: URL, queue: str, last_error: str, errors: str | None = None) -> int:
    eng = create_engine(url)
    try:
        with eng.begin() as conn:
            return int(
                conn.execute(
                    text(
                        "INSERT INTO alkstore.jobs (queue, payload, run_at, max_attempts,"
                        " visibility_timeout, last_error, errors) VALUES (:q, '\\x00',"
                        " statement_timestamp(), 2, '2 seconds', :e, CAST(:j AS jsonb))"
                        " RETURNING id"
                    ),
                    {"q": queue, "e": last_error, "j": errors},
                ).scalar_one()
            )
    finally:
        eng.dispose()


def test_o1_cli_jobs_escapes_terminal_controls_and_bidi_in_last_error(database_url: URL) -> None:
    _insert(database_url, "q", "\x1b[2K \x1b[32mOK all good \u202eevil\x07")
    proc = alkstore("jobs", "q", url=database_url)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "\u202e" not in proc.stdout and "\x07" not in proc.stdout
    assert "\\x1b[2K \\x1b[32mOK all good \\u202eevil\\x07" in proc.stdout


def test_o1_cli_jobs_shows_a_row_whose_history_cannot_be_read(database_url: URL) -> None:
    job_id = _insert(database_url, "q", "plain", errors='[{"attempt": "x"}, 5]')
    proc = alkstore("jobs", "q", url=database_url)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert "Traceback" not in proc.stdout
    assert str(job_id) in proc.stdout and "plain" in proc.stdout
    as_json = alkstore("jobs", "q", "--json", url=database_url)
    assert as_json.returncode == 0 and '"errors": []' in as_json.stdout


def test_o5_cli_stats_escapes_a_queue_name_nobody_validated(database_url: URL) -> None:
    _insert(database_url, "q\x1b[31m", "x")
    proc = alkstore("stats", url=database_url)
    assert proc.returncode == 0, proc.stderr
    assert "\x1b" not in proc.stdout and "q\\x1b[31m" in proc.stdout
