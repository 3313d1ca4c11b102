"""Opt-in warm start: what is carried over, keys, LRU bound, layout changes."""

from __future__ import annotations

import pytest

from pooltree.controllers.memory import TaskMemoryOptions, TaskMemoryReserve
from pooltree.controllers.warm_start import MemoryDigestWarmStartStore
from pooltree.errors import ConfigError

GiB = 1024.0**3


def finished_operation(ratio: float, jobs: int = 40, spec: dict | None = None) -> TaskMemoryReserve:
    t = TaskMemoryReserve(TaskMemoryOptions.from_spec(spec or {"memory_limit": "1Gi"}))
    for _ in range(jobs):
        t.on_job_completed(ratio * GiB, 200 * 1024.0**2)
    t.start_job("c")
    t.on_job_aborted_resource_overdraft("c", ratio * GiB)
    return t


def test_new_operation_starts_from_previous_digest() -> None:
    store = MemoryDigestWarmStartStore()
    previous = finished_operation(0.3)
    assert store.remember("alice", "research", "python map.py", previous)
    state = store.lookup("alice", "research", "python map.py")
    assert state is not None
    warm = TaskMemoryReserve(TaskMemoryOptions.from_spec({"memory_limit": "1Gi"}), warm_start=state)
    assert warm.warm_started
    assert warm.user_job_reserve_factor() == previous.user_job_reserve_factor() < 0.5
    assert warm.job_proxy_reserve_factor() == previous.job_proxy_reserve_factor()
    assert warm.user_job_digest.sample_count == previous.user_job_digest.sample_count
    # restart reserves and running jobs are not carried
    assert warm.reserve_for_restart("c") is None and warm.running_reserve("c") is None
    cold = TaskMemoryReserve(TaskMemoryOptions.from_spec({"memory_limit": "1Gi"}))
    assert cold.user_job_reserve_factor() == 0.5


def test_other_keys_start_cold() -> None:
    store = MemoryDigestWarmStartStore()
    store.remember("alice", "research", "python map.py", finished_operation(0.3))
    assert store.lookup("bob", "research", "python map.py") is None
    assert store.lookup("alice", "prod", "python map.py") is None
    assert store.lookup("alice", "research", "python reduce.py") is None


def test_lru_bound() -> None:
    store = MemoryDigestWarmStartStore(capacity=2)
    store.remember("u", "p", "a", finished_operation(0.3))
    store.remember("u", "p", "b", finished_operation(0.3))
    assert store.lookup("u", "p", "a") is not None  # a is now most recent
    store.remember("u", "p", "c", finished_operation(0.3))
    assert len(store) == 2
    assert store.lookup("u", "p", "b") is None
    assert store.keys() == [("u", "p", "a"), ("u", "p", "c")]


def test_empty_operation_not_remembered_and_carried_samples_capped() -> None:
    store = MemoryDigestWarmStartStore(max_carried_samples=10)
    assert not store.remember("u", "p", "t", TaskMemoryReserve())
    store.remember("u", "p", "t", finished_operation(0.3, jobs=95))
    state = store.lookup("u", "p", "t")
    assert state is not None and state.user_job_digest["sample_count"] == 10
    warm = TaskMemoryReserve(TaskMemoryOptions.from_spec({"memory_limit": "1Gi"}), warm_start=state)
    assert warm.user_job_digest.sample_count == 10


def test_changed_layout_starts_cold() -> None:
    store = MemoryDigestWarmStartStore()
    store.remember("u", "p", "t", finished_operation(0.3))
    state = store.lookup("u", "p", "t")
    spec = {"memory_limit": "1Gi", "tmpfs_size": "200Mi"}  # a different lower bound: counters do not line up
    warm = TaskMemoryReserve(TaskMemoryOptions.from_spec(spec), warm_start=state)
    assert warm.user_job_digest.sample_count == 0
    assert warm.user_job_reserve_factor() == 0.5


def test_bad_store_config_and_key() -> None:
    with pytest.raises(ConfigError):
        MemoryDigestWarmStartStore(capacity=0)
    with pytest.raises(ConfigError) as info:
        MemoryDigestWarmStartStore().lookup("", "p", "t")
    assert info.value.path == "user"
