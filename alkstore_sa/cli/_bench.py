"""``alkstore bench``: the benchmark suite of a source checkout, as ``python -m bench``.

The suite (``bench/`` at the repository root) is not part of the installed
package: it needs the ``bench`` extra (pgqueuer, asyncpg, ...) and measures
against baselines a user's install has no use for.  So the command finds it
next to the package, as ``alkstore demo`` finds its app, and hands it every
argument after ``bench``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from ._db import CliError

__all__ = ["cmd_bench"]

ROOT = Path(__file__).resolve().parents[2]


def cmd_bench(argv: Sequence[str]) -> int:
    if not (ROOT / "bench" / "cli.py").is_file():
        raise CliError(
            f"the benchmark suite is not at {ROOT / 'bench'}: `alkstore bench` runs from a "
            "source checkout (pip install -e '.[bench]')",
            code=2,
        )
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    # Imported by name: the suite is not part of the package (nor of its typing).
    suite = importlib.import_module("bench.cli")
    code: int = suite.main(list(argv))
    return code
