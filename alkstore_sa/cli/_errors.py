"""The CLI's own error and environment names, importable without SQLAlchemy.

``alkstore --help`` builds the parser from modules that import nothing
heavy (V3); the modules that talk to the database import these from here.
"""

from __future__ import annotations

__all__ = ["SCHEMA_VAR", "CliError"]

SCHEMA_VAR = "ALKSTORE_SCHEMA"


class CliError(Exception):
    """A failure the CLI reports as one line and an exit code (2: usage, 1: runtime)."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.message = message.removeprefix("alkstore: ")
        self.code = code
