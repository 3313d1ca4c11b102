"""The rest of a forecast's horizon after a run stopped early (its CPU budget ran out): a capacity hand-over.

The simulator cannot cover an hour of a 1,000-node cluster within a few CPU seconds, so a run that stops at ``H``
is carried to the horizon by a coarser model, without nodes, heartbeats or fair-share updates:

- each tree's capacity is the sum of its nodes' resources; what the running jobs hold at ``H`` is taken, the
  rest is free;
- running jobs end when they drew to end; a new job's run time is drawn from its task's distribution (the run's
  own, per seed);
- freed capacity goes first to operations that may run but have no job yet (oldest first, one job each in turn:
  in the core such an operation is the furthest below its fair share), then back to the operation whose job
  ended if it has pending jobs, then to the oldest operation with pending jobs; a job starts when its resources
  fit the free total (a node's fragmentation is not seen);
- an operation whose last job ended finishes and leaves its pool tree through the tree runtime's own
  ``unregister_operation``: the count limits and queues of the real `PoolTree` decide which queued operations it
  lets run, in the order the core would.

Preemption: an operation the core's last update found below its fair share preempts, once its starvation
timeout passes, the newest jobs of operations above their fair shares (`pooltree.forecast.tail_preemption`).
What it does not model: fair-share changes past the stop (each operation keeps the capacity it holds until it
has nothing left to start, unless preempted), and nodes (only totals). Starts and finishes that come from it
are marked, and the back-test measures their accuracy (docs/forecast.md).
"""

from __future__ import annotations

import heapq
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pooltree.errors import PooltreeError
from pooltree.forecast.durations import remaining
from pooltree.forecast.fork import spec_task
from pooltree.forecast.stopped import Resources, Shape, StoppedRun, held_usage, shape_of
from pooltree.forecast.tail_preemption import Starving, dominant_share
from pooltree.sim.scenario import Distribution, SimOperation, SimTask

EPSILON = 1e-9
MAX_TAIL_JOBS = 1_000_000
"""Jobs the hand-over starts at most in one run (a bound on its cost; the horizon usually ends it first)."""


@dataclass(eq=False)
class _TailOp:
    id: str
    order: int
    pending: list[list[Any]]
    """[task, jobs still to start], tasks in spec order (mutable pairs: a start changes a count in place)."""
    left: int = 0
    """Jobs still to start over all tasks."""
    running: int = 0
    started: bool = False
    may_run: bool = True
    gang: bool = False
    held: Counter[Resources] = field(default_factory=Counter)
    """Its running jobs counted by resources (a counter: cheaper per job than summing a vector)."""
    jobs: dict[int, tuple[Resources, SimTask]] = field(default_factory=dict)
    """Its running jobs by serial, oldest first: resources and the task a preempted one returns to."""
    drawn: dict[str, tuple[Resources, tuple[float, float] | Distribution]] = field(default_factory=dict)
    """Task name → its job's resources and what its jobs' run times are drawn from (`_HandOver.sampler`), looked
    up once per task: keyed by the operation's own task names, not by the task objects' identities (an id is
    unique only while its object lives)."""

    def has_pending(self) -> bool:
        return self.left > 0

    def usage(self) -> list[float]:
        """Resources its running jobs hold (from ``held``: only preemption asks)."""
        return held_usage(self.held)

    def give_back(self, task: SimTask) -> None:
        """A preempted job of ``task`` is pending again."""
        self.left += 1
        for entry in self.pending:
            if entry[0] is task:
                entry[1] += 1
                return
        self.pending.append([task, 1])


