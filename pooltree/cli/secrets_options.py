"""Where the live cluster's processes read their secrets from: files (mode 0600) or the environment, never only
the command line (a ``--token`` value is visible to every local user in ``ps``).

* The superuser (root) token: ``--token-file``, else ``$POOLTREE_TOKEN``, else ``--token`` (warned about), else
  ``DATA/token`` (created with a fresh token on first start).
* The store key (seals ``secure_vault`` values and saved mutation answers in the store): ``--store-key-file``,
  else ``DATA/store_key`` (created on first start).
* The cluster node secret: ``--node-secret-file``, else ``$POOLTREE_NODE_SECRET``, else (scheduler only)
  ``DATA/node_secret`` (created on first start). Nodes must be given one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from urllib.parse import unquote

from pooltree.errors import PooltreeError
from pooltree.security.credentials import (
    NODE_SECRET_FILE,
    TOKEN_FILE,
    ensure_secret_file,
    new_node_secret,
    new_token,
    read_secret_file,
    restrict_file,
)

TOKEN_ENV = "POOLTREE_TOKEN"
NODE_SECRET_ENV = "POOLTREE_NODE_SECRET"
STORE_KEY_FILE = "store_key"
"""The key that seals secrets kept in the store (``pooltree.security.sealing``): never inside the store itself."""
MIN_TOKEN_LENGTH = 16

log = logging.getLogger("pooltree.cli.secrets")


def superuser_token(token_file: Path | None, token: str | None, data: Path) -> tuple[str, Path | None, bool]:
    """(token, the file it came from or None, created now)."""
    if token_file is not None:
        return read_secret_file(token_file, "token"), token_file, False
    from_env = os.environ.get(TOKEN_ENV)
    if from_env:
        return _checked(from_env.strip(), f"${TOKEN_ENV}"), None, False
    if token:
        log.warning("--token is visible to every local user in ps; prefer --token-file or $%s", TOKEN_ENV)
        return _checked(token, "--token"), None, False
    path = data / TOKEN_FILE
    value, created = ensure_secret_file(path, "token", new_token)
    return value, path, created


def node_secret(node_secret_file: Path | None, data: Path | None) -> tuple[str, Path | None, bool]:
    """(secret, the file it came from or None, created now); ``data`` None means "must be given"."""
    if node_secret_file is not None:
        return read_secret_file(node_secret_file, "node secret"), node_secret_file, False
    from_env = os.environ.get(NODE_SECRET_ENV)
    if from_env:
        return _checked(from_env.strip(), f"${NODE_SECRET_ENV}"), None, False
    if data is None:
        raise PooltreeError(
            f"a node needs the cluster node secret: --node-secret-file PATH or ${NODE_SECRET_ENV} "
            "(the scheduler keeps it in DATA/node_secret)"
        )
    path = data / NODE_SECRET_FILE
    value, created = ensure_secret_file(path, "node secret", new_node_secret)
    return value, path, created


def _checked(value: str, where: str) -> str:
    if len(value) < MIN_TOKEN_LENGTH or any(ch.isspace() for ch in value):
        raise PooltreeError(f"{where}: a token must be at least {MIN_TOKEN_LENGTH} characters without spaces")
    return value


def restrict_store_files(store_url: str) -> None:
    """chmod 0600 a SQLite store and its journal files (the scheduler also runs with umask 077)."""
    if store_url.startswith("sqlite:///"):
        path = Path(unquote(store_url[len("sqlite:///") :]))
    elif "://" not in store_url:
        path = Path(store_url)
    else:
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        restrict_file(path.with_name(path.name + suffix))
