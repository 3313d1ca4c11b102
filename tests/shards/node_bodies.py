"""Node heartbeat bodies the shard tests send (a node with nothing running)."""

from __future__ import annotations

from typing import Any

from pooltree.node import wire


def idle_heartbeat(address: str, slots: int = 1) -> dict[str, Any]:
    """A heartbeat of ``address`` with ``slots`` user slots and as many cpus, 1 GiB, nothing running or finished."""
    return wire.heartbeat(
        address,
        sequence=0,
        time=0.0,
        resource_limits={"user_slots": slots, "cpu": slots, "memory": 1 << 30},
        resource_usage={},
        memory_limit=1 << 30,
        memory_usage=0,
        memory_meter="none",
        running_jobs=[],
        finished_jobs=[],
    )
