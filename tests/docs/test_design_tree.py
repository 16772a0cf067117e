"""docs/design.md draws the package tree, and the drawing is the tree.

The "Layers" section's first fenced block lists every module of the package,
one per line (a path relative to ``alkstore_sa/`` and what it is for).  A
module added, moved or removed without the drawing fails here, so a reader
can trust the drawing to tell the layers apart.  The same test holds the size
rule of the structure: no module over 350 lines.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "alkstore_sa"
DESIGN = ROOT / "docs" / "design.md"
MAX_LINES = 350


def _drawn() -> list[str]:
    text = DESIGN.read_text()
    section = text.split("## Layers", 1)[1]
    block = re.search(r"```text\n(.*?)```", section, flags=re.DOTALL)
    assert block, "docs/design.md: the Layers section has no ```text block"
    paths = []
    for line in block.group(1).splitlines():
        first = line.split(maxsplit=1)[0] if line.strip() else ""
        if first.endswith(".py"):
            paths.append(first)
    return paths


def _modules() -> list[str]:
    return sorted(
        str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts
    )


def test_design_draws_every_module_once() -> None:
    drawn = _drawn()
    assert len(drawn) == len(set(drawn)), "a module is drawn twice"
    assert sorted(drawn) == _modules()


def test_design_draws_modules_in_tree_order() -> None:
    assert _drawn() == _modules()


def test_no_module_is_over_the_size_rule() -> None:
    long = {
        m: n for m in _modules() if (n := len((PACKAGE / m).read_text().splitlines())) > MAX_LINES
    }
    assert long == {}
