"""A queue's operations, everything but fetching a connection: enqueue, claim, acks.

``QueueCore`` (with ``HandleCore`` in ``handle.py`` and the operator's calls
in ``admin.py``) validates arguments before any SQL and returns a *call*: a
function of one sync ``Connection`` that runs the operation in ``_db.ops``.
The sync faces run the call on a connection; the async faces hand it to
``run_sync``.  So each rule lives here or in ``_db`` once, for both APIs.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import TypeVar

from sqlalchemy import Connection

from .._db import enqueue as _enqueue
from .._db import flow as _flow
from .._db import ops as _ops
from .._db import vacuum as _vacuum
from .._db.address import QueueAddress, channel_for
from .._db.park import Parker
from .._extras.instrument import Carrier, Observer, Send, installed
from .._values import validate as v
from .._values.job import Job, SweepResult
from .._values.opts import EnqueueOpts, QueueOpts
from .._values.stamps import Stamps, as_interval, resolve_stamps
from .._values.validate import MAX_REQUEUE as MAX_REQUEUE  # re-exported: the web reads it
from . import Call
from .admin import QueueAdminCalls

T = TypeVar("T")


class QueueCore(QueueAdminCalls):
    """A queue's validated identity and its operations as calls (the operator's in
    ``QueueAdminCalls``)."""

    __slots__ = ("_parker", "_plain_stamps", "address", "flow", "name", "opts")

    def __init__(self, schema: str, name: object, opts: QueueOpts | None) -> None:
        if opts is not None and not isinstance(opts, QueueOpts):
            raise TypeError(f"opts must be QueueOpts, got {type(opts).__name__}")
        self.name = v.queue_name(name)
        self.opts = opts or QueueOpts()
        self.address = QueueAddress(schema, self.name, channel_for(schema, self.name))
        # The stamps of an enqueue without EnqueueOpts: the same every time.
        self._plain_stamps = resolve_stamps(self.opts, None)
        self._parker = Parker()
        # F1: whether the queue has limits, as this object's claims last saw it.
        self.flow = _flow.FlowState()

    def enqueue_many(
        self, payloads: Iterable[object], opts: EnqueueOpts | None, unique_keys: object = None
    ) -> Call[list[int]]:
        if isinstance(payloads, bytes | bytearray | memoryview | str):
            raise TypeError("enqueue_many takes an iterable of payloads, not a single payload")
        data = [v.payload(p) for p in payloads]
        if unique_keys is None:
            return self._enqueue(data, opts)
        return self._enqueue(data, opts, _keys_for(data, opts, unique_keys))

    def enqueue(self, payload: object, opts: EnqueueOpts | None) -> Call[int]:
        many = self._enqueue([v.payload(payload)], opts)
        return lambda conn: many(conn)[0]

    def _enqueue(
        self, data: list[bytes], opts: EnqueueOpts | None, keys: list[str | None] | None = None
    ) -> Call[list[int]]:
        if opts is not None and not isinstance(opts, EnqueueOpts):
            raise TypeError(f"opts must be EnqueueOpts, got {type(opts).__name__}")
        limit = self.opts.max_payload_bytes
        # max() over the lengths runs in C: an enqueue_many of thousands pays ~nothing.
        if limit is not None and max(map(len, data), default=0) > limit:
            for i, payload in enumerate(data):
                if len(payload) > limit:
                    which = "the payload" if len(data) == 1 else f"payload {i}"
                    raise ValueError(
                        f"{which} is {len(payload):,} bytes, more than queue {self.name!r} "
                        f"takes (QueueOpts.max_payload_bytes={limit:,}; None lifts the cap)"
                    )
        if opts is None:
            stamps = self._plain_stamps
        elif opts.unique_key is None:
            stamps = resolve_stamps(self.opts, opts)
        else:
            # U1: the one key applies to every payload; a key alone changes no stamp.
            stamps = self._plain_stamps if _key_only(opts) else resolve_stamps(self.opts, opts)
            if keys is None:
                keys = [opts.unique_key] * len(data)
        if keys is not None and all(key is None for key in keys):
            keys = None  # no key at all: the plain statement, as it always was
        observers = installed()
        if observers and data:
            return self._observed(observers, data, stamps, keys)
        if keys is not None:
            return partial(
                _enqueue.enqueue_keyed,
                address=self.address,
                payloads=data,
                keys=keys,
                stamps=stamps,
            )
        return partial(_enqueue.enqueue, address=self.address, payloads=data, stamps=stamps)

    def _observed(
        self,
        observers: tuple[Observer, ...],
        data: list[bytes],
        stamps: Stamps,
        keys: list[str | None] | None,
    ) -> Call[list[int]]:
        """The enqueue call wrapped by each installed observer (B3), the first innermost.

        Built here, where the caller builds the call: in its thread and
        context (its current span), which the observers capture now; the
        call may run elsewhere (the async faces run it in a greenlet).  The
        carrier they fill is stored with every job of the call.
        """
        address = self.address

        def insert(conn: Connection, carrier: Carrier) -> list[int]:
            if keys is not None:
                return _enqueue.enqueue_keyed(
                    conn,
                    address=address,
                    payloads=data,
                    keys=keys,
                    stamps=stamps,
                    trace_context=carrier or None,
                )
            return _enqueue.enqueue(
                conn, address=address, payloads=data, stamps=stamps, trace_context=carrier or None
            )

        send: Send = insert
        for observer in observers:
            send = observer.wrap_enqueue(self.name, len(data), send)
        wrapped = send
        return lambda conn: wrapped(conn, {})

    def claim(
        self, worker_id: object, n: object, max_batch_payload_bytes: object = None
    ) -> Call[list[Job]] | None:
        """``None`` for ``n <= 0``: the face returns ``[]`` and runs no SQL (Q13).

        ``max_batch_payload_bytes``: None, or the most payload
        bytes one batch brings back (at least one job is always claimed).
        """
        who = v.worker_id(worker_id)
        max_bytes = batch_bytes(max_batch_payload_bytes)
        if isinstance(n, int) and not isinstance(n, bool) and n <= 0:
            return None  # any n <= 0 means "none", however low (no int4 range check)
        size = v.integer(n, "n")
        return partial(
            _ops.claim,
            address=self.address,
            worker_id=who,
            n=size,
            parker=self._parker,
            max_bytes=max_bytes,
            flow=self.flow,
        )

    def ack_batch(self, job_ids: Iterable[object]) -> Call[int] | None:
        ids = v.job_ids(job_ids)
        if not ids:
            return None
        return self._freeing(partial(_ops.ack_batch, address=self.address, job_ids=ids), ids)

    def cancel(self, job_id: object) -> Call[bool]:
        job = v.job_id(job_id)
        return self._freeing(partial(_ops.cancel, address=self.address, job_id=job), [job])

    def get_job(self, job_id: object) -> Call[Job | None]:
        return partial(_ops.get_job, address=self.address, job_id=v.job_id(job_id))

    # -- for the worker runtime: many claims per round trip -------------------

    def ack_claims(self, claims: list[tuple[int, int]]) -> Call[list[int]]:
        """Ack ``(job_id, attempts)`` claims still held; the call returns acked ids."""
        ids = [job_id for job_id, _ in claims]
        return self._freeing(partial(_ops.ack_held, address=self.address, claims=claims), ids)

    def heartbeat_claims(self, claims: list[tuple[int, int]]) -> Call[list[int]]:
        """Extend held claims by each job's visibility timeout; returns extended ids."""
        return partial(_ops.heartbeat_held, address=self.address, claims=claims)

    def gone(self, job_ids: list[int]) -> Call[list[int]]:
        """C1: which of ``job_ids`` have no row left (cancelled while claimed)."""
        return partial(_ops.gone, address=self.address, job_ids=job_ids)

    def release(self, job_id: int, attempts: int) -> Call[_ops.Released | None]:
        """Give a held claim back: pending, due now, attempt not refunded (Q27).

        On its last attempt the job is dead-lettered instead (``"dead"``).
        """
        return self._freeing(
            partial(_ops.release, address=self.address, job_id=job_id, attempts=attempts),
            [job_id],
        )

    def ack_claim(
        self, job_id: int, attempts: int, *, kept: bool = False, result: bytes | None = None
    ) -> Call[bool]:
        """Ack one held claim (a session handler's ack, Q28); False when it was gone.

        ``kept``: the job carries keep_completed, so it moves with ``result`` (R1).
        """
        if kept:
            return self._freeing(
                partial(
                    _ops.ack_kept,
                    address=self.address,
                    job_id=job_id,
                    attempts=attempts,
                    result=result,
                ),
                [job_id],
            )
        return self._freeing(
            partial(_ops.ack, address=self.address, job_id=job_id, attempts=attempts),
            [job_id],
        )

    def retry_claim(
        self, job_id: int, attempts: int, error: str | None, delay: float, traceback: str | None
    ) -> Call[_ops.Retried | None]:
        """Q17/Q18 for a held claim, ``delay`` seconds (already checked) from now."""
        return self._freeing(
            partial(
                _ops.retry,
                address=self.address,
                job_id=job_id,
                attempts=attempts,
                delay=as_interval(delay),
                error=error,
                traceback=traceback,
            ),
            [job_id],
        )

    def snooze_claim(self, job_id: int, attempts: int, delay: float) -> Call[bool]:
        """Z1 for a held claim, ``delay`` seconds (already checked) from now."""
        return self._freeing(
            partial(
                _ops.snooze,
                address=self.address,
                job_id=job_id,
                attempts=attempts,
                delay=as_interval(delay),
            ),
            [job_id],
        )

    def fail_claim(
        self, job_id: int, attempts: int, error: str | None, traceback: str | None
    ) -> Call[bool]:
        """Q19 for a held claim; False when it was gone."""
        return self._freeing(
            partial(
                _ops.fail,
                address=self.address,
                job_id=job_id,
                attempts=attempts,
                error=error,
                traceback=traceback,
            ),
            [job_id],
        )

    def _freeing(self, call: Call[T], ids: list[int]) -> Call[T]:
        """``call`` on the jobs ``ids``, then the freed slots' promotion and wake (F2, F3)."""
        flow, address = self.flow, self.address
        return lambda conn: _flow.freeing(conn, call, address=address, flow=flow, ids=ids)

    def record_outcomes(self, acked: int, retried: int, dead: int) -> Call[None]:
        """W2: add a worker's tallies to this queue's per-minute throughput counts."""
        return partial(
            _ops.record_outcomes, address=self.address, acked=acked, retried=retried, dead=dead
        )

    def check_schema(self) -> Call[None]:
        """B5: raises ``SchemaMissingError`` unless the tables are there and up to date."""
        return partial(_ops.check_schema, address=self.address)

    def vacuum_jobs(self, min_dead: int, live_fraction: float) -> Call[_vacuum.Vacuumed]:
        """The worker's vacuum of this store's jobs table, when due (``_vacuum.vacuum_jobs``)."""
        return partial(
            _vacuum.vacuum_jobs,
            address=self.address,
            min_dead=min_dead,
            live_fraction=live_fraction,
        )

    def sweep_expired(self) -> Call[SweepResult]:
        retention = self.opts.dead_letter_retention
        return partial(
            _ops.sweep,
            address=self.address,
            retention=None if retention is None else as_interval(retention),
        )


