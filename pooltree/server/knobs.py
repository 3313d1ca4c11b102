"""Environment overrides of the service's tuning constants, for back-to-back comparisons (``POOLTREE_*``).

An override that is not a number in its range is ignored with a warning naming it, and the constant applies."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TypeVar

log = logging.getLogger(__name__)
T = TypeVar("T", int, float)


def seconds_override(name: str, default: float, valid: Callable[[float], bool], valid_text: str) -> float:
    """The environment variable ``name`` as seconds when ``valid`` holds for it, else ``default``."""
    return _override(name, default, float, valid, f"seconds in {valid_text}")


def count_override(name: str, default: int, lowest: int, highest: int) -> int:
    """The environment variable ``name`` as a whole number in [``lowest``, ``highest``], else ``default``."""
    return _override(
        name, default, int, lambda v: lowest <= v <= highest, f"a whole number in [{lowest}, {highest}]"
    )


def _override(name: str, default: T, parse: Callable[[str], T], valid: Callable[[T], bool], what: str) -> T:
    """``name`` read by ``parse`` when it is set and ``valid`` holds for it; ``default`` otherwise (warned when set)."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = parse(raw)
    except ValueError:
        value = None
    if value is None or not valid(value):
        log.warning("%s=%r is not %s; using %s", name, raw, what, default)
        return default
    return value
