"""A lock held by another thread for the length of a ``with`` block: what a slow heartbeat or fair-share update
does to the scheduling lock, for tests of reads that must not wait for it."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

WAIT = 30.0


@contextmanager
def held_elsewhere(lock: Any, wait: float = WAIT) -> Iterator[None]:
    """``lock`` is held by another thread inside the block (taken before it starts, released when it ends)."""
    has_lock, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            has_lock.set()
            release.wait(wait)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert has_lock.wait(wait), "the holder never got the lock"
    try:
        yield
    finally:
        release.set()
        holder.join(wait)
