"""``X-YT-Parameters`` maps kept by the header's text for reads (``protocol.ParsedHeaders``): the same parameters
as a fresh parse, never shared with the caller, bounded, and nothing kept of a header that does not parse."""

from __future__ import annotations

from typing import Any

import pytest

from pooltree.server import protocol
from pooltree.server.protocol import ParsedHeaders, YtError, decode_parameters

HEADER = '{"operation_id"="1-2-3-4";"attributes"=["state";"progress"];"spec"={"a"=<x=1>[1;{"b"=%true}]};}'
FORMAT = "<format=text>yson"


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> ParsedHeaders:
    kept = ParsedHeaders(3, 200)
    monkeypatch.setattr(protocol, "PARSED_HEADERS", kept)
    return kept


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    parsed: list[bytes] = []
    real = protocol.parse_structured

    def counted(data: bytes, fmt: Any, what: str) -> Any:
        parsed.append(data)
        return real(data, fmt, what)

    monkeypatch.setattr(protocol, "parse_structured", counted)
    return parsed


def test_a_kept_map_is_the_fresh_parse_and_is_not_shared(
    fresh: ParsedHeaders, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed = _counting(monkeypatch)
    plain = decode_parameters(HEADER, FORMAT, None, None, {"q": "1"})
    first = decode_parameters(HEADER, FORMAT, None, None, {"q": "1"}, keep=True)
    assert first == plain and len(parsed) == 2
    first["spec"]["a"]["$value"][1]["b"] = False  # a handler changing its parameters
    first["attributes"].append("x")
    second = decode_parameters(HEADER, FORMAT, None, None, {"q": "1"}, keep=True)
    assert second == plain and len(parsed) == 2  # not parsed again, and the change did not reach it
    other_format = decode_parameters(HEADER, "yson", None, None, None, keep=True)
    assert len(parsed) == 3 and other_format["operation_id"] == "1-2-3-4"


def test_only_asked_for_bounded_and_errors_not_kept(
    fresh: ParsedHeaders, monkeypatch: pytest.MonkeyPatch
) -> None:
    parsed = _counting(monkeypatch)
    decode_parameters(HEADER, FORMAT)
    decode_parameters(HEADER, FORMAT)
    assert len(parsed) == 2  # without keep: parsed each time
    headers = [f'{{"limit"={i};}}' for i in range(4)]
    for header in headers:
        decode_parameters(header, FORMAT, keep=True)
    assert fresh.get(headers[0], FORMAT) is None and fresh.get(headers[3], FORMAT) == {"limit": 3}
    long = '{"path"="' + "x" * 300 + '";}'
    decode_parameters(long, FORMAT, keep=True)
    assert fresh.get(long, FORMAT) is None  # longer than max_length
    for _ in range(2):
        with pytest.raises(YtError, match="X-YT-Parameters"):
            decode_parameters('{"broken"=', FORMAT, keep=True)
    assert fresh.get('{"broken"=', FORMAT) is None
