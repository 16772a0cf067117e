"""The enqueue operations (Q4-Q7, U1, R1's stamp) over a sync ``Connection``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection

from .._values.errors import AlkstoreError
from .execute import fetch
from .sql import enqueue as enqueue_sql

if TYPE_CHECKING:
    from .._values.stamps import Stamps
    from .address import QueueAddress


def enqueue(
    conn: Connection,
    *,
    address: QueueAddress,
    payloads: list[bytes],
    stamps: Stamps,
    trace_context: dict[str, str] | None = None,
) -> list[int]:
    """Insert ``payloads``; ``trace_context`` (B3), when given, is stored with each job."""
    if not payloads:
        return []
    params = _enqueue_params(address, stamps)
    if _varied(stamps):  # R1, F3: their own variants, so no other enqueue changes
        _vary(params, stamps)
        return _enqueue_kept(conn, address, params, payloads, None, trace_context)
    if trace_context:
        params["p_trace_context"] = trace_context
        if len(payloads) == 1:
            params["p_payload"] = payloads[0]
            stmt = enqueue_sql.enqueue_one_traced()
        else:
            params["p_payloads"] = payloads
            stmt = enqueue_sql.enqueue_traced()
        return [row[0] for row in fetch(conn, address, stmt, params)]
    if len(payloads) == 1:
        params["p_payload"] = payloads[0]
        return [row[0] for row in fetch(conn, address, enqueue_sql.enqueue_one(), params)]
    params["p_payloads"] = payloads
    return [row[0] for row in fetch(conn, address, enqueue_sql.enqueue(), params)]


def _enqueue_kept(
    conn: Connection,
    address: QueueAddress,
    params: dict[str, Any],
    payloads: list[bytes],
    keys: list[str | None] | None,
    trace_context: dict[str, str] | None,
) -> list[Any]:
    """An enqueue stamped with keep_completed (R1) or a group (F3), or keyed with
    on_conflict="replace" (U2) (plain: ids; keyed: (id, key) rows).

    ``params`` carries ``p_keep_completed`` / ``p_group`` / ``replace`` (``_vary``)."""
    one = len(payloads) == 1
    if trace_context:
        params["p_trace_context"] = trace_context
    if one:
        params["p_payload"] = payloads[0]
    else:
        params["p_payloads"] = payloads
    if keys is not None:
        if one:
            params["p_unique_key"] = keys[0]
        else:
            params["p_unique_keys"] = keys
    stmt = enqueue_sql.enqueue_variant(
        one=one,
        keyed=keys is not None,
        traced=bool(trace_context),
        kept=params.get("p_keep_completed") is not None,
        grouped="p_group" in params,
        replace=keys is not None and bool(params.get("replace")),
    )
    params.pop("replace", None)
    rows = fetch(conn, address, stmt, params)
    return rows if keys is not None else [row[0] for row in rows]


def _varied(stamps: Stamps) -> bool:
    """The enqueue needs a variant statement (R1's stamp, F3's group, U2's replace)."""
    return stamps.keep_completed is not None or stamps.group is not None or stamps.replace


def _vary(params: dict[str, Any], stamps: Stamps) -> None:
    if stamps.keep_completed is not None:
        params["p_keep_completed"] = stamps.keep_completed
    if stamps.group is not None:
        params["p_group"] = stamps.group
    if stamps.replace:
        params["replace"] = True  # not a bound parameter: picks the statement


def _enqueue_params(address: QueueAddress, stamps: Stamps) -> dict[str, Any]:
    """What every enqueue statement binds besides its payloads (and keys)."""
    return {
        "p_queue": address.queue,
        "p_priority": stamps.priority,
        "p_run_at": stamps.run_at,
        "p_delay": stamps.delay,
        "p_max_attempts": stamps.max_attempts,
        "p_visibility_timeout": stamps.visibility_timeout,
        "p_expires_in": stamps.expires_in,
        "p_channel": address.channel,
    }


# U1: how many times a keyed enqueue inserts again a key whose live job
# finished between the insert that met it and the look-up for it.  Each
# round needs another job of that key to be made and finish inside that
# window, so a second round is rare and a fifth never happens in practice.
KEYED_ROUNDS = 5


def enqueue_keyed(
    conn: Connection,
    *,
    address: QueueAddress,
    payloads: list[bytes],
    keys: list[str | None],
    stamps: Stamps,
    trace_context: dict[str, str] | None = None,
) -> list[int]:
    """U1: insert ``payloads`` with ``keys`` (parallel; None for no key), skipping live keys.

    Repeats of a key collapse to their first payload; a key that is live
    (pending or processing) keeps its job, whose id is returned in its
    place.  The database decides which key is live: the insert goes
    ``ON CONFLICT DO NOTHING`` against the partial unique index, and only
    the keys it skipped are then looked up -- in a statement of its own, so
    a job another transaction committed while the insert waited for it is
    seen.  A key whose job finished between the two is free again: it is
    inserted in another round.  Ids come back in input order.
    """
    first: dict[str, int] = {}  # each key's first position (U2's replace: its last)
    for i, key in enumerate(keys):
        if key is not None and (key not in first or stamps.replace):
            first[key] = i
    if len(first) == len(keys):  # every payload keyed, no repeat (one enqueue())
        sending = list(range(len(keys)))
    else:
        sending = [i for i, key in enumerate(keys) if key is None or first[key] == i]
    params = _enqueue_params(address, stamps)
    if trace_context:
        params["p_trace_context"] = trace_context
    _vary(params, stamps)
    keyed: dict[str, int] = {}
    keyless: list[int] = []  # the keyless payloads' ids, in input order (ids ascend with it)
    for _ in range(KEYED_ROUNDS):
        for id_, key in _insert_keyed(conn, address, params, payloads, keys, sending):
            if key is None:
                keyless.append(id_)
            else:
                keyed[key] = id_
        skipped = [k for i in sending if (k := keys[i]) is not None and k not in keyed]
        if not skipped:
            break
        found = {"p_queue": address.queue, "p_unique_keys": skipped}
        for key, id_ in fetch(conn, address, enqueue_sql.live_keys(), found):
            keyed[key] = id_
        # Keyless payloads never collide: they all went in with the first round.
        sending = [first[key] for key in skipped if key not in keyed]
        if not sending:
            break
    else:
        raise AlkstoreError(
            f"queue {address.queue!r}: the jobs of unique key(s) "
            f"{sorted(k for k in first if k not in keyed)!r} kept finishing while "
            f"they were enqueued ({KEYED_ROUNDS} rounds); try again"
        )
    rest = iter(keyless)
    return [next(rest) if key is None else keyed[key] for key in keys]


def _insert_keyed(
    conn: Connection,
    address: QueueAddress,
    params: dict[str, Any],
    payloads: list[bytes],
    keys: list[str | None],
    sending: list[int],
) -> list[Any]:
    traced = "p_trace_context" in params
    if params.get("p_keep_completed") is not None or "p_group" in params or "replace" in params:
        picked = [payloads[i] for i in sending]
        return _enqueue_kept(
            conn,
            address,
            dict(params),
            picked,
            [keys[i] for i in sending],
            params.get("p_trace_context"),
        )
    if len(sending) == 1:
        [i] = sending
        one = {**params, "p_payload": payloads[i], "p_unique_key": keys[i]}
        stmt = enqueue_sql.enqueue_one_keyed_traced() if traced else enqueue_sql.enqueue_one_keyed()
        return fetch(conn, address, stmt, one)
    many = {
        **params,
        "p_payloads": [payloads[i] for i in sending],
        "p_unique_keys": [keys[i] for i in sending],
    }
    stmt = enqueue_sql.enqueue_keyed_traced() if traced else enqueue_sql.enqueue_keyed()
    return fetch(conn, address, stmt, many)
