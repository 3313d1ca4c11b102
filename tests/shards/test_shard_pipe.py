"""A shard process reads and writes its pipe to the leader on its event loop (``shards/pipe.py``): the frames are
``multiprocessing.connection.Connection``'s both ways, a reply reaches its heartbeat's answer with the bytes the
leader's answer map encodes to (also a reply cut across writes), a reply with a proof lets the shard answer the
node's next heartbeat itself, and the shard ends when the leader's end does."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import pickle
import random
import socket
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from typing import Any

import httpx
import pytest
from node_bodies import idle_heartbeat

from pooltree.node import wire
from pooltree.shards.messages import answer_body, answer_reply, unpack
from pooltree.shards.pipe import Frames, LoopPipe, frame
from pooltree.shards.process import ShardSettings, run_shard
from pooltree.shards.verdicts import StartEntryResources, expected_next
from tests.server.heartbeat_maps import comparable_answer

try:
    import uvloop
except ImportError:  # the shard's loop is asyncio's then
    uvloop = None

HEARTBEAT = "/internal/node_heartbeat"
TIMEOUT = 30.0
LOOP_FACTORIES = [asyncio.new_event_loop, *([uvloop.new_event_loop] if uvloop is not None else [])]
"""The shard's loop (uvloop when installed, which makes the pipe non-blocking) and asyncio's."""
LOOP_NAMES = ["asyncio", *(["uvloop"] if uvloop is not None else [])]

MESSAGES: list[Any] = [
    ("generation", 7, 12.5, 3, [("n1", 4)]),
    (1, 200, {"start": [], "acknowledge": ["j"] * 3, "heartbeat_period": 1.0}, None, 13.0),
    (2, 200, {"start": [{"job_id": "x" * 40_000}]}, (1, 2), 14.0),  # over 16 KiB: the leader writes it in two
    ("sync", 3, 8, 15.0, 4, ()),
    (3, 503, {"X-YT-Error": "{}"}, b'{"code": 1}'),
]


def _written_by_connection(messages: list[Any]) -> bytes:
    """The bytes ``Connection.send`` writes for ``messages`` (read off the other end of a socket pair)."""
    left, right = socket.socketpair()
    sender = Connection(left.detach())
    chunks = []
    with right:
        for message in messages:
            sender.send(message)
            while True:
                right.setblocking(False)
                try:
                    chunks.append(right.recv(1 << 20))
                except BlockingIOError:
                    break
    sender.close()
    return b"".join(chunks)


def test_frames_read_what_the_leader_s_connection_writes_however_it_is_cut() -> None:
    data = _written_by_connection(MESSAGES)
    rng = random.Random(25)
    for cuts in ([1] * 64, [len(data)], [rng.randint(1, 9000) for _ in range(200)]):
        frames, read, at = Frames(), [], 0
        for size in cuts * (len(data) // sum(cuts) + 1):
            read += frames.feed(data[at : at + size])
            at += size
            if at >= len(data):
                break
        assert read == MESSAGES and frames.holding == 0


def test_the_leader_s_connection_reads_what_the_shard_writes() -> None:
    left, right = socket.socketpair()
    receiver = Connection(right.detach())
    with left:
        for message in MESSAGES[:3]:
            left.sendall(frame(message))
        assert [receiver.recv() for _ in MESSAGES[:3]] == MESSAGES[:3]
    receiver.close()


@pytest.mark.parametrize("loop_factory", LOOP_FACTORIES, ids=LOOP_NAMES)
def test_a_full_pipe_keeps_the_frames_waiting_in_order_instead_of_failing(loop_factory: Any) -> None:
    """The leader reads its pipe between heartbeats it processes; meanwhile the shard's sends fill the pipe's
    buffer. A send then waits on the loop, whole frames in order (it failed with EAGAIN and answered the node 503:
    seen at 1,000 nodes with two shard processes, and it could leave half a frame in the pipe)."""
    left, right = socket.socketpair()
    right.setblocking(False)  # as uvloop's add_reader leaves the shard's end
    leader = Connection(left.detach())
    shard_end = Connection(right.detach())
    messages = [(serial, "x" * 4096) for serial in range(600)]  # ~2.4 MiB, past any socket pair's buffer
    loop = loop_factory()
    pipe = LoopPipe(shard_end, loop, lambda message: None, lambda: None)
    try:
        for message in messages:
            pipe.send(message)
        assert pipe.unsent > 0  # the buffer is full: the rest waits
        received: list[Any] = []

        def read() -> None:
            while len(received) < len(messages) and leader.poll(TIMEOUT):
                received.append(leader.recv())

        with ThreadPoolExecutor(1) as reader:
            done = loop.run_in_executor(reader, read)
            loop.run_until_complete(asyncio.wait_for(done, TIMEOUT))
        assert received == messages and pipe.unsent == 0
    finally:
        pipe.close()
        loop.close()
        leader.close()
        shard_end.close()


def test_a_send_after_the_leader_s_end_is_gone_raises() -> None:
    left, right = socket.socketpair()
    shard_end = Connection(right.detach())
    loop = asyncio.new_event_loop()
    ended: list[bool] = []
    pipe = LoopPipe(shard_end, loop, lambda message: None, lambda: ended.append(True))
    try:
        left.close()
        with pytest.raises(OSError):
            for serial in range(10_000):  # the first sends may still land in the buffer
                pipe.send((serial, "x" * 4096))
    finally:
        pipe.close()
        loop.close()
        shard_end.close()


@contextlib.contextmanager
def _shard_process(settings: ShardSettings) -> Iterator[tuple[Connection, str, Any]]:
    """A real shard process with ``settings`` at the end of a pipe whose leader's end the test holds: (that end,
    its URL, the process)."""
    context = multiprocessing.get_context("spawn")
    leader, child = context.Pipe(duplex=True)
    process = context.Process(target=run_shard, args=(child, 0, settings), daemon=True)
    process.start()
    child.close()
    try:
        assert leader.poll(60.0), "the shard did not start"
        kind, port = leader.recv()
        assert kind == "ready"
        yield leader, f"http://127.0.0.1:{port}", process
    finally:
        leader.close()
        process.join(TIMEOUT)
        if process.is_alive():
            process.kill()
            process.join(TIMEOUT)


@pytest.fixture
def shard() -> Iterator[tuple[Connection, str, Any]]:
    """A real shard process (no node authentication) at the end of a pipe whose leader's end the test holds."""
    with _shard_process(ShardSettings("127.0.0.1", False, None, None, "test")) as ends:
        yield ends


