"""Times as the HTTP API writes and reads them: ``iso_time`` for the attribute maps of operations and jobs
(``%Y-%m-%dT%H:%M:%S.%fZ``, the format the ``yt`` client parses), ``parse_time`` for ``list_operations``'
``from_time``/``to_time``/``cursor_time``."""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from pooltree.server.protocol import parameter_error


def iso_time(seconds: float | None) -> str | None:
    """``%Y-%m-%dT%H:%M:%S.%fZ``, the format the client parses (a fraction is mandatory)."""
    if seconds is None:
        return None
    return _iso_time(float(seconds))


@functools.lru_cache(maxsize=1 << 16)
def _iso_time(seconds: float) -> str:
    """``iso_time`` of a number, remembered: a listing formats the same start times again and again."""
    moment = dt.datetime.fromtimestamp(float(seconds), tz=dt.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: Any, name: str) -> float | None:
    """Seconds from an ISO time string or a number (list_operations ``from_time``/``to_time``/``cursor_time``)."""
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value) / (1000.0 if value > 1e11 else 1.0)
    if isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as error:
            raise parameter_error(name, f"expected an ISO 8601 time, got {value!r}") from error
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=dt.UTC)
        return moment.timestamp()
    raise parameter_error(name, f"expected a time, got {type(value).__name__}")
