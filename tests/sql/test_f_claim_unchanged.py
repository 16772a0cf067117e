"""F1's "no cost for queues without limits": the unlimited claim is the statement it
was before flow control, but for the new ``grp`` (and G1's ``workflow_id``)
columns it carries along.

The hashes are of the four claim statements as rendered at 262bc07 (before
revision 0012).  Today's text, with the three places the new column rides
along removed (RETURNING, the exhausted rows' copy into dead_jobs), must
match them byte for byte: no new predicate, join, CTE or lock.  Every bound slot
is read as ``?`` on both sides: since issue 30 the job statuses and the batch
size are ``literal_execute`` slots (``__[POSTCOMPILE_x]``, rendered into the
text) where they were ``%(x)s`` parameters, and since revision 0016 the due rows'
time key is ``NOT parked`` and ``run_at`` where it was the generated ``claim_at``
(``TIME_KEY`` below maps it back), the same statement otherwise.  How the
claim knows a queue has limits costs it nothing: the queue's settings row
is the pause row it always read (``_db/flow.py``).
"""

from __future__ import annotations

import hashlib
import re

import pytest
import sqlalchemy
from sqlalchemy.dialects import postgresql

from alkstore_sa._db.sql import claim

BEFORE = {
    "claim": "09fb7fee3da4a11e90642201d5219ecde9e442cfccf34299c8c597523e5a91a5",
    "claim_walk": "d342556c3ec76873085ef91e30109af5fbda39c13d7ea6ca9432ee50d9480cc7",
    "claim_bounded": "d5eae963bed37ed1e6426f850e132248e7b821819ffd131601d497e452f9bf3b",
    "claim_walk_bounded": "23ddaa681d0cfbf9766d159eb9bf947ca9379050cfbd794484cbd751c03c0f91",
}


# Revision 0016 replaced claim_at (run_at, or +infinity once parked) with NOT parked
# and run_at in the due rows' scans: today's text -> the text at 262bc07.
_UNPARKED_DUE = r"NOT alkstore\.jobs\.parked AND alkstore\.jobs\.run_at <= "
TIME_KEY = [
    # jobs.* copied into the exhausted rows' RETURNING had the column.
    (
        r"alkstore\.jobs\.parked, alkstore\.jobs\.keep_completed",
        "alkstore.jobs.parked, alkstore.jobs.claim_at, alkstore.jobs.keep_completed",
    ),
    # The due rows' scan: its condition and its ORDER BY.
    (
        _UNPARKED_DUE + r"(statement_timestamp\(\).*?ORDER BY alkstore\.jobs\.priority DESC, )"
        r"alkstore\.jobs\.run_at",
        r"alkstore.jobs.claim_at <= \1alkstore.jobs.claim_at",
    ),
    # The walk: its level row, and the probe from it.
    (r"head\.run_at AS run_at", "head.claim_at AS claim_at"),
    (r"head\.parked, head\.run_at", "head.claim_at"),
    (
        r"NOT alkstore\.jobs\.parked AND (alkstore\.jobs\.priority = level\.priority AND )"
        r"\(alkstore\.jobs\.run_at, alkstore\.jobs\.id\) >= \(level\.run_at, level\.id\) "
        r"AND alkstore\.jobs\.run_at <= (statement_timestamp\(\).*?ORDER BY )"
        r"alkstore\.jobs\.run_at",
        r"\1(alkstore.jobs.claim_at, alkstore.jobs.id) >= (level.claim_at, level.id) "
        r"AND alkstore.jobs.claim_at <= \2alkstore.jobs.claim_at",
    ),
]


# The hashes are of SQLAlchemy 2.1's compiler output; another minor version
# renders the same statement with other text (anonymous names, spacing), so
# there the comparison says nothing either way (CI's oldest-SQLAlchemy leg
# leaves this file out, .ci/subset).
RENDERED_WITH = "2.1."


@pytest.mark.skipif(
    not sqlalchemy.__version__.startswith(RENDERED_WITH),
    reason=f"the pinned hashes are SQLAlchemy {RENDERED_WITH}x's rendering",
)
@pytest.mark.parametrize("name", sorted(BEFORE))
def test_f1_the_unlimited_claim_is_the_statement_it_was(name: str) -> None:
    text = str(getattr(claim, name)().compile(dialect=postgresql.dialect()))
    assert "paused_queues.concurrency" not in text and "group" not in text
    # And G1's workflow_id, which rides along the same way (0013).
    without_group = (
        text.replace(", alkstore.jobs.grp", "")
        .replace(", alkstore.jobs.workflow_id", "")
        .replace(", exhausted_moved.grp AS grp", "")
        .replace(", exhausted_moved.workflow_id AS workflow_id", "")
        .replace(", keep_completed, grp, workflow_id,", ", keep_completed,")
    )
    for today, then in TIME_KEY:
        without_group = re.sub(today, then, without_group, flags=re.S)
    slots = re.sub(r"%\((\w+)\)s(::\w+)?|__\[POSTCOMPILE_\w+\]", "?", without_group)
    assert hashlib.sha256(slots.encode()).hexdigest() == BEFORE[name]
