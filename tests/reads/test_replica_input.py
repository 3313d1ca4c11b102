"""Bad input never crashes the replica (``pooltree/reads/replica.py``): a feed message of another shape leaves it
broken (it relays everything, as ``NoReplica``) without raising; a request it cannot read is relayed; a seeded fuzz
of requests and messages raises nothing, not even inside (``relays["failed"]``: an exception caught and logged). No secret is fed: the security message holds token SHA-256s only."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from pooltree.reads import wire
from pooltree.reads.replica import Replica
from pooltree.reads.seam import ReadRequest
from pooltree.security.credentials import sha256_hex

TOKEN = "ytct-0000-" + "9a9a" * 8
NOW = 1_700_000_000.0
OPERATION = "1-2-3-4"


def _fed() -> Replica:
    """A replica holding one pending operation (a template with its slots), its queue and root's token."""
    replica = Replica(clock=lambda: NOW)
    replica.apply(
        [
            {
                "kind": wire.SECURITY,
                "authentication": True,
                "host": "h",
                "document": {
                    "users": ["root", "guest"],
                    "groups": {"superusers": ["root"], "users": [], "everyone": []},
                    "tokens": {sha256_hex(TOKEN): "root"},
                },
            },
            {
                "kind": wire.TEMPLATE,
                "operation": OPERATION,
                "key": wire.encoding_key({"output_format": "json"}),
                "template": {
                    "pieces": ['{"id": "1-2-3-4", "pending_position": ', ', "build_time": ', "}"],
                    "slots": [["default", "pending_position"], [None, "build_time"]],
                    "fixed_reasons": [["default", None]],
                    "content_type": "application/json",
                },
                "waits": [["default", "queue"]],
                "access": {"owner": "root", "acl": [], "owners": []},
            },
            {"kind": wire.QUEUE, "tree": "default", "pool": "queue", "start": 0, "ids": ["0-0-0-1", OPERATION],
             "running": 0, "max_running": 0},
            {"kind": wire.COUNTER, "value": 1},
        ]
    )  # fmt: skip
    return replica


def _request(parameters: bytes, *, token: str = TOKEN, **changes: Any) -> ReadRequest:
    fields: dict[str, Any] = {
        "method": b"GET",
        "target": b"/api/v4/get_operation",
        "headers": (
            (b"authorization", f"OAuth {token}".encode()),
            (b"x-yt-header-format", b"<format=text>yson"),
            (b"x-yt-parameters", parameters),
        ),
        "body": b"",
        "client": ("127.0.0.1", 1),
        "keep_alive": True,
    }
    fields.update(changes)
    return ReadRequest(**fields)


GOOD = b'{"operation_id"="1-2-3-4";"output_format"="json";}'


def test_a_fed_replica_answers_and_fills_its_slots() -> None:
    replica = _fed()
    answer = replica.answer(_request(GOOD), 1)
    assert answer is not None and answer.startswith(b"HTTP/1.1 200 OK\r\n")
    body = answer.split(b"\r\n\r\n", 1)[1]
    assert json.loads(body) == {
        "id": OPERATION,
        "pending_position": 1,
        "build_time": "2023-11-14T22:13:20.000000Z",
    }
    closing = replica.answer(_request(GOOD, keep_alive=False), 1)
    assert closing is not None and b"\r\nconnection: close\r\n" in closing


