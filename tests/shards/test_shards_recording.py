"""The recorded-heartbeat harness node shards are proven with: a run of the single-process scheduler with
starts, completions and preemptions is recorded; replays into fresh schedulers make the same decisions, and a
scheduler that decides differently (another pool configuration) is told apart."""

from __future__ import annotations

from pathlib import Path

from recorded_run import NOT_PREEMPTING, PREEMPTING, make_scheduler, record_run

from pooltree.shards.recording import ReplayDivergence, replay


def test_replays_decide_as_the_recorded_run(tmp_path: Path) -> None:
    recorder, recorded = record_run(tmp_path / "recorded.db")
    assert recorded.started_count > 10 and recorded.preempted_count > 0  # starts, completions and preemptions
    for name in ("first.db", "second.db"):
        assert replay(recorder.recording, make_scheduler(tmp_path / name, PREEMPTING)) == recorded


def test_a_scheduler_that_decides_otherwise_is_told_apart(tmp_path: Path) -> None:
    recorder, recorded = record_run(tmp_path / "recorded.db")
    try:
        other = replay(recorder.recording, make_scheduler(tmp_path / "other.db", NOT_PREEMPTING))
    except ReplayDivergence:
        return
    assert other != recorded
