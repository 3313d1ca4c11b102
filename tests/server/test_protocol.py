"""Wire-level units: parameters in YSON/JSON, encode_utf8 both ways, formats, binary YSON, YT errors."""

from __future__ import annotations

import json
import struct
import zlib

import pytest
import yt.yson as yson
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.errors import ConfigError, PooltreeError
from pooltree.server.protocol import (
    Format,
    YtError,
    code_points_to_utf8,
    decode_parameters,
    decompress_body,
    encode_structured,
    error_json,
    error_to_dict,
    parse_format,
    parse_structured,
    resolve_error,
    utf8_to_code_points,
)
from pooltree.ypath import join_tokens, parse_ypath


def test_yson_header_parameters_strip_scalar_attributes_but_keep_formats() -> None:
    header = (
        '{"path"="//sys/pool_trees/\\xD0\\xBA";"job_id"=<address="node-1:9012";error={code=1}>"j-1";'
        '"output_format"=<format=pretty;sort_keys=%false>yson;"recursive"=%true;"max_size"=65535;"x"=#;}'
    )
    params = decode_parameters(header, "<format=text>yson")
    assert params["path"] == "//sys/pool_trees/к"
    assert params["job_id"] == "j-1"
    assert params["recursive"] is True and params["max_size"] == 65535 and params["x"] is None
    fmt = parse_format(params["output_format"])
    assert fmt == Format("yson", {"format": "pretty", "sort_keys": False})


def test_json_header_parameters_decode_encode_utf8() -> None:
    raw = "ключ".encode().decode("latin-1")
    header = json.dumps(
        {"path": "//tmp/" + raw, "output_format": {"$value": "json", "$attributes": {"encode_utf8": True}}}
    )
    params = decode_parameters(header, "json")
    assert params["path"] == "//tmp/ключ"
    assert parse_format(params["output_format"]) == Format("json", {"encode_utf8": True})
    # plain Unicode JSON (what `yt set` passes through from the command line) is kept as it is
    assert decode_parameters(json.dumps({"path": "//ключ", "x": "café"}), "json") == {
        "path": "//ключ",
        "x": "café",
    }


def test_post_body_parameters_yson_json_and_sniffed() -> None:
    body = b'{type="scheduler_pool";attributes={name="p1";pool_tree="physical"};mutation_id="1-2-3-4";retry=%false}'
    params = decode_parameters(None, None, body, "application/x-yt-yson-text")
    assert params["attributes"] == {"name": "p1", "pool_tree": "physical"} and params["retry"] is False
    assert decode_parameters(None, None, b'{"path": "//a"}', "application/json") == {"path": "//a"}
    assert decode_parameters(None, None, b'{path="//a"}', None) == {"path": "//a"}
    assert decode_parameters(None, None, b'{"path": "//a"}', None) == {"path": "//a"}
    assert decode_parameters(None, None, None, None, {"path": "//q"}) == {"path": "//q"}


@pytest.mark.parametrize(
    ("header", "header_format", "match"),
    [
        ("{path=", "<format=text>yson", "Cannot parse X-YT-Parameters as YSON"),
        ('<"a\xff"=1>{}', "<format=text>yson", "Cannot parse X-YT-Parameters as YSON"),  # a key not UTF-8
        ('{"path": ', "json", "Cannot parse X-YT-Parameters as JSON"),
        ("[1;2]", "yson", "must be a map of parameters"),
        ("{}", "<format=text", "Cannot parse X-YT-Header-Format"),
        ("{}", "dsv", "Format 'dsv' is not supported"),
    ],
)
def test_bad_parameters_are_yt_errors(header: str, header_format: str, match: str) -> None:
    with pytest.raises(YtError, match=match):
        decode_parameters(header, header_format)


def test_encode_utf8_json_output_is_one_code_point_per_byte() -> None:
    data, content_type = encode_structured({"ключ": ["значение", 1, 2.5, None, True]}, Format("json"))
    assert content_type == "application/json"
    assert data.isascii() and b"\\u00d0\\u00ba" in data
    decoded = json.loads(data)  # what the client does, then undoes encode_utf8
    [(key, value)] = decoded.items()
    assert key.encode("latin-1").decode("utf-8") == "ключ"
    assert value[0].encode("latin-1").decode("utf-8") == "значение"
    plain, _ = encode_structured({"ключ": "значение"}, Format("json", {"encode_utf8": False}))
    assert json.loads(plain.decode("utf-8")) == {"ключ": "значение"}


@settings(max_examples=60, deadline=None)
@given(
    st.recursive(
        st.text(),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
        max_leaves=8,
    )
)
def test_encode_utf8_roundtrip(value: object) -> None:
    assert code_points_to_utf8(utf8_to_code_points(value)) == value
    data, _ = encode_structured(value, Format("json"))
    assert parse_structured(data, Format("json"), "body") == value


def test_yson_outputs_parse_back_in_every_style() -> None:
    value = {"a": [1, 2.5, True, None], "ключ": "значение", "attr": {"$attributes": {"x": 1}, "$value": "v"}}
    for style, content_type in (
        ("text", "x-yt-yson-text"),
        ("pretty", "x-yt-yson-pretty"),
        ("binary", "x-yt-yson-binary"),
    ):
        data, ctype = encode_structured(value, Format("yson", {"format": style}))
        assert ctype.endswith(content_type)
        parsed = yson.loads(data)
        assert parsed["ключ"] == "значение" and parsed["attr"].attributes == {"x": 1}
        assert parse_structured(data, Format("yson"), "body") == value
    pretty, _ = encode_structured({"physical": {"research": {}}}, Format("yson", {"format": "pretty"}))
    assert pretty.startswith(b'{\n    "physical" = {') and pretty.endswith(b"}\n")
    with pytest.raises(YtError, match="not supported for structured output"):
        encode_structured(1, Format("dsv"))


