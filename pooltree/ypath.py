"""YPath parsing: ``//sys/pool_trees/physical/p1/@weight``, ``#<object-id>/child``, escapes and ``&``."""

from __future__ import annotations

from dataclasses import dataclass

from pooltree.errors import YtError

_SPECIAL = "\\/@&*[{"


@dataclass(frozen=True)
class YPath:
    """A parsed path: the node (by ``tokens`` from the root, or from ``object_id``) and an optional attribute.

    ``attribute`` is None for the node itself, ``()`` for ``/@`` (all attributes) and the attribute name plus
    nested keys otherwise (``@config/main_resource`` -> ``("config", "main_resource")``).
    """

    text: str
    tokens: tuple[str, ...]
    object_id: str | None = None
    attribute: tuple[str, ...] | None = None


def escape_token(token: str) -> str:
    """A node name as it appears inside a path."""
    return "".join("\\" + ch if ch in _SPECIAL else ch for ch in token)


def join_tokens(tokens: tuple[str, ...] | list[str]) -> str:
    """The canonical path of a node: ``/`` for the root, ``//a/b`` otherwise."""
    return "//" + "/".join(escape_token(t) for t in tokens) if tokens else "/"


def _read_literal(text: str, pos: int, stops: str) -> tuple[str, int]:
    out: list[str] = []
    while pos < len(text) and text[pos] not in stops:
        ch = text[pos]
        if ch == "\\":
            if pos + 1 >= len(text):
                raise YtError(f"Unexpected end of path after escape in {text!r}", attributes={"path": text})
            nxt = text[pos + 1]
            if nxt == "x" and pos + 4 <= len(text):
                try:
                    out.append(chr(int(text[pos + 2 : pos + 4], 16)))
                except ValueError as error:
                    raise YtError(f"Bad \\x escape in path {text!r}", attributes={"path": text}) from error
                pos += 4
                continue
            out.append(nxt)
            pos += 2
            continue
        out.append(ch)
        pos += 1
    return "".join(out), pos


def parse_ypath(text: object) -> YPath:
    """Parse a YPath; bad syntax is a YT error naming the path."""
    if not isinstance(text, str):
        raise YtError(f"Path must be a string, got {type(text).__name__}", attributes={"parameter": "path"})
    path = text.strip()
    object_id: str | None = None
    if path.startswith("#"):
        object_id, pos = _read_literal(path, 1, "/")
        if not object_id:
            raise YtError(f"Empty object id in path {text!r}", attributes={"path": text})
    elif path.startswith("//") or path == "/":
        pos = 1
    elif path.startswith("/@"):
        pos = 0
    else:
        raise YtError(f"Path {text!r} must start with // (or # for an object id)", attributes={"path": text})
    tokens: list[str] = []
    attribute: tuple[str, ...] | None = None
    while pos < len(path):
        if path[pos] == "&":
            pos += 1
            continue
        if path[pos] != "/":
            raise YtError(
                f"Unexpected {path[pos]!r} at position {pos} in path {text!r}", attributes={"path": text}
            )
        if path.startswith("/@", pos):
            attribute = _parse_attribute(path, pos + 2, text)
            break
        token, pos = _read_literal(path, pos + 1, "/@&")
        if not token:
            if pos >= len(path) and tokens:
                break  # a trailing slash
            raise YtError(f"Empty node name in path {text!r}", attributes={"path": text})
        tokens.append(token)
    return YPath(text, tuple(tokens), object_id, attribute)


def _parse_attribute(path: str, pos: int, text: str) -> tuple[str, ...]:
    keys: list[str] = []
    while pos < len(path):
        key, pos = _read_literal(path, pos, "/")
        if not key:
            raise YtError(f"Empty attribute key in path {text!r}", attributes={"path": text})
        keys.append(key)
        if pos < len(path):
            pos += 1
            if pos == len(path):
                raise YtError(f"Empty attribute key in path {text!r}", attributes={"path": text})
    return tuple(keys)
