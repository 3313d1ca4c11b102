"""The simulator decides the same in every process: no order follows object identity (memory addresses).

Elements, runtimes and allocations hash by identity; a set of them iterates in an order that moves with the
process's memory layout (the working directory alone moved it). Each test here runs the same busy simulation in
processes whose memory layout differs (allocations of random sizes, some freed, before the run; the same
``PYTHONHASHSEED``) and compares what they decided, or pins an order that used to be a set's. The last test
checks the divergence that was taken for one: the compiled fair-share passes against the numpy reference (a tree
copied without its built ``_kernels`` runs the reference).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pooltree.fairshare.compiled import COMPILED_KERNELS_AVAILABLE, use_compiled_kernels
from pooltree.sim import Simulation, parse_scenario
from pooltree.strategy import changes
from pooltree.strategy.core import SchedulerCore
from tests.sim.test_sim_engine import mixed_document

ROOT = Path(__file__).resolve().parents[2]


def busy_document(seed: int = 5) -> dict[str, Any]:
    """Many operations sharing a small cluster: 6 pools (weights 1-3, two with guarantees) on 8 nodes of 8 cpu,
    48 operations of 4-24 jobs of 20-90 s arriving over the first 2 minutes, starvation after 10 s."""
    pools: dict[str, Any] = {}
    for index in range(6):
        pools[f"pool-{index}"] = {"weight": 1 + index % 3}
        if index % 3 == 0:
            pools[f"pool-{index}"]["strong_guarantee_resources"] = {"cpu": 16}
    operations = [
        {
            "id": f"op-{index:02d}",
            "submit_time": (index * 37) % 120,
            "spec": {"pool": f"pool-{index % 6}"},
            "tasks": [
                {
                    "job_count": 4 + (index * 7) % 21,
                    "resources": {"cpu": 1, "memory": "1Gi", "user_slots": 1},
                    "duration": {"distribution": "uniform", "min": "20s", "max": "90s"},
                }
            ],
        }
        for index in range(48)
    ]
    return {
        "seed": seed,
        "until": "6m",
        "scheduler": {"fair_share_update_period": "1s", "node_heartbeat_period": "1s"},
        "cluster": {
            "nodes": [
                {"address": "n", "count": 8, "resource_limits": {"user_slots": 8, "cpu": 8, "memory": "32Gi"}}
            ]
        },
        "pool_trees": {"physical": {"config": {"fair_share_starvation_timeout": "10s"}, "pools": pools}},
        "operations": operations,
    }


_RUN = """
import hashlib, json, random, sys
layout = int(sys.argv[1])
rng = random.Random(layout)
junk = [[object() for _ in range(rng.randrange(1, 64))] for _ in range(layout * 400)]
del junk[:: 2 + layout % 3]
import pytest

from pooltree.fairshare.compiled import COMPILED_KERNELS_AVAILABLE, use_compiled_kernels
from pooltree.sim import Simulation, parse_scenario
from tests.sim.test_reproducible import busy_document
document = busy_document(int(sys.argv[2]))
document.setdefault("report", {})["event_log"] = True
digest = hashlib.sha256()
count = [0]
def sink(event):
    count[0] += 1
    digest.update(json.dumps(event, sort_keys=True, default=str).encode() + b"\\n")
Simulation(parse_scenario(document, source="test"), event_sink=sink).run()
print(json.dumps([count[0], digest.hexdigest()]))
"""


def _events_in_process(layout: int, seed: int) -> list[Any]:
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONPATH": str(ROOT), "LAYOUT_PAD": "x" * (layout * 1000)}
    done = subprocess.run(
        [sys.executable, "-c", _RUN, str(layout), str(seed)],
        cwd=ROOT if layout % 2 == 0 else ROOT / "tests",
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_simulation_decides_the_same_in_processes_of_other_memory_layouts():
    first = _events_in_process(0, 5)
    assert first[0] > 400  # a busy run: starts, preemptions, finishes
    for layout in (1, 3):
        assert _events_in_process(layout, 5) == first


def test_lists_configured_in_parts_are_taken_in_tree_order(monkeypatch):
    """`ChangedPublisher.configure_lists` with a limit (the live service's holds) takes the operations in tree
    order; it took them in the order of a set of elements, which follows their memory addresses."""
    taken: list[int] = []
    batches: list[list[int]] = []
    configure = changes.configure_lists
    update = SchedulerCore.update_fair_share

    def configured(state: Any, element: Any) -> None:
        taken.append(element.index)
        configure(state, element)

    def updated(self: SchedulerCore, now: float) -> Any:
        taken.clear()
        result = update(self, now, in_parts=True)
        while not self.finish_update(1):
            pass
        batches.append(list(taken))
        return result

    monkeypatch.setattr(changes, "configure_lists", configured)
    monkeypatch.setattr(SchedulerCore, "update_fair_share", updated)
    Simulation(parse_scenario(busy_document(), source="test")).run()
    assert (
        sum(len(batch) > 3 for batch in batches) > 5
    )  # several updates configured several operations' lists
    assert all(batch == sorted(batch) for batch in batches)


def _events(document: dict[str, Any]) -> list[str]:
    events: list[str] = []
    scenario = parse_scenario(json.loads(json.dumps(document)), source="test")
    Simulation(scenario, event_sink=lambda e: events.append(json.dumps(e, sort_keys=True, default=str))).run()
    return events


@pytest.mark.skipif(not COMPILED_KERNELS_AVAILABLE, reason="the compiled fair-share passes are not built")
def test_the_compiled_and_reference_fair_share_passes_decide_the_same():
    """A tree without the built ``_kernels`` (a copied checkout) runs the numpy reference: it must decide as the
    compiled passes. The reference's pool sums (`reference._integrated`) subtracted each parent's base from one
    cumulative sum over every parent; their last bits differed from the compiled sweep's running sums, and equal
    pools' satisfaction ties broke the other way (the 1,000-node forecast divergence of bench/RESULTS.md's ninth
    round; here event 183)."""
    document = mixed_document()
    with use_compiled_kernels(True):
        compiled = _events(document)
    with use_compiled_kernels(False):
        reference = _events(document)
    assert compiled == reference