@dataclass
class _Tree:
    free: list[float]
    pool_tree: Any
    total: list[float] = field(default_factory=list)
    shares: dict[str, float] = field(default_factory=dict)
    """Operation id → its dominant fair share at the stop (`pooltree.forecast.tail_preemption`)."""
    victims: list[tuple[float, int, Any]] | None = None
    """(fair share - usage share, order, operation): who is furthest above its fair share (made when needed)."""
    ops: dict[str, _TailOp] = field(default_factory=dict)
    starters: list[tuple[int, str]] = field(default_factory=list)
    """(order, id): operations that may run and have no job yet (a heap; stale entries skipped when read)."""
    hungry: list[tuple[int, str]] = field(default_factory=list)
    """(order, id): operations that may run and have pending jobs (a heap; stale entries skipped)."""

    def admit(self, op: _TailOp) -> None:
        if op.may_run and op.has_pending():
            heapq.heappush(self.hungry, (op.order, op.id))
            if op.running == 0:
                heapq.heappush(self.starters, (op.order, op.id))


TRIES = 4
"""Operations at the head of a queue tried per freed capacity (a bigger job does not block smaller ones behind)."""


def _take(free: list[float], shape: Shape, sign: float) -> None:
    for index, amount in shape:
        free[index] += sign * amount


@dataclass
class TailResult:
    jobs: int = 0
    """Jobs the hand-over started."""
    preempted: int = 0
    """Jobs it preempted for starving operations."""
    reached: float = math.inf
    """Where it stopped when its CPU deadline passed (inf: it covered the horizon)."""


def hand_over(
    stopped: StoppedRun,
    pool_trees: Mapping[str, Any],
    seed: int,
    horizon: float,
    on_start: Callable[[str, float], None],
    on_finish: Callable[[str, float], None],
    *,
    redraw: bool = False,
    deadline: float | None = None,
    arrivals: Sequence[SimOperation] = (),
    on_preempt: Callable[[str, str], None] | None = None,
    durations: Mapping[tuple[str, str], Distribution] | None = None,
) -> TailResult:
    """Carry ``stopped`` (a simulation stopped at ``stopped.now``, every operation arrived, read once for all its
    hand-overs: `pooltree.forecast.stopped`) to ``horizon``; calls ``on_start`` for the first job of an operation
    that had not started by the stop and ``on_finish`` for a completion.
    ``pool_trees``: the run's pool trees by name, the hand-over's own copies (it unregisters operations in them).
    ``redraw``: the running jobs' ends are drawn anew with ``seed`` (conditioned on their having run until now), so
    one stopped simulation serves several seeds; with ``durations`` ((operation id, spec task) → ``seed``'s own
    run-time distribution, `pooltree.forecast.fork.seed_distributions`) a running job's end is drawn from it given
    how long the job has run since it really started, and every job the hand-over starts runs like it, so the
    seeds differ in what they assume of the run times as simulated seeds do, not only in the single jobs' draws.
    ``deadline``: ``time.process_time()`` when it stops. ``arrivals``: submissions still to come (after
    ``stopped.now``, by time), registered in their pool trees when they come (a count limit may queue them) and
    served like the others. ``on_preempt(preemptor, victim)``: a job preempted for a starving operation
    (`pooltree.forecast.tail_preemption`)."""
    tail = _HandOver(stopped, pool_trees, seed, on_start, on_finish, on_preempt, durations)
    tail.take_operations()
    tail.place_running(redraw)
    coming = sorted((op for op in arrivals if op.submit_time > tail.now), key=lambda op: op.submit_time)
    tail.smallest = tail.smallest_job(coming)
    for tree in tail.trees.values():
        tail.dispatch(tree, tail.now, None)
    tail.run(horizon, deadline, coming, stopped.starvations)
    tail.result.jobs = tail.started_jobs
    if tail.result.reached == math.inf:
        tail.finish_past_horizon()
    return tail.result


