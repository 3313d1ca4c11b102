"""Discretized fair share (tree options ``enable_discretized_fair_share``, ``max_discretized_steps``): operations'
fair-share functions as staircases of whole jobs, after YTsaurus's ``TOperationElement::PrepareFairShareByFitFactor``
and its integration test ``test_scheduler_discretized_fair_share.py``."""

from __future__ import annotations

import numpy as np
import pytest
from fairshare_random_trees import random_case, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.errors import ConfigError
from pooltree.fairshare import Operation, Pool, UpdateSettings, guarantees, update_fair_share
from pooltree.fairshare import discretized as dz
from pooltree.fairshare.building import step_flags
from pooltree.fairshare.compiled import COMPILED_KERNELS_AVAILABLE, use_compiled_kernels
from pooltree.fairshare.model import UpdateState
from pooltree.fairshare.update import _Update
from pooltree.resources import vector

# YTsaurus's integration test: one node of 3 cpu, 20 user slots, 10 GiB.
TOTAL = vector(user_slots=20, cpu=3, memory=10 * 2**30)
ONE_CPU_JOB = vector(user_slots=1, cpu=1)
KERNELS = [False, True] if COMPILED_KERNELS_AVAILABLE else [False]


@pytest.fixture(params=KERNELS, ids=lambda on: "compiled" if on else "numpy")
def kernels(request):
    previous = use_compiled_kernels(request.param)
    yield request.param
    use_compiled_kernels(previous)


def _staircase_inputs(
    root: Pool, settings: UpdateSettings
) -> tuple[dz.DiscretizedInputs, np.ndarray, np.ndarray]:
    """What the staircases read for ``root`` (b.1's attributes computed), its operations' rows and their gang step
    flags."""
    upd = _Update(root, TOTAL, settings, 0.0, None)
    tree, inputs = upd.tree, upd.inputs
    attrs = guarantees.compute_attributes(
        tree,
        upd.total,
        inputs.usage,
        inputs.demand,
        inputs.schedulable,
        inputs.apply_limits,
        inputs.specified_limits,
    )
    staircases = dz.DiscretizedInputs(
        tree,
        upd.total,
        settings.discretized_job_resources,
        settings.max_discretized_steps,
        inputs.apply_limits,
        attrs.usage,
        attrs.demand,
        attrs.dominant,
        {},
    )
    ops = np.flatnonzero(tree.is_op)
    return (
        staircases,
        ops,
        step_flags(tree, inputs.step, settings.enable_step_function_for_gang_operations)[ops],
    )


def _op(name: str, pending: int, running: int = 0, per_job=ONE_CPU_JOB, **kwargs) -> Operation:
    return Operation(
        name,
        usage=per_job * running,
        demand=per_job * (pending + running),
        pending_allocation_count=pending,
        **kwargs,
    )


def _on(job_resources: dict, **kwargs) -> UpdateSettings:
    return UpdateSettings(
        enable_discretized_fair_share=True, discretized_job_resources=job_resources, **kwargs
    )


def _cpu(result, name: str) -> float:
    return float(result.elements[name].fair_share[1])


def test_two_equal_operations_get_one_whole_job_each(kernels):
    """YTsaurus ``test_discretized_fair_share_whole_job_boundary``: two operations of three 1-cpu jobs in one pool
    on 3 cpu get 1 job each (1/3 of the cluster), not 1.5 (0.5) as without the option."""
    root = Pool("<Root>", children=[Pool("pool", children=[_op("op1", 3), _op("op2", 3)])])
    jobs = {"op1": ONE_CPU_JOB, "op2": ONE_CPU_JOB}
    on = update_fair_share(root, TOTAL, _on(jobs), 0.0)
    assert _cpu(on, "op1") == pytest.approx(1 / 3, abs=1e-12)
    assert _cpu(on, "op2") == pytest.approx(1 / 3, abs=1e-12)
    off = update_fair_share(root, TOTAL, UpdateSettings(discretized_job_resources=jobs), 0.0)
    assert _cpu(off, "op1") == pytest.approx(0.5, abs=1e-12)
    assert _cpu(off, "op2") == pytest.approx(0.5, abs=1e-12)


def test_an_uncontested_operation_gets_its_whole_demand(kernels):
    """YTsaurus ``test_discretized_fair_share_uncontested_gives_full_demand``: 2 jobs alone get 2/3."""
    root = Pool("<Root>", children=[Pool("pool", children=[_op("op", 2)])])
    result = update_fair_share(root, TOTAL, _on({"op": ONE_CPU_JOB}), 0.0)
    assert _cpu(result, "op") == pytest.approx(2 / 3, abs=1e-12)


