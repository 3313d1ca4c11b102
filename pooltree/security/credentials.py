"""Secrets and their hashes: user tokens, passwords, the cluster's node secret, and files that hold secrets.

Tokens follow YTsaurus (``ytct-<4 hex>-<32 hex>``, 128 random bits) and are kept only as the lowercase hex
SHA-256 of the token, exactly what YTsaurus stores under ``//sys/cypress_tokens`` and what the client sends to
``revoke_token`` as ``token_sha256``. A fast unsalted hash is enough for a 128-bit random secret: no dictionary
or precomputed table covers that space, and a salt would make revoking by ``token_sha256`` impossible.

Passwords are low-entropy, so they get a slow, memory-hard, salted hash: ``hashlib.scrypt`` (the standard library,
OpenSSL's implementation; no new dependency) over the SHA-256 the client sends (``password_sha256``), with a random
16-byte salt per password. argon2-cffi would do as well but adds a compiled dependency for a check that runs only on
the rare authentication commands.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
from pathlib import Path

from pooltree.errors import PooltreeError

TOKEN_PREFIX = "ytct-"
SCRYPT_N = 2**14
SCRYPT_R = 8
SCRYPT_P = 1
SALT_BYTES = 16
SECRET_FILE_MODE = 0o600
TOKEN_FILE = "token"
NODE_SECRET_FILE = "node_secret"
"""The names of the superuser token and the cluster node secret in a scheduler's data directory."""
_SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def sha256_hex(text: str) -> str:
    """Lowercase hex SHA-256 of ``text`` (UTF-8), as the ``yt`` client encodes passwords and tokens."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def new_token() -> str:
    """A fresh user token in the YTsaurus format ``ytct-<4 hex>-<32 hex>``."""
    return f"{TOKEN_PREFIX}{secrets.token_hex(2)}-{secrets.token_hex(16)}"


def token_prefix(token: str) -> str:
    """The public part of a token (``ytct-abcd-``) that may be shown and stored; empty for other formats."""
    if re.match(r"^ytct-[0-9a-f]{4}-", token):
        return token[:10]
    return ""


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and bool(_SHA256_RE.match(value))


def hash_password(password_sha256: str, salt: bytes | None = None) -> tuple[str, str]:
    """``(hash_hex, salt_hex)`` of a password given as the client's SHA-256 hex of it (scrypt, random salt)."""
    salt = secrets.token_bytes(SALT_BYTES) if salt is None else salt
    digest = hashlib.scrypt(
        password_sha256.encode("ascii"), salt=salt, n=SCRYPT_N, r=SCRYPT_R, p=SCRYPT_P, dklen=32
    )
    return digest.hex(), salt.hex()


def verify_password(password_sha256: str, hashed: str, salt_hex: str) -> bool:
    """True when ``password_sha256`` hashes to ``hashed`` with ``salt_hex`` (constant-time comparison)."""
    if not is_sha256(password_sha256):
        return False
    try:
        salt = bytes.fromhex(salt_hex)
    except ValueError:
        return False
    candidate, _ = hash_password(password_sha256, salt)
    return hmac.compare_digest(candidate, hashed)


def new_node_secret() -> str:
    """A fresh cluster node secret (256 random bits); nodes send it, users never see it."""
    return "ptns-" + secrets.token_hex(32)


def constant_time_equal(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "surrogateescape"), b.encode("utf-8", "surrogateescape"))


def write_secret_file(path: Path, value: str) -> None:
    """Write ``value`` to ``path`` created with mode 0600 (never readable by others, not even for a moment)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, SECRET_FILE_MODE)
    try:
        os.fchmod(fd, SECRET_FILE_MODE)
        os.write(fd, (value + "\n").encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def read_secret_file(path: Path, what: str) -> str:
    """The secret in ``path`` (first line, stripped); refuses a file others may read or an empty one."""
    try:
        info = path.stat()
        text = path.read_text(encoding="utf-8")
    except OSError as error:
        raise PooltreeError(f"cannot read the {what} file {path}: {error.strerror or error}") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise PooltreeError(
            f"the {what} file {path} is readable by other users (mode {stat.S_IMODE(info.st_mode):o}); "
            f"run: chmod 600 {path}"
        )
    value = text.strip().splitlines()[0].strip() if text.strip() else ""
    if not value:
        raise PooltreeError(f"the {what} file {path} is empty")
    return value


def ensure_secret_file(path: Path, what: str, make: object = None) -> tuple[str, bool]:
    """The secret in ``path``, creating it (mode 0600) with a fresh value when missing; returns (value, created)."""
    if path.exists():
        return read_secret_file(path, what), False
    value = make() if callable(make) else new_token()
    write_secret_file(path, value)
    return value, True


def restrict_file(path: Path) -> None:
    """chmod 0600 an existing file (the store's database and its journal files)."""
    try:
        if path.exists() and stat.S_IMODE(path.stat().st_mode) != SECRET_FILE_MODE:
            path.chmod(SECRET_FILE_MODE)
    except OSError:
        pass
