"""Heartbeats a node shard answers itself: the leader's proof that a node's next heartbeat changes nothing.

Most heartbeats of a cluster change nothing: the node reports the jobs it reported last time and the strategy
finds nothing to start, stop or acknowledge (a full node, or no pending work that fits it). YTsaurus's node shards
process such heartbeats in parallel against the tree snapshot; here the leader proves them empty with the
strategy's own rule, and the shard answers them without the leader.

After processing a node's heartbeat, the leader (``LeaderVerdicts.prove``, in the heartbeat's hold of the
scheduler's lock) asks whether a heartbeat reporting the same running jobs (same ids, usage, memory, GPUs), no
finished job, the same limits, tags, memory meter and alerts would change anything, and answers with its state
generation when it provably would not (the shard keeps that as the node's ``NodeVerdict``, bound to the same
peer): the node runs exactly the jobs the scheduler holds running there, no revived job is reserved for it, no
stop or abort is queued for it, no tree waits to be published and no tentative ban to be applied, and in each of
its trees ``SchedulerCore.heartbeat_is_noop`` (the rule the simulator skips heartbeats by) holds even with the
preemptive stages due. That proof reads the node's usage, the tree's pending work
(``generation.pending_min_needed``), starving operations, violated limits and queued stops; it holds while the
scheduler's ``StateGeneration`` (``server/live/generation.py``) is the one it was made at.

The shard keeps each node's last verdict (``ShardNodes``) and the latest generation the leader told it. A
heartbeat equal to the proven one while the generation holds is answered by the shard: nothing to start, stop
or acknowledge, the period and shard URL of the leader's last answer. Every other heartbeat goes to the leader
as before. The shard notes each heartbeat it answered (``take_skips``) and sends the notes to the leader before
the next heartbeat it forwards (and every ``SKIP_FLUSH_PERIOD`` seconds); the leader applies them in order
(``apply_skips``): the node was seen, and each tree's ``SchedulerCore.skip_heartbeat`` moves the preemptive
backoff as the heartbeat's strategy pass would have. Nothing else of a proven-empty heartbeat changes the
leader's state but the orchid's deactivation counters of a pass that tried operations and found none that fits,
which a skipped heartbeat does not count (as in the simulator).

**After starts.** A heartbeat answered with jobs to start is followed by one that first reports them running;
reported as started (the resources of their start entry, no measured memory yet or up to the bound) they change
nothing at the leader that a later report would not (``LiveJobs._take_running_reports``: a known running job
confirmed). So the leader proves that expected heartbeat (``expected_next``: this heartbeat's running jobs and
the started ones, in that order, no finished job) and the shard keeps the verdict for it: the nodes that a start
fills are answered by their shard from their next heartbeat on, not from the one after. Such a proof counts
toward the sparing of unused proofs as any other.

**Full nodes.** A node that cannot start more in any of its trees reads no pending work, so its proof also holds
while only other nodes' jobs start and end: the leader adds (``StateGeneration.full_stamp``) the generation's
``coarse`` counter and the node's own stamp, and the shard answers while either the whole generation or both of
those are the proven ones (``generation.py`` says what moves them). On a busy cluster the generation moves at
every start and end anywhere, but the heartbeats of full nodes that report nothing new are answered by the shards.

No decision is made on stale state: a shard either answers what the leader would have answered, or forwards.
A generation the leader moved reaches the shard a little later (the pipe; ``host.GENERATION_POLL``), and during
that window a shard may answer a heartbeat the leader would now give work: the work waits for the node's next
heartbeat, as a start waits for a heartbeat anyway; nothing is started, stopped, lost or run twice by it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from pooltree.errors import ConfigError
from pooltree.node import wire
from pooltree.node.wire import HeartbeatRequest, RunningJobReport
from pooltree.resources import MEMORY, parse_resources
from pooltree.server.live.generation import pending_min_needed
from pooltree.strategy.scheduler import usage_above_reserve

if TYPE_CHECKING:
    from pooltree.server.live import LiveScheduler
    from pooltree.strategy.model import Allocation

SKIP_FLUSH_PERIOD = 0.5
"""Seconds a shard keeps notes of the heartbeats it answered before sending them without a forwarded one."""

Skip = tuple[str, float]
"""(node address, the leader's time of the heartbeat a shard answered)."""

FullStamp = tuple[int, int]
"""(the generation's ``coarse`` counter, the node's stamp): what a full node's proof also holds at."""

Key = tuple[Any, ...]
"""What the leader reads of a heartbeat that reports no finished job (``heartbeat_key``)."""

Proof = tuple[int, dict[str, float], FullStamp | None, HeartbeatRequest]
"""(the state generation it holds at, per running job a bound its measured memory may vary up to, the full
node's stamp or None: a node that can start more, the proven heartbeat: the node's next one as the answer leaves it,
``expected_next``)."""

Proven = tuple[int, dict[str, float], FullStamp | None, Key, float, str | None]
"""A proof as a shard keeps it (``proven``): the generation, bounds and full node's stamp of the ``Proof``, the
proven heartbeat's ``heartbeat_key``, and the heartbeat period and shard URL (None: none) of the leader's answer,
which the shard's own answer repeats. A shard process so keeps a verdict without decoding the node's heartbeat or
the leader's answer."""

UNUSED_PROOFS = 3
"""Proofs for a node in a row that no shard-answered heartbeat used, after which the leader proves only every
`PROOF_PROBE`-th of the node's heartbeats: on a busy cluster the generation moves before the node's next heartbeat,
so the proof (under the scheduling lock, per running job a memory bound) is made for nothing."""

PROOF_PROBE = 4
"""While a node's proofs go unused, one of its heartbeats in this many is proven (to see whether they would be
used again: the first note of a heartbeat a shard answered proves every heartbeat of the node again)."""


_REPORTED_LIMIT = 4096
"""Distinct start entries' resource maps a `StartEntryResources` keeps at most."""


class StartEntryResources:
    """Start entries' resources as a node's running report of them reads (``parse_resources``), kept per distinct
    map (an operation's jobs share theirs): owned by the `LeaderVerdicts` that reads them, at most
    `_REPORTED_LIMIT` maps (then forgotten all at once)."""

    def __init__(self) -> None:
        self._known: dict[tuple[tuple[str, Any], ...], tuple[float, ...]] = {}

    def reported(self, resources: dict[str, Any]) -> tuple[float, ...]:
        """``resources`` as the node's report of the job reads them."""
        key = tuple(sorted(resources.items()))
        known = self._known
        usage = known.get(key)
        if usage is None:
            if len(known) >= _REPORTED_LIMIT:
                known.clear()
            usage = known[key] = tuple(parse_resources(resources, "resources").tolist())
        return usage


_BOUNDS_LIMIT = 4096
"""Distinct (report, reserve, resources) a `MemoryBounds` keeps at most."""


class MemoryBounds:
    """A running job's memory bound by what it is a function of (the report's resource usage, the allocation's
    reserve and resources), kept per distinct inputs: the jobs of an operation share theirs, so the rule's numpy
    work (``RunningJobReport.counted_usage``, ``usage_above_reserve``, ``np.array_equal``: ~20 us a job) is done about once per
    operation and reserve, not for every job new since the node's last proof (several per proof on a loaded
    cluster; ``bench/RESULTS.md``, session 33). At most `_BOUNDS_LIMIT` inputs (then forgotten all at once)."""

    def __init__(self) -> None:
        self._known: dict[tuple[Any, ...], float | None] = {}

    def bound(self, usage: tuple[float, ...], allocation: Allocation) -> float | None:
        """The measured memory up to which a report of ``usage`` changes nothing for ``allocation`` (a live one):
        its reserve's memory when a report at the reserve leaves the allocation's accounted usage as it is
        (``RunningJobReport.counted_usage``, ``usage_above_reserve``: the rule ``LiveJobs`` applies); None (the memory must be
        the same) when a report has raised it above."""
        reserve = allocation.reserve
        # the reserve is the resources, the same array, until a report raised it: then its floats are the key
        key = (
            usage,
            None if reserve is allocation.resources else tuple(reserve.tolist()),
            allocation.amounts,
        )
        known = self._known
        try:
            return known[key]
        except KeyError:
            pass
        memory = float(reserve[MEMORY])
        at_reserve = RunningJobReport("", "", "", usage, memory).counted_usage
        above = usage_above_reserve(reserve, at_reserve)
        bound = memory if np.array_equal(above, allocation.resources) else None
        if len(known) >= _BOUNDS_LIMIT:
            known.clear()
        known[key] = bound
        return bound


def expected_next(
    heartbeat: HeartbeatRequest, answer: dict[str, Any], entries: StartEntryResources
) -> HeartbeatRequest | None:
    """The node's next heartbeat as the leader's ``answer`` to ``heartbeat`` leaves it when nothing else happens
    on the node: the same running jobs and then the started ones in the answer's order, each with the resources
    of its start entry (what a node reports for it: ``node/agent.py``, ``bench/live_nodes.py``; read through
    ``entries``) and no measured memory, and no finished job (the answer acknowledged them). ``heartbeat`` itself
    when nothing was started; None when a start entry cannot be read so (its next heartbeat then goes to the
    leader)."""
    started = answer.get(wire.START)
    if not started:
        return heartbeat
    running = list(heartbeat.running)
    try:
        for entry in started:
            task = entry.get("task_name") or "main"
            usage = entries.reported(entry["resources"])
            running.append(RunningJobReport(entry["job_id"], entry["operation_id"], task, usage))
    except (KeyError, TypeError, AttributeError, ValueError, ConfigError):
        return None
    return replace(heartbeat, running=running, finished=[])


def heartbeat_key(heartbeat: HeartbeatRequest, bounds: dict[str, float]) -> tuple[Any, ...]:
    """What the leader reads of a heartbeat that reports no finished job: two heartbeats with equal keys are
    processed alike, when the measured memory of each job with a bound is at most that bound (the memory is left
    out of the key for those). A running job's statistics are in the key: the leader keeps the last ones sent
    (``get_job``), so a heartbeat with new ones goes to it (a node sends them every
    ``wire.RUNNING_STATISTICS_BACKOFF``, its other heartbeats none)."""
    return (
        tuple(heartbeat.resource_limits.tolist()),
        heartbeat.tags,
        tuple(
            (
                r.job_id,
                r.operation_id,
                r.task_name,
                tuple(r.resource_usage),
                None if r.job_id in bounds else r.memory_usage,
                r.gpu_devices,
                r.statistics,
            )
            for r in heartbeat.running
        ),
        heartbeat.memory_meter,
        heartbeat.alerts,
    )


def proven(proof: Proof, answer: dict[str, Any]) -> Proven:
    """``proof`` as a shard keeps it, with the period and shard URL of ``answer`` (the leader's whole answer to
    the heartbeat, as the node gets it)."""
    generation, bounds, full, heartbeat = proof
    key = heartbeat_key(heartbeat, bounds)
    return generation, bounds, full, key, answer[wire.HEARTBEAT_PERIOD], answer.get(wire.HEARTBEAT_URL)


@dataclass(frozen=True)
class NodeVerdict:
    """The leader's proof that a heartbeat with ``key`` from ``peer`` changes nothing while the scheduler's state
    generation is ``generation``; ``answer`` is what the leader answers it (nothing to do, period, shard URL)."""

    generation: int
    key: tuple[Any, ...]
    bounds: dict[str, float]
    """Per running job, the measured memory up to which its report changes nothing (at most its reserve)."""
    peer: str | None
    answer: dict[str, Any]
    full: FullStamp | None = None
    """For a node that could not start more: the proof also holds while this stamp is the current one."""


class ShardNodes:
    """A shard's verdicts of its nodes and the notes of the heartbeats it answered (pure: no I/O, no clock)."""

    def __init__(self) -> None:
        self.generation = 0
        """The latest state generation the leader told this shard."""
        self.coarse = 0
        """The latest ``coarse`` counter the leader told this shard."""
        self.stamps: dict[str, int] = {}
        """Per node, the latest stamp the leader told this shard (absent: 0)."""
        self._verdicts: dict[str, NodeVerdict] = {}
        self._skips: list[Skip] = []
        self.answered = 0
        """Heartbeats this shard answered itself."""
        self.answered_full = 0
        """Of those, the heartbeats of full nodes answered after the generation moved (on ``NodeVerdict.full``)."""

    def learn(self, generation: int, coarse: int = 0, stamps: Iterable[tuple[str, int]] = ()) -> None:
        """The leader's state generation is at least ``generation``, its ``coarse`` counter at least ``coarse``,
        and each node's stamp at least the one in ``stamps`` ((node, stamp) pairs)."""
        if generation > self.generation:
            self.generation = generation
        if coarse > self.coarse:
            self.coarse = coarse
        known = self.stamps
        for address, stamp in stamps:
            if stamp > known.get(address, 0):
                known[address] = stamp

    def remember(self, address: str, peer: str | None, proof: Proven | None) -> None:
        """The leader answered a heartbeat of ``address`` from ``peer`` and proved the node's next one empty
        (``LeaderVerdicts.prove``, as ``proven`` gives it; None: not proven, the node's next heartbeat goes to the
        leader)."""
        if proof is None:
            self._verdicts.pop(address, None)
            return
        generation, bounds, full, key, period, url = proof
        if full is None:
            self.learn(generation)
        else:
            self.learn(generation, full[0], ((address, full[1]),))
        reply = wire.response(start=[], preempt=[], abort=[], acknowledge=[], heartbeat_period=period)
        if url is not None:
            reply[wire.HEARTBEAT_URL] = url
        self._verdicts[address] = NodeVerdict(generation, key, bounds, peer, reply, full)

    def holds(self, address: str, peer: str | None) -> bool:
        """Whether a verdict of ``address`` from ``peer`` is kept that holds at the generation the leader told
        this shard last (without one, ``answer`` is None for the node's heartbeats: the shard need not decode
        them)."""
        verdict = self._verdicts.get(address)
        return verdict is not None and peer == verdict.peer and self._holds(address, verdict) is not None

    def _holds(self, address: str, verdict: NodeVerdict) -> bool | None:
        """None when ``verdict`` does not hold at the latest generation, coarse counter and stamp; else whether
        it holds only as a full node's (the generation moved)."""
        if verdict.generation == self.generation:
            return False
        full = verdict.full
        if full is None or full[0] != self.coarse or full[1] != self.stamps.get(address, 0):
            return None
        return True

    def answer(self, heartbeat: HeartbeatRequest, peer: str | None, now: float) -> dict[str, Any] | None:
        """The answer to ``heartbeat`` at the leader's time ``now`` when a verdict proves it empty, else None."""
        verdict = self._verdicts.get(heartbeat.address)
        if verdict is None or heartbeat.finished or peer != verdict.peer:
            return None
        on_full = self._holds(heartbeat.address, verdict)
        if on_full is None:
            return None
        bounds = verdict.bounds
        if heartbeat_key(heartbeat, bounds) != verdict.key:
            return None
        for report in heartbeat.running:
            bound = bounds.get(report.job_id)
            if bound is not None and report.memory_usage > bound:
                return None
        self._skips.append((heartbeat.address, now))
        self.answered += 1
        self.answered_full += on_full
        return dict(verdict.answer)

    def take_skips(self) -> list[Skip]:
        """The notes of the heartbeats answered here since the last call, in order."""
        skips, self._skips = self._skips, []
        return skips


class LeaderVerdicts:
    """The leader's side: proofs after heartbeats, notes of shard-answered heartbeats applied.

    ``clock`` is the scheduler's: a note's time is capped by it (a shard's estimate of the leader's time runs
    ahead by at most the pipe's latency)."""

    def __init__(self, scheduler: LiveScheduler, clock: Callable[[], float] | None = None) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.applied = 0
        """Notes of shard-answered heartbeats applied."""
        self._unused: dict[str, int] = {}
        """Per node, the proofs made for it since a shard last answered one of its heartbeats (absent: none)."""
        self._unproven: dict[str, int] = {}
        """Per node whose proofs go unused, its quiet heartbeats not proven since its last proof."""
        self.memory_bounds = MemoryBounds()
        """Running jobs' memory bounds by what they are computed from."""
        self.entries = StartEntryResources()
        """Start entries' resources as reports read them (`expected_next`)."""
        self.proofs_made = 0
        self.proofs_spared = 0
        """Quiet heartbeats not proven because the node's last `UNUSED_PROOFS` proofs went unused."""

    def prove(self, heartbeat: HeartbeatRequest, answer: dict[str, Any]) -> Proof | None:
        """After the leader answered ``heartbeat`` with ``answer`` (the scheduling lock held: the node shards'
        leader calls it at the end of the heartbeat's own hold, ``LiveJobs.process_heartbeat_unwaited``'s
        ``then``): the proof that the node's next heartbeat as the answer leaves it (``expected_next``: with the
        started jobs running) changes nothing (the state generation it holds at, the running jobs' memory bounds,
        the full node's stamp, that expected heartbeat), or None.

        None also when the node's last `UNUSED_PROOFS` proofs were not used (no heartbeat of it answered by a
        shard since), but for every `PROOF_PROBE`-th such heartbeat: not proving only sends the node's next
        heartbeat to the leader, which decides it as one process would. A proof after starts counts as any other:
        on a cluster where jobs end before their node's next heartbeat it goes unused, and the node's proofs
        are spared."""
        if answer.get(wire.PREEMPT) or answer.get(wire.ABORT) or answer.get(wire.SCHEDULING_SKIPPED):
            return None  # the node's next heartbeat reports what this one stopped, or it was throttled
        address = heartbeat.address
        if self._unused.get(address, 0) >= UNUSED_PROOFS:
            unproven = self._unproven.get(address, 0) + 1
            if unproven < PROOF_PROBE:
                self._unproven[address] = unproven
                self.proofs_spared += 1
                return None
            self._unproven[address] = 0
        expected = expected_next(heartbeat, answer, self.entries)
        if expected is None or not self._quiet(expected):
            return None
        generation = self.scheduler.generation
        full = generation.full_stamp(address) if self._full(address) else None
        proof = generation.value, self._memory_bounds(expected), full, expected
        self._unused[address] = self._unused.get(address, 0) + 1
        self.proofs_made += 1
        return proof

    def _quiet(self, heartbeat: HeartbeatRequest) -> bool:
        """Whether an equal next heartbeat provably changes nothing (lock held)."""
        scheduler = self.scheduler
        address = heartbeat.address
        node = scheduler.nodes.get(address)
        if node is None or node.preempts or node.aborts:
            return False
        if scheduler.publishing or scheduler.tentative.pending_bans:
            return False
        if scheduler.reservations.operations_on(address):
            return False
        running = {job.id for job in scheduler.jobs.on_node(address) if job.state == "running"}
        if running != {report.job_id for report in heartbeat.running} or len(running) != len(
            heartbeat.running
        ):
            return False
        for tree, core in scheduler.cores.items():
            if tree not in node.trees:
                if address in core.node_limits:
                    return False  # the node would leave this tree
                continue
            if core.strategy.segments.enabled or core.strategy.gpu_policy.allocating:
                return False
            # now = inf: the preemptive stages due, the strictest case (quiet then is quiet at any time)
            if not core.heartbeat_is_noop(address, math.inf, lambda core=core: pending_min_needed(core)):
                return False
        return bool(node.trees)

    def _full(self, address: str) -> bool:
        """Whether the (quiet) node cannot start more in any of its trees (lock held): its proof reads no pending
        work, so it holds at the generation's ``full_stamp`` too."""
        scheduler = self.scheduler
        node = scheduler.nodes[address]
        return all(not scheduler.cores[tree].can_start_more(address) for tree in node.trees)

    def _memory_bounds(self, heartbeat: HeartbeatRequest) -> dict[str, float]:
        """Per running job, the measured memory up to which a report changes nothing (lock held): any, when the
        scheduler does not count the job's reports (no live allocation); else ``MemoryBounds.bound`` of its
        report and allocation (its reserve, or none: the memory must be the same)."""
        scheduler = self.scheduler
        jobs = scheduler.jobs
        cores = scheduler.cores
        bound_of = self.memory_bounds.bound
        bounds: dict[str, float] = {}
        for report in heartbeat.running:
            job = jobs.get(report.job_id)
            core = cores.get(job.tree) if job is not None and job.tree else None
            allocation = (
                core.strategy.allocations.get(job.allocation_id)
                if core is not None and job is not None and job.allocation_id is not None
                else None
            )
            if allocation is None or allocation.preempted:
                bounds[report.job_id] = math.inf
                continue
            bound = bound_of(report.resource_usage, allocation)
            if bound is not None:
                bounds[report.job_id] = bound
        return bounds

    def apply_skips(self, skips: Iterable[Skip]) -> None:
        """Heartbeats a shard answered, in order: the node was seen; each tree's preemptive backoff moves as the
        heartbeat's strategy pass would have moved it (``SchedulerCore.skip_heartbeat``)."""
        skips = list(skips)
        if not skips:
            return
        scheduler = self.scheduler
        with scheduler.lock:
            cap = self.clock() if self.clock is not None else math.inf
            for address, when in skips:
                now = min(when, cap)
                self._unused.pop(address, None)  # a proof of the node was used: prove its heartbeats again
                self._unproven.pop(address, None)
                node = scheduler.nodes.get(address)
                if node is None:
                    continue
                node.last_seen = max(node.last_seen, now)
                scheduler.now = max(scheduler.now, now)
                for tree in node.trees:
                    core = scheduler.cores.get(tree)
                    if core is not None and address in core.strategy.nodes:
                        core.skip_heartbeat(address, now)
                self.applied += 1