def test_the_staircase_counts_pending_allocations_only(kernels):
    """YTsaurus builds K = pending allocations steps of one job each, capped by the demand: an operation with one
    running and two pending jobs alone tops out at two jobs (its usage is not added)."""
    root = Pool("<Root>", children=[Pool("pool", children=[_op("op", 2, running=1)])])
    result = update_fair_share(root, TOTAL, _on({"op": ONE_CPU_JOB}), 0.0)
    assert _cpu(result, "op") == pytest.approx(2 / 3, abs=1e-12)
    continuous = update_fair_share(root, TOTAL, UpdateSettings(), 0.0)
    assert _cpu(continuous, "op") == pytest.approx(1.0, abs=1e-12)


def test_operations_the_staircase_does_not_apply_to():
    """In the root (YTsaurus's root never discretizes), without pending allocations, without a per-job vector, and
    gang operations under the step function keep their functions."""
    root = Pool(
        "<Root>",
        children=[
            _op("in_root", 3),
            Pool(
                "pool",
                children=[
                    _op("no_vector", 3),
                    _op("gang", 3, is_gang=True),
                    _op("idle", 0),
                    _op("zero_vector", 3),
                    _op("plain", 3),
                ],
            ),
        ],
    )
    jobs = {name: ONE_CPU_JOB for name in ("in_root", "gang", "idle", "plain")}
    jobs["zero_vector"] = vector()
    staircases, ops, step = _staircase_inputs(root, _on(jobs, enable_step_function_for_gang_operations=True))
    mask, pending, per_job = dz.eligible(staircases, ops, step)
    ids = staircases.tree.ids
    found = {ids[i]: bool(m) for i, m in zip(ops.tolist(), mask.tolist(), strict=True)}
    assert found == {
        "in_root": False,
        "no_vector": False,
        "gang": False,
        "idle": False,
        "zero_vector": False,
        "plain": True,
    }
    k = [ids[i] for i in ops.tolist()].index("plain")
    assert pending[k] == 3 and per_job[k].tolist() == pytest.approx([0.05, 1 / 3, 0, 0, 0])


def test_limits_applied_to_demand_cap_the_pending_count(kernels):
    """With ``apply_specified_resource_limits_to_demand`` YTsaurus counts the pending allocations of the needed
    resources capped by the operation's limits: 2 of 3 under a limit of 2 user slots, so the staircase ends at 2 jobs
    (2/3 of the cpu) even when the cluster could give more."""
    limits = vector(user_slots=2, cpu=10, gpu=10, memory=10 * 2**30, network=10)
    capped = _op("op", 3, specified_resource_limits=limits, apply_specified_resource_limits_to_demand=True)
    root = Pool("<Root>", children=[Pool("pool", children=[capped])])
    staircases, ops, step = _staircase_inputs(root, _on({"op": ONE_CPU_JOB}))
    _, pending, _ = dz.eligible(staircases, ops, step)
    assert pending.tolist() == [2]
    result = update_fair_share(root, TOTAL, _on({"op": ONE_CPU_JOB}), 0.0)
    assert _cpu(result, "op") == pytest.approx(2 / 3, abs=1e-12)


def test_staircase_points():
    """Step k at fit factor k·2/(K+1) from v(k−1) to v(k) = min(k·perJob, demand), flat to f = 2."""
    per_job = np.array([0.05, 1 / 3, 0, 0, 0])
    demand = per_job * 3
    x, y = dz.staircase(3, 0, 3, demand, per_job)
    assert x.tolist() == [0.0, 0.5, 0.5, 1.0, 1.0, 1.5, 1.5, 2.0]
    assert np.allclose(y[:, 1], [0, 0, 1 / 3, 1 / 3, 2 / 3, 2 / 3, 1, 1])
    # Capped by demand: a step that adds nothing is no point.
    x, y = dz.staircase(3, 0, 3, per_job * 1.5, per_job)
    assert np.allclose(y[:, 1], [0, 0, 1 / 3, 1 / 3, 0.5, 0.5, 0.5])
    assert np.all(np.diff(x) >= 0) and np.all(np.diff(y, axis=0) >= 0)


