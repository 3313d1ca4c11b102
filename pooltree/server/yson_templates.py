"""YSON text parameters parsed once per shape: the quoted strings of a request's parameters (an operation id, a
mutation id, a cursor) change from request to request, the rest (keys' order, numbers, booleans, nesting) mostly
does not.

yt's YSON parser is pure Python: a ``get_operation``'s ``X-YT-Parameters`` costs ~0.1 ms to parse and a
``start_operation``'s 242-byte body ~0.5 ms, on the event loop every request passes through. ``YsonTemplates``
keeps, per *skeleton* (the text with every quoted string replaced by a numbered slot), the value that
``protocol.parse_structured`` made of it (``from_yson`` and ``check_value`` applied) and answers a text of the same
skeleton by putting the request's strings into a fresh copy of it.

Only texts whose answer the slots cannot change are served from a template: YSON *text* (no byte of the skeleton
outside printable ASCII and whitespace, so binary YSON, whose markers are control bytes, always goes to the
parser), every quoted string non-empty (the parser refuses an empty attribute name), ASCII and without a backslash
(its bytes are then its value, no escape to undo, no UTF-8 to check), no two keys of one map that became the same string (the parser refuses a duplicate key; the
copy would keep one). Everything else, and every text the parser refuses, is parsed as before
(``load`` answers None). The answers are the parser's, value for value (``tests/server/test_yson_templates.py``
compares them on generated maps).
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

_QUOTED = re.compile(rb'"([^"\\]*)"')
"""A quoted string without escapes (one with a backslash leaves a ``\\`` or ``"`` in the skeleton: refused)."""
_SKELETON_BYTES = re.compile(rb"[^\x20-\x7e\t\n\r]")
"""A byte a YSON text skeleton never holds (binary YSON's markers, non-ASCII outside strings)."""
_SLOT = "\x7f"
"""Slots are ``"\\x7fN"``: DEL is no character of an unquoted YSON string, and the skeleton holds no other quoted
string, so a parsed string starting with it is a slot."""


class YsonTemplates:
    """Parsed values of YSON texts kept per skeleton (at most ``size``, least recently used dropped); texts
    longer than ``max_length`` bytes or with more than ``max_slots`` strings are not kept."""

    def __init__(self, size: int = 512, max_length: int = 4096, max_slots: int = 64) -> None:
        self.size = size
        self.max_length = max_length
        self.max_slots = max_slots
        self._templates: OrderedDict[bytes, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        """Texts answered from a kept template."""

    def load(self, data: bytes, parse: Callable[[bytes], Any]) -> Any | None:
        """``data``'s value as ``parse`` (the full parser, which raises on bad input) would make it, from the
        template of its skeleton (made by ``parse`` on first use); None when ``data`` cannot use a template."""
        if len(data) > self.max_length or b"\x7f" in data:
            return None
        parts = _QUOTED.split(data)  # outside, string, outside, ..., outside
        strings, outside = parts[1::2], parts[0::2]
        if len(strings) > self.max_slots or not all(s and s.isascii() for s in strings):
            return None
        key = b'"\x7f"'.join(outside)
        if b"\\" in key or _SKELETON_BYTES.search(key.replace(b"\x7f", b"")):
            return None
        with self._lock:
            template = self._templates.get(key)
            if template is not None:
                self._templates.move_to_end(key)
        if template is None:
            numbered = [outside[0]]
            for index, part in enumerate(outside[1:]):
                numbered.append(b'"\x7f%d"' % index)
                numbered.append(part)
            try:
                template = parse(b"".join(numbered))
            except Exception:  # the text itself is parsed then, and its own error answered
                return None
            with self._lock:
                self._templates[key] = template
                while len(self._templates) > self.size:
                    self._templates.popitem(last=False)
        else:
            self.hits += 1
        values = [s.decode("ascii") for s in strings]
        try:
            return _filled(template, values)
        except _Collision:
            return None


class _Collision(Exception):
    """Two keys of one map became the same string (the parser refuses the text: parse it)."""


def _filled(value: Any, strings: list[str]) -> Any:
    """A copy of ``value`` with every slot replaced by its string."""
    kind = type(value)
    if kind is str:
        return strings[int(value[1:])] if value.startswith(_SLOT) else value
    if kind is dict:
        out = {_filled(key, strings): _filled(child, strings) for key, child in value.items()}
        if len(out) != len(value):
            raise _Collision
        return out
    if kind is list:
        return [_filled(child, strings) for child in value]
    return value