class _HandOver:
    """One hand-over's state: the trees' free capacity and operations, the heap of job ends, and the callbacks
    (see `hand_over`; each method is one concern of it)."""

    def __init__(
        self,
        stopped: StoppedRun,
        pool_trees: Mapping[str, Any],
        seed: int,
        on_start: Callable[[str, float], None],
        on_finish: Callable[[str, float], None],
        on_preempt: Callable[[str, str], None] | None,
        durations: Mapping[tuple[str, str], Distribution] | None,
    ) -> None:
        self.stopped = stopped
        self.rng = random.Random(f"{seed}/tail")
        self.now = stopped.now
        self.on_start = on_start
        self.on_finish = on_finish
        self.on_preempt = on_preempt
        self.durations = durations
        self.trees: dict[str, _Tree] = {
            name: _Tree(list(stopped.free[name]), pool_trees[name], total, stopped.shares.get(name, {}))
            for name, total in stopped.totals.items()
        }
        self.owner: dict[str, _Tree] = {}
        """Operation id → the tree it runs in (an operation of several trees: its first; see ``elsewhere``)."""
        self.elsewhere: dict[int, _Tree] = {}
        """Serial → the tree of a job running at the stop on a node of another tree than its operation's first
        (an operation of several trees): its resources are that tree's until it ends. The hand-over starts new
        jobs in the operation's first tree only."""
        self.heap: list[tuple[float, int, _Tree | None, _TailOp | None, Resources]] = []
        """(end, serial, tree, operation, resources) of every running job (None: an operation the hand-over does
        not serve, whose jobs keep what they hold)."""
        self.serial = len(stopped.jobs)
        self.result = TailResult()
        self.started_jobs = 0
        self.smallest: Shape = ()
        """The smallest job of any operation: while it does not fit, nothing is served."""
        self.order = len(stopped.simulation.ops)
        """The next arrival's place in the queues (after every operation of the simulation)."""
        self.default_tree = stopped.simulation.scenario.snapshot.default_pool_tree

    def take_operations(self) -> None:
        """Every unfinished operation of the simulation, with its jobs still to start, in its tree's queues
        (each with its own counters; the queues as `_Tree.admit` makes them, copied)."""
        for taken in self.stopped.operations:
            tree = self.trees[taken.tree]
            tail_op = _TailOp(
                taken.id,
                taken.order,
                [[task, count] for task, count in taken.pending],
                sum(count for _, count in taken.pending),
                running=taken.running,
                started=taken.started,
                may_run=taken.may_run,
                gang=taken.gang,
                held=Counter(taken.held),
            )
            tree.ops[tail_op.id] = tail_op
            self.owner[tail_op.id] = tree
        for name, (starters, hungry) in self.stopped.queues.items():
            self.trees[name].starters = list(starters)
            self.trees[name].hungry = list(hungry)

    def place_running(self, redraw: bool) -> None:
        """The jobs running at the stop hold their resources until their ends (drawn anew with ``redraw``), in
        the heap with their tree and operation (after `take_operations`)."""
        now = self.now
        heap = self.heap
        durations = self.durations
        rng = self.rng
        for job in self.stopped.jobs:
            end = job.end
            if redraw and job.redrawn is not None:
                own = None if durations is None else durations.get(job.key)
                if own is not None:  # the seed's own run times, given the time since the job's real start
                    end = now + remaining(own, job.since_start, rng)
                else:
                    end = now + remaining(job.redrawn, job.since_placed, rng)
            tree = self.owner.get(job.operation_id)
            op = None if tree is None else tree.ops[job.operation_id]
            if op is not None:
                op.jobs[job.serial] = (job.resources, job.task)
            if job.elsewhere:
                self.elsewhere[job.serial] = self.trees[job.tree]
            heap.append((end, job.serial, tree, op, job.resources))
        heapq.heapify(heap)

    def smallest_job(self, coming: Sequence[SimOperation]) -> Shape:
        """Each resource's least amount over the jobs still to start and those of the submissions to come."""
        least = self.stopped.least
        for arrival in coming:
            for task in arrival.tasks:
                least = [min(a, float(b)) for a, b in zip(least, task.resources, strict=True)]
        return shape_of([0.0 if math.isinf(amount) else amount for amount in least])

    def shape(self, task: SimTask) -> Resources:
        return self.stopped.shapes.intern(shape_of(task.resources))

    def sampler(self, op: _TailOp, task: SimTask) -> tuple[float, float] | Distribution:
        """What ``op``'s jobs of ``task`` draw their run times from: the seed's own distribution of its spec task
        (a preempted job of the fork's running jobs' task starts again as a job of its spec task), else the
        task's; (median, sigma) of a lognormal (drawn in `start_jobs` as `Distribution.sample` draws it, from the
        same generator: the same run times). A whole run time always: the running jobs' remaining times
        (`durations.RemainingTimes`, handed out to the simulation's placed jobs) are never handed out here (they
        were the stopped simulation's, shared by all its hand-overs)."""
        own = None if self.durations is None else self.durations.get((op.id, spec_task(task.name)))
        distribution = own or task.duration
        assert distribution is not None
        if distribution.kind == "lognormal":
            return (distribution.a, distribution.b)
        if type(distribution) is not Distribution:
            return Distribution(distribution.kind, distribution.a, distribution.b)
        return distribution

    def start_jobs(self, tree: _Tree, op: _TailOp, at: float, most: float = math.inf) -> int:
        """Start ``op``'s next jobs at ``at`` one by one while they fit the tree's free capacity, at most
        ``most``; how many started. The checks and the counting are written out here, not called, and the
        counters that nothing reads meanwhile are summed up once at the end: this runs for every job the
        hand-over starts, and once more for the job that does not fit."""
        started = 0
        free = tree.free
        heap = self.heap
        push = heapq.heappush
        gauss = self.rng.gauss
        exp = math.exp
        serial = self.serial
        jobs = op.jobs
        full = False
        while started < most and not full:
            for entry in op.pending:
                if entry[1] > 0:
                    break
            else:
                break
            task = entry[0]
            if task.duration is None:
                break
            found = op.drawn.get(task.name)
            if found is None:
                found = op.drawn[task.name] = (self.shape(task), self.sampler(op, task))
            resources, drawn = found
            amounts = resources.amounts
            lognormal = type(drawn) is tuple
            if lognormal:
                median, sigma = drawn
            begun = started
            while started < most and entry[1] > 0:  # the same task's jobs, while they fit
                for index, amount in amounts:
                    if amount > free[index] + EPSILON:
                        full = True
                        break
                if full:
                    break
                for index, amount in amounts:
                    free[index] -= amount
                entry[1] -= 1
                started += 1
                serial += 1
                jobs[serial] = (resources, task)
                if lognormal:
                    run_time = median * exp(sigma * gauss(0.0, 1.0))
                else:
                    run_time = drawn.sample(self.rng)
                push(heap, (at + run_time, serial, tree, op, resources))
            if started > begun:
                op.held[resources] += started - begun
        if started:
            self.serial = serial
            op.left -= started
            op.running += started
            self.started_jobs += started
            if not op.started:
                op.started = True
                self.on_start(op.id, at)
        return started

    def preempt_for(self, tree: _Tree, op: _TailOp, at: float) -> None:
        """``op``'s starvation timeout passed: jobs of the operations furthest above their fair shares make room
        for its jobs until it holds its own fair share (see `pooltree.forecast.tail_preemption`)."""
        share = tree.shares.get(op.id, 0.0)
        while op.may_run and op.has_pending() and dominant_share(op.usage(), tree.total) < share - EPSILON:
            if self.start_jobs(tree, op, at, 1):
                continue
            found = self.victim(tree, op)
            if found is None:
                return
            victim, order_key = found
            job_serial = next(reversed(victim.jobs))  # the newest job goes first
            resources, task = victim.jobs.pop(job_serial)
            victim.held[resources] -= 1
            _take(self.elsewhere.pop(job_serial, tree).free, resources.amounts, 1.0)
            victim.running -= 1
            victim.give_back(task)
            tree.admit(victim)
            if victim.jobs:
                still = tree.shares[victim.id] - dominant_share(victim.usage(), tree.total)
                assert tree.victims is not None
                heapq.heappush(tree.victims, (still, order_key, victim))
            self.result.preempted += 1
            if self.on_preempt is not None:
                self.on_preempt(op.id, victim.id)

    def victim(self, tree: _Tree, op: _TailOp) -> tuple[_TailOp, int] | None:
        """The operation furthest above its fair share (not ``op``) and its order key; None: nobody is above."""
        victims = tree.victims
        if victims is None:  # once per hand-over: by how far above their fair shares, the furthest first
            victims = tree.victims = [
                (tree.shares[c.id] - dominant_share(c.usage(), tree.total), c.order, c)
                for c in tree.ops.values()
                if c.jobs and c.id in tree.shares
            ]
            heapq.heapify(victims)
        while victims:  # entries are refreshed when read (an operation's usage moved since it was keyed)
            key, order_key, candidate = heapq.heappop(victims)
            if candidate is op or not candidate.jobs or tree.ops.get(candidate.id) is not candidate:
                continue
            current = tree.shares[candidate.id] - dominant_share(candidate.usage(), tree.total)
            if current >= -EPSILON:
                continue
            if current > key + EPSILON:
                heapq.heappush(victims, (current, order_key, candidate))
                continue
            return candidate, order_key
        return None

    def serve(self, tree: _Tree, queue: list[tuple[int, str]], at: float, first_only: bool) -> None:
        """Start jobs for the operations at the head of ``queue`` while they fit (``first_only``: one each); the
        caller saw that the smallest job fits."""
        skipped = []
        while queue and len(skipped) < TRIES and self.started_jobs < MAX_TAIL_JOBS:
            operation_id = queue[0][1]
            op = tree.ops.get(operation_id)
            if op is None or not op.may_run or not op.has_pending() or (first_only and op.running > 0):
                heapq.heappop(queue)
                continue
            if not self.start_jobs(tree, op, at, 1 if first_only else math.inf):
                skipped.append(heapq.heappop(queue))
                continue
            if first_only:
                heapq.heappop(queue)
            elif op.has_pending():
                break
        for entry in skipped:
            heapq.heappush(queue, entry)

    def dispatch(self, tree: _Tree, at: float, last: _TailOp | None) -> None:
        """Freed capacity: operations without a job first, then ``last`` (whose job ended), then the oldest."""
        # nothing is served while not even the smallest job fits (checked here, written out: most job ends restart
        # their own operation's next job and leave nothing for the queues)
        free = tree.free
        if tree.starters:
            for index, amount in self.smallest:
                if amount > free[index] + EPSILON:
                    break
            else:
                self.serve(tree, tree.starters, at, True)
        if last is not None and last.may_run and last.left > 0:
            self.start_jobs(tree, last, at)
        if tree.hungry:
            for index, amount in self.smallest:
                if amount > free[index] + EPSILON:
                    return
            self.serve(tree, tree.hungry, at, False)

    def arrive(self, arrival: SimOperation, at: float) -> None:
        """A submission registered in its pool tree (refused as a real start would be) and served."""
        names = arrival.spec.pool_trees_or(self.default_tree)
        tree = self.trees.get(names[0]) if names else None
        if tree is None:
            return
        try:
            registered = tree.pool_tree.register_operation(
                arrival.id,
                user=arrival.user,
                operation_type=arrival.type,
                pool=arrival.spec.pool_for_tree(names[0], arrival.user),
                spec=arrival.spec,
                now=at,
            )
        except PooltreeError:
            return  # refused as the real start would be (a count limit of the pool's operations)
        pending: list[list[Any]] = [[task, task.job_count] for task in arrival.tasks if task.job_count > 0]
        tail_op = _TailOp(
            arrival.id,
            self.order,
            pending,
            sum(count for _, count in pending),
            may_run=bool(registered.running),
            gang=any(task.gang_size is not None for task in arrival.tasks),
        )
        self.order += 1
        tree.ops[tail_op.id] = tail_op
        tree.admit(tail_op)
        self.owner[tail_op.id] = tree
        self.dispatch(tree, at, None)

    def job_ended(self, at: float) -> None:
        """The first job end of the heap: its resources are freed; its operation finishes when it was the last
        (leaving its pool tree, which may let queued operations run), and the freed capacity is dispatched."""
        _, job_serial, tree, op, resources = heapq.heappop(self.heap)
        if tree is None:
            return
        elsewhere = self.elsewhere
        if op is None:
            _take((elsewhere.pop(job_serial, tree) if elsewhere else tree).free, resources.amounts, 1.0)
            return
        if op.jobs.pop(job_serial, None) is None:
            return  # preempted earlier: its resources were freed then
        where = elsewhere.pop(job_serial, tree) if elsewhere else tree
        op.held[resources] -= 1
        free = where.free
        for index, amount in resources.amounts:
            free[index] += amount
        op.running -= 1
        if op.running == 0 and op.left <= 0:
            operation_id = op.id
            del tree.ops[operation_id]
            self.on_finish(operation_id, at)
            for left in self.trees.values():  # every tree it runs in (its first, and any other)
                if operation_id not in left.pool_tree.operations:
                    continue
                for activated in left.pool_tree.unregister_operation(operation_id):
                    if activated in left.ops:
                        left.ops[activated].may_run = True
                        left.admit(left.ops[activated])
                if left is not tree:
                    self.dispatch(left, at, None)
        if where is not tree:
            self.dispatch(where, at, None)
        self.dispatch(tree, at, op)

    def run(
        self,
        horizon: float,
        deadline: float | None,
        coming: Sequence[SimOperation],
        starvations: Sequence[Starving],
    ) -> None:
        """Job ends, submissions and starvation timeouts in time order until the horizon (or the deadline)."""
        heap = self.heap
        job_ended = self.job_ended
        coming_index = starving_index = 0
        events = 0
        while self.started_jobs < MAX_TAIL_JOBS:
            arrival_at = coming[coming_index].submit_time if coming_index < len(coming) else math.inf
            starving_at = starvations[starving_index].at if starving_index < len(starvations) else math.inf
            other = min(arrival_at, starving_at)
            # job ends before the next submission or starvation timeout (ties go to those): the same order and
            # checks as below, without looking at the others again for each job end
            while heap and self.started_jobs < MAX_TAIL_JOBS:
                at = heap[0][0]
                if at >= other or at > horizon:
                    break
                events += 1
                if deadline is not None and events % 64 == 0 and time.process_time() > deadline:
                    self.result.reached = at
                    return
                job_ended(at)
            if self.started_jobs >= MAX_TAIL_JOBS:
                break
            at = heap[0][0] if heap else math.inf
            if min(at, other) > horizon:
                break
            events += 1
            # every 64 events (it was every 64 jobs started: job ends that start nothing never looked at the clock)
            if deadline is not None and events % 64 == 0 and time.process_time() > deadline:
                self.result.reached = min(at, other)
                break
            if starving_at <= min(at, arrival_at):
                item = starvations[starving_index]
                starving_index += 1
                tree = self.trees[item.tree]
                op = tree.ops.get(item.operation_id)
                if op is not None:
                    self.preempt_for(tree, op, starving_at)
                continue
            if arrival_at <= at:
                self.arrive(coming[coming_index], arrival_at)
                coming_index += 1
                continue
            job_ended(at)

    def finish_past_horizon(self) -> None:
        """Past the horizon: an operation with nothing left to start finishes when its last running job ends."""
        last_end: dict[str, float] = {}
        ends: Counter[str] = Counter()
        for at, _, _, heaped, _ in self.heap:
            if heaped is None:
                continue
            operation_id = heaped.id
            last_end[operation_id] = max(last_end.get(operation_id, at), at)
            ends[operation_id] += 1
        for operation_id, at in last_end.items():
            tree = self.owner.get(operation_id)
            op = None if tree is None else tree.ops.get(operation_id)
            if op is None or op.has_pending() or op.gang or op.running != ends[operation_id]:
                continue  # jobs left to start, a gang, or a job that never ends
            self.on_finish(operation_id, at)