def test_window_of_a_large_operation():
    """Above M pending allocations only M steps around the hint are stairs; ramps below and above."""
    assert dz.window(10, 100, 0) == (0, 10)
    assert dz.window(10, 4, 0) == (0, 4)
    assert dz.window(10, 4, 5) == (3, 7)
    assert dz.window(10, 4, 10) == (6, 10)
    assert dz.window(11, 5, 5) == (3, 8)  # M // 2 below the centre
    per_job = np.array([0.0, 0.1, 0, 0, 0])
    demand = per_job * 10
    x, y = dz.staircase(10, 3, 7, demand, per_job)
    width = 2 / 11
    assert x[0] == 0.0 and x[1] == pytest.approx(3 * width) and y[1][1] == pytest.approx(0.3)
    assert x[-1] == 2.0 and y[-1][1] == pytest.approx(1.0)  # the ramp above reaches the demand
    assert x[-2] == pytest.approx(7 * width) and y[-2][1] == pytest.approx(0.7)
    jumps = [k for k in range(1, len(x)) if x[k] == x[k - 1]]
    assert len(jumps) == 4  # steps 4..7


def test_batched_staircases_are_the_reference_points():
    """``staircases`` (all operations at once) gives ``staircase``'s points bit for bit, capped steps included."""
    rng = np.random.default_rng(7)
    cases = []
    for _ in range(300):
        pending = int(rng.integers(1, 40))
        max_steps = int(rng.integers(1, 45))
        lo, hi = dz.window(pending, max_steps, int(rng.integers(0, pending + 1)))
        per_job = rng.choice([0.0, 0.01, 0.05, 1 / 3], size=5)
        demand = per_job * (pending + int(rng.integers(0, 3))) * rng.choice([1.0, 0.5])
        cases.append((pending, lo, hi, demand, per_job))
    batch = dz.staircases(
        np.array([c[0] for c in cases]),
        np.array([c[1] for c in cases]),
        np.array([c[2] for c in cases]),
        np.array([c[3] for c in cases]),
        np.array([c[4] for c in cases]),
    )
    for i, case in enumerate(cases):
        x, y = dz.staircase(*case)
        lo, hi = batch.offsets[i], batch.offsets[i + 1]
        assert np.array_equal(batch.x[lo:hi], x), i
        assert np.array_equal(batch.y[lo:hi], y), i


def test_window_hint():
    """The previous fair share, else the usage share, in jobs of the dominant resource, rounded half up."""
    per_job = np.array([0.01, 0.1, 0, 0, 0])
    usage = np.array([0.02, 0.2, 0, 0, 0])
    assert dz.hint_jobs(np.array([0.0, 0.45, 0, 0, 0]), usage, per_job, 1, 10) == 5
    assert dz.hint_jobs(None, usage, per_job, 1, 10) == 2
    assert dz.hint_jobs(None, usage * 0, per_job, 1, 10) == 0
    assert dz.hint_jobs(np.array([0.0, 3.0, 0, 0, 0]), usage, per_job, 1, 10) == 10  # clamped to K


def test_the_previous_fair_share_moves_the_window(kernels):
    """Two operations of 10 pending 1-cpu jobs on 10 cpu with M = 4. The first update's windows are steps 0..4 (no
    usage, no previous fair share) with a ramp above, where each gets 0.5. The next windows are centred on those 5
    jobs (steps 3..7, ramps on both sides): now the fifth job of both is one simultaneous step that lands exactly
    on the whole cluster and rises after it, which YTsaurus's left-continuity does not take (pooltree/fairshare
    ARCHITECTURE.md, jumps that land on a limit): 4 jobs each, and so again in the update after."""
    total = vector(user_slots=100, cpu=10, memory=1.0)
    root = Pool("<Root>", children=[Pool("pool", children=[_op("a", 10), _op("b", 10)])])
    settings_on = _on({"a": ONE_CPU_JOB, "b": ONE_CPU_JOB}, max_discretized_steps=4)
    first = update_fair_share(root, total, settings_on, 0.0)
    assert _cpu(first, "a") == _cpu(first, "b") == pytest.approx(0.5, abs=1e-12)
    assert first.state.discretized_fair_share is not None
    assert first.state.discretized_fair_share["a"][1] == pytest.approx(0.5)
    second = update_fair_share(root, total, settings_on, 1.0, first.state)
    assert _cpu(second, "a") == _cpu(second, "b") == pytest.approx(0.4, abs=1e-12)
    third = update_fair_share(root, total, settings_on, 2.0, second.state)
    assert _cpu(third, "a") == _cpu(third, "b") == pytest.approx(0.4, abs=1e-12)
    # Without the previous fair share (a fresh state) the window is at 0 again.
    fresh = update_fair_share(root, total, settings_on, 2.0)
    assert _cpu(fresh, "a") == pytest.approx(0.5, abs=1e-12)
    # Three operations: 10/3 cpu each is no whole number; each gets 3 jobs, windowed or not.
    three = Pool("<Root>", children=[Pool("pool", children=[_op(n, 10) for n in "abc"])])
    jobs = {n: ONE_CPU_JOB for n in "abc"}
    result = update_fair_share(three, total, _on(jobs), 0.0)
    assert [_cpu(result, n) for n in "abc"] == pytest.approx([0.3, 0.3, 0.3], abs=1e-12)
    windowed = update_fair_share(three, total, _on(jobs, max_discretized_steps=4), 0.0)
    again = update_fair_share(three, total, _on(jobs, max_discretized_steps=4), 1.0, windowed.state)
    assert [_cpu(again, n) for n in "abc"] == pytest.approx([0.3, 0.3, 0.3], abs=1e-12)
    assert update_fair_share(three, total, UpdateSettings(), 0.0).elements["a"].fair_share[
        1
    ] == pytest.approx(1 / 3)


