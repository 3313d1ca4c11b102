"""A replica for the read process's tests, made in the read process by ``seam.make_replica``
(``counting_replica:make``): it knows the last number the feed sent and answers ``GET /replica`` with it while that
number reaches the floor, naming the floor it was given; below the floor ``GET /replica`` is held for the feed
(``holds``); every other request is relayed. A number not above the last one applied is refused (the feed's order
kept), as is ``"fail"``."""

from __future__ import annotations

from typing import Any

from pooltree.reads.seam import ReadRequest


class CountingReplica:
    def __init__(self) -> None:
        self.applied = 0

    def apply(self, message: Any) -> None:
        if message == "fail":
            raise RuntimeError("a feed message this replica cannot apply")
        number = int(message[0] if isinstance(message, tuple) else message)  # (number, padding): a long one
        if number <= self.applied:
            raise RuntimeError(f"feed message {number} after {self.applied}: out of order")
        self.applied = number

    def holds(self, request: ReadRequest, floor: int) -> bool:
        return request.target == b"/replica" and self.applied < floor

    def answer(self, request: ReadRequest, floor: int) -> bytes | None:
        if request.target != b"/replica" or self.applied < floor:
            return None
        body = b"replica applied=%d floor=%d" % (self.applied, floor)
        return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


def make() -> CountingReplica:
    return CountingReplica()
