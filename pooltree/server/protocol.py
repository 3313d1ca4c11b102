"""The YTsaurus HTTP API v4 wire protocol: parameters, formats, ``encode_utf8``, YT errors.

Values travel inside the server as plain Python (dict, list, str, int, float, bool, None). A YSON value with
attributes is represented with the YT JSON convention ``{"$attributes": {...}, "$value": v}``, so it survives
JSON storage and prints the same way in JSON output; YSON output turns it back into ``<attrs>value``.
Pure functions only: the app module does the I/O.
"""

from __future__ import annotations

import json
import math
import re
import threading
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import yt.yson as yson
from yt.yson.yson_types import NotUnicodeError, YsonBoolean, YsonEntity, YsonStringProxy

from pooltree.errors import GENERIC_ERROR, ConfigError, PooltreeError, YtError
from pooltree.gc_policy import POLICY
from pooltree.server.yson_templates import YsonTemplates

# YTsaurus error codes the official client acts on (yt-http-api.md §5).
RESOLVE_ERROR = 500
ALREADY_EXISTS = 501
AUTHENTICATION_ERROR = 900
AUTHORIZATION_ERROR = 901
NO_SUCH_OPERATION = 1915
NO_SUCH_JOB = 203
NO_SUCH_TRANSACTION = 11000

YSON_CONTENT_TYPES = {
    "text": "application/x-yt-yson-text",
    "pretty": "application/x-yt-yson-pretty",
    "binary": "application/x-yt-yson-binary",
}
DATETIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"

MAX_DECOMPRESSED_BYTES = 32 * 1024 * 1024
"""A compressed body may expand to this much and no more (decompressed in bounded steps, so a gzip bomb costs
the scheduler at most this much memory before it is refused with 413)."""
INFLATE_STEP = 1 << 20
"""Bytes inflated per step: the transient copy beside the growing body stays this small."""
MAX_NESTING_LEVEL = 128
"""Levels of maps and lists a parsed value may have. YTsaurus's YSON parser stops at 64 YSON levels ("Depth limit
exceeded while parsing YSON"); a YSON level with attributes is two levels here (``$attributes`` / ``$value``)."""
MIN_INTEGER = -(2**63)
MAX_INTEGER = 2**64 - 1
"""Integers travel as YSON int64 or uint64: anything outside is refused."""


class PayloadTooLarge(YtError):
    """A request body (or its decompressed form) over its limit: HTTP 413."""

    http_status = 413


class BodyTimeout(YtError):
    """A request body that stopped arriving (a client that sent part of it and waits): HTTP 408."""

    http_status = 408


class ClientGone(YtError):
    """The client hung up before its request body was read whole: nobody is left to answer (logged at info)."""

    http_status = 400


class UnsupportedEncoding(YtError):
    """A ``Content-Encoding`` the server cannot decode: HTTP 415."""

    http_status = 415


def resolve_error(path: str, reason: str) -> YtError:
    """YT code 500 "Error resolving path P" with the concrete reason as the inner error."""
    return YtError(
        f"Error resolving path {path}",
        code=RESOLVE_ERROR,
        attributes={"path": path},
        inner_errors=[YtError(reason, code=RESOLVE_ERROR)],
    )


def parameter_error(name: str, reason: str) -> YtError:
    """A bad request parameter, named in the message and in ``attributes.parameter``."""
    return YtError(f"Error parsing parameter {name!r}: {reason}", attributes={"parameter": name})


def format_datetime(seconds: float) -> str:
    """YT timestamp text: ``2026-11-22T10:25:21.643455Z`` (fractional seconds are mandatory for the client)."""
    return datetime.fromtimestamp(seconds, UTC).strftime(DATETIME_FORMAT)


# Plain values <-> YSON / JSON.


def is_attributed(value: Any) -> bool:
    """True for the ``{"$attributes": ..., "$value": ...}`` form of an attributed value."""
    return isinstance(value, dict) and "$value" in value and set(value) <= {"$value", "$attributes", "$type"}


def strip_attributes(value: Any) -> Any:
    """The bare value of a possibly attributed value (``<a=1>"x"`` -> ``"x"``)."""
    while is_attributed(value):
        value = value["$value"]
    return value


def attributes_of(value: Any) -> dict[str, Any]:
    """The attributes of a possibly attributed value (``{}`` for a bare one)."""
    return dict(value.get("$attributes") or {}) if is_attributed(value) else {}


