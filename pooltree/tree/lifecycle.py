"""Operation lifecycle: the states a YTsaurus client sees, the legal transitions between them, and the events list.

A typical path is ``starting → (pending) → running → completing → completed``; ``aborting → aborted`` and
``failing → failed`` may start from any non-final state. ``suspended`` is a flag, not a state: a suspended operation
keeps its place (and its counts) but gets no new allocations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from pooltree.errors import PooltreeError


class OperationState(StrEnum):
    """Client-visible operation states (YSON spellings)."""

    STARTING = "starting"
    PENDING = "pending"
    RUNNING = "running"
    COMPLETING = "completing"
    COMPLETED = "completed"
    ABORTING = "aborting"
    ABORTED = "aborted"
    FAILING = "failing"
    FAILED = "failed"

    @property
    def is_final(self) -> bool:
        """Completed, aborted and failed end the operation (the client's poll loop stops there)."""
        return self in FINAL_STATES


FINAL_STATES = frozenset({OperationState.COMPLETED, OperationState.ABORTED, OperationState.FAILED})

_S = OperationState
TRANSITIONS: dict[OperationState, frozenset[OperationState]] = {
    _S.STARTING: frozenset({_S.PENDING, _S.RUNNING, _S.ABORTING, _S.FAILING}),
    _S.PENDING: frozenset({_S.RUNNING, _S.COMPLETING, _S.ABORTING, _S.FAILING}),
    _S.RUNNING: frozenset({_S.COMPLETING, _S.ABORTING, _S.FAILING}),
    _S.COMPLETING: frozenset({_S.COMPLETED, _S.ABORTING, _S.FAILING}),
    _S.ABORTING: frozenset({_S.ABORTED}),
    _S.FAILING: frozenset({_S.FAILED}),
    _S.COMPLETED: frozenset(),
    _S.ABORTED: frozenset(),
    _S.FAILED: frozenset(),
}
"""Legal moves; the intermediate states (completing, aborting, failing) are never skipped."""

FINISHING_STATE: dict[OperationState, OperationState] = {
    _S.COMPLETED: _S.COMPLETING,
    _S.ABORTED: _S.ABORTING,
    _S.FAILED: _S.FAILING,
}


class InvalidOperationStateError(PooltreeError):
    """An operation was asked to move to a state it cannot reach from its current one."""

    def __init__(self, operation_id: str, current: OperationState, target: OperationState):
        allowed = ", ".join(sorted(TRANSITIONS[current])) or "none (the operation has finished)"
        super().__init__(
            f"Operation {operation_id} cannot move from state {current.value!r} to {target.value!r}; "
            f"allowed: {allowed}",
            attributes={"operation_id": operation_id, "state": current.value, "target_state": target.value},
        )


@dataclass(slots=True)
class OperationEvent:
    """One entry of the operation's ``events`` attribute: the state entered and when (seconds)."""

    state: OperationState
    time: float


@dataclass(slots=True)
class OperationLifecycle:
    """State, suspended flag and the timestamped events of one operation."""

    operation_id: str
    state: OperationState = OperationState.STARTING
    suspended: bool = False
    events: list[OperationEvent] = field(default_factory=list)
    start_time: float = 0.0
    finish_time: float | None = None

    @classmethod
    def start(cls, operation_id: str, now: float) -> OperationLifecycle:
        """A new operation in state ``starting`` at ``now``."""
        return cls(operation_id, start_time=now, events=[OperationEvent(OperationState.STARTING, now)])

    def can_move(self, target: OperationState) -> bool:
        return target in TRANSITIONS[self.state]

    def move(self, target: OperationState, now: float) -> None:
        """Enter ``target`` at ``now``; raises InvalidOperationStateError for an illegal move."""
        target = OperationState(target)
        if target not in TRANSITIONS[self.state]:
            raise InvalidOperationStateError(self.operation_id, self.state, target)
        self.state = target
        self.events.append(OperationEvent(target, now))
        if target in FINAL_STATES:
            self.finish_time = now
            self.suspended = False

    def finish(self, final: OperationState, now: float) -> None:
        """Reach a final state through its intermediate state (``running → completing → completed``)."""
        final = OperationState(final)
        if final not in FINISHING_STATE:
            raise PooltreeError(
                f"{final.value!r} is not a final operation state", attributes={"state": final.value}
            )
        intermediate = FINISHING_STATE[final]
        if self.state is not intermediate:
            self.move(intermediate, now)
        self.move(final, now)

    def set_suspended(self, suspended: bool) -> None:
        """Suspend or resume; finished operations cannot be suspended."""
        if self.state in FINAL_STATES:
            raise PooltreeError(
                f"Operation {self.operation_id} is in final state {self.state.value!r} and cannot be "
                f"{'suspended' if suspended else 'resumed'}",
                attributes={"operation_id": self.operation_id, "state": self.state.value},
            )
        self.suspended = suspended

    def events_as_dicts(self) -> list[dict[str, object]]:
        return [{"state": e.state.value, "time": e.time} for e in self.events]
