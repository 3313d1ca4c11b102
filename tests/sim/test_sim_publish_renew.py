"""A publish of a changed structure reuses the previous `_Element` objects (`publish._renew`); the outputs are the
ones genuinely new elements give.

Both runs build a fresh `SchedulingTree` every period (so every publish takes the changed-structure path); one
lets `_new_elements` renew the previous objects, the other makes it create new ones (keeping ``last_start``, as
it always did). Every output file and the summary must be byte-identical.
"""

from __future__ import annotations

import filecmp
from types import SimpleNamespace

from tests.sim.simkit import run
from tests.sim.test_sim_engine import _comparable, mixed_document


def test_renewed_elements_equal_new_elements(monkeypatch, tmp_path):
    import pooltree.strategy.publish as publish
    import pooltree.strategy.snapshot as snapshot

    def fresh_tree(self, total, elements):
        return snapshot.SchedulingTree(total, elements, self.config, name=self.name)

    monkeypatch.setattr(snapshot.SchedulingTree, "with_shares", fresh_tree)
    renewed_calls = []
    renew = publish._renew
    monkeypatch.setattr(publish, "_renew", lambda *a: renewed_calls.append(1) or renew(*a))
    document = mixed_document(until="10m")
    renewed = run(document, tmp_path / "renewed")
    assert len(renewed_calls) > 500
    new_elements = publish.SnapshotPublisher._new_elements

    def without_reuse(self, tree, previous, fifo_order):
        # only last_start carries over (is_op None never matches, so no object is renewed)
        stubs = {key: SimpleNamespace(last_start=e.last_start, is_op=None) for key, e in previous.items()}
        return new_elements(self, tree, stubs, fifo_order)

    monkeypatch.setattr(publish.SnapshotPublisher, "_new_elements", without_reuse)
    new = run(document, tmp_path / "new")
    for name in ("events.jsonl", "timeline.csv", "operations.csv"):
        assert filecmp.cmp(tmp_path / "renewed" / name, tmp_path / "new" / name, shallow=False), name
    assert _comparable(renewed) == _comparable(new)
    assert renewed["global"]["preempted_allocation_count"] > 0