def _forwarded(leader: Connection, notes: list[Any] | None = None) -> tuple[Any, ...]:
    """The next heartbeat the shard forwards; the notes sent apart before it (``("skips", notes)`` every
    ``SKIP_FLUSH_PERIOD``) are added to ``notes``."""
    while True:
        assert leader.poll(TIMEOUT), "the shard forwarded nothing"
        message = leader.recv()
        if message[0] == "skips" and notes is not None:
            notes.extend(message[1])
        elif message[0] not in ("skips", "synced"):
            return message


def test_a_reply_read_on_the_loop_answers_the_leader_s_map_as_its_bytes(
    shard: tuple[Connection, str, Any],
) -> None:
    leader, url, _ = shard
    big_start = [
        {"job_id": f"j{i}", "environment": {"YT_JOB_INDEX": str(i)}, "pad": f"{i:0300d}"} for i in range(90)
    ]
    answers = [
        {"start": [], "preempt": [], "abort": [], "acknowledge": ["a", "b"], "heartbeat_period": 1.0},
        {"start": big_start, "preempt": [], "abort": [], "acknowledge": [], "heartbeat_period": 2.5},
    ]
    # the leader's Connection writes the header and the payload of a message over 16 KiB apart
    assert len(pickle.dumps(answer_body(answers[1]))) > 16_384
    with httpx.Client(timeout=TIMEOUT) as client, ThreadPoolExecutor(1) as node:
        for index, answer in enumerate(answers):
            leader.send(("generation", index + 1, 100.0 + index, index, ()))
            sent = node.submit(
                client.post, url + HEARTBEAT, content=json.dumps(idle_heartbeat(f"n{index}", 2)).encode()
            )
            request_id, packed, peer, hostname, _skips = _forwarded(leader)
            assert unpack(packed).address == f"n{index}" and peer == "127.0.0.1" and hostname == "127.0.0.1"
            leader.send((request_id, 200, answer_body(answer), None, 101.0))
            response = sent.result(TIMEOUT)
            assert response.status_code == 200
            assert response.headers["content-type"] == wire.MEDIA_TYPE
            assert response.content == wire.encode(answer)
        error_headers = {"X-YT-Error": '{"code": 1, "message": "m"}', "X-YT-Response-Code": "1"}
        sent = node.submit(client.post, url + HEARTBEAT, content=json.dumps(idle_heartbeat("n9", 2)).encode())
        leader.send((_forwarded(leader)[0], 503, error_headers, b'{"code": 1, "message": "m"}'))
        response = sent.result(TIMEOUT)
        assert response.status_code == 503 and response.content == b'{"code": 1, "message": "m"}'
        assert response.headers["X-YT-Response-Code"] == "1"


