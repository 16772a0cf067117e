"""Tasks: functions deferred as JSON envelopes and run by workers by name (T1, T2),
and periodic jobs (P1)."""

from ._codec import ENVELOPE_VERSION, InvalidEnvelope, decode_envelope, encode_envelope
from ._dispatch import UnknownTaskError
from ._periodic import Periodic
from ._registry import Tasks
from ._task import AsyncSessionTask, AsyncTask, SessionTask, Task, TaskBase

__all__ = [
    "ENVELOPE_VERSION",
    "AsyncSessionTask",
    "AsyncTask",
    "InvalidEnvelope",
    "Periodic",
    "SessionTask",
    "Task",
    "TaskBase",
    "Tasks",
    "UnknownTaskError",
    "decode_envelope",
    "encode_envelope",
]
