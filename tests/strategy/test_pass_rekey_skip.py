"""`BestLeaf.finish_pass` re-keys nothing after a regular pass that set no heap entry aside: the same decisions as
re-keying every pool the pass touched, on seeded traces that take both ways."""

from __future__ import annotations

import heapq
import json

import pytest
from golden_trace import golden_trace

from pooltree.strategy.best_leaf import BestLeaf


@pytest.mark.parametrize("seed", [3, 4, 15, 22])
def test_a_pass_without_exclusions_decides_as_one_that_re_keys_its_pools(seed, monkeypatch):
    finish = BestLeaf.finish_pass
    skipped: list[bool] = []

    def observed(self, current):
        skipped.append(not current.popped and bool(current.touched))
        finish(self, current)

    monkeypatch.setattr(BestLeaf, "finish_pass", observed)
    fast = json.dumps(golden_trace(seed, steps=60), sort_keys=True)

    def re_keying(self, current):  # every pass re-keys the pools it touched, as before the skip
        for heap, entry in current.popped:
            heapq.heappush(heap, entry)
        self.state.serial += 1
        for composite in sorted(current.touched, key=lambda e: (-e.depth, e.index)):
            if self.recompute(composite, None):
                self.propagate(composite, None)

    monkeypatch.setattr(BestLeaf, "finish_pass", re_keying)
    plain = json.dumps(golden_trace(seed, steps=60), sort_keys=True)
    assert fast == plain
    # both ways were taken: passes that started allocations without leaving any operation out, and others
    assert any(skipped) and not all(skipped)