def test_a_reply_with_a_proof_lets_the_shard_answer_the_node_s_next_heartbeat(
    shard: tuple[Connection, str, Any],
) -> None:
    """The answer comes as the node's JSON body; with a proof (as the leader's reply carries it: the key of the
    node's expected next heartbeat, made by the leader) the shard answers the node's equal next heartbeat itself
    (its note reaches the leader, apart or with the next forwarded one), after starts the heartbeat that reports
    the started job as its start entry gave it."""
    leader, url, _ = shard
    start = {
        "job_id": "j1",
        "operation_id": "o1",
        "task_name": "main",
        "resources": {"user_slots": 1, "cpu": 1},
    }
    answer = {"start": [start], "preempt": [], "abort": [], "acknowledge": [], "heartbeat_period": 2.0}
    started = idle_heartbeat("n1", 2)
    started["running_jobs"] = [
        wire.running_job("j1", "o1", "main", start_time=1.0, resource_usage={"user_slots": 1, "cpu": 1})
    ]
    with httpx.Client(timeout=TIMEOUT) as client, ThreadPoolExecutor(1) as node:
        leader.send(("generation", 4, 50.0, 0, ()))
        sent = node.submit(client.post, url + HEARTBEAT, content=json.dumps(idle_heartbeat("n1", 2)).encode())
        request_id, packed, _, _, _ = _forwarded(leader)
        expected = expected_next(unpack(packed), answer, StartEntryResources())
        assert expected is not None
        leader.send(answer_reply(request_id, answer, (4, {}, None, expected), 50.5))
        assert sent.result(TIMEOUT).content == answer_body(answer)
        local = client.post(url + HEARTBEAT, content=json.dumps(started).encode())
        assert local.status_code == 200
        assert json.loads(local.content) == {
            "start": [],
            "preempt": [],
            "abort": [],
            "acknowledge": [],
            "heartbeat_period": 2.0,
        }
        sent = node.submit(client.post, url + HEARTBEAT, content=json.dumps(idle_heartbeat("n2", 2)).encode())
        notes: list[Any] = []  # the local answer's note: sent apart if the flush came first, else with n2's
        request_id, packed, _, _, skips = _forwarded(leader, notes)
        assert unpack(packed).address == "n2" and [address for address, _ in notes + skips] == ["n1"]
        leader.send((request_id, 200, answer_body({"start": []}), None, 51.0))
        assert sent.result(TIMEOUT).status_code == 200


def test_the_shard_ends_when_the_leader_s_end_of_the_pipe_closes(shard: tuple[Connection, str, Any]) -> None:
    leader, url, process = shard
    with httpx.Client(timeout=TIMEOUT) as client, ThreadPoolExecutor(1) as node:
        leader.send(("generation", 1, 1.0, 0, ()))
        sent = node.submit(client.post, url + HEARTBEAT, content=json.dumps(idle_heartbeat("n1", 2)).encode())
        _forwarded(leader)  # a heartbeat waits for the leader's reply
        leader.close()
        process.join(TIMEOUT)
        assert process.exitcode == 0
        with pytest.raises(httpx.HTTPError):  # its connection ends unanswered: the node asks the leader next
            sent.result(TIMEOUT)


SECRET = "node-secret-" + "5" * 32


@pytest.fixture
def guarded() -> Iterator[tuple[Connection, str, Any]]:
    """A real shard process that checks the node secret, at the end of a pipe whose leader's end the test holds."""
    with _shard_process(ShardSettings("127.0.0.1", True, SECRET, None, "test")) as ends:
        yield ends


