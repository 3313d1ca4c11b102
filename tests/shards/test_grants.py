"""How many grants a shard's passes get: all while their starts take most of them, a probe of a few on every
`GRANT_PROBE`-th pass while they go unused (each unused grant is a controller's choice the leader made and undid). Whether a grant
answers a start exactly is proven by the replays (`test_shard_processes.py`) and `tests/controllers/test_take_back.py`."""

from __future__ import annotations

from typing import Any

from pooltree.shards.remote import (
    GRANT_PROBE,
    GRANT_USE_FLOOR,
    GRANTS_PER_PASS,
    GRANTS_PER_PROBE,
    ProcessShardStarts,
    ShardLink,
)


def test_a_shard_whose_grants_go_unused_gets_them_only_on_probes() -> None:
    conn: Any = None
    link = ShardLink(0, conn)
    assert all(ProcessShardStarts._granting(link) == GRANTS_PER_PASS for _ in range(3 * GRANT_PROBE))
    link.grant_use = GRANT_USE_FLOOR / 2
    got = [ProcessShardStarts._granting(link) for _ in range(2 * GRANT_PROBE)]
    assert got == ([0] * (GRANT_PROBE - 1) + [GRANTS_PER_PROBE]) * 2
    assert 0 < GRANTS_PER_PROBE < GRANTS_PER_PASS
    link.grant_use = GRANT_USE_FLOOR
    assert ProcessShardStarts._granting(link) == GRANTS_PER_PASS
