"""YTsaurus's GPU scheduling policy (``policy_kind: gpu``, ``gpu_scheduling_policy``): an assignment planner.

What YTsaurus does (its ``strategy/policy/gpu``: the assignment plan update, its context, the policy's heartbeat,
and ``test_gpu_scheduling_policy.py``; restated, not ported):

* **An assignment** is a planned place for one allocation of an operation on a node: *preliminary* until the
  node's next heartbeat starts an allocation for it, *realized* after. Every ``plan_update_period`` the plan is
  updated from the published fair share; a heartbeat only carries the plan out: it preempts the allocations
  whose assignments the plan took away and starts one allocation per preliminary assignment on the node
  (an assignment whose allocation cannot start is dropped).
* **Preemptible assignments**: a full-host module-bound operation (every allocation needs a full host, 8 GPUs,
  and the operation is a gang) is preemptible as a whole when its fair share is zero; any other operation's
  assignments are taken in order of progress (oldest first, preliminary last) and become preemptible from the
  one whose cumulative usage share passes the fair share.
* **What an operation may get**: allocations are counted *ready to assign* while the assigned usage plus them
  stays within the fair share (+ epsilon), the rest of its pending allocations are *extra* (none for a
  full-host operation); preliminary assignments already count as assigned.
* **Planning**, in this order:
  1. *Full-host module-bound operations*: first those whose pool enables priority module binding
     (``enable_priority_scheduling_segment_module_assignment``) and that have waited for a module longer than
     ``priority_module_binding_timeout``, then all; narrower module choice first, then more allocations. An
     operation bound to a module for which it has waited for assignments longer than
     ``module_reconsideration_timeout`` is evicted from it (all its assignments preempted). Binding: among the
     modules (``modules`` of ``module_type``, narrowed by the spec's ``scheduling_modules``) with enough nodes,
     the one whose unreserved node count (nodes minus the allocations of the operations bound there) takes the
     operation with the fewest evictions, then the fewest nodes left (best fit); a priority binding may evict
     non-priority operations bound there (the largest first, then the smallest one that suffices). Then its
     ready allocations are planned in its module: without preemption, with preemption of preemptible
     assignments if it is starving, and after ``full_host_aggressive_preemption_timeout`` of waiting with
     *full-host aggressive preemption* (every assignment of an operation that is not full-host module-bound is
     preemptible).
  2. *Regular operations*: vanilla first, then bigger allocations, then more of them; without preemption on
     every schedulable node, then with preemption when starving.
  3. *Extra allocations* of regular operations as preemptible assignments, within the operation's and its
     pools' resource limits.
  Without preemption a group goes to the nodes with the fewest unassigned GPUs first (best fit, a node is filled
  before the next); with preemption to the node whose cheapest sufficient set of preemptible assignments has the
  smallest penalty (GPU × seconds of progress, at least ``min_assignment_preemptible_duration``).
* **Nodes** are schedulable when their module (data center or InfiniBand cluster tag) is configured; a node that
  leaves, changes module or stops being schedulable loses its assignments.
* ``mode: dry_run`` plans (orchid only) while the classic policy schedules; ``noop`` does nothing.

Here allocations and their needs come from pooltree's controllers: an operation has one allocation group (its
controller's min needed resources × its pending count); its initial needs are the first ones seen with pending
work. Allocations that run without an assignment (started before the policy was switched on, or by the classic
policy in dry-run mode) are adopted as realized assignments instead of being preempted. The operation's and
pools' limits for extra allocations are read from their current usage.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pooltree.config.gpu_policy import GpuPolicyConfig
from pooltree.resources import GPU, RESOURCE_COUNT, USER_SLOTS
from pooltree.strategy.gpu_plan import (
    EPSILON,
    Assignment,
    Floats,
    OperationFacts,
    PlanNode,
    PlanOperation,
    PlanStatistics,
    node_module,
)
from pooltree.strategy.model import AbortReason, ExecNode


class GpuPolicy:
    """One tree's GPU scheduling policy: the assignment plan, its update and the heartbeat that carries it out."""

    def __init__(self, config: GpuPolicyConfig | None = None) -> None:
        self.config = config if config is not None else GpuPolicyConfig()
        self.nodes: dict[str, PlanNode] = {}
        self.operations: dict[str, PlanOperation] = {}
        self.last_update: float | None = None
        self.started: float | None = None
        self.statistics = PlanStatistics()
        self.preempted_total = 0
        self.planned_total = 0
        self.tag_filter: Callable[[str, frozenset[str]], bool] | None = None
        """(operation id, node tags) -> whether the operation's scheduling tag filter admits the node."""
        self._now = 0.0
        self._bound: dict[str, list[PlanOperation]] = {}
        """Module -> the full-host module-bound operations bound there (during one update)."""
        self._modules: dict[frozenset[str], str | None] = {}
        """Node tags -> module (`node_module`), for the configured modules."""
        self._realized: dict[str, Assignment] = {}
        """Allocation id -> its (realized) assignment."""

    @property
    def allocating(self) -> bool:
        return self.config.allocating

    def configure(self, config: GpuPolicyConfig) -> None:
        if config == self.config:
            return
        modules_changed = (config.modules, config.module_type) != (
            self.config.modules,
            self.config.module_type,
        )
        self.config = config
        if not config.planning:
            self.nodes.clear()
            self.operations.clear()
            self._realized.clear()
            self.last_update = self.started = None
        elif modules_changed:
            self._modules.clear()
            for node in self.nodes.values():
                node.module = node_module(node.tags, config)

    def due(self, now: float) -> bool:
        if not self.config.planning:
            return False
        return self.last_update is None or now >= self.last_update + self.config.plan_update_period

    # ------------------------------------------------------------------------------------------- plan update

    def update(
        self,
        nodes: Iterable[ExecNode],
        operations: Iterable[OperationFacts],
        allocations: Mapping[str, Any] | Iterable[Any],
        total: Floats,
        now: float,
    ) -> None:
        """One plan update at ``now`` from the strategy's nodes, the published operations, the running
        allocations (objects with ``id``, ``operation_id``, ``node_address``, ``amounts``, ``start_time``) and
        the tree's total resources."""
        self._now = now
        if self.started is None:
            self.started = now
        self.last_update = now
        self.statistics = PlanStatistics()
        facts = {op.id: op for op in operations}
        self._sync_nodes(nodes)
        self._sync_operations(facts)
        self._reconcile(allocations)
        for op in self.operations.values():
            # found running with nothing pending: its allocations tell
            if not op.initialized and op.assignments:
                op.initial_resources = op.assignments[0].resources
                op.initial_count = len(op.assignments)
        if (
            now <= self.started + self.config.initialization_timeout
            and self.config.initialization_timeout > 0
        ):
            return
        for op_id in sorted(self.operations):
            op, fact = self.operations[op_id], facts[op_id]
            self._update_preemption_status(op, fact, total)
            self._update_resources(op, fact, total)
        self._plan_full_host_module_bound()
        self._plan_regular()
        self._plan_extra(facts)
        self.planned_total += self.statistics.planned
        self.preempted_total += self.statistics.preempted

    def _sync_nodes(self, nodes: Iterable[ExecNode]) -> None:
        seen = set()
        for exec_node in nodes:
            seen.add(exec_node.address)
            limits = tuple(exec_node.resource_limits.tolist())
            module = self._modules.get(exec_node.tags, ...)
            if module is ...:
                module = self._modules[exec_node.tags] = node_module(exec_node.tags, self.config)
            schedulable = module is not None and limits[USER_SLOTS] > 0
            node = self.nodes.get(exec_node.address)
            if node is None:
                self.nodes[exec_node.address] = PlanNode(
                    exec_node.address, limits, exec_node.tags, module, schedulable
                )
                continue
            if node.schedulable and not schedulable:
                self._preempt_all(node.assignments, AbortReason.NODE_UNSCHEDULABLE, "Node is unschedulable")
            elif node.module is not None and module != node.module:
                self._preempt_all(
                    node.assignments, AbortReason.NODE_UNSCHEDULABLE, "Node's scheduling module has changed"
                )
            node.limits, node.tags, node.module, node.schedulable = (
                limits,
                exec_node.tags,
                module,
                schedulable,
            )
        for address in [a for a in self.nodes if a not in seen]:
            node = self.nodes.pop(address)
            for assignment in list(node.assignments):
                self._remove(assignment)

    def _sync_operations(self, facts: Mapping[str, OperationFacts]) -> None:
        for op_id in [o for o in self.operations if o not in facts]:
            for assignment in list(self.operations[op_id].assignments):
                self._remove(assignment)
            del self.operations[op_id]
        for op_id, fact in facts.items():
            op = self.operations.get(op_id)
            if op is None:
                op = self.operations[op_id] = PlanOperation(
                    op_id, fact.type, fact.gang, fact.specified_modules
                )
            if not op.initialized and fact.pending_count > 0:
                op.initial_resources = fact.min_needed
                op.initial_count = fact.pending_count
            op.priority_binding_enabled = fact.priority_binding_enabled

    def _reconcile(self, allocations: Mapping[str, Any] | Iterable[Any]) -> None:
        """Assignments follow the allocations: ended (or preempted) ones are dropped, unknown running ones adopted.
        Costs a pass over the realized assignments and one over the allocations, nothing sorted but the new ones."""
        if not isinstance(allocations, Mapping):
            allocations = {allocation.id: allocation for allocation in allocations}
        for allocation_id, assignment in list(self._realized.items()):
            allocation = allocations.get(allocation_id)
            if allocation is None or getattr(allocation, "preempted", False):
                self._remove(assignment)
        for node in self.nodes.values():
            if node.to_preempt:
                for allocation_id in [a for a in node.to_preempt if a not in allocations]:
                    del node.to_preempt[allocation_id]
        unknown = [
            allocation
            for allocation_id, allocation in allocations.items()
            if allocation_id not in self._realized and not getattr(allocation, "preempted", False)
        ]
        for allocation in sorted(unknown, key=lambda a: a.id):
            op = self.operations.get(allocation.operation_id)
            node = self.nodes.get(allocation.node_address)
            if op is None or node is None or allocation.id in node.to_preempt:
                continue
            waiting = [a for a in node.assignments if a.operation_id == op.id and a.allocation_id is None]
            if waiting:  # started for a preliminary assignment outside `realize`
                self.realize(waiting[0], allocation)
                continue
            assignment = Assignment(
                op.id, node.address, tuple(allocation.amounts), allocation.start_time,
                allocation_id=allocation.id, preemptible_progress_start_time=allocation.start_time,
            )  # fmt: skip
            self._add(assignment, op, node)

    def realize(self, assignment: Assignment, allocation: Any) -> None:
        """The heartbeat started ``allocation`` for the preliminary ``assignment`` (see `carry_out_plan`)."""
        node = self.nodes.get(assignment.node)
        op = self.operations.get(assignment.operation_id)
        if node is None or op is None:
            return
        self._resize(assignment, op, node, tuple(allocation.amounts))
        if assignment.allocation_id is None:
            node.preliminary -= 1
        assignment.allocation_id = allocation.id
        assignment.preemptible_progress_start_time = allocation.start_time
        self._realized[allocation.id] = assignment

    # ------------------------------------------------------------------------------------------- bookkeeping

    def _add(self, assignment: Assignment, op: PlanOperation, node: PlanNode) -> None:
        op.assignments.append(assignment)
        node.assignments.append(assignment)
        if assignment.allocation_id is None:
            node.preliminary += 1
        else:
            self._realized[assignment.allocation_id] = assignment
        _add_to(op.assigned, assignment.resources)
        _add_to(node.assigned, assignment.resources)

    def _resize(self, assignment: Assignment, op: PlanOperation, node: PlanNode, resources: Floats) -> None:
        _sub_from(op.assigned, assignment.resources)
        _sub_from(node.assigned, assignment.resources)
        assignment.resources = resources
        _add_to(op.assigned, resources)
        _add_to(node.assigned, resources)

    def _remove(self, assignment: Assignment) -> None:
        op = self.operations.get(assignment.operation_id)
        node = self.nodes.get(assignment.node)
        if op is not None and assignment in op.assignments:
            op.assignments.remove(assignment)
            _sub_from(op.assigned, assignment.resources)
        if node is not None and assignment in node.assignments:
            node.assignments.remove(assignment)
            _sub_from(node.assigned, assignment.resources)
            if assignment.allocation_id is None:
                node.preliminary -= 1
        if (
            assignment.allocation_id is not None
            and self._realized.get(assignment.allocation_id) is assignment
        ):
            del self._realized[assignment.allocation_id]

    def _preempt(
        self, assignment: Assignment, reason: AbortReason, description: str, for_op: str | None
    ) -> None:
        node = self.nodes.get(assignment.node)
        if assignment.allocation_id is not None and node is not None:
            node.to_preempt[assignment.allocation_id] = (reason, description, for_op)
        self._remove(assignment)
        self.statistics.preempted += 1
        key = reason.value
        self.statistics.preempted_by_stage[key] = self.statistics.preempted_by_stage.get(key, 0) + 1

    def _preempt_all(self, assignments: list[Assignment], reason: AbortReason, description: str) -> None:
        for assignment in list(assignments):
            self._preempt(assignment, reason, description, None)

    # ------------------------------------------------------------------------------------ statuses and counts

    def _update_preemption_status(self, op: PlanOperation, fact: OperationFacts, total: Floats) -> None:
        op.starving = fact.starving
        if not op.initialized:
            return
        if op.full_host_module_bound:
            op.preemptible = all(f <= EPSILON for f in fact.fair_share)
            for assignment in op.assignments:
                assignment.preemptible = op.preemptible
            if op.preemptible:
                op.module = None  # a preemptible operation cannot be bound to a module
            return
        if not op.assignments:
            return
        ordered = sorted(op.assignments, key=_progress_order)
        bound = _bounds(fact.fair_share, total)
        u0 = u1 = u2 = u3 = u4 = 0.0
        b0, b1, b2, b3, b4 = bound
        for assignment in ordered:
            r0, r1, r2, r3, r4 = assignment.resources
            u0 += r0
            u1 += r1
            u2 += r2
            u3 += r3
            u4 += r4
            assignment.preemptible = u0 > b0 or u1 > b1 or u2 > b2 or u3 > b3 or u4 > b4

    def _update_resources(self, op: PlanOperation, fact: OperationFacts, total: Floats) -> None:
        op.ready = op.extra = 0
        op.needed = fact.min_needed
        if not op.initialized or (op.full_host_module_bound and op.preemptible) or fact.pending_count <= 0:
            return
        bound = _bounds(fact.fair_share, total)
        empty = sum(1 for a in op.assignments if a.allocation_id is None)
        running = list(op.assigned)
        wanted = fact.pending_count - empty
        while op.ready < wanted:
            _add_to(running, fact.min_needed)
            if any(u > b for u, b in zip(running, bound, strict=True)):
                break
            op.ready += 1
        if not op.full_host:
            op.extra = max(0, wanted - op.ready)  # past the fair share every further one is past it too

    # ------------------------------------------------------------------------------------------- planning

    def _module_nodes(self) -> dict[str, list[PlanNode]]:
        found: dict[str, list[PlanNode]] = {module: [] for module in self.config.modules}
        for address in sorted(self.nodes):
            node = self.nodes[address]
            if node.schedulable and node.module in found:
                found[node.module].append(node)
        return found

    def _plan_full_host_module_bound(self) -> None:
        module_nodes = self._module_nodes()
        self._bound = {m: [] for m in self.config.modules}
        ops = [self.operations[o] for o in sorted(self.operations)]
        fhmb = [op for op in ops if op.full_host_module_bound]
        for op in fhmb:
            if op.module is not None and not op.preemptible:
                if op.module in self._bound:
                    self._bound[op.module].append(op)
                else:
                    op.module = None  # a module no longer configured

        def wants(op: PlanOperation) -> bool:
            return op.ready > 0 or (not op.preemptible and op.module is None and bool(op.assignments))

        now = self._now
        timeout = self.config.priority_module_binding_timeout
        priority = [
            op
            for op in fhmb
            if op.priority_binding_enabled
            and op.waiting_for_module_binding_since is not None
            and op.waiting_for_module_binding_since + timeout < now
            and wants(op)
        ]
        self._plan_full_host(priority, module_nodes, priority=True)
        self._plan_full_host([op for op in fhmb if wants(op)], module_nodes, priority=False)

    def _reserved(self, module: str) -> int:
        return sum(op.initial_count for op in self._bound.get(module, ()))

    def _plan_full_host(
        self, ops: list[PlanOperation], module_nodes: dict[str, list[PlanNode]], *, priority: bool
    ) -> None:
        count = len(self.config.modules)
        ops = sorted(
            ops,
            key=lambda op: (
                op.module is None,
                len(op.specified_modules) if op.specified_modules is not None else count,
                -op.initial_count,
                op.id,
            ),
        )
        now = self._now
        config = self.config
        for op in ops:
            if op.preemptible:
                continue
            if (
                op.module is not None
                and op.waiting_for_assignments_since is not None
                and op.waiting_for_assignments_since + config.module_reconsideration_timeout < now
            ):
                self._evict(op, "Preempted after module reset")
                op.waiting_for_assignments_since = None
            if op.module is None and not self._bind(op, module_nodes, priority):
                continue
            if op.waiting_for_assignments_since is None:
                op.waiting_for_assignments_since = now
            assert op.module is not None
            nodes = module_nodes[op.module]
            self._plan_group(op, nodes, stage="full_host")
            if op.starving:
                self._plan_group_with_preemption(op, nodes, aggressive=False)
            if op.waiting_for_assignments_since + config.full_host_aggressive_preemption_timeout < now:
                self._plan_group_with_preemption(op, nodes, aggressive=True)
            if op.ready == 0:
                op.waiting_for_assignments_since = None

    def _evict(self, op: PlanOperation, description: str) -> None:
        if op.module is not None and op in self._bound.get(op.module, []):
            self._bound[op.module].remove(op)
        op.module = None
        self._preempt_all(op.assignments, AbortReason.EVICTION_FROM_SCHEDULING_MODULE, description)

    def _bind(self, op: PlanOperation, module_nodes: dict[str, list[PlanNode]], priority: bool) -> bool:
        needed = op.initial_count
        used = op.used_module(self.nodes)
        outcomes: list[tuple[int, int, str, list[PlanOperation]]] = []
        for module in self.config.modules:
            if op.specified_modules is not None and module not in op.specified_modules:
                continue
            size = len(module_nodes[module])
            if size < needed:
                continue
            unreserved = size - self._reserved(module)
            if unreserved >= needed:
                penalty = len(op.assignments) if used is not None and used != module else 0
                outcomes.append((penalty, unreserved - needed, module, []))
            elif priority:
                candidates = [o for o in self._bound[module] if not o.priority_binding_enabled]
                evicted = _operations_to_evict(candidates, needed - unreserved)
                if evicted is not None:
                    freed = sum(o.initial_count for o in evicted)
                    outcomes.append((freed, unreserved + freed - needed, module, evicted))
        if not outcomes:
            if op.waiting_for_module_binding_since is None:
                op.waiting_for_module_binding_since = self._now
            return False
        _, _, best, evicted = min(outcomes, key=lambda item: (item[0], item[1], item[2]))
        if used is not None and used != best:
            self._preempt_all(
                op.assignments,
                AbortReason.OPERATION_BOUND_TO_OTHER_MODULE,
                f"Preempted because operation was bound to other scheduling module {best}",
            )
        for other in evicted:
            self._evict(
                other,
                f"Preempted due to operation's eviction from scheduling module in favour of priority operation "
                f"{op.id}",
            )
        op.waiting_for_module_binding_since = None
        op.module = best
        self._bound[best].append(op)
        return True

    def _regular_order(self, ops: list[PlanOperation], count: Any) -> list[PlanOperation]:
        return sorted(ops, key=lambda op: (op.type != "vanilla", -op.needed[GPU], -count(op), op.id))

    def _plan_regular(self) -> None:
        nodes = [self.nodes[a] for a in sorted(self.nodes) if self.nodes[a].schedulable]
        ops = [op for op in self.operations.values() if not op.full_host_module_bound and op.ready > 0]
        for op in self._regular_order(ops, lambda op: op.ready):
            self._plan_group(op, nodes, stage="regular")
            if op.starving:
                self._plan_group_with_preemption(op, nodes, aggressive=False)

    def _plan_extra(self, facts: Mapping[str, OperationFacts]) -> None:
        nodes = [self.nodes[a] for a in sorted(self.nodes) if self.nodes[a].schedulable]
        ops = [op for op in self.operations.values() if not op.full_host_module_bound and op.extra > 0]
        for op in self._regular_order(ops, lambda op: op.extra):
            room = facts[op.id].limit_room
            if room is not None:
                limited = min(
                    (room[r] / op.needed[r] for r in range(RESOURCE_COUNT) if op.needed[r] > 0),
                    default=float(op.extra),
                )
                op.extra = max(0, min(op.extra, int(limited + 1e-9)))
            self._plan_group(op, nodes, stage="extra", preemptible=True)

    def _can_add(self, op: PlanOperation, node: PlanNode, discount: list[float] | None = None) -> bool:
        if self.tag_filter is not None and not self.tag_filter(op.id, node.tags):
            return False
        for r in range(RESOURCE_COUNT):
            used = node.assigned[r] - (discount[r] if discount is not None else 0.0)
            if used + op.needed[r] > node.limits[r] + 1e-9:
                return False
        return True

    def _new_assignment(self, op: PlanOperation, node: PlanNode, *, preemptible: bool, stage: str) -> None:
        assignment = Assignment(op.id, node.address, op.needed, self._now, preemptible=preemptible)
        self._add(assignment, op, node)
        if preemptible:
            op.extra -= 1
        else:
            op.ready -= 1
        self.statistics.planned += 1
        self.statistics.planned_by_stage[stage] = self.statistics.planned_by_stage.get(stage, 0) + 1

    def _count(self, op: PlanOperation, preemptible: bool) -> int:
        return op.extra if preemptible else op.ready

    def _plan_group(
        self, op: PlanOperation, nodes: list[PlanNode], *, stage: str, preemptible: bool = False
    ) -> None:
        """Without preemption: the node with the fewest unassigned GPUs first, each filled before the next."""
        if self._count(op, preemptible) <= 0:
            return
        ordered = sorted(nodes, key=lambda node: (node.unassigned_gpu(), node.address))
        index = 0
        while self._count(op, preemptible) > 0:
            while index < len(ordered) and not self._can_add(op, ordered[index]):
                index += 1
            if index == len(ordered):
                return
            self._new_assignment(op, ordered[index], preemptible=preemptible, stage=stage)

    def _penalty(self, assignment: Assignment) -> float:
        minimum = self.config.min_assignment_preemptible_duration
        start = assignment.preemptible_progress_start_time
        duration = minimum if start is None else max(self._now - start, minimum)
        return float(int(duration)) * assignment.resources[GPU]

    def _plan_group_with_preemption(
        self, op: PlanOperation, nodes: list[PlanNode], *, aggressive: bool
    ) -> None:
        """With preemption: the node whose cheapest sufficient set of preemptible assignments costs least."""
        if op.ready <= 0:
            return
        reason = AbortReason.FULL_HOST_AGGRESSIVE_PREEMPTION if aggressive else AbortReason.PREEMPTION
        description = (
            f"Aggressively preempted to plan an assignment for full-host operation {op.id}"
            if aggressive
            else f"Preempted to plan an assignment for operation {op.id}"
        )
        victims: dict[str, list[Assignment]] = {}
        discounts: dict[str, list[float]] = {}
        heap: list[tuple[float, str]] = []
        for node in nodes:
            candidates = [
                a
                for a in node.assignments
                if a.preemptible
                or (aggressive and not self.operations[a.operation_id].full_host_module_bound)
            ]
            candidates.sort(key=lambda a: (self._penalty(a), a.creation_time), reverse=True)  # cheapest last
            discount = [0.0] * RESOURCE_COUNT
            for a in candidates:
                _add_to(discount, a.resources)
            victims[node.address], discounts[node.address] = candidates, discount
            if self._can_add(op, node, discount):
                heap.append((self._next_penalty(op, node, candidates), node.address))
        heapq.heapify(heap)
        while op.ready > 0 and heap:
            _, address = heapq.heappop(heap)
            node = self.nodes[address]
            candidates, discount = victims[address], discounts[address]
            while not self._can_add(op, node):
                victim = candidates.pop()
                _sub_from(discount, victim.resources)
                self._preempt(victim, reason, description, op.id)
            self._new_assignment(op, node, preemptible=False, stage="preemptive")
            if self._can_add(op, node, discount):
                heapq.heappush(heap, (self._next_penalty(op, node, candidates), address))

    def _next_penalty(self, op: PlanOperation, node: PlanNode, candidates: list[Assignment]) -> float:
        penalty = 0.0
        freed = [0.0] * RESOURCE_COUNT
        for victim in reversed(candidates):
            if self._can_add(op, node, freed):
                break
            _add_to(freed, victim.resources)
            penalty += self._penalty(victim)
        return penalty

    # ------------------------------------------------------------------------------------------- heartbeat

    def has_work(self, address: str) -> bool:
        """Whether the node's next heartbeat has something to do: allocations to preempt or assignments to start."""
        node = self.nodes.get(address)
        return node is not None and (bool(node.to_preempt) or node.preliminary > 0)

    def take_preemptions(self, address: str) -> dict[str, tuple[AbortReason, str, str | None]]:
        node = self.nodes.get(address)
        if node is None or not node.to_preempt:
            return {}
        taken, node.to_preempt = node.to_preempt, {}
        return taken

    def preliminary(self, address: str) -> list[Assignment]:
        node = self.nodes.get(address)
        if node is None or not node.schedulable:
            return []
        return [a for a in node.assignments if a.allocation_id is None]

    def drop(self, assignment: Assignment) -> None:
        """A preliminary assignment whose allocation could not start."""
        self._remove(assignment)

    def operation_view(self, operation_id: str) -> dict[str, Any]:
        op = self.operations.get(operation_id)
        if op is None or not self.config.planning:
            return {}
        return {
            "gpu_policy_scheduling_module": op.module,
            "gpu_policy_preemptible": op.preemptible,
            "gpu_policy_assignment_count": len(op.assignments),
        }

    def view(self) -> dict[str, Any]:
        """The orchid's ``gpu_assignment_plan`` (YTsaurus's nodes and operations of the plan) with the last
        update's statistics and the module states."""
        if not self.config.planning:
            return {"mode": self.config.mode, "policy_kind": self.config.policy_kind}
        module_nodes = self._module_nodes()
        bound: dict[str, list[str]] = {m: [] for m in self.config.modules}
        for op_id in sorted(self.operations):
            op = self.operations[op_id]
            if op.module in bound and not op.preemptible:
                bound[op.module].append(op_id)
        return {
            "mode": self.config.mode,
            "policy_kind": self.config.policy_kind,
            "last_update_time": self.last_update,
            "modules": {
                module: {
                    "node_count": len(module_nodes[module]),
                    "unreserved_node_count": len(module_nodes[module])
                    - sum(self.operations[o].initial_count for o in bound[module]),
                    "full_host_bound_operation_count": len(bound[module]),
                }
                for module in self.config.modules
            },
            "statistics": {
                "planned_assignments": self.statistics.planned,
                "preempted_assignments": self.statistics.preempted,
                "planned_assignments_by_stage": dict(sorted(self.statistics.planned_by_stage.items())),
                "preempted_assignments_by_reason": dict(sorted(self.statistics.preempted_by_stage.items())),
                "planned_assignments_total": self.planned_total,
                "preempted_assignments_total": self.preempted_total,
            },
            "nodes": {address: self.nodes[address].to_dict() for address in sorted(self.nodes)},
            "operations": {op_id: self.operations[op_id].to_dict() for op_id in sorted(self.operations)},
        }