def from_yson(value: Any) -> Any:
    """Plain Python from parsed ``yt.yson`` objects; attributes become the ``$attributes`` form."""
    attributes = getattr(value, "attributes", None)
    if isinstance(value, YsonEntity) or value is None:
        plain: Any = None
    elif isinstance(value, YsonBoolean | bool):
        plain = bool(value)
    elif isinstance(value, YsonStringProxy):
        plain = yson.get_bytes(value).decode("utf-8", "surrogateescape")
    elif isinstance(value, bytes):
        plain = value.decode("utf-8", "surrogateescape")
    elif isinstance(value, str):
        plain = str(value)
    elif isinstance(value, int):
        plain = int(value)
    elif isinstance(value, float):
        plain = float(value)
    elif isinstance(value, Mapping):
        plain = {_key(k): from_yson(v) for k, v in value.items()}
    elif isinstance(value, list | tuple):
        plain = [from_yson(v) for v in value]
    else:
        raise YtError(f"Unsupported YSON value of type {type(value).__name__}")
    if attributes:
        return {"$attributes": {_key(k): from_yson(v) for k, v in attributes.items()}, "$value": plain}
    return plain


def _key(key: Any) -> str:
    if isinstance(key, YsonStringProxy):
        return yson.get_bytes(key).decode("utf-8", "surrogateescape")
    if isinstance(key, bytes):
        return key.decode("utf-8", "surrogateescape")
    return str(key)


def normalize(value: Any) -> Any:
    """Plain JSON-like Python from handler results (numpy scalars/arrays, tuples, sets, bytes)."""
    kind = type(value)
    # exact plain types first: handler results are mostly these, and isinstance against the ABCs costs more
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if kind is dict:
        return {k if type(k) is str else _key(k): normalize(v) for k, v in value.items()}
    if kind is list:
        return [normalize(v) for v in value]
    if isinstance(value, bool | str):
        return value
    if isinstance(value, int | float):
        return value
    if isinstance(value, bytes):
        return value.decode("utf-8", "surrogateescape")
    if isinstance(value, Mapping):
        return {_key(k): normalize(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value) if isinstance(value, set | frozenset) else value
        return [normalize(v) for v in items]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):  # numpy scalars and arrays
        return normalize(tolist())
    raise YtError(f"Cannot encode a value of type {type(value).__name__}")