def test_bad_max_steps_is_refused_naming_the_field():
    root = Pool("<Root>", children=[Pool("pool", children=[_op("op", 3)])])
    for bad in (0, -1, 2.5, True, "100"):
        with pytest.raises(ConfigError) as error:
            update_fair_share(root, TOTAL, _on({"op": ONE_CPU_JOB}, max_discretized_steps=bad), 0.0)
        assert "max_discretized_steps" in str(error.value)


def test_off_the_new_settings_change_nothing():
    """With the option off, per-job vectors and a step count change no byte of any result."""
    for seed in range(6):
        root, total, base = random_case(seed)
        ops = _operations(root)
        jobs = {op.id: np.maximum(op.demand / max(op.pending_allocation_count, 1), 0.0) for op in ops}
        off = UpdateSettings(
            **{**base.__dict__, "max_discretized_steps": 3, "discretized_job_resources": jobs}
        )
        state_a, state_b = UpdateState(), UpdateState()
        for step in range(2):
            a = update_fair_share(root, total, base, 100.0 * step, state_a)
            b = update_fair_share(root, total, off, 100.0 * step, state_b)
            assert snapshot(a) == snapshot(b)
            assert b.state.discretized_fair_share is None
            state_a, state_b = a.state, b.state


def _operations(pool: Pool) -> list[Operation]:
    found: list[Operation] = []
    for child in pool.children:
        if isinstance(child, Pool):
            found.extend(_operations(child))
        else:
            found.append(child)  # type: ignore[arg-type]
    return found


@st.composite
def _trees(draw):
    """A pool tree of operations with whole jobs of one kind each (per-job vector, pending and running counts)."""
    jobs: dict[str, np.ndarray] = {}

    def operation(name: str) -> Operation:
        per_job = np.array(
            [1.0, draw(st.sampled_from([1, 2, 4])), 0.0, draw(st.sampled_from([5, 20, 60])), 0.0]
        )
        pending = draw(st.integers(0, 30))
        running = draw(st.integers(0, 5))
        jobs[name] = per_job
        return _op(name, pending, running, per_job=per_job, weight=draw(st.sampled_from([None, 1.0, 2.0])))

    def pool(name: str, depth: int) -> Pool:
        children: list = []
        for k in range(draw(st.integers(1, 3))):
            child = f"{name}.{k}"
            children.append(pool(child, depth - 1) if depth and draw(st.booleans()) else operation(child))
        return Pool(name, weight=draw(st.sampled_from([None, 1.0, 3.0])), children=children)

    root = Pool("<Root>", children=[pool(f"p{k}", 2) for k in range(draw(st.integers(1, 3)))])
    return root, jobs, draw(st.sampled_from([100, 3]))


TREE_TOTAL = vector(user_slots=100, cpu=60, gpu=0, memory=1000, network=100)


@settings(max_examples=40, deadline=None)
@given(_trees())
def test_shares_are_whole_jobs(case):
    """With the option on (no limits, no guarantees), every discretized operation's fair share is v(k) for a whole
    number k of jobs (capped by its demand), and the shares still fit the cluster."""
    root, jobs, max_steps = case
    result = update_fair_share(root, TREE_TOTAL, _on(jobs, max_discretized_steps=max_steps), 0.0)
    total_fs = np.zeros(5)
    for op in _operations(root):
        fs = result.elements[op.id].fair_share
        total_fs += fs
        if op.pending_allocation_count == 0 or op.pending_allocation_count > max_steps:
            continue  # continuous, or a window with ramps around it
        per_job = jobs[op.id] / np.where(TREE_TOTAL > 0, TREE_TOTAL, 1.0)
        demand = result.elements[op.id].demand_share
        whole = [np.minimum(per_job * k, demand) for k in range(op.pending_allocation_count + 1)]
        assert any(np.allclose(fs, v, atol=1e-9) for v in whole), (op.id, fs.tolist())
    assert np.all(total_fs <= 1.0 + 1e-9)
