"""Errors every layer of pooltree raises: one type per kind, each naming where the problem is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GENERIC_ERROR = 1
"""YTsaurus's generic error code (an error with no more specific code)."""


class PooltreeError(Exception):
    """Base of every error pooltree raises on purpose.

    ``code`` follows YTsaurus error codes where one exists (the HTTP API reports it as is);
    ``attributes`` carries machine-readable context (pool, tree, limit, ...).
    """

    code: int = 1

    def __init__(self, message: str, *, code: int | None = None, attributes: dict[str, Any] | None = None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.attributes: dict[str, Any] = dict(attributes or {})


class YtError(PooltreeError):
    """An error answered to the client in the YT error format, with optional nested causes.

    ``http_status`` is the HTTP status it is answered with (400 unless a subclass says otherwise).
    """

    http_status = 400

    def __init__(
        self,
        message: str,
        *,
        code: int = GENERIC_ERROR,
        attributes: dict[str, Any] | None = None,
        inner_errors: list[BaseException | dict[str, Any]] | None = None,
    ) -> None:
        super().__init__(message, code=code, attributes=attributes)
        self.inner_errors: list[BaseException | dict[str, Any]] = list(inner_errors or [])


def yt_error(
    code: int,
    message: str,
    attributes: Mapping[str, Any] | None = None,
    inner: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An error in the YTsaurus wire shape: ``{code, message, attributes, inner_errors}``."""
    return {
        "code": code,
        "message": message,
        "attributes": dict(attributes or {}),
        "inner_errors": list(inner or []),
    }


class ConfigError(PooltreeError):
    """Invalid configuration or input document; ``path`` names the offending field (``a.b[2].c``)."""

    code = 1

    def __init__(self, path: str, reason: str, *, attributes: dict[str, Any] | None = None):
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}" if path else reason, attributes=attributes)


def join_path(base: str, key: str | int) -> str:
    """Append a map key or list index to a dotted field path."""
    if isinstance(key, int):
        return f"{base}[{key}]"
    return f"{base}.{key}" if base else str(key)
