"""``secure_vault``: secrets of an operation that reach only its jobs' environment (``YT_SECURE_VAULT_<key>``, as
in YTsaurus; a value that is not a string arrives as YSON text). Never in ``get_operation``, ``list_operations``,
logs or error messages: errors here name the key, never the value."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pooltree.errors import ConfigError
from pooltree.security.sealing import Sealer, SealError, is_sealed

ENV_PREFIX = "YT_SECURE_VAULT_"
KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MAX_VAULT_BYTES = 64 * 1024


def _strip(value: Any) -> Any:
    while isinstance(value, dict) and "$value" in value and set(value) <= {"$value", "$attributes", "$type"}:
        value = value["$value"]
    return value


def validate_secure_vault(value: Any, path: str = "spec.secure_vault") -> None:
    """A map of environment-safe names to values, at most 64 KiB in all; the error never shows a value."""
    value = _strip(value)
    if value is None:
        return
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"expected a map of names to secrets, got a {type(value).__name__}")
    size = 0
    for key, item in value.items():
        if not isinstance(key, str) or not KEY_RE.match(key):
            raise ConfigError(
                path, "keys must be letters, digits and underscores (not starting with a digit)"
            )
        size += len(key) + len(_text(item))
    if size > MAX_VAULT_BYTES:
        raise ConfigError(path, f"is larger than {MAX_VAULT_BYTES} bytes")


def _text(value: Any) -> str:
    value = _strip(value)
    if isinstance(value, str):
        return value
    import yt.yson as yson

    return yson.dumps(value, yson_format="text").decode("utf-8", "replace")


def secure_vault_environment(spec: Mapping[str, Any]) -> dict[str, str]:
    """The job environment variables of ``spec.secure_vault`` (empty when there is none or it is malformed)."""
    vault = _strip(spec.get("secure_vault"))
    if not isinstance(vault, Mapping):
        return {}
    return {
        ENV_PREFIX + key: _text(item)
        for key, item in vault.items()
        if isinstance(key, str) and KEY_RE.match(key)
    }


def seal_secure_vault(spec: Mapping[str, Any], sealer: Sealer) -> Mapping[str, Any]:
    """``spec`` as stored: its ``secure_vault`` sealed (a copy; an already sealed vault is kept as it is)."""
    vault = spec.get("secure_vault")
    if vault is None or is_sealed(vault):
        return spec
    return {**spec, "secure_vault": sealer.seal(vault)}


def open_secure_vault(spec: dict[str, Any], sealer: Sealer) -> dict[str, Any]:
    """``spec`` as read back: its sealed ``secure_vault`` opened, or left sealed when ``sealer`` cannot open it
    (``vault_is_sealed`` then tells; jobs must not start without their secrets)."""
    vault = spec.get("secure_vault")
    if not is_sealed(vault):
        return spec
    try:
        return {**spec, "secure_vault": sealer.open(vault)}
    except SealError:
        return spec


def vault_is_sealed(spec: Mapping[str, Any]) -> bool:
    """The stored vault could not be opened with this store key."""
    return is_sealed(spec.get("secure_vault"))