def batch_bytes(value: object) -> int | None:
    """A ``max_batch_payload_bytes`` checked: None, or an int of at least 1."""
    if value is None:
        return None
    return v.integer(value, "max_batch_payload_bytes", minimum=1)


def _key_only(opts: EnqueueOpts) -> bool:
    """``opts`` sets a unique key and nothing else: the queue's plain stamps apply."""
    return (
        opts.priority is None
        and opts.delay is None
        and opts.run_at is None
        and opts.expires_in is None
        and opts.max_attempts is None
        and opts.keep_completed is None
        and opts.group is None
        and opts.on_conflict == "keep"
    )


def _keys_for(data: list[bytes], opts: EnqueueOpts | None, unique_keys: object) -> list[str | None]:
    """U1: ``enqueue_many``'s ``unique_keys``, one per payload (None for none), validated."""
    if opts is not None and isinstance(opts, EnqueueOpts) and opts.unique_key is not None:
        raise ValueError(
            "give either opts.unique_key (one key for every payload) or unique_keys "
            "(one per payload), not both"
        )
    if isinstance(unique_keys, str | bytes | bytearray | memoryview) or not isinstance(
        unique_keys, Iterable
    ):
        raise TypeError(
            "unique_keys must be an iterable of str or None, one per payload, "
            f"got {type(unique_keys).__name__}"
        )
    keys = [None if key is None else v.unique_key(key, "unique key") for key in unique_keys]
    if len(keys) != len(data):
        raise ValueError(f"unique_keys has {len(keys)} entries for {len(data)} payloads")
    return keys


def wait_args(job_id: object, timeout: object) -> tuple[int, float | None]:
    """R3: a wait's job id and timeout (seconds, >= 0, or None), checked before SQL."""
    seconds = None if timeout is None else v.duration(timeout, "timeout", allow_zero=True)
    return v.job_id(job_id), seconds
