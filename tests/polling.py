"""Bounded polling for tests that wait on real processes and servers."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, period: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns a truthy value (returned) or fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(period)
    raise AssertionError(f"condition not met within {timeout} s (last value {last!r})")
