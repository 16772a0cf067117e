"""The web dashboard (W1-W5): ``create_app(store)``, an ASGI app to mount or serve.

Needs the ``web`` extra (``pip install 'alkstore-sa[web]'``: Starlette,
Jinja2, python-multipart; uvicorn for ``alkstore web``).  The core package
never imports this one.  See docs/web.md.
"""

from ._app import create_app
from ._security import BasicAuth, basic_auth_from_env

__all__ = ["BasicAuth", "basic_auth_from_env", "create_app"]
