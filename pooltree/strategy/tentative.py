"""Tentative pool trees: an operation runs on trial in more trees and leaves those where its jobs are too slow.

YTsaurus (the controller agent's ``TTentativeTreeEligibility``, one per task, and the strategy's saturation
check): the spec's ``tentative_pool_trees`` are trees the operation runs in besides its ``pool_trees``. Per task
and tentative tree, at most ``sample_job_count`` jobs run there before that many have completed ("wait for a sample
of jobs to finish before allowing the rest of the jobs to start"). Every completed job adds its duration to the
tree's samples, or to the samples of the non-tentative trees. A tentative tree is *slow* when

- the non-tentative trees have at least ``sample_job_count`` completed jobs with a non-zero mean duration,
- the tree's mean duration is at least ``min_job_duration``, and
- that mean divided by the non-tentative mean is at least ``max_tentative_job_duration_ratio``.

The tree's mean counts a job still running too: with fewer samples than ``sample_job_count``, the job started
last there is one more sample lasting until now; with a full sample it is the sample's mean. After each completed job, every tentative tree
that is slow is *banned* for the operation: the operation leaves it and its jobs there are aborted (abort reason
``banned_in_tentative_tree``). Completed jobs are the only samples; failed and aborted ones only count as finished.

When a tentative tree declines a job (banned, or waiting for its sample), the operation is *saturated* in that
tree for the tree's ``tentative_tree_saturation_deactivation_period`` (default 10 s): it is skipped there with
the deactivation reason ``saturated_in_tentative_tree`` and no controller call, as YTsaurus's
``IsSaturatedInTentativeTree``.

This module is pure: time is passed in. :class:`TentativeGate` is what a tree's scheduling stages ask before
calling an operation's controller (`stages.py`); the live service feeds job starts and ends
(`pooltree/server/live/tentative.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pooltree.config.base import check_option_map
from pooltree.errors import ConfigError, join_path
from pooltree.resources import parse_duration

BANNED_IN_TENTATIVE_TREE = "banned_in_tentative_tree"
"""The abort reason of an operation's jobs in a tree banned for it (YTsaurus ``BannedInTentativeTree``)."""

DEFAULT_SATURATION_DEACTIVATION_PERIOD = 10.0
"""The tree's ``tentative_tree_saturation_deactivation_period`` default, seconds (YTsaurus: 10 s)."""


@dataclass(frozen=True)
class TentativeTreeEligibilityConfig:
    """The spec's ``tentative_tree_eligibility`` (YTsaurus's defaults)."""

    sample_job_count: int = 10
    max_tentative_job_duration_ratio: float = 10.0
    min_job_duration: float = 30.0
    """Seconds."""
    ignore_missing_pool_trees: bool = False

    @classmethod
    def parse(cls, raw: Any, path: str = "tentative_tree_eligibility") -> TentativeTreeEligibilityConfig:
        """Validate the spec's map; a bad entry names its field."""
        if raw is None:
            return cls()
        raw = check_option_map(
            raw,
            path,
            (
                "sample_job_count",
                "max_tentative_job_duration_ratio",
                "min_job_duration",
                "ignore_missing_pool_trees",
            ),
        )
        count = raw.get("sample_job_count", 10)
        if isinstance(count, bool) or not isinstance(count, int) or count <= 0:
            raise ConfigError(join_path(path, "sample_job_count"), f"expected an integer > 0, got {count!r}")
        ratio = raw.get("max_tentative_job_duration_ratio", 10.0)
        if isinstance(ratio, bool) or not isinstance(ratio, int | float) or not ratio > 0:
            raise ConfigError(
                join_path(path, "max_tentative_job_duration_ratio"), f"expected a number > 0, got {ratio!r}"
            )
        duration = parse_duration(raw.get("min_job_duration", 30000), join_path(path, "min_job_duration"))
        ignore = raw.get("ignore_missing_pool_trees", False)
        if not isinstance(ignore, bool):
            raise ConfigError(
                join_path(path, "ignore_missing_pool_trees"), f"expected a boolean, got {ignore!r}"
            )
        return cls(count, float(ratio), duration, ignore)


