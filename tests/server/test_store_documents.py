"""``store.base.dump_document`` (orjson's text for the job records written on every heartbeat) reads back as
``dump_json``'s would, for any value: the same value, or the same refusal; byte for byte the same text when no float
is in it (a float's spelling may differ, ``1e-05`` against ``1e-5``, never its value). Values orjson writes
otherwise than the standard library (``NaN`` and infinities, tuples, datetimes, non-ASCII text, integers past 64
bits, keys that are not strings) are where the two could part, so the strategy draws them often."""

from __future__ import annotations

import dataclasses
import datetime
import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.server.store.base import dump_document, dump_json, load_json

_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -0.0, 1e-05, 1e16, 1e22, 123456789.125, 5e-324, math.inf, math.nan]),
    st.text(),
    st.text(alphabet=st.characters(max_codepoint=127)),
    st.sampled_from(["", "é", "\x00", "\x1f\x7f", '"\\/', "\u2028", "𝄞"]),
    st.just(datetime.datetime(2026, 11, 29, 19, 0, 0)),
)


@dataclasses.dataclass
class _Point:
    x: int


def _values() -> st.SearchStrategy[Any]:
    return st.recursive(
        _SCALARS | st.just(_Point(1)),
        lambda children: st.one_of(
            st.lists(children, max_size=4),
            st.lists(children, max_size=3).map(tuple),
            st.dictionaries(st.text(max_size=6), children, max_size=4),
            st.dictionaries(st.integers(-3, 3), children, max_size=2),
        ),
        max_leaves=12,
    )


def _same(left: Any, right: Any) -> bool:
    """Equal, with NaN equal to NaN and a float told from an equal integer."""
    if isinstance(left, float) and isinstance(right, float):
        return (math.isnan(left) and math.isnan(right)) or left == right
    if type(left) is not type(right):
        return False
    if isinstance(left, list):
        return len(left) == len(right) and all(_same(a, b) for a, b in zip(left, right, strict=True))
    if isinstance(left, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    return bool(left == right)


def _outcome(dump: Any, value: Any) -> tuple[str, Any]:
    try:
        return "text", dump(value)
    except (TypeError, ValueError) as error:
        return "refused", type(error)


def _has_float(value: Any) -> bool:
    if isinstance(value, float):
        return True
    if isinstance(value, dict):
        return any(_has_float(v) for v in value.values())
    if isinstance(value, list | tuple):
        return any(_has_float(v) for v in value)
    return False


@settings(max_examples=600, deadline=None)
@given(_values())
def test_a_document_reads_back_as_the_standard_librarys_text(value: Any) -> None:
    plain, fast = _outcome(dump_json, value), _outcome(dump_document, value)
    assert plain[0] == fast[0], (plain, fast)
    if plain[0] == "refused":
        assert plain == fast
        return
    assert fast[1].isascii()
    assert _same(load_json(fast[1]), load_json(plain[1]))
    if not _has_float(value):
        assert fast[1] == plain[1]


def test_a_job_document_is_written_by_orjson_as_the_standard_library_writes_it() -> None:
    document = {
        "task_name": "main",
        "job_index": 17,
        "tree": "default",
        "error": None,
        "exit_code": 0,
        "statistics": {"user_job/max_memory": 123, "time": {"total": 1.5}},
        "stderr": 'line\n\ttab "quoted"',
        "gpu_devices": [],
        "has_competitors": False,
    }
    assert dump_document(document) == dump_json(document)
    running = {**document, "statistics": {}, "exit_code": None, "job_competition_id": None}
    assert dump_document(running) == dump_json(running)


def _dumped(value: Any) -> str | None:
    try:
        return dump_json(value)
    except (TypeError, ValueError):
        return None


def _loaded(text: str) -> tuple[str, Any]:
    try:
        return "value", load_json(text)
    except (json.JSONDecodeError, RecursionError) as error:
        return "refused", type(error) is RecursionError


def _standard(text: str) -> tuple[str, Any]:
    try:
        return "value", json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        return "refused", type(error) is RecursionError


_TEXTS = st.one_of(
    st.text(max_size=30),
    st.text(alphabet='0123456789-+.eE[]{}":,NaInfity \\u', max_size=40),
    st.integers().map(str),
    st.integers(min_value=-(2**80), max_value=2**80).map(lambda n: f'{{"n":{n},"s":"{n}"}}'),
    st.sampled_from(
        [
            "NaN",
            "[Infinity,-Infinity]",
            "1e400",
            "-1e400",
            "1e-400",
            '"\\ud800"',
            "18446744073709551615",
            "18446744073709551616",
            "-9223372036854775809",
            "9223372036854775807",
            "1.0000000000000000000001",
            '{"a":1,"a":2}',
            "-0",
            "-0.0",
            " [1] ",
            "[1,]",
            '"a\x01"',
            "[" * 2000 + "]" * 2000,
        ]
    ),
)


@settings(max_examples=800, deadline=None)
@given(st.one_of(_values().map(_dumped), _TEXTS))
def test_a_stored_text_is_read_as_the_standard_library_reads_it(text: str | None) -> None:
    """``load_json`` (orjson where it reads the same) gives what ``json.loads`` gives, for the texts the store
    writes (``dump_json``: integers past 64 bits, ``NaN``, infinities, lone surrogates, any text) and any text
    at all: the same value (an integer never read as a float) or a refusal."""
    if text is None:
        return
    plain = _standard(text)
    fast = _loaded(text)
    assert plain[0] == fast[0], (text, plain, fast)
    if plain[0] == "refused":
        assert plain == fast  # a JSONDecodeError (orjson's is one), or too deep for both
    else:
        assert _same(fast[1], plain[1]), (text, plain, fast)
