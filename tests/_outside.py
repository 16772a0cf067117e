"""The ``alkstore`` command as an install outside a source checkout runs it.

A copy of the package alone, first on the import path, run from an empty
directory: nothing of the repository (examples/, bench/, alembic.ini) is
next to the package or in the working directory, as after ``pip install`` of
a wheel.  ``.ci/wheel-demo`` does the real thing (builds the wheel, installs
it in a fresh venv); this is the quick version that fits in the suite.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Outside:
    cwd: Path  # an empty directory to run from
    pythonpath: str  # puts the copy ahead of the checkout's editable install


def install_outside(tmp: Path) -> Outside:
    site = tmp / "site-packages"
    shutil.copytree(
        ROOT / "alkstore_sa", site / "alkstore_sa", ignore=shutil.ignore_patterns("__pycache__")
    )
    cwd = tmp / "empty"
    cwd.mkdir()
    outside = Outside(cwd, str(site))
    # Not vacuous: the command imports the copy, not the checkout.
    found = subprocess.run(
        [sys.executable, "-c", "import alkstore_sa; print(alkstore_sa.__file__)"],
        env={**os.environ, "PYTHONPATH": outside.pythonpath},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.strip()
    assert Path(found).parent == site / "alkstore_sa", found
    return outside
