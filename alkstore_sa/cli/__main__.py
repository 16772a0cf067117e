"""``python -m alkstore_sa.cli``: the same as the ``alkstore`` script."""

from . import main

raise SystemExit(main())
