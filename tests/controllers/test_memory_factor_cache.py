"""A task's memory reserve keeps its new-job factors between samples (``TaskMemoryReserve._new_job_factors``): a start
reads them, only a sample (or a warm start, a reset, a merge) moves them. The kept factors and demands must equal
what the plain computation gives at every step of any sequence of starts, completions, overdraft aborts and
digest changes, with and without the recent window and a cold-start prior."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.controllers.memory import (
    JobMemoryReserve,
    MemoryDigestSettings,
    TaskMemoryOptions,
    TaskMemoryReserve,
)
from pooltree.digest import LogDigest

GIB = float(2**30)


def plain_demand(reserve: TaskMemoryReserve, cookie: object) -> float:
    """The demand computed afresh from the digests, as before the factors were kept."""
    restart = reserve.reserve_for_restart(cookie) if cookie is not None else None
    uj = reserve.user_job_reserve_factor()
    jp = reserve.job_proxy_reserve_factor()
    if restart is not None:
        uj = restart.user_job_reserve_factor if restart.user_job_reserve_factor is not None else uj
        jp = restart.job_proxy_reserve_factor if restart.job_proxy_reserve_factor is not None else jp
    o = reserve.options
    return JobMemoryReserve(
        user_job_reserve_factor=uj,
        job_proxy_reserve_factor=jp,
        memory_limit=o.memory_limit,
        job_proxy_estimate=o.job_proxy_memory,
        footprint_memory=o.footprint_memory,
        restarted=restart is not None,
    ).memory_demand


steps = st.lists(
    st.one_of(
        st.tuples(st.just("start"), st.integers(0, 5)),
        st.tuples(st.just("complete"), st.integers(0, 5), st.floats(0.01, 1.5), st.floats(0.0, 2.0)),
        st.tuples(st.just("overdraft"), st.integers(0, 5), st.floats(0.01, 2.0), st.floats(0.0, 2.0)),
        st.tuples(st.just("reset"), st.sampled_from(["user", "proxy"])),
        st.tuples(st.just("merge"), st.floats(0.01, 1.0)),
    ),
    max_size=60,
)


@settings(max_examples=150, deadline=None)
@given(
    steps=steps,
    window=st.sampled_from([0, 3, 12]),
    rule=st.sampled_from(["quantile", "overdraft_cost"]),
    prior=st.booleans(),
)
def test_kept_factors_equal_the_plain_computation(
    steps: list[tuple[object, ...]], window: int, rule: str, prior: bool
) -> None:
    config = MemoryDigestSettings(user_job_recent_window=window, user_job_reserve_rule=rule)  # type: ignore[arg-type]
    options = TaskMemoryOptions.from_spec({"memory_limit": "1Gi"}, config)
    cold = None
    if prior:
        cold = LogDigest(options.user_job_digest_lower_bound, 1.0, config.user_job_memory_digest_precision)
        cold.add_sample(0.7)
    reserve = TaskMemoryReserve(options, config, cold_start_prior=cold)
    for step in steps:
        kind = step[0]
        if kind == "start":
            cookie = ("main", step[1])
            assert reserve.start_job(cookie).memory_demand == plain_demand(reserve, cookie)
        elif kind == "complete":
            _, index, user, proxy = step
            reserve.on_job_completed(user * GIB, proxy * GIB, cookie=("main", index))
        elif kind == "overdraft":
            _, index, user, proxy = step
            reserve.on_job_aborted_resource_overdraft(("main", index), user * GIB, proxy * GIB)
        elif kind == "reset":
            (reserve.user_job_digest if step[1] == "user" else reserve.job_proxy_digest).reset()
        else:
            other = reserve.user_job_digest.copy()
            other.reset()
            other.add_sample(float(step[1]))  # type: ignore[arg-type]
            reserve.user_job_digest.merge(other)
        assert reserve.memory_demand() == plain_demand(reserve, None)
        for index in range(6):
            cookie = ("main", index)
            assert reserve.memory_demand(cookie) == plain_demand(reserve, cookie)
