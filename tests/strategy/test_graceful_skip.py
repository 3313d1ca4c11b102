"""The graceful stage returns at once while no element of the last publish is in graceful preemption mode
(`PreemptiveStages.graceful`, read once per publish): the same decisions as filtering every node's allocations."""

from __future__ import annotations

import json

import pytest
from golden_trace import golden_trace

from pooltree.strategy.preemption import PreemptiveStages


@pytest.mark.parametrize("seed", [4, 12, 15, 22])  # seeds whose traces hold both phases
def test_graceful_skipped_while_no_operation_is_graceful_decides_as_the_filter(seed, monkeypatch):
    seen: list[bool] = []
    stage = PreemptiveStages.graceful

    def observed(self, node, now, result):
        stage(self, node, now, result)
        seen.append(self._graceful_operations)

    monkeypatch.setattr(PreemptiveStages, "graceful", observed)
    fast = json.dumps(golden_trace(seed, steps=60), sort_keys=True)

    def filtered(self, node, now, result):  # the flag forced: every heartbeat filters the node's allocations
        self._graceful_publish = self.state.publishes
        self._graceful_operations = True
        stage(self, node, now, result)

    monkeypatch.setattr(PreemptiveStages, "graceful", filtered)
    plain = json.dumps(golden_trace(seed, steps=60), sort_keys=True)
    assert fast == plain
    # both ways were taken: heartbeats before any graceful operation, and with graceful operations published
    assert any(seen) and not all(seen)
    # and the stage preempted in them (graceful operations above their fair share)
    assert any("graceful" in json.dumps(p) for entry in json.loads(plain) for p in entry.get("preempt", ()))