@pytest.mark.parametrize(
    "request_",
    [
        _request(GOOD, method=b"POST"),
        _request(GOOD, target=b"/api/v4/get_operation?operation_id=1-2-3-4"),
        _request(GOOD, target=b"/api/v4/list_operations"),
        _request(GOOD, body=b"x"),
        _request(GOOD, token="ytct-0000-" + "00" * 16),
        _request(b'{"operation_id"="1-2-3-4";"output_format"="json";"transaction_id"="1-1-1-1"}'),
        _request(b'{"operation_alias"="*a";"output_format"="json";}'),
        _request(b'{"operation_id"="1-2-3-4";"output_format"="yson";}'),
        _request(b'{"operation_id"="9-9-9-9";"output_format"="json";}'),
        _request(b'{"operation_id"="1-2-3-4";"output_format"="json"'),  # not YSON
        _request(b'{"operation_id"=1;"output_format"="json";}'),
        _request(b"\xff\xfe" * 40),
        _request(
            GOOD,
            headers=((b"authorization", b"OAuth " + TOKEN.encode()),) * 2 + ((b"x-yt-parameters", GOOD),),
        ),
        _request(GOOD, headers=((b"authorization", "OAuth é".encode()),)),
    ],
)
def test_what_it_cannot_answer_is_relayed(request_: ReadRequest) -> None:
    replica = _fed()
    assert replica.answer(request_, 1) is None
    assert replica.answered == 0 and sum(replica.relays.values()) == 1


def test_behind_the_floor_it_relays() -> None:
    replica = _fed()
    assert replica.answer(_request(GOOD), 2) is None
    assert replica.relays["behind the floor"] == 1


def test_only_a_get_behind_the_floor_is_held() -> None:
    """``holds``: the read process waits for the feed only with a get the replica answers but for the floor."""
    replica = _fed()
    assert replica.holds(_request(GOOD), 2)
    assert not replica.holds(_request(GOOD), 1)  # at the floor: asked at once
    for other in (
        _request(GOOD, method=b"POST"),
        _request(GOOD, target=b"/api/v4/list_operations"),
        _request(GOOD, body=b"x"),
    ):
        assert not replica.holds(other, 2)
    replica.apply("not a map")  # broken: it answers nothing, so holds nothing
    assert not replica.holds(_request(GOOD), 2)


@pytest.mark.parametrize(
    "message",
    [
        "not a map",
        {"kind": "unheard of"},
        {"kind": wire.COUNTER, "value": "7"},
        {"kind": wire.COUNTER, "value": 0},  # backwards
        {"kind": wire.VOID},
        {"kind": wire.TEMPLATE, "operation": OPERATION, "key": "k", "template": {"pieces": [1]}},
        {"kind": wire.TEMPLATE, "operation": OPERATION, "key": "k", "template": {}, "waits": [], "access": {}},
        {"kind": wire.QUEUE, "tree": "default", "pool": "queue", "start": 5, "ids": ["x"], "running": 0},
        {"kind": wire.QUEUE, "tree": "default", "pool": "queue", "start": 0, "ids": ["a", "a"], "running": 0,
         "max_running": 0},
        {"kind": wire.SECURITY, "authentication": True, "host": "h", "document": {"users": "root"}},
        [{"kind": wire.COUNTER, "value": 3}, None],
    ],
)  # fmt: skip
def test_a_message_it_cannot_apply_leaves_it_broken_without_raising(message: Any) -> None:
    replica = _fed()
    replica.apply(message)
    assert replica.refused == 1 and replica.broken
    assert replica.answer(_request(GOOD), 0) is None  # relays everything from then on
    assert replica.relays["no replica"] == 1


def test_a_seeded_fuzz_raises_nothing() -> None:
    rng = random.Random(25)
    alphabet = [b'"', b";", b"=", b"{", b"}", b"[", b"]", b"<", b">", b"%", b"1-2-3-4", b"json", b"\x00", b"\xff",
                b"operation_id", b"attributes", b"output_format", b" "]  # fmt: skip
    for _ in range(600):
        replica = _fed()
        parameters = b"".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 30)))
        replica.answer(_request(parameters), rng.randrange(0, 3))
        junk = rng.choice(
            [None, 1, "x", [], {}, {"kind": rng.choice(wire.KINDS)}, {"kind": wire.QUEUE, "ids": [1]}]
        )
        replica.apply(junk)
        replica.answer(_request(GOOD), 0)
        assert replica.relays["failed"] == 0, "a request reached code that raised (caught, logged, relayed)"
