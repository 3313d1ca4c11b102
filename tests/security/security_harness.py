"""The security tests reuse the server tests' uvicorn harness (``ServerThread``, the ``serve`` fixture)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "server_conftest", Path(__file__).parent.parent / "server" / "conftest.py"
)
assert _spec is not None and _spec.loader is not None
_server = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_server)

ServerThread = _server.ServerThread
serve = _server.serve
free_port = _server.free_port