def test_plain_heartbeats_past_asgi_get_the_answers_uvicorn_s_route_gives(
    guarded: tuple[Connection, str, Any],
) -> None:
    """The shard answers the plain heartbeats its listener's protocol takes past ASGI (``direct_heartbeat``) as
    it answers the same requests handed to uvicorn's protocol (``Connection: close``: ``ShardServer.answer``
    through the ASGI route): a forwarded heartbeat's answer, the leader's error, refusals of the secret and of
    the body, a heartbeat answered here after a proof; status, type, length, ``X-YT-*`` and body alike."""
    leader, url, _ = guarded
    good = {"X-Pooltree-Node-Secret": SECRET}
    answer = {"start": [], "preempt": [], "abort": [], "acknowledge": ["j"], "heartbeat_period": 1.5}
    error_headers = {"X-YT-Error": '{"code": 1, "message": "m"}', "X-YT-Response-Code": "1"}

    def ok(request_id: int, packed: bytes) -> tuple[Any, ...]:
        return request_id, 200, answer_body(answer), None, 60.0

    def failed(request_id: int, packed: bytes) -> tuple[Any, ...]:
        return request_id, 503, error_headers, b'{"code": 1, "message": "m"}'

    def proven(request_id: int, packed: bytes) -> tuple[Any, ...]:
        expected = expected_next(unpack(packed), answer, StartEntryResources())
        assert expected is not None
        return answer_reply(request_id, answer, (5, {}, None, expected), 60.0)

    cases: list[tuple[dict[str, str], bytes, Any, int]] = [
        (good, json.dumps(idle_heartbeat("n1", 2)).encode(), ok, 200),
        ({"X-Pooltree-Node-Secret": "wrong"}, json.dumps(idle_heartbeat("n1", 2)).encode(), None, 401),
        ({}, json.dumps(idle_heartbeat("n1", 2)).encode(), None, 401),
        (good, b'{"node_address": 7}', None, 400),
        (good, b"not json", None, 400),
        (good, b"", None, 400),
        (good, json.dumps(idle_heartbeat("n2", 2)).encode(), failed, 503),
        (good, json.dumps({"node_address": "n2", "resource_limits": 5}).encode(), ok, 200),
    ]
    leader.send(("generation", 5, 60.0, 0, ()))
    with httpx.Client(timeout=TIMEOUT) as client, ThreadPoolExecutor(1) as node:
        for headers, body, reply, status in cases:
            got = []
            for extra in ({}, {"Connection": "close"}):  # past ASGI, then through uvicorn's protocol
                sent = node.submit(client.post, url + HEARTBEAT, headers={**headers, **extra}, content=body)
                if reply is not None:
                    request_id, packed, *_ = _forwarded(leader)
                    leader.send(reply(request_id, packed))
                response = sent.result(TIMEOUT)
                got.append(comparable_answer(response.status_code, dict(response.headers), response.content))
            assert got[0] == got[1], (headers, body[:40])
            assert got[0][0] == status, (headers, body[:40])
        # after a proof, the node's equal next heartbeat is answered here, on either path
        body = json.dumps(idle_heartbeat("n3", 2)).encode()
        sent = node.submit(client.post, url + HEARTBEAT, headers=good, content=body)
        request_id, packed, *_ = _forwarded(leader)
        leader.send(proven(request_id, packed))
        assert sent.result(TIMEOUT).status_code == 200
        local = [
            client.post(url + HEARTBEAT, headers={**good, **extra}, content=body)
            for extra in ({}, {"Connection": "close"})
        ]
        assert [response.status_code for response in local] == [200, 200]
        assert local[0].content == local[1].content == wire.encode({**answer, "acknowledge": []})
        notes: list[Any] = []
        sent = node.submit(
            client.post, url + HEARTBEAT, headers=good, content=json.dumps(idle_heartbeat("n4", 2)).encode()
        )
        request_id, _, _, _, skips = _forwarded(leader, notes)
        assert [address for address, _ in notes + skips] == ["n3", "n3"]  # both answered here, both noted
        leader.send(ok(request_id, b""))
        assert sent.result(TIMEOUT).status_code == 200