def test_numpy_and_infinity_outputs() -> None:
    import numpy as np

    data, _ = encode_structured(
        {"v": np.array([1.0, np.inf]), "n": np.int64(3)}, Format("yson", {"format": "text"})
    )
    assert yson.loads(data) == {"v": [1.0, float("inf")], "n": 3}


def test_set_bodies_in_yson_text_binary_and_json() -> None:
    assert parse_structured(b"2", Format("yson", {"format": "binary"}), "input") == 2
    assert parse_structured(b"\x03" + struct.pack("<d", 5.0), Format("yson"), "input") == 5.0
    assert parse_structured(b"\x01\x0c" + "ключ".encode()[:6], Format("yson"), "input") == "клю"
    assert parse_structured(yson.dumps({"cpu": 10}, yson_format="binary"), Format("yson"), "input") == {
        "cpu": 10
    }
    assert parse_structured(b"5.0", Format("json"), "input") == 5.0
    with pytest.raises(YtError, match="Cannot parse input as YSON"):
        parse_structured(b"\x03\x00", Format("yson"), "input")


def test_compressed_bodies() -> None:
    assert decompress_body(zlib.compress(b"payload"), "gzip") == b"payload"
    assert decompress_body(b"raw", None) == b"raw"
    with pytest.raises(YtError, match="Unsupported Content-Encoding"):
        decompress_body(b"x", "br-unknown")
    with pytest.raises(YtError, match="Cannot decompress"):
        decompress_body(b"not zlib", "gzip")


def test_error_shapes() -> None:
    error = resolve_error("//x", 'Node / has no child with key "x"')
    body = error_to_dict(error, host="h1", now=0.5)
    assert body["code"] == 500 and body["message"] == "Error resolving path //x"
    assert (
        body["attributes"]["host"] == "h1" and body["attributes"]["datetime"] == "1970-01-01T00:00:00.500000Z"
    )
    assert body["attributes"]["path"] == "//x"
    assert body["inner_errors"][0]["code"] == 500 and body["inner_errors"][0]["inner_errors"] == []
    config = error_to_dict(ConfigError("pool_trees.t.pools.a.weight", "must be positive"), host="h", now=0)
    assert config["code"] == 1 and config["attributes"]["field"] == "pool_trees.t.pools.a.weight"
    crash = error_to_dict(ValueError("boom"), host="h", now=0)
    assert crash["code"] == 1 and "ValueError: boom" in crash["message"]
    coded = error_to_dict(
        PooltreeError("no such op", code=1915, attributes={"limit": float("inf")}), host="h", now=0
    )
    assert json.loads(error_json(coded))["attributes"]["limit"] == "inf"
    assert error_json(coded).isascii()


def test_ypath_parsing() -> None:
    p = parse_ypath("//sys/pool_trees/physical/p1/@strong_guarantee_resources/cpu")
    assert p.tokens == ("sys", "pool_trees", "physical", "p1") and p.attribute == (
        "strong_guarantee_resources",
        "cpu",
    )
    assert parse_ypath("//a/b&/@").attribute == () and parse_ypath("//a/b&/@").tokens == ("a", "b")
    assert parse_ypath("/").tokens == () and parse_ypath("//a/").tokens == ("a",)
    assert parse_ypath("//a\\/b/c\\@d").tokens == ("a/b", "c@d")
    assert parse_ypath("#1-2-3-4/child").object_id == "1-2-3-4"
    assert join_tokens(("a/b", "c")) == "//a\\/b/c" and parse_ypath(join_tokens(("a/b", "c@"))).tokens == (
        "a/b",
        "c@",
    )
    for bad in ("sys", "//a//b", "//a/@x/", "", "#"):
        with pytest.raises(YtError):
            parse_ypath(bad)
    with pytest.raises(YtError, match="must be a string"):
        parse_ypath(5)


def test_pretty_json_leaves_nothing_frozen_in_cycles() -> None:
    """``format=pretty`` JSON takes the standard library's Python encoder (``indent``), whose closures form a
    reference cycle per call. Encoded where the collector's policy does not freeze (``GcPolicy.unfrozen``): with
    every collection freezing its survivors and collections every 50 allocations, a vent afterwards finds nothing
    (before: the encoder's closures and cells, ~30 objects a call)."""
    import gc

    from pooltree.gc_policy import POLICY

    value = {"tasks": {f"task{index}": {"job_count": index, "env": [{"x": None}]} for index in range(100)}}
    pretty = Format("json", {"format": "pretty"})
    encode_structured(value, pretty)
    POLICY.acquire(at_collection=False, young=True)
    try:
        POLICY.settle()
        gc.set_threshold(50, 1, 1)
        for _ in range(5):
            assert encode_structured(value, pretty)[0].startswith(b'{\n    "tasks"')
        vent = POLICY.vent()
    finally:
        POLICY.release(at_collection=False, young=True)
    assert vent.found == 0, vent.kinds
