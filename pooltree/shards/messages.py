"""What a node shard sends the leader for one heartbeat: its body as the node sent it, decoded by the leader.

A shard used to decode every heartbeat, pack the ``HeartbeatRequest`` into plain tuples and pickle them, and the
leader unpickled and rebuilt the request: in one process, on loaded heartbeats (16 running jobs, ~1.6 finished),
the shard's decoding 36 µs, packing 13 µs and pickling 17 µs, the leader's unpickling 8 µs and rebuilding 28 µs.
The body itself pickles in 2 µs and unpickles in 1 µs, and the leader's decoding of it (``unpack``: the wire
module's ``decode_heartbeat``, with its reader thread's own ``RunningReports``, so that a node's unchanged running
jobs are not read again) costs it 32 µs. So a shard forwards the body (``pack``) and decodes a heartbeat only
when it may answer it itself (``heartbeat_head``: the node has a verdict there and the body reports no finished
job) or when the leader's answer carries a proof (the shard then keeps the node's expected next heartbeat). ``unpack(pack(body))`` is the request
``decode_heartbeat(body)`` gives, errors included (a malformed body is refused by the leader with the error the
shard would have answered).

The leader's answer comes back as the JSON body the node gets (``answer_body``), which the shard sends on as it
is, in the reply ``answer_reply`` makes: with a proof, the proof as the shard keeps it (``verdicts.proven``: the
expected next heartbeat's key, made by the leader, which has the heartbeat and the answer decoded already, and the
answer's period and shard URL), so that the shard decodes neither the body nor the answer after a proof (it did,
~110 µs per proof when cold, ~0.4 proofs per forwarded heartbeat live).
"""

from __future__ import annotations

import threading
from typing import Any

from pooltree.node import wire
from pooltree.node.wire import HeartbeatRequest, RunningReports
from pooltree.node.wire_structs import read_address, read_head
from pooltree.server.heartbeats import decode_heartbeat
from pooltree.shards.verdicts import Proof, proven

Packed = bytes

_READERS = threading.local()
"""Per leader thread that reads a shard's pipe (one per shard), its ``RunningReports``."""


def pack(body: bytes) -> Packed:
    """A heartbeat's body as the shard forwards it."""
    return body


def heartbeat_address(body: bytes) -> str | None:
    """The ``node_address`` of a heartbeat body when it is a non-empty string, without reading the rest; None
    otherwise (``decode_heartbeat`` then names what is wrong)."""
    return read_address(body)


def heartbeat_head(body: bytes) -> tuple[str | None, bool]:
    """``heartbeat_address`` of a body, and whether it reports a finished job (``wire_structs.read_head``: the
    rest not read). A shard answers no heartbeat with a finished job (its acknowledgement waits for the store),
    so it forwards such a body undecoded even when the node's verdict holds: under load most heartbeats after a
    full node's proof report one (``bench/RESULTS.md``, session 34)."""
    return read_head(body)


def unpack(packed: Packed) -> HeartbeatRequest:
    """The ``HeartbeatRequest`` of a forwarded body, as ``decode_heartbeat`` reads it (a YT error, 400, when it is
    not one), with the calling thread's ``RunningReports``."""
    reports = getattr(_READERS, "reports", None)
    if reports is None:
        reports = _READERS.reports = RunningReports()
    return decode_heartbeat(packed, reports)


def answer_body(answer: dict[str, Any]) -> bytes:
    """The leader's answer as its reply carries it: the JSON body the shard sends the node as it is (an answer
    with starts pickles and unpickles as a map in ~16 µs and is then encoded, as bytes in ~3 µs)."""
    return wire.encode(answer)


def answer_reply(
    request_id: int, answer: dict[str, Any], proof: Proof | None, clock: float
) -> tuple[Any, ...]:
    """The leader's reply to a forwarded heartbeat: ``(request id, 200, the node's JSON body, the proof as the
    shard keeps it or None, the leader's clock)``."""
    kept = None if proof is None else proven(proof, answer)
    return request_id, 200, answer_body(answer), kept, clock
