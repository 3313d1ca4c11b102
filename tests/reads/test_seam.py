"""The seam between the read process's shell and its replica (``pooltree/reads/seam.py``)."""

from __future__ import annotations

import pytest

from pooltree.reads.seam import NoReplica, ReadRequest, make_replica

REQUEST = ReadRequest(
    method=b"GET",
    target=b"/api/v4/get_operation",
    headers=((b"x-yt-parameters", b'{"operation_id": "1-2-3-4"}'),),
    body=b"",
    client=("127.0.0.1", 40000),
    keep_alive=True,
)


class Answering:
    """A replica that answers once it has applied the floor (what the seam asks of a real one)."""

    def __init__(self) -> None:
        self.applied = 0

    def apply(self, message: int) -> None:
        self.applied = message

    def holds(self, request: ReadRequest, floor: int) -> bool:
        return self.applied < floor

    def answer(self, request: ReadRequest, floor: int) -> bytes | None:
        if self.applied < floor:
            return None
        return b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def make_answering() -> Answering:
    return Answering()


def test_no_replica_relays_every_request() -> None:
    replica = make_replica(None)
    assert isinstance(replica, NoReplica)
    replica.apply(("anything", 1))
    assert replica.answer(REQUEST, 0) is None


def test_a_spec_names_the_replica_maker() -> None:
    replica = make_replica(f"{__name__}:make_answering")
    assert isinstance(replica, Answering)
    assert replica.answer(REQUEST, 1) is None
    replica.apply(1)
    assert replica.answer(REQUEST, 1) is not None


def test_a_spec_naming_nothing_fails() -> None:
    with pytest.raises(AttributeError):
        make_replica(f"{__name__}:no_such_maker")
