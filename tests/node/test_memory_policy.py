"""Node memory arbitration (pure) and the choice of memory meter."""

from __future__ import annotations

import os
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.errors import ConfigError
from pooltree.node.arbitration import JobMemoryUsage, arbitrate_node_memory
from pooltree.node.job import JobSpec
from pooltree.node.memory import CgroupMeter, ProcessTreeMeter, make_meter, probe_cgroup_v2

MiB = 1024 * 1024


def usage(
    job_id: str, used: float, reserve: float, limit: float | None = None, start: float = 0.0
) -> JobMemoryUsage:
    return JobMemoryUsage(job_id=job_id, usage=used, reserve=reserve, memory_limit=limit, start_time=start)


def test_job_above_reserve_keeps_running_while_the_node_has_room():
    decision = arbitrate_node_memory(1000, [usage("a", 600, 100, 800), usage("b", 300, 300)])
    assert decision.memory_limit_exceeded == () and decision.resource_overdraft == ()


def test_memory_limit_is_checked_before_overdraft():
    decision = arbitrate_node_memory(1000, [usage("a", 900, 100, 800), usage("b", 500, 100, start=1)])
    assert decision.memory_limit_exceeded == ("a",)
    assert decision.resource_overdraft == (), "after a's failure the node fits b"


def test_overdraft_aborts_the_largest_overdraft_first():
    jobs = [usage("small", 300, 100, start=2), usage("large", 700, 100, start=1)]
    assert arbitrate_node_memory(900, jobs).resource_overdraft == ("large",)


def test_overdraft_ties_go_to_the_newest_job():
    jobs = [
        usage("old", 500, 100, start=1),
        usage("new", 500, 100, start=2),
        usage("fits", 300, 300, start=3),
    ]
    decision = arbitrate_node_memory(1000, jobs)
    assert decision.resource_overdraft == ("new",)
    decision = arbitrate_node_memory(200, jobs)
    assert decision.resource_overdraft == ("new", "old"), "a job within its reserve is never a victim"


job_lists = st.lists(
    st.tuples(st.integers(0, 1000), st.integers(0, 1000), st.one_of(st.none(), st.integers(1, 1000))),
    max_size=8,
)


@settings(max_examples=150, deadline=None)
@given(jobs=job_lists, node_limit=st.integers(0, 3000))
def test_arbitration_properties(jobs, node_limit):
    views = [usage(f"j{i}", u, r, lim, start=i) for i, (u, r, lim) in enumerate(jobs)]
    decision = arbitrate_node_memory(node_limit, views)
    by_id = {view.job_id: view for view in views}
    failed, aborted = set(decision.memory_limit_exceeded), set(decision.resource_overdraft)
    assert not failed & aborted
    assert failed == {v.job_id for v in views if v.memory_limit is not None and v.usage > v.memory_limit}
    assert all(by_id[j].usage > by_id[j].reserve for j in aborted)
    remaining = sum(v.usage for v in views if v.job_id not in failed | aborted)
    candidates_left = [v for v in views if v.job_id not in failed | aborted and v.usage > v.reserve]
    # Either the node fits now, or every job above its reserve has been aborted.
    assert remaining <= node_limit or not candidates_left
    if aborted:
        # Minimality: without the last victim the node would still not fit.
        last = decision.resource_overdraft[-1]
        assert remaining + by_id[last].usage > node_limit


def test_cgroup_probe_rejects_a_hierarchy_without_memory(tmp_path):
    hierarchy = tmp_path / "cg"
    assert "no cgroup v2 hierarchy" in probe_cgroup_v2(hierarchy / "pooltree")
    hierarchy.mkdir()
    (hierarchy / "cgroup.controllers").write_text("cpu io pids\n")
    assert "does not offer the memory controller" in probe_cgroup_v2(hierarchy / "pooltree")
    (hierarchy / "cgroup.controllers").write_text("cpu memory\n")
    # A plain directory is not a cgroup: children get no memory.current.
    reason = probe_cgroup_v2(hierarchy / "pooltree")
    assert reason is not None and ("memory" in reason)
    meter, why = make_meter("auto", hierarchy / "pooltree")
    assert isinstance(meter, ProcessTreeMeter) and why.startswith("psutil fallback")
    with pytest.raises(ConfigError, match="memory_meter"):
        make_meter("cgroup", hierarchy / "pooltree")


@pytest.mark.skipif(
    probe_cgroup_v2() is not None or sys.platform != "linux" or os.geteuid() != 0,
    reason="no writable cgroup v2 memory hierarchy on this machine",
)
def test_cgroup_meter_on_a_real_hierarchy(tmp_path):
    meter, _ = make_meter("cgroup")
    assert isinstance(meter, CgroupMeter)
    spec = JobSpec(job_id="cg-probe", operation_id="op", command="true", memory_limit=64 * MiB)
    meter.prepare(spec.job_id, spec.memory_limit)
    try:
        assert (meter.parent / "job-cg-probe" / "memory.max").read_text().strip() == str(64 * MiB)
        assert meter.sample([spec.job_id])[spec.job_id].current >= 0
    finally:
        meter.release(spec.job_id)
    assert not (meter.parent / "job-cg-probe").exists()