OPERATIONS_WITHOUT_TENTATIVE_POOL_TREES = frozenset({"sort", "map_reduce", "remote_copy"})
"""Operation types never run tentatively in a tree without ``non_tentative_operation_types`` (YTsaurus's
scheduler-wide ``operations_without_tentative_pool_trees`` default: data shuffling stays in regular trees)."""

USE_DEFAULT = "use_default_tentative_pool_trees"
DEFAULT_TREES = "default_tentative_pool_trees"
"""The scheduler-wide list (YTsaurus's strategy config; pooltree's ``pooltree scheduler
--default-tentative-pool-trees`` and the snapshot's top-level key) the spec's ``use_default_tentative_pool_trees``
takes."""

INTERSECT = "Regular and tentative pool trees must not intersect"
NO_REGULAR = "Regular pool trees must be explicitly specified for tentative pool trees to work properly"


def tentative_trees(
    spec: Mapping[str, Any],
    operation_type: str,
    existing: Iterable[str],
    non_tentative_types: Mapping[str, Iterable[str] | None],
    path: str = "spec",
    defaults: Sequence[str] = (),
) -> list[str]:
    """The trees the operation runs in tentatively (YTsaurus's ``ParsePoolTrees``).

    ``spec``'s ``tentative_pool_trees``, or, when it lists none and sets ``use_default_tentative_pool_trees``, the
    scheduler's ``default_tentative_pool_trees`` (``defaults``), need explicit ``pool_trees`` and must not
    intersect them; a tree that does not exist fails the start unless
    ``tentative_tree_eligibility.ignore_missing_pool_trees``; a tree whose ``non_tentative_operation_types``
    (default :data:`OPERATIONS_WITHOUT_TENTATIVE_POOL_TREES`) lists the operation's type is left out.
    """
    raw = spec.get("tentative_pool_trees")
    field_path = join_path(path, "tentative_pool_trees")
    if raw is None:
        use_default = spec.get(USE_DEFAULT, False)
        if not isinstance(use_default, bool):
            raise ConfigError(join_path(path, USE_DEFAULT), f"expected a boolean, got {use_default!r}")
        if not use_default or not defaults:
            return []
        raw, field_path = list(defaults), DEFAULT_TREES
    if isinstance(raw, str) or not isinstance(raw, Sequence):
        raise ConfigError(field_path, "expected a list of pool tree names")
    config = TentativeTreeEligibilityConfig.parse(
        spec.get("tentative_tree_eligibility"), join_path(path, "tentative_tree_eligibility")
    )
    regular = spec.get("pool_trees")
    if raw and not regular:
        raise ConfigError(field_path, NO_REGULAR)
    present = set(existing)
    result: list[str] = []
    for index, name in enumerate(raw):
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{field_path}[{index}]", "expected a pool tree name")
        if name in regular:
            raise ConfigError(f"{field_path}[{index}]", f"{INTERSECT} ({name!r})")
        if name in result:
            continue
        if name not in present:
            if config.ignore_missing_pool_trees:
                continue
            raise ConfigError(f"{field_path}[{index}]", f"Pool tree {name!r} not found")
        types = non_tentative_types.get(name)
        if operation_type in (OPERATIONS_WITHOUT_TENTATIVE_POOL_TREES if types is None else set(types)):
            continue
        result.append(name)
    return result


NON_TENTATIVE_TYPES = "non_tentative_operation_types"


def non_tentative_types(tree_configs: Mapping[str, Any]) -> dict[str, list[str] | None]:
    """Tree → its ``non_tentative_operation_types`` (None: the default list), from tree name → tree config."""
    result: dict[str, list[str] | None] = {}
    for name, config in tree_configs.items():
        raw = (getattr(config, "model_extra", None) or {}).get(NON_TENTATIVE_TYPES)
        result[name] = [str(t) for t in raw] if isinstance(raw, list) else None
    return result


