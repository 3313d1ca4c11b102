"""The group commit's interval (``live/commit.py``): an event-loop committer takes its batch no sooner than the
interval after the previous take, so a busy scheduler writes fewer, larger transactions; a quiet one is not
delayed, ``wait``/``flush`` never wait for it, and a gathering whose loop stopped is still taken."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from pooltree.server.live import LiveScheduler
from pooltree.server.live.commit import COMMIT_INTERVAL, GroupCommit, commit_interval
from pooltree.server.metrics import make_registry
from pooltree.server.store import JobRecord, open_store

WAIT = 30.0


def _record(job_id: str) -> JobRecord:
    return JobRecord("op", job_id, "running", "n1", 1.0, None, None, {})


class _Written:
    """What a group commit wrote: each batch's job ids and when (``time.monotonic``) its write began."""

    def __init__(self) -> None:
        self.batches: list[list[str]] = []
        self.times: list[float] = []

    def __call__(self, records: Sequence[JobRecord]) -> None:
        self.times.append(time.monotonic())
        self.batches.append([record.id for record in records])


def test_a_busy_committer_waits_out_the_interval_and_a_quiet_one_does_not() -> None:
    interval = 0.4
    written = _Written()
    commits = GroupCommit(written, interval=interval)

    async def main() -> tuple[float, float]:
        first_submitted = time.monotonic()
        await asyncio.wait_for(
            commits.wait_async(commits.submit([_record("a")])), WAIT
        )  # nothing taken before
        # two heartbeats right after: the first gathers until an interval past a's take, the second joins it
        second, third = commits.submit([_record("b")]), commits.submit([_record("c")])
        await asyncio.wait_for(asyncio.gather(commits.wait_async(second), commits.wait_async(third)), WAIT)
        deadline = time.monotonic() + WAIT
        while time.monotonic() < commits._taken_at + interval and time.monotonic() < deadline:
            await asyncio.sleep(0.01)  # quiet for an interval
        quiet_submitted = time.monotonic()
        await asyncio.wait_for(commits.wait_async(commits.submit([_record("d")])), WAIT)
        return first_submitted, quiet_submitted

    try:
        first_submitted, quiet_submitted = asyncio.run(main())
    finally:
        commits.close()
    assert written.batches == [["a"], ["b", "c"], ["d"]]
    assert written.times[1] - first_submitted >= interval  # b and c taken no sooner than an interval after a
    assert written.times[0] - first_submitted < interval  # a, after a quiet start, at once
    assert written.times[2] - quiet_submitted < interval  # d, after a quiet interval, at once
    assert (commits.batches, commits.tickets, commits.gathered) == (3, 4, 1)


def test_without_an_interval_every_committer_takes_at_once() -> None:
    written = _Written()
    commits = GroupCommit(written)

    async def main() -> None:
        for job in ("a", "b", "c"):
            await asyncio.wait_for(commits.wait_async(commits.submit([_record(job)])), WAIT)

    try:
        asyncio.run(main())
    finally:
        commits.close()
    assert written.batches == [["a"], ["b"], ["c"]]
    assert commits.gathered == 0


def test_flush_takes_a_gathering_batch_at_once() -> None:
    """A write under the scheduling lock (``flush``) must not wait for the interval: it takes what is queued,
    the gathering heartbeat's records with it, and that heartbeat's waiter is woken by its end."""
    written = _Written()
    commits = GroupCommit(written, interval=WAIT * 10)
    flushed = threading.Event()

    async def main() -> None:
        await asyncio.wait_for(commits.wait_async(commits.submit([_record("a")])), WAIT)
        gathering = asyncio.ensure_future(commits.wait_async(commits.submit([_record("b")])))
        deadline = time.monotonic() + WAIT
        while commits._gathering_until is None and time.monotonic() < deadline:
            await asyncio.sleep(0.001)
        assert commits._gathering_until is not None
        commits.submit([_record("c")])
        flusher = threading.Thread(target=lambda: (commits.flush(), flushed.set()))
        flusher.start()
        await asyncio.wait_for(gathering, WAIT)
        await asyncio.to_thread(flusher.join, WAIT)

    try:
        asyncio.run(main())
    finally:
        commits.close()
    assert flushed.is_set()
    assert written.batches == [["a"], ["b", "c"]]


@pytest.mark.parametrize("step", ["before its end", "after its end"])
def test_a_gathering_whose_loop_stopped_is_taken_for_a_waiter_on_another_loop(step: str) -> None:
    """The loop that gathers may stop before its timer runs (its service ending): a waiter on another loop still
    gets its batch, by a timer of its own (a step before the gathering's end) or by taking it (a step after)."""
    written = _Written()
    commits = GroupCommit(written, interval=0.3)
    stopped = asyncio.new_event_loop()
    try:
        stopped.run_until_complete(asyncio.wait_for(commits.wait_async(commits.submit([_record("a")])), WAIT))
        assert commits.wait_step(commits.submit([_record("b")]), stopped) is not None  # gathers on `stopped`
        assert commits._gathering_until is not None
    finally:
        stopped.close()  # its timer never runs

    async def other() -> None:
        until = commits._gathering_until
        assert until is not None
        if step == "after its end":
            deadline = time.monotonic() + WAIT
            while time.monotonic() <= until and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
        await asyncio.wait_for(commits.wait_async(commits.submit([_record("c")])), WAIT)

    try:
        asyncio.run(other())
    finally:
        commits.close()
    assert written.batches == [["a"], ["b", "c"]]


def test_the_interval_setting(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    for bad in (-0.001, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="interval"):
            GroupCommit(lambda records: None, interval=bad)
    monkeypatch.delenv("POOLTREE_COMMIT_INTERVAL", raising=False)
    assert commit_interval() == COMMIT_INTERVAL
    monkeypatch.setenv("POOLTREE_COMMIT_INTERVAL", "0")
    assert commit_interval() == 0.0
    monkeypatch.setenv("POOLTREE_COMMIT_INTERVAL", "0.002")
    assert commit_interval() == 0.002
    for bad in ("2", "-0.1", "soon"):
        monkeypatch.setenv("POOLTREE_COMMIT_INTERVAL", bad)
        with caplog.at_level(logging.WARNING):
            assert commit_interval() == COMMIT_INTERVAL
        assert f"POOLTREE_COMMIT_INTERVAL={bad!r}" in caplog.text


def test_the_scheduler_gathers_by_its_interval_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("POOLTREE_COMMIT_INTERVAL", "0.2")
    live = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    commits = live.commits
    assert commits.interval == 0.2

    async def main() -> None:
        await asyncio.wait_for(commits.wait_async(commits.submit([_record("a")])), WAIT)
        await asyncio.wait_for(commits.wait_async(commits.submit([_record("b")])), WAIT)

    try:
        asyncio.run(main())
    finally:
        commits.close()
    assert (commits.batches, commits.gathered) == (2, 1)
    assert {record.id for record in live.store.list_jobs("op")} == {"a", "b"}
    assert (
        "pooltree_scheduler_group_commit_gathered_total 1.0" in generate_latest(make_registry(live)).decode()
    )
