"""The compiled fair-share passes (``_kernels.c``) and the switch between them and the numpy reference.

``setup.py`` builds ``_kernels`` at install time when a C compiler is there; without it everything runs on
the numpy code in ``functions.py`` and ``update.py`` (same results, the 1k-pool update about 2.5 times slower).
``use_compiled_kernels(False)`` runs a block on the reference (tests compare both).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import numpy as np

try:
    from pooltree.fairshare import _kernels as _compiled  # type: ignore[attr-defined]
except ImportError:  # no C compiler at install time: the numpy reference runs
    _compiled = None

COMPILED_KERNELS_AVAILABLE = _compiled is not None
_active = COMPILED_KERNELS_AVAILABLE
RESOURCE_COUNT = 5


def kernels() -> ModuleType | None:
    """The compiled module when it is built and switched on, else None (run the numpy reference)."""
    return _compiled if _active else None


def compiled_kernels_active() -> bool:
    """Whether the compiled passes are in use (built, and not switched off)."""
    return _active


@contextmanager
def use_compiled_kernels(enabled: bool) -> Iterator[None]:
    """Run the block with (or without) the compiled passes; restores the previous choice afterwards."""
    global _active
    previous = _active
    _active = enabled and COMPILED_KERNELS_AVAILABLE
    try:
        yield
    finally:
        _active = previous


def read_vectors(rows: list[Any]) -> np.ndarray | None:
    """Rows of 5 float64 numbers as an (n, 5) array in one pass, or None if some row is not such an array.

    The input model holds vectors as numpy arrays; numpy's generic conversion of a list of 10,000 of them
    costs several times a plain copy. None sends the caller to its validating slow path.
    """
    module = kernels()
    if module is None:
        return None
    out = np.empty((len(rows), RESOURCE_COUNT))
    return out if module.read_vectors(rows, out) < 0 else None
