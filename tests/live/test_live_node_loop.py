"""The node loop's own rules: ``--resources`` / ``--tags`` parsing, bounded backoff, and that a node whose
scheduler is unreachable keeps retrying within the backoff cap and stops promptly."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pooltree.errors import ConfigError
from pooltree.node.agent import detect_resource_limits
from pooltree.node.service import (
    BACKOFF_CAP,
    backoff_delay,
    check_period,
    parse_resources_option,
    parse_tags,
    run_node,
)
from pooltree.resources import vector

GIB = 1024**3


def test_resources_option_parses_numbers_and_sizes() -> None:
    overrides = parse_resources_option("cpu=4, memory=8Gi,user_slots=4")
    assert overrides == {"cpu": 4.0, "memory": "8Gi", "user_slots": 4.0}
    limits = detect_resource_limits(overrides)
    assert list(limits[:2]) == [4.0, 4.0] and limits[3] == 8 * GIB
    assert parse_resources_option("") == {}


@pytest.mark.parametrize(
    ("text", "path"),
    [("cpu", "resources"), ("cpu=1,cpu=2", "resources.cpu"), ("=3", "resources"), ("cpu=", "resources")],
)
def test_resources_option_errors_name_the_field(text: str, path: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_resources_option(text)
    assert error.value.path == path


def test_tags() -> None:
    assert parse_tags("ssd, fast,,ssd") == ("ssd", "fast")
    with pytest.raises(ConfigError, match=r"tags\[0\]"):
        parse_tags("bad tag")
    with pytest.raises(ConfigError, match=r"tags\[1\]"):
        parse_tags(["ok", ""])


@settings(max_examples=50, deadline=None)
@given(st.integers(min_value=0, max_value=10_000))
def test_backoff_is_bounded_and_monotone(failures: int) -> None:
    delay = backoff_delay(failures)
    assert 0 <= delay <= BACKOFF_CAP
    assert backoff_delay(failures + 1) >= delay
    assert (delay == 0) == (failures == 0)


def test_period_bounds() -> None:
    assert check_period(0.5, "p") == 0.5
    for bad in (0, -1, float("nan"), 61, True, "1"):
        with pytest.raises(ConfigError, match=r"^p:"):
            check_period(bad, "p")


def test_unreachable_scheduler_is_retried_with_backoff_and_stop_is_prompt(tmp_path: Path) -> None:
    loops = []
    ready_at: list[float] = []

    def ready(loop: Any) -> None:
        ready_at.append(time.monotonic())
        loops.append(loop)

    async def main() -> tuple[float, float, int]:
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_node(
                "http://127.0.0.1:9",  # discard port: nothing listens
                root_dir=tmp_path / "node",
                address="n1",
                resources={"user_slots": 1, "cpu": 1, "memory": "1Gi"},
                stop=stop,
                memory_meter="psutil",
                on_ready=ready,
            )
        )
        # the fifth failed attempt, waited for (bounded), not a fixed sleep: a slow machine only makes it later
        deadline = time.monotonic() + 20
        while not (loops and loops[0].stats.failures >= 5):
            assert time.monotonic() < deadline and not task.done(), "five attempts within 20 s"
            await asyncio.sleep(0.01)
        fifth = time.monotonic() - ready_at[0]
        stop.set()  # during the fifth backoff (0.8 s)
        started = time.monotonic()
        stats = await asyncio.wait_for(task, 10)
        return fifth, time.monotonic() - started, stats.failures

    fifth, elapsed, failures = asyncio.run(main())
    # 0.05 + 0.1 + 0.2 + 0.4 s of backoff come before the fifth attempt: never a busy loop
    assert fifth >= 0.75 * 0.95, fifth
    assert failures == 5  # stopped in the backoff after it, without another attempt
    assert elapsed < 2.5  # not waiting out the backoff
    agent = loops[0].agent
    assert agent.address == "n1" and list(agent.resource_limits) == list(
        vector(user_slots=1, cpu=1, gpu=0, memory=GIB, network=100)
    )
