"""Environment overrides of the service's tuning constants, for back-to-back comparisons (``POOLTREE_*``).

An override that is not a number in its range is ignored with a warning naming it, and the constant applies."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

log = logging.getLogger(__name__)


def seconds_override(name: str, default: float, valid: Callable[[float], bool], valid_text: str) -> float:
    """The environment variable ``name`` as seconds when ``valid`` holds for it, else ``default``."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not valid(value):
        log.warning("%s=%r is not seconds in %s; using %s", name, raw, valid_text, default)
        return default
    return value


def count_override(name: str, default: int, lowest: int, highest: int) -> int:
    """The environment variable ``name`` as a whole number in [``lowest``, ``highest``], else ``default``."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = lowest - 1
    if not lowest <= value <= highest:
        log.warning("%s=%r is not a whole number in [%d, %d]; using %d", name, raw, lowest, highest, default)
        return default
    return value
