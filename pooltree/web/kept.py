"""Rendered pages kept per read snapshot (``PageCache``): the web pages whose text is a function of the snapshot
and the request's path, query, user and a few other reads are rendered once per snapshot (which changes at most
once a fair-share period), not per request. What a page shows of the request's clock ("x s ago") is kept out of
the text and filled in per request (``Rendered.text``)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from pooltree.server.live.snapshot import ReadSnapshot

MAX_PAGES = 16
"""Rendered pages kept per read snapshot (``PageCache``); past it the oldest are rendered again."""


def ago(seconds: Any, now: float) -> str:
    try:
        delta = max(now - float(seconds), 0.0)
    except (TypeError, ValueError):
        return "–"
    if delta < 60:
        return f"{delta:.1f} s ago"
    if delta < 3600:
        return f"{delta / 60:.1f} min ago"
    return f"{delta / 3600:.1f} h ago"


class Rendered(NamedTuple):
    """A rendered page: its text split where it shows how long ago a moment was (the request's clock), and those
    moments, one between each two parts (none: the text is whole); ``keep``: False when the text read the request's
    clock (not to be kept)."""

    parts: tuple[str, ...]
    moments: tuple[float, ...] = ()
    keep: bool = True

    def text(self, now: float) -> str:
        """The page as of ``now`` (the same text as rendering it with ``now``)."""
        if not self.moments:
            return self.parts[0]
        out = [self.parts[0]]
        for moment, part in zip(self.moments, self.parts[1:], strict=True):
            out.append(ago(moment, now))
            out.append(part)
        return "".join(out)


class PageCache:
    """The pages rendered from the last read snapshot, by key (what their text depends on besides the snapshot):
    a second request for a page on the same snapshot renders nothing. At most ``MAX_PAGES`` per snapshot; a newer
    snapshot starts afresh, and a request still reading an older one renders without keeping."""

    def __init__(self) -> None:
        self._number = -1
        self._pages: dict[Hashable, Rendered] = {}
        self._lock = threading.Lock()

    def get(self, snapshot: ReadSnapshot, key: Hashable, render: Callable[[], Rendered]) -> Rendered:
        with self._lock:  # one request renders a page, the others wait for it
            if snapshot.number < self._number:
                return render()
            if snapshot.number > self._number:
                self._number, self._pages = snapshot.number, {}
            found = self._pages.get(key)
            if found is None:
                found = render()
                if not found.keep:
                    return found
                if len(self._pages) >= MAX_PAGES:
                    self._pages.pop(next(iter(self._pages)))
                self._pages[key] = found
            return found
