"""Node shards in one process: the shard step and the leader's side joined by calls instead of pipes.

``InProcessShards(scheduler, count)`` takes heartbeat maps as ``recording.replay``'s sender does: the node's
shard (``shard_of``) answers a heartbeat its verdict proves empty (``verdicts.ShardNodes``); any other goes to the
leader with the shard's notes of answered heartbeats applied first, and the leader's verdict (made in the
heartbeat's hold of the scheduling lock, as ``host.py`` makes it) comes back to the shard. It is the flow of
``host.py`` and ``process.py`` without processes, HTTP or latency: the shards learn every new state generation
(and ``coarse`` counter and node stamps) before the next heartbeat (the processes learn it a pipe's latency
later), so a replay through it must decide exactly as the single-process scheduler does.
"""

from __future__ import annotations

from typing import Any

from pooltree.node.wire import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.shards.host import shard_of
from pooltree.shards.verdicts import LeaderVerdicts, Proof, ShardNodes, proven


class InProcessShards:
    """``count`` shard steps in front of ``scheduler``; ``forwarded`` counts the heartbeats the leader took."""

    def __init__(self, scheduler: LiveScheduler, count: int) -> None:
        if count < 1:
            raise ValueError("node shards need a count of at least 1")
        self.scheduler = scheduler
        scheduler.generation.watch_updates = True
        self.shards = [ShardNodes() for _ in range(count)]
        self.leader = LeaderVerdicts(scheduler)
        self.forwarded = 0

    @property
    def answered(self) -> int:
        """Heartbeats the shards answered themselves."""
        return sum(shard.answered for shard in self.shards)

    def __call__(self, data: dict[str, Any], now: float) -> dict[str, Any]:
        heartbeat = parse_heartbeat(data)
        count = len(self.shards)
        shard = self.shards[shard_of(heartbeat.address, count)]
        generation = self.scheduler.generation
        moved = generation.take_moved()
        for each in self.shards:
            each.learn(generation.value, generation.coarse, moved)
        local = shard.answer(heartbeat, None, now)
        if local is not None:
            return local
        self.leader.apply_skips(shard.take_skips())
        self.forwarded += 1
        proofs: list[Proof | None] = []
        answer, ticket = self.scheduler.process_heartbeat_unwaited(
            heartbeat, now, then=lambda answer: proofs.append(self.leader.prove(heartbeat, answer))
        )
        self.scheduler.commits.wait(ticket)
        proof = proofs[-1] if proofs else None
        shard.remember(heartbeat.address, None, None if proof is None else proven(proof, answer))
        return answer