def _operations_to_evict(candidates: list[PlanOperation], needed: int) -> list[PlanOperation] | None:
    """The largest bound operations while none suffices alone, then the smallest one that does; None when all of
    them together free too few nodes (YTsaurus's greedy ``FindOperationsToEvict``)."""
    ordered = sorted(candidates, key=lambda op: (-op.initial_count, op.id))
    freed = 0
    taken: list[PlanOperation] = []
    index = 0
    while index < len(ordered) and freed + ordered[index].initial_count < needed:
        freed += ordered[index].initial_count
        taken.append(ordered[index])
        index += 1
    if index == len(ordered):
        return None
    last = index
    while index < len(ordered) and freed + ordered[index].initial_count >= needed:
        last = index
        index += 1
    taken.append(ordered[last])
    return taken


def _progress_order(assignment: Assignment) -> tuple[bool, bool, float, float]:
    """Realized assignments by the start of their progress (oldest first), preliminary ones last."""
    start = assignment.preemptible_progress_start_time
    return (assignment.allocation_id is None, start is None, start or 0.0, assignment.creation_time)


def _bounds(fair_share: Floats, total: Floats) -> Floats:
    """Per resource, the absolute usage a fair share (+ epsilon) covers; unbounded where the tree has none of it
    (a share of nothing is zero, always within the fair share)."""
    return tuple((f + EPSILON) * t if t > 0 else float("inf") for f, t in zip(fair_share, total, strict=True))


def _add_to(target: list[float], values: Iterable[float]) -> None:
    for r, value in enumerate(values):
        target[r] += value


def _sub_from(target: list[float], values: Iterable[float]) -> None:
    for r, value in enumerate(values):
        target[r] -= value
