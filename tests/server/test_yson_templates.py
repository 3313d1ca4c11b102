"""YSON parameter texts answered from a template of their shape (``pooltree/server/yson_templates.py``) give the
parser's values, value for value, and its errors: generated maps (strings with quotes, backslashes, non-ASCII and
invalid UTF-8; attributes; numbers, booleans, entities; repeated keys) parsed through ``parse_structured`` twice,
the second time from the template of the first, against yt's parser alone."""

from __future__ import annotations

from typing import Any

import pytest
import yt.yson as yson
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.errors import YtError
from pooltree.server.protocol import YSON_TEMPLATES, Format, _parse_yson, parse_structured
from pooltree.server.yson_templates import YsonTemplates

YSON = Format("yson")

_text = st.one_of(
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=12),
    st.text(max_size=6),  # non-ASCII, control characters
    st.sampled_from(["", 'a"b', "a\\b", "\x7f", "$value", "$attributes", "%true", "1"]),
)
_scalar = st.one_of(
    _text,
    st.binary(max_size=6),  # invalid UTF-8 too
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=False, allow_infinity=False),
)
_values = st.recursive(
    _scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(_text, inner, max_size=4),
    ),
    max_leaves=12,
)


def _attributed(value: Any, attributes: dict[str, Any] | None) -> Any:
    if not attributes:
        return value
    return yson.to_yson_type(value, attributes=attributes)


def _outcome(data: bytes) -> tuple[str, Any]:
    try:
        return "value", parse_structured(data, YSON, "X-YT-Parameters")
    except YtError as error:
        return "error", error.message


@settings(max_examples=300, deadline=None)
@given(
    st.dictionaries(_text, _values, min_size=1, max_size=5),
    st.one_of(st.none(), st.dictionaries(_text, _scalar, max_size=2)),
    st.lists(st.tuples(st.integers(0, 4), _text), max_size=3),
)
def test_a_template_answers_as_the_parser(
    params: dict[str, Any], attributes: dict[str, Any] | None, changes: list[tuple[int, str]]
) -> None:
    first = yson.dumps(_attributed(params, attributes), yson_format="text")
    # the same shape with other strings in it: the second is answered from the first's template when it can be
    changed = dict(params)
    keys = list(changed)
    for index, text in changes:
        key = keys[index % len(keys)]
        if isinstance(changed[key], str):
            changed[key] = text
    second = yson.dumps(_attributed(changed, attributes), yson_format="text")
    for data in (first, second, first):
        try:
            expected: tuple[str, Any] = ("value", _parse_yson(data, "X-YT-Parameters"))
        except YtError as error:
            expected = ("error", error.message)
        hits = YSON_TEMPLATES.hits
        assert _outcome(data) == expected, data
    if expected[0] == "value" and YsonTemplates().load(first, lambda text: _parse_yson(text, "")) is not None:
        assert (
            YSON_TEMPLATES.hits == hits + 1
        )  # the last parse of a text that can use one came from a template


def test_repeated_keys_are_refused_as_the_parser_refuses_them() -> None:
    assert _outcome(b'{"a"="1";"b"="2";}')[0] == "value"
    kind, message = _outcome(b'{"a"="1";"a"="2";}')  # the template of {"\x7f0"=...;"\x7f1"=...} exists now
    assert kind == "error" and "Duplicate map key" in message


def test_requests_of_one_shape_parse_once() -> None:
    templates = YsonTemplates()
    parsed: list[bytes] = []

    def parse(text: bytes) -> Any:
        parsed.append(text)
        return _parse_yson(text, "X-YT-Parameters")

    header = '{"suppress_transaction_coordinator_sync"=%false;"operation_id"="{id}";"output_format"="json";}'
    for operation_id in ("1-2-3-4", "5-6-7-8", "a-b-c-d"):
        data = header.replace("{id}", operation_id).encode()
        assert templates.load(data, parse) == {
            "suppress_transaction_coordinator_sync": False,
            "operation_id": operation_id,
            "output_format": "json",
        }
    assert len(parsed) == 1 and templates.hits == 2
    # binary YSON, escapes and non-ASCII strings go to the parser
    assert templates.load(yson.dumps({"a": "b"}, yson_format="binary"), parse) is None
    assert templates.load(b'{"a"="b\\"c";}', parse) is None
    assert templates.load('{"a"="é";}'.encode(), parse) is None
    assert len(parsed) == 1


@pytest.mark.parametrize(
    "data",
    [
        b'{"limit"=99999999999999999999;"a"="b";}',
        b"{" * 200 + b"}" * 200,
        b'{"a"="b";',
        b'{"a"=<"x"="y">"z";}',
    ],
)
def test_refusals_and_attributes_match_the_parser(data: bytes) -> None:
    YSON_TEMPLATES.load(
        data, lambda text: _parse_yson(text, "body")
    )  # a template made first, where one can be
    try:
        expected: tuple[str, Any] = ("value", _parse_yson(data, "X-YT-Parameters"))
    except YtError as error:
        expected = ("error", error.message)
    assert _outcome(data) == expected
