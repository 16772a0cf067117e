"""One exception tree: everything the library raises on its own account is an
``AlkstoreError``, each keeping the builtin base callers already catch
(``_values/errors.py`` draws it)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil

import pytest

import alkstore_sa
from alkstore_sa import AlkstoreError, FailJob, InvalidNameError, RetryJob
from alkstore_sa.tasks import InvalidEnvelope, UnknownTaskError
from alkstore_sa.tasks._codec import Signature, decode_envelope

# Not errors of the library: a handler raises these to steer its job; the
# CLI's own one-line failure never leaves ``alkstore``'s run().
NOT_LIBRARY_ERRORS = {"FailJob", "RetryJob", "CliError"}


def _modules() -> list[str]:
    names = [alkstore_sa.__name__]
    for info in pkgutil.walk_packages(alkstore_sa.__path__, f"{alkstore_sa.__name__}."):
        # Not modules to import: the CLI entry point runs, Alembic runs env.py.
        if (
            not info.name.endswith(("__main__", ".migrations.env"))
            and ".versions." not in info.name
        ):
            names.append(info.name)
    return names


def test_every_exception_class_of_the_library_is_an_alkstore_error() -> None:
    found = {}
    for name in _modules():
        try:
            module = importlib.import_module(name)
        except ImportError:  # an optional extra that is not installed
            continue
        for cls_name, cls in vars(module).items():
            if (
                inspect.isclass(cls)
                and issubclass(cls, BaseException)
                and cls.__module__ == module.__name__
                and not cls_name.startswith("_")
            ):
                found[cls_name] = cls
    assert {"InvalidEnvelope", "UnknownTaskError", "InvalidNameError"} <= set(found)
    strays = {
        n
        for n, c in found.items()
        if n not in NOT_LIBRARY_ERRORS and not issubclass(c, AlkstoreError)
    }
    assert not strays, f"not under AlkstoreError: {sorted(strays)}"


def test_the_tree_keeps_the_builtin_bases() -> None:
    assert issubclass(InvalidEnvelope, ValueError) and issubclass(InvalidEnvelope, AlkstoreError)
    assert issubclass(UnknownTaskError, LookupError)
    assert issubclass(UnknownTaskError, AlkstoreError)
    assert issubclass(InvalidNameError, ValueError)
    assert str(UnknownTaskError("t")) == "unknown task 't'"
    assert not issubclass(FailJob, AlkstoreError) and not issubclass(RetryJob, AlkstoreError)


@pytest.mark.parametrize(
    "payload",
    [
        b"[" * 100_000 + b"]" * 100_000,
        b'{"v":1,"task":"t","kwargs":{"x":' + b"[" * 200 + b"]" * 200 + b"}}",
        b'{"v":1,"task":"t","kwargs":{"x":NaN}}',
        b'{"v":1,"task":"t","kwargs":{"x":-Infinity}}',
    ],
    ids=["100k-deep", "200-deep-argument", "NaN", "-Infinity"],
)
def test_t1_deep_or_nan_envelopes_are_invalid_payloads(payload: bytes) -> None:
    with pytest.raises(InvalidEnvelope):
        decode_envelope(payload)


@dataclasses.dataclass
class Order:
    id: int
    note: str | None = None
    tags: list[str] = dataclasses.field(default_factory=list)


def test_v6_rebuilt_dataclass_fields_are_checked_like_deferred_arguments() -> None:
    def ship(order: Order) -> None: ...

    sig = Signature.of(ship)
    assert sig.load({"order": {"id": 7, "tags": ["a"]}}, "task 'ship'")["order"] == Order(
        7, None, ["a"]
    )
    for bad in ({"id": "not-int"}, {"id": True}, {"id": 1, "note": 5}, {"id": 1, "tags": [1]}):
        with pytest.raises(TypeError, match=r"task 'ship': argument 'order'\.\w+: expected"):
            sig.load({"order": bad}, "task 'ship'")
