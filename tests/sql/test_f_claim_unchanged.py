"""F1's "no cost for queues without limits": the unlimited claim is the statement it
was before flow control, but for the new ``grp`` (and G1's ``workflow_id``)
columns it carries along.

The hashes are of the four claim statements as rendered at 262bc07 (before
revision 0012).  Today's text, with the three places the new column rides
along removed (RETURNING, the exhausted rows' copy into dead_jobs), must
match them byte for byte: no new predicate, join, CTE or lock.  How the
claim knows a queue has limits costs it nothing: the queue's settings row
is the pause row it always read (``_db/flow.py``).
"""

from __future__ import annotations

import hashlib

import pytest
import sqlalchemy
from sqlalchemy.dialects import postgresql

from alkstore_sa._db.sql import claim

BEFORE = {
    "claim": "3ca014e04b67998bbb90ab35079dc4b51ea57a2fee550544def1a1a204496e08",
    "claim_walk": "e1bf96323428568f536c69f386c87ba570da398a807b99c9a2aa7c6005534aa6",
    "claim_bounded": "5822ad305f261430c00e4fcbd19d2044f1230e54381ccbe9018f3a48a8fa5b38",
    "claim_walk_bounded": "f0a2608e6e20797a17daaed8f8a9c0571fd5f593ba21bdc9117cb83607b8b8c5",
}


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
    assert hashlib.sha256(without_group.encode()).hexdigest() == BEFORE[name]
