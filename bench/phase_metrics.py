"""What a phase of a live bench did to the scheduler, from its ``/metrics`` text read at the phase's start and end
(``lock_figures``): the scheduling lock's holds, the fair-share updates, the read snapshot's captures, the
collector's pauses and the group commit's transactions. Used by ``live_nodes.py`` (and the benches that reuse its
phases); apart from it because it reads metrics, not heartbeats."""

from __future__ import annotations

from typing import Any

OVERTAKEN = "pooltree_scheduler_fair_share_computes_overtaken_total"
CAPTURES = "pooltree_scheduler_read_snapshot_capture_cpu_seconds"
COMMIT_BATCHES = "pooltree_scheduler_group_commit_batches_total"
COMMIT_SUBMISSIONS = "pooltree_scheduler_group_commit_submissions_total"


def sample(text: str, name: str) -> float | None:
    """The value of the sample ``name`` (with its labels, as written) in a ``/metrics`` text, None if absent."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return None


def lock_figures(before: str | None, after: str | None) -> dict[str, Any]:
    """What a phase did to the scheduling lock, from ``/metrics`` read at its start and end: holds longer than
    50 and 100 ms in it, the longest hold so far (the metric is not per phase), the fair-share updates' mean wall
    time in it (lock waits included; older builds without the lock's histogram report only this), the read
    snapshot's captures in it and their mean thread CPU under the lock (builds that count them) and the garbage
    collections' count and pauses per generation."""
    if before is None or after is None:
        return {}
    figures: dict[str, Any] = {}
    update = 'pooltree_scheduler_work_seconds_{}{{work="fair_share_update"}}'
    counts = [sample(text, update.format("count")) for text in (before, after)]
    sums = [sample(text, update.format("sum")) for text in (before, after)]
    if None not in counts and None not in sums and counts[1] > counts[0]:  # type: ignore[operator]
        figures["fair_share_updates"] = counts[1] - counts[0]  # type: ignore[operator]
        figures["fair_share_update_mean_ms"] = round(
            1000 * (sums[1] - sums[0]) / (counts[1] - counts[0]),  # type: ignore[operator]
            2,
        )
    bucket = 'pooltree_scheduler_lock_hold_seconds_bucket{{le="{}"}}'
    every = [sample(text, bucket.format("+Inf")) for text in (before, after)]
    if None in every:
        return figures
    for bound, label in (("0.05", "50"), ("0.1", "100")):
        below = [sample(text, bucket.format(bound)) for text in (before, after)]
        if None not in below:
            figures[f"lock_holds_over_{label}ms"] = (every[1] - below[1]) - (every[0] - below[0])  # type: ignore[operator]
    figures["lock_holds"] = every[1] - every[0]  # type: ignore[operator]
    longest = sample(after, "pooltree_scheduler_lock_hold_max_seconds")
    if longest is not None:
        figures["lock_hold_max_ms_so_far"] = round(1000 * longest, 1)
    overtaken = [sample(text, OVERTAKEN) for text in (before, after)]
    if None not in overtaken:  # builds that compute the fair share outside the lock
        figures["fair_share_computes_overtaken"] = overtaken[1] - overtaken[0]  # type: ignore[operator]
    captures = [sample(text, f"{CAPTURES}_count") for text in (before, after)]
    capture_cpu = [sample(text, f"{CAPTURES}_sum") for text in (before, after)]
    if None not in captures and None not in capture_cpu and captures[1] > captures[0]:  # type: ignore[operator]
        # the read snapshot's captures under the lock in the phase, their thread CPU (builds that count them)
        figures["read_snapshot_captures"] = captures[1] - captures[0]  # type: ignore[operator]
        figures["read_snapshot_capture_cpu_ms_mean"] = round(
            1000 * (capture_cpu[1] - capture_cpu[0]) / (captures[1] - captures[0]),  # type: ignore[operator]
            2,
        )
    collections = {}
    for generation in ("0", "1", "2"):  # the garbage collector's pauses in the phase, per generation
        label = f'{{generation="{generation}"}}'
        counts = [sample(text, f"pooltree_gc_pause_seconds_count{label}") for text in (before, after)]
        sums = [sample(text, f"pooltree_gc_pause_seconds_sum{label}") for text in (before, after)]
        if None not in counts and None not in sums:
            collections[generation] = {
                "count": counts[1] - counts[0],  # type: ignore[operator]
                "total_ms": round(1000 * (sums[1] - sums[0]), 1),  # type: ignore[operator]
            }
    if collections:
        figures["gc_pauses"] = collections
    batches = [sample(text, COMMIT_BATCHES) for text in (before, after)]
    submissions = [sample(text, COMMIT_SUBMISSIONS) for text in (before, after)]
    if None not in batches and None not in submissions and batches[1] > batches[0]:  # type: ignore[operator]
        # heartbeats' record sets stored per store transaction (`heartbeat_profile.py --commit-batch`)
        figures["group_commit_batches"] = batches[1] - batches[0]  # type: ignore[operator]
        figures["group_commit_submissions_per_batch"] = round(
            (submissions[1] - submissions[0]) / (batches[1] - batches[0]),  # type: ignore[operator]
            2,
        )
    return figures