def asks_for_tentative_trees(spec: Any) -> bool:
    """Whether a spec (a map or an ``OperationSpec``) names tentative trees or asks for the scheduler's default
    ones."""
    options = spec_options(spec)
    return options.get("tentative_pool_trees") is not None or bool(options.get(USE_DEFAULT))


def spec_options(spec: Any) -> Mapping[str, Any]:
    """The tentative options of a spec given as a map or as an ``OperationSpec`` (kept in its extras)."""
    if isinstance(spec, Mapping):
        return spec
    return {**(getattr(spec, "model_extra", None) or {}), "pool_trees": getattr(spec, "pool_trees", None)}


def with_tentative_trees(spec: Any, regular: Sequence[str], tentative: Sequence[str]) -> Any:
    """The ``OperationSpec`` registered in its regular and then its tentative trees (YTsaurus lists both)."""
    return spec.model_copy(update={"pool_trees": (*regular, *tentative)}) if tentative else spec


@dataclass
class _Durations:
    total: float = 0.0
    count: int = 0

    def add(self, seconds: float) -> None:
        self.total += seconds
        self.count += 1


@dataclass
class TaskEligibility:
    """One task's record in its operation's tentative trees (YTsaurus's per-task ``TTentativeTreeEligibility``)."""

    config: TentativeTreeEligibilityConfig
    started: dict[str, int] = field(default_factory=dict)
    finished: dict[str, int] = field(default_factory=dict)
    completed: dict[str, int] = field(default_factory=dict)
    last_start: dict[str, float] = field(default_factory=dict)
    durations: dict[str, _Durations] = field(default_factory=dict)
    non_tentative: _Durations = field(default_factory=_Durations)

    def can_start(self, tree: str) -> bool:
        """Whether one more job may start in tentative ``tree`` now (not waiting for the sample to finish)."""
        running = self.started.get(tree, 0) - self.finished.get(tree, 0)
        remaining = self.config.sample_job_count - self.completed.get(tree, 0)
        return not (remaining > 0 and running >= remaining)

    def mean_duration(self, tree: str, now: float) -> float:
        """The tree's mean job duration, counting the job started last while the tree has one running."""
        sample = self.durations.get(tree, _Durations())
        n = self.config.sample_job_count
        last = now - self.last_start.get(tree, now)
        if sample.count < n:
            return (sample.total + last) / (sample.count + 1)
        return sample.total / sample.count

    def is_slow(self, tree: str, now: float) -> bool:
        base = self.non_tentative
        if base.count < self.config.sample_job_count or base.total <= 0.0:
            return False
        mean = self.mean_duration(tree, now)
        if mean < self.config.min_job_duration:
            return False
        return mean / (base.total / base.count) >= self.config.max_tentative_job_duration_ratio


