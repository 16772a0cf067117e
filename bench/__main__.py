"""``python -m bench``: run the suite (``--help`` for options)."""

from bench.cli import main

raise SystemExit(main())
