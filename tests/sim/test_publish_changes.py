"""The incremental same-structure publish (`pooltree/strategy/changes.py`) leaves the strategy exactly as the
three-pass publish (every element visited) does.

The heartbeat path marks what it touches; a missed mark would leave some element stale. Each example runs a busy
simulation twice — once with the incremental publish, once with it switched off — and after every publish
compares every element's published state: statuses, starvation clocks, usage, shares, satisfaction, activity,
deactivation counts, preemption priorities, preemptible lists, and each pool's heap as the set of its valid
entries (key, least recently served, tree index) — what the best-leaf choice reads.
"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from pooltree.sim import Simulation, parse_scenario
from pooltree.strategy.changes import ChangedPublisher
from pooltree.strategy.publish import SnapshotPublisher
from tests.sim.test_sim_engine import mixed_document


def _state(scheduler: Any) -> tuple[Any, ...]:
    scheduler._flush_counts()
    rows: list[Any] = []
    for element_id in scheduler.tree.order:
        element = scheduler._elements[element_id]
        state = scheduler.starvation.get(element_id)
        row: tuple[Any, ...] = (
            element_id,
            element.spec is scheduler.tree.elements[element_id],
            element.status,
            element.starvation,
            None if state is None else (state.status, state.below_fair_share_since, state.starving_since),
            element.active,
            element.sat,
            element.inactive_reason,
            tuple(element.usage),
            element.fair_share,
            element.demand_share,
            element.blocked,
            element.fifo_key,
            element.active and element.keyed_start == element.last_start,
        )
        runtime = element.op
        if element.is_op and runtime is not None:
            row += (
                runtime.preemption_priority,
                sorted(runtime.deactivation_reasons.items()),
                runtime.lists_key,
                runtime.lists_settled,
                [(allocation.id, allocation.preemption_status) for allocation in runtime.lists],
            )
        if not element.is_op:
            row += (
                sorted(
                    (entry[0], entry[1], entry[2])
                    for entry in element.heap
                    if entry[3] == entry[4].version and entry[4].active
                ),
            )
        rows.append(row)
    priorities = {level: [e.id for e in listed] for level, listed in scheduler._ops_by_priority.items()}
    return tuple(rows), sorted(priorities.items()), scheduler.last_update_time


def _states(document: dict[str, Any], monkeypatch: Any, incremental: bool) -> tuple[list[Any], int]:
    states: list[Any] = []
    used = [0]
    publish = SnapshotPublisher.publish
    changes = ChangedPublisher._publish_changes

    def recorded(self: Any, tree: Any, now: Any) -> None:
        publish(self, tree, now)
        states.append(_state(self))

    def switched(self: Any, tree: Any, now: float, total: Any) -> bool:
        if not incremental:
            self._forget_changes()
            return False
        done = changes(self, tree, now, total)
        used[0] += done
        return done

    with monkeypatch.context() as patch:
        patch.setattr(SnapshotPublisher, "publish", recorded)
        patch.setattr(ChangedPublisher, "_publish_changes", switched)
        Simulation(parse_scenario(copy.deepcopy(document), source="test")).run()
    return states, used[0]


@settings(
    max_examples=3,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: each example is two simulations
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(seed=st.integers(1, 10_000), jitter=st.sampled_from(["0s", "200ms", "700ms"]))
def test_incremental_publish_equals_three_passes(monkeypatch, seed, jitter):
    # monkeypatch.context() inside _states undoes its patches for every example
    document = mixed_document(until="8m", seed=seed)
    document["scheduler"]["node_heartbeat_jitter"] = jitter
    incremental, used = _states(document, monkeypatch, incremental=True)
    full, _ = _states(document, monkeypatch, incremental=False)
    assert used > len(incremental) // 2  # most publishes took the incremental path
    assert len(incremental) == len(full)
    for number, (mine, theirs) in enumerate(zip(incremental, full, strict=True)):
        assert mine == theirs, f"publish {number} differs"
    counts = [row[-4] for row in incremental[-1][0] if len(row) > 15]
    assert any(counts)  # idle operations were counted
