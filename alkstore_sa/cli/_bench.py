"""``alkstore bench``: the benchmark suite of a source checkout, as ``python -m bench``.

The suite (``bench/`` at the repository root) is not part of the installed
package: it needs the ``bench`` extra (pgqueuer, asyncpg, ...) and measures
against baselines a user's install has no use for.  So the command looks for
it next to the package -- which is where it is only when the package runs
from a checkout (``pip install -e``) -- and hands it every argument after
``bench``.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from pathlib import Path

from ._db import CliError

__all__ = ["cmd_bench"]

# The directory holding the alkstore_sa package: a checkout's root, or site-packages.
ROOT = Path(__file__).resolve().parents[2]


def _is_checkout(root: Path) -> bool:
    # pyproject.toml too: site-packages could hold some other project's `bench`.
    return (root / "bench" / "cli.py").is_file() and (root / "pyproject.toml").is_file()


def cmd_bench(argv: Sequence[str]) -> int:
    if not _is_checkout(ROOT):
        raise CliError(
            "`alkstore bench` needs a source checkout: the benchmark suite (bench/) is not "
            "part of an installed package; in a clone of the repository, "
            "pip install -e '.[bench]' and run it there",
            code=2,
        )
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    # Imported by name: the suite is not part of the package (nor of its typing).
    suite = importlib.import_module("bench.cli")
    code: int = suite.main(list(argv))
    return code