def _to_yson(value: Any) -> Any:
    if is_attributed(value):
        return yson.to_yson_type(
            _to_yson(value["$value"]), attributes=_to_yson(value.get("$attributes") or {})
        )
    if isinstance(value, dict):
        return {_yson_str(k): _to_yson(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_to_yson(v) for v in value]
    if isinstance(value, str):
        return _yson_str(value)
    return value


def _yson_str(text: str) -> str | bytes:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")


def _map_strings(value: Any, convert: Any) -> Any:
    if isinstance(value, str):
        return convert(value)
    if isinstance(value, dict):
        return {convert(k): _map_strings(v, convert) for k, v in value.items()}
    if isinstance(value, list):
        return [_map_strings(v, convert) for v in value]
    return value


def utf8_to_code_points(value: Any) -> Any:
    """``encode_utf8`` for output: every string becomes one code point per UTF-8 byte."""
    return _map_strings(value, lambda s: s.encode("utf-8", "surrogateescape").decode("latin-1"))


def code_points_to_utf8(value: Any) -> Any:
    """``encode_utf8`` for input: strings of code points 0..255 are the bytes of a UTF-8 string.

    A string that cannot be in that form (a code point above U+00FF, or bytes that are not UTF-8) is plain
    Unicode JSON, as the CLI sends for ``yt set PATH '"мир"'``; it is kept as it is.
    """

    def convert(text: str) -> str:
        if text.isascii():
            return text
        try:
            return text.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            return text

    return _map_strings(value, convert)


# Formats.


@dataclass(frozen=True)
class Format:
    """A YT format: ``name`` (``json``, ``yson``, ...) and its attributes (``format``, ``encode_utf8``, ...)."""

    name: str
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def yson_style(self) -> str:
        style = str(self.attributes.get("format", "binary" if self.name == "yson" else "text"))
        if style not in YSON_CONTENT_TYPES:
            raise YtError(f"Unknown YSON format style {style!r}; expected text, pretty or binary")
        return style

    @property
    def encode_utf8(self) -> bool:
        return bool(self.attributes.get("encode_utf8", True))


def parse_format(value: Any, what: str = "format") -> Format:
    """A ``Format`` from a parameter value: ``"json"``, ``<format=pretty>yson`` or the ``$attributes`` form."""
    name = strip_attributes(value)
    if not isinstance(name, str) or not name:
        raise parameter_error(what, f"expected a format name such as json or yson, got {name!r}")
    attributes = attributes_of(value)
    return Format(name, {k: strip_attributes(v) for k, v in attributes.items()})


def parse_header_format(text: str | None) -> Format:
    """The ``X-YT-Header-Format`` value (YSON text such as ``<format=text>yson``); YSON text if absent.

    Clients send one of a few values on every request, so the parsed formats are kept by their text
    (``HEADER_FORMATS_KEPT`` of them; an invalid one is not kept): the YSON parser is pure Python. A ``Format``
    is frozen and its attributes are only read."""
    if not text:
        return _TEXT_YSON
    found = _header_formats.get(text)
    if found is None:
        found = _parse_header_format(text)
        if len(_header_formats) < HEADER_FORMATS_KEPT:
            _header_formats[text] = found
    return found


HEADER_FORMATS_KEPT = 64
_TEXT_YSON = Format("yson", {"format": "text"})
_header_formats: dict[str, Format] = {}


def _parse_header_format(text: str) -> Format:
    try:
        return parse_format(from_yson(yson.loads(text.encode("latin-1"))), "X-YT-Header-Format")
    except (yson.YsonError, UnicodeEncodeError) as error:
        raise YtError(f"Cannot parse X-YT-Header-Format {text!r}: {_first_line(error)}") from error


def _first_line(error: BaseException, limit: int = 300) -> str:
    """The first line of an error's text, at most ``limit`` characters (parsers quote the offending input)."""
    line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return line if len(line) <= limit else line[:limit] + "…"


def parse_structured(data: bytes, fmt: Format | None, what: str) -> Any:
    """A value from bytes in ``fmt``; without a format, JSON or YSON is recognised by content."""
    if fmt is None:
        fmt = _sniff_format(data)
    if fmt.name == "json":
        try:
            value = json.loads(data.decode("utf-8"))
        except RecursionError as error:
            raise _too_deep(what) from error
        except ValueError as error:  # JSONDecodeError, UnicodeDecodeError, integers over 4,300 digits
            raise YtError(
                f"Cannot parse {what} as JSON: {_first_line(error)}", attributes={"field": what}
            ) from error
        check_value(value, what)
        return code_points_to_utf8(value) if fmt.encode_utf8 else value
    if fmt.name == "yson":
        kept = YSON_TEMPLATES.load(data, lambda text: _parse_yson(text, what))
        return kept if kept is not None else _parse_yson(data, what)
    raise YtError(
        f"Format {fmt.name!r} is not supported for {what}; use json or yson", attributes={"field": what}
    )


def _parse_yson(data: bytes, what: str) -> Any:
    """YSON (text or binary) parsed by yt's parser, as plain values, checked (``check_value``)."""
    try:
        value = from_yson(yson.loads(data))
    except RecursionError as error:
        raise _too_deep(what) from error
    except (yson.YsonError, ValueError, OverflowError, NotUnicodeError) as error:
        # NotUnicodeError (a TypeError): an attribute key that is not UTF-8, which the parser itself reads
        raise YtError(
            f"Cannot parse {what} as YSON: {_first_line(error)}", attributes={"field": what}
        ) from error
    check_value(value, what)
    return value


YSON_TEMPLATES = YsonTemplates()
"""YSON parameter texts parsed once per shape (``yson_templates.py``)."""


def _too_deep(what: str) -> YtError:
    return YtError(
        f"Depth limit exceeded while parsing {what}",
        attributes={"field": what, "limit": MAX_NESTING_LEVEL},
    )


_SURROGATE = re.compile("[\ud800-\udfff]")


def _surrogate_error(value: Any, what: str) -> YtError:
    """The error for a string holding a UTF-16 surrogate (a lone ``\\ud800`` escape in JSON, or bytes that are
    not UTF-8 in YSON): such a string cannot be stored or answered, so it is refused naming where it is."""
    stack: list[tuple[Any, str]] = [(value, what)]
    where = what
    while stack:
        item, path = stack.pop()
        if isinstance(item, str) and _SURROGATE.search(item):
            where = path
            break
        if isinstance(item, dict):
            bad_keys = [key for key in item if isinstance(key, str) and _SURROGATE.search(key)]
            if bad_keys:
                where = f"{path} (a key)"
                break
            stack.extend((child, f"{path}.{key}") for key, child in item.items())
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
    return YtError(
        f"Error parsing {where}: the string is not valid UTF-8 (it holds a lone UTF-16 surrogate)",
        attributes={"field": where},
    )


def check_value(value: Any, what: str) -> None:
    """Refuse a parsed value nested deeper than ``MAX_NESTING_LEVEL``, holding an integer outside int64/uint64 or
    a string that is not valid UTF-8 (iteratively: no recursion however deep the value is)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level > MAX_NESTING_LEVEL:
                raise _too_deep(what)
            if isinstance(item, dict):
                stack.extend((child, level + 1) for child in item.values())
                if not all(
                    key.isascii() or not _SURROGATE.search(key) for key in item if isinstance(key, str)
                ):
                    raise _surrogate_error(value, what)
            else:
                stack.extend((child, level + 1) for child in item)
        elif isinstance(item, str):
            if not item.isascii() and _SURROGATE.search(item):
                raise _surrogate_error(value, what)
        elif isinstance(item, int) and not isinstance(item, bool) and not MIN_INTEGER <= item <= MAX_INTEGER:
            raise YtError(
                f"Integer in {what} is out of range: YSON integers are int64 or uint64",
                attributes={"field": what, "min": MIN_INTEGER, "max": MAX_INTEGER},
            )


def _sniff_format(data: bytes) -> Format:
    try:
        json.loads(data.decode("utf-8"))
    except RecursionError:
        return Format("json")
    except ValueError:  # not JSON (or not UTF-8)
        return Format("yson")
    return Format("json")


def content_type_format(content_type: str | None) -> Format | None:
    """The format a request ``Content-Type`` names, or None when it names none."""
    kind = (content_type or "").split(";", 1)[0].strip().lower()
    if kind == "application/json":
        return Format("json")
    if kind.startswith("application/x-yt-yson"):
        return Format("yson")
    return None


SUPPORTED_ENCODINGS = ("identity", "gzip", "x-gzip", "deflate")


class BodyDecoder:
    """Undoes ``Content-Encoding`` chunk by chunk with a bound on the decoded size (the official client labels
    zlib streams as gzip, so gzip accepts both). Each step inflates at most what is left under ``limit`` (+1
    byte), so a bomb is refused after ``limit`` bytes of output, never expanded whole."""

    def __init__(self, content_encoding: str | None, limit: int, what: str = "Request body") -> None:
        encoding = (content_encoding or "identity").strip().lower() or "identity"
        if encoding not in SUPPORTED_ENCODINGS:
            raise UnsupportedEncoding(
                f"Unsupported Content-Encoding {header_text(encoding, 100)!r}; use identity, gzip or deflate",
                attributes={"content_encoding": header_text(encoding, 100)},
            )
        self.encoding = encoding
        self.limit = limit
        self.what = what
        self._inflater = (
            None if encoding == "identity" else zlib.decompressobj(15 if encoding == "deflate" else 47)
        )
        self._out = bytearray()

    def _too_large(self) -> PayloadTooLarge:
        detail = "decompressed " if self._inflater is not None else ""
        return PayloadTooLarge(
            f"{self.what} is larger than {self.limit} bytes {detail}".rstrip(),
            attributes={"limit": self.limit, "content_encoding": self.encoding},
        )

    def feed(self, chunk: bytes) -> None:
        if self._inflater is None:
            if len(self._out) + len(chunk) > self.limit:
                raise self._too_large()
            self._out += chunk
            return
        data = chunk
        try:
            while data:
                room = self.limit - len(self._out)
                self._out += self._inflater.decompress(data, min(room + 1, INFLATE_STEP))
                if len(self._out) > self.limit:
                    raise self._too_large()
                data = self._inflater.unconsumed_tail
                if self._inflater.eof:
                    break
        except zlib.error as error:
            raise YtError(f"Cannot decompress {self.what.lower()} ({self.encoding}): {error}") from error

    def finish(self) -> bytes:
        if self._inflater is not None:
            try:
                self._out += self._inflater.flush(self.limit - len(self._out) + 1)
            except zlib.error as error:
                raise YtError(f"Cannot decompress {self.what.lower()} ({self.encoding}): {error}") from error
            if len(self._out) > self.limit:
                raise self._too_large()
            if not self._inflater.eof and self._out:
                raise YtError(f"Cannot decompress {self.what.lower()} ({self.encoding}): truncated stream")
        return bytes(self._out)


def decompress_body(data: bytes, content_encoding: str | None, limit: int = MAX_DECOMPRESSED_BYTES) -> bytes:
    """Undo ``Content-Encoding`` of a whole body, bounded by ``limit`` decoded bytes."""
    decoder = BodyDecoder(content_encoding, limit)
    decoder.feed(data)
    return decoder.finish()


PARAMETER_ATTRIBUTES = "$parameter_attributes"
"""Where ``decode_parameters`` keeps the attributes it strips from top-level parameters (name → attributes)."""


def decode_parameters(
    header_value: str | None,
    header_format: str | None,
    body: bytes | None = None,
    content_type: str | None = None,
    query: Mapping[str, str] | None = None,
    *,
    keep: bool = False,
) -> dict[str, Any]:
    """Command parameters from the query string, ``X-YT-Parameters`` and (for POST) the body, in that order.

    Top-level scalars lose their attributes (the client sends ``job_id=<address=..>"id"``); ``*_format``
    parameters keep theirs, because the attributes are the format options. ``keep``: the header's map is kept
    by its text (``ParsedHeaders``) for the next request sending the same; for reads, whose parameters carry no
    mutation id and which clients repeat (an operation's state polled, a listing refreshed).
    """
    params: dict[str, Any] = dict(query or {})
    if header_value:
        kept = PARSED_HEADERS.get(header_value, header_format) if keep else None
        if kept is None:
            fmt = parse_header_format(header_format)
            raw = header_value.encode("latin-1", "replace")  # header bytes arrive latin-1 decoded
            kept = _parameter_map(parse_structured(raw, fmt, "X-YT-Parameters"), "X-YT-Parameters")
            if keep:
                PARSED_HEADERS.put(header_value, header_format, kept)
        params.update(_copied(kept) if keep else kept)
    if body:
        value = parse_structured(body, content_type_format(content_type), "request body")
        params.update(_parameter_map(value, "request body"))
    out = {k: v if k.endswith("_format") else strip_attributes(v) for k, v in params.items()}
    kept = {k: attributes_of(v) for k, v in params.items() if not k.endswith("_format") and attributes_of(v)}
    if kept:  # e.g. write_file's <append=%true>//path: commands that need them read them from here
        out[PARAMETER_ATTRIBUTES] = kept
    return out


class ParsedHeaders:
    """``X-YT-Parameters`` maps kept by the header's text and format, least recently used dropped past ``size``;
    a header longer than ``max_length`` characters is not kept. YSON is parsed by pure Python here (hundreds of
    microseconds for a small map, much of a cheap read's cost). A kept map is never handed out itself: callers
    get a copy (``_copied``), as handlers may change their parameters."""

    def __init__(self, size: int, max_length: int) -> None:
        self.size = size
        self.max_length = max_length
        self._maps: OrderedDict[tuple[str, str | None], dict[str, Any]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, text: str, header_format: str | None) -> dict[str, Any] | None:
        with self._lock:
            found = self._maps.get((text, header_format))
            if found is not None:
                self._maps.move_to_end((text, header_format))
            return found

    def put(self, text: str, header_format: str | None, value: dict[str, Any]) -> None:
        if len(text) > self.max_length:
            return
        with self._lock:
            self._maps[(text, header_format)] = value
            while len(self._maps) > self.size:
                self._maps.popitem(last=False)


PARSED_HEADERS = ParsedHeaders(4096, 2048)


def _copied(value: Any) -> Any:
    """A copy of a parsed value's maps and lists (the scalars in them are immutable)."""
    kind = type(value)
    if kind is dict:
        return {k: _copied(v) for k, v in value.items()}
    if kind is list:
        return [_copied(v) for v in value]
    return value


def _parameter_map(value: Any, what: str) -> dict[str, Any]:
    value = strip_attributes(value)
    if not isinstance(value, dict):
        raise YtError(
            f"{what} must be a map of parameters, got {type(value).__name__}", attributes={"field": what}
        )
    return value


def encode_structured(value: Any, fmt: Format, *, plain: bool = False) -> tuple[bytes, str]:
    """Bytes and content type of a structured result in the requested output format.

    ``plain``: the caller built ``value`` from JSON values with string keys (a listing of stored records), so the
    ``normalize`` walk is skipped; a value JSON cannot encode (numpy, bytes, sets) still goes through it."""
    if plain and fmt.name == "json":
        try:
            return _encode_json(value, fmt)
        except TypeError:
            pass
    return _encode(normalize(value), fmt)


def _encode(value: Any, fmt: Format) -> tuple[bytes, str]:
    if fmt.name == "json":
        return _encode_json(value, fmt)
    if fmt.name == "yson":
        style = fmt.yson_style
        data = yson.dumps(_to_yson(value), yson_format=style)
        if style == "pretty":
            data += b"\n"
        return data, YSON_CONTENT_TYPES[style]
    raise YtError(
        f"Output format {fmt.name!r} is not supported for structured output; use json or yson",
        attributes={"parameter": "output_format"},
    )


def _encode_json(value: Any, fmt: Format) -> tuple[bytes, str]:
    pretty = fmt.attributes.get("format") == "pretty"
    if not pretty:
        text = _json_text(value, fmt, None)
    else:
        # ``indent`` takes the standard library's Python encoder, whose closures form a reference cycle per call:
        # made where no collection freezes it (``pooltree.gc_policy``), so that it is collected
        with POLICY.unfrozen():
            text = _json_text(value, fmt, 4)
    return (text + ("\n" if pretty else "")).encode("utf-8", "surrogateescape"), "application/json"


def _json_text(value: Any, fmt: Format, indent: int | None) -> str:
    if fmt.encode_utf8:
        text = json.dumps(value, ensure_ascii=False, indent=indent)
        if not text.isascii():
            # only non-ASCII strings change under encode_utf8 (ASCII ones are their own UTF-8 bytes, and both
            # modes escape control characters alike), so all-ASCII output is already the answer
            text = json.dumps(utf8_to_code_points(value), ensure_ascii=True, indent=indent)
        return text
    return json.dumps(value, ensure_ascii=False, indent=indent)


# Errors.


def error_to_dict(error: BaseException | Mapping[str, Any], *, host: str, now: float) -> dict[str, Any]:
    """The YT error JSON of an exception: code, message, attributes (with host and datetime), inner errors."""
    if isinstance(error, Mapping):
        out = dict(error)
        attrs = dict(out.get("attributes") or {})
        attrs.setdefault("host", host)
        attrs.setdefault("datetime", format_datetime(now))
        out["attributes"] = attrs
        out.setdefault("code", GENERIC_ERROR)
        out.setdefault("message", "")
        out["inner_errors"] = [error_to_dict(e, host=host, now=now) for e in out.get("inner_errors") or []]
        return out
    attributes: dict[str, Any] = {"host": host, "datetime": format_datetime(now)}
    inner: list[Any] = []
    if isinstance(error, PooltreeError):
        code, message = int(error.code), error.message
        attributes.update(_safe_attributes(error.attributes))
        if isinstance(error, ConfigError):
            attributes.setdefault("field", error.path)
            attributes.setdefault("reason", error.reason)
        inner = list(getattr(error, "inner_errors", []))
    else:
        code, message = GENERIC_ERROR, f"{type(error).__name__}: {error}"
    return {
        "code": code if code != 0 else GENERIC_ERROR,
        "message": message,
        "attributes": attributes,
        "inner_errors": [error_to_dict(e, host=host, now=now) for e in inner],
    }


def _safe_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return normalize(dict(attributes))
    except YtError:
        return {str(k): repr(v) for k, v in attributes.items()}


def error_json(error: Mapping[str, Any]) -> str:
    """Compact ASCII JSON of an error (safe for the ``X-YT-Error`` header; ``inf`` spelled as strings)."""
    return json.dumps(_finite(error), ensure_ascii=True, separators=(",", ":"))


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


_CONTROL = {code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F)}


def header_text(text: str, limit: int = 1000) -> str:
    """A one-line printable-ASCII rendering of ``text`` for an HTTP header value: whitespace runs become one
    space, other control characters and non-ASCII are escaped (a header holding them would be refused by the
    HTTP server and the connection dropped)."""
    flat = " ".join(text.split()).translate(_CONTROL)
    return flat.encode("ascii", "backslashreplace").decode("ascii")[:limit]
