"""The smallest useful worker definition, for ``alkstore worker examples.tasks:worker``.

    export ALKSTORE_DATABASE_URL=postgresql+psycopg://user:pass@localhost/app
    alkstore migrate
    alkstore worker examples.tasks:worker --concurrency 4     # terminal 1
    alkstore enqueue emails --payload 'hello'                 # terminal 2

The store is built from the same variables the CLI reads (``alkstore
--database-url/--schema`` set them for the imported module), so one worker
definition serves every environment.
"""

from __future__ import annotations

import logging
import os

from alkstore_sa import FailJob, Job, QueueOpts, Store, Worker

log = logging.getLogger("examples.tasks")

store = Store.from_url(
    os.environ["ALKSTORE_DATABASE_URL"], schema=os.environ.get("ALKSTORE_SCHEMA") or "alkstore"
)
emails = store.queue("emails", QueueOpts(max_attempts=3, visibility_timeout=30))


def send_email(job: Job) -> None:
    """Pretend to send the payload as an email; an empty payload is a caller bug."""
    body = job.payload.decode("utf-8", errors="replace")
    if not body:
        raise FailJob("empty email body")  # retrying would not help: dead-letter it
    log.info("sent email job=%d attempt=%d body=%r", job.id, job.attempts, body)


worker = Worker({emails: send_email}, concurrency=4, poll_interval=1.0)
