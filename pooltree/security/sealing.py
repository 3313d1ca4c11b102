"""Secrets the scheduler must get back after a restart, kept sealed in the store with a key kept outside it.

Two things stored by the scheduler must be recoverable and are secret: an operation's ``secure_vault`` (its jobs
get the values again after a restart or a failover) and the saved answer of a mutation that carries a secret
(``issue_token`` answers the new token; a retry of the same mutation must get the same answer). They are sealed
with Fernet from PyCA's ``cryptography`` (AES-128-CBC with an HMAC-SHA256 tag: a changed or foreign ciphertext is
refused, never decoded wrongly); the key is a separate file, mode 0600, that never enters the store
(``DATA/store_key`` for ``pooltree scheduler``, else ``--store-key-file``; beside a SQLite file as
``<file>.key`` when a store is opened without one). A copy of the database alone reveals no secret.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

try:
    from cryptography.fernet import Fernet, InvalidToken
except ImportError as missing:  # a venv made before this dependency: say how to fix it
    raise ImportError(
        "pooltree needs the 'cryptography' package (a dependency since issue 24, sealing secrets in the store): "
        "run .venv/bin/pip install -e '.[test]'"
    ) from missing

from pooltree.errors import PooltreeError
from pooltree.security.credentials import ensure_secret_file

SEALED_PREFIX = "ptsealed1:"
"""Sealed text starts with this marker (then the Fernet token), so a reader knows what it holds."""

log = logging.getLogger(__name__)


class SealError(PooltreeError):
    """Sealed text that this key cannot open (another key, or the text was changed)."""


class Sealer:
    """Seal and open JSON values with one Fernet key."""

    def __init__(self, key: bytes | str, *, source: str) -> None:
        self._fernet = Fernet(key)
        self.source = source
        """Where the key came from (a path, or ``ephemeral``): named in errors, never the key itself."""

    @classmethod
    def from_file(cls, path: Path) -> Sealer:
        """The key in ``path`` (mode 0600), created with a fresh key when missing."""
        key, created = ensure_secret_file(path, "store key", lambda: Fernet.generate_key().decode("ascii"))
        if created:
            log.info("created the store key in %s (mode 0600); secrets in the store are sealed with it", path)
        try:
            return cls(key, source=str(path))
        except ValueError:
            raise PooltreeError(f"the store key file {path} does not hold a valid key") from None

    @classmethod
    def ephemeral(cls) -> Sealer:
        """A key that lives only in this process: what it seals cannot be opened after a restart."""
        return cls(Fernet.generate_key(), source="ephemeral")

    def seal(self, value: Any) -> str:
        text = json.dumps(value, sort_keys=True, allow_nan=True, separators=(",", ":"))
        return SEALED_PREFIX + self._fernet.encrypt(text.encode("utf-8")).decode("ascii")

    def open(self, sealed: str) -> Any:
        if not is_sealed(sealed):
            raise SealError("the value is not sealed")
        try:
            text = self._fernet.decrypt(sealed[len(SEALED_PREFIX) :].encode("ascii"))
        except (InvalidToken, ValueError):
            raise SealError(
                f"a sealed secret cannot be opened with the store key from {self.source} "
                "(it was sealed with another key, or changed)"
            ) from None
        return json.loads(text)


def is_sealed(value: object) -> bool:
    return isinstance(value, str) and value.startswith(SEALED_PREFIX)