class TentativeEligibility:
    """An operation's tentative trees: job starts and ends per task, the trees banned, the saturation times."""

    def __init__(self, trees: Iterable[str], config: TentativeTreeEligibilityConfig) -> None:
        self.trees: frozenset[str] = frozenset(trees)
        self.config = config
        self.tasks: dict[str, TaskEligibility] = {}
        self.banned: set[str] = set()
        self.saturated_at: dict[str, float] = {}
        """Tentative tree → when a job was last declined there."""

    def _task(self, task: str) -> TaskEligibility:
        record = self.tasks.get(task)
        if record is None:
            record = self.tasks[task] = TaskEligibility(self.config)
        return record

    def can_start(self, tree: str) -> bool:
        """Whether a job may start in ``tree``: always in a non-tentative tree; in a tentative one, unless it is
        banned or every task with a record waits for its sample (a task without one may start)."""
        if tree not in self.trees:
            return True
        if tree in self.banned:
            return False
        if not self.tasks:
            return True
        return any(record.can_start(tree) for record in self.tasks.values())

    def task_can_start(self, task: str, tree: str) -> bool:
        if tree not in self.trees:
            return True
        return tree not in self.banned and self._task(task).can_start(tree)

    def on_declined(self, tree: str, now: float) -> None:
        self.saturated_at[tree] = now

    def is_saturated(self, tree: str, now: float, period: float) -> bool:
        since = self.saturated_at.get(tree)
        return since is not None and now - since < period

    def on_started(self, task: str, tree: str, now: float) -> None:
        if tree in self.trees:
            record = self._task(task)
            record.started[tree] = record.started.get(tree, 0) + 1
            record.last_start[tree] = now

    def on_finished(self, task: str, tree: str, state: str, duration: float, now: float) -> list[str]:
        """A job of ``task`` in ``tree`` ended in ``state``; returns the tentative trees banned now."""
        record = self._task(task)
        tentative = tree in self.trees
        if tentative:
            record.finished[tree] = record.finished.get(tree, 0) + 1
        if state != "completed":
            return []
        if tentative:
            record.completed[tree] = record.completed.get(tree, 0) + 1
            record.durations.setdefault(tree, _Durations()).add(duration)
        else:
            record.non_tentative.add(duration)
        newly: list[str] = []
        for name in sorted(record.started):
            if name not in self.banned and record.is_slow(name, now):
                self.banned.add(name)
                newly.append(name)
        return newly


class TentativeGate:
    """What a tree's scheduling stages ask before calling an operation's controller: the operations that run
    tentatively in this tree and the tree's saturation deactivation period."""

    def __init__(self, period: float = DEFAULT_SATURATION_DEACTIVATION_PERIOD) -> None:
        self.period = period
        self.operations: dict[str, TentativeEligibility] = {}
        """Operation id → its eligibility, for the operations tentative in this tree."""
        self.tree = ""

    def deactivation(self, operation_id: str, now: float) -> str | None:
        """``saturated_in_tentative_tree`` while the operation is saturated here, ``declined`` when it may not
        start a job here now (which saturates it), None when the controller may be asked."""
        eligibility = self.operations.get(operation_id)
        if eligibility is None:
            return None
        if eligibility.is_saturated(self.tree, now, self.period):
            return "saturated_in_tentative_tree"
        if not eligibility.can_start(self.tree):
            eligibility.on_declined(self.tree, now)
            return "declined"
        return None

    def on_allocated(self, operation_id: str, task: str, now: float) -> None:
        """An allocation of ``task`` started here: a job in the tentative tree (counted when it is decided, so the
        rest of the heartbeat already sees it)."""
        eligibility = self.operations.get(operation_id)
        if eligibility is not None:
            eligibility.on_started(task, self.tree, now)


PERIOD_OPTION = "tentative_tree_saturation_deactivation_period"


def attach_eligibility(
    gates: Mapping[str, TentativeGate],
    operation_id: str,
    trees: Sequence[str],
    spec: Mapping[str, Any],
    tree_configs: Mapping[str, Any],
) -> TentativeEligibility:
    """The operation's eligibility (its spec's ``tentative_tree_eligibility``), given to the gate of each tentative
    tree with the tree's ``tentative_tree_saturation_deactivation_period``; the live service and the simulator
    both attach through here."""
    config = TentativeTreeEligibilityConfig.parse(
        spec.get("tentative_tree_eligibility"), "spec.tentative_tree_eligibility"
    )
    eligibility = TentativeEligibility(trees, config)
    for tree in trees:
        gate = gates[tree]
        gate.tree = tree
        raw = (getattr(tree_configs[tree], "model_extra", None) or {}).get(PERIOD_OPTION)
        gate.period = (
            DEFAULT_SATURATION_DEACTIVATION_PERIOD
            if raw is None
            else parse_duration(raw, f"pool_trees.{tree}.config.{PERIOD_OPTION}")
        )
        gate.operations[operation_id] = eligibility
    return eligibility
