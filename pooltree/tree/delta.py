"""One period's changes of a pool tree, found once and read by every consumer of the period (issue 28).

A fair-share period reads the runtime tree twice: the fair-share input (`fair_share_input.py`) and the strategy's
element rows (`pooltree.strategy.build`). Each keeps what it built at the tree's previous ``revision`` and needs to
know what changed since: nothing (the same revision), only some operations (arrived, left, activated, suspended,
moved, new parameters: `PoolTree.operations_changed_since`), or the pools themselves (walk the whole tree again).
`period_delta` answers that once per period; `SchedulerCore` (and `pooltree fair-share`'s step) hands the same
`PeriodDelta` to both consumers, together with the operations whose usage or demand may have moved (the
strategy's and the controllers' notifications), so no consumer asks the tree again.

A consumer takes the delta only when it was built at ``delta.since`` (the previous period's revision); otherwise
(its previous build failed half-way, or it never built) it walks the tree, which gives the same result.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pooltree.tree.elements import PoolElement, TreeOperation
from pooltree.tree.values import EffectiveParameters


class RuntimeTree(Protocol):
    """What the period's consumers (the fair-share input, the strategy's element rows, the tree checks) read of
    a pool tree at run time: `pooltree.tree.PoolTree` is the one implementation, typed here so that no consumer
    probes for attributes."""

    name: str
    config: Any
    root: PoolElement
    revision: int
    """Bumped by every change the per-period builds read (pools, a running operation's placement or parameters)."""
    structure_revision: int
    """The ``revision`` of the latest change of the pools themselves (created, removed, a config swap)."""

    @property
    def pools(self) -> Mapping[str, PoolElement]: ...

    @property
    def operations(self) -> Mapping[str, TreeOperation]:
        """Every operation of the tree in registration order (running or pending)."""
        ...

    def operations_changed_since(self, revision: int) -> set[str] | None: ...

    def effective_parameters(self, pool_name: str) -> EffectiveParameters: ...


@dataclass(frozen=True, slots=True)
class PeriodDelta:
    """What changed in ``tree`` between the previous period (at revision ``since``) and this one (``revision``).

    ``operations``: the operations added, removed, moved, activated, suspended or given new parameters since
    ``since`` (empty when the revision is the same); ``None`` when the pools or the tree's config changed (or there
    is no previous period): every consumer walks the whole tree. ``resources``: the operations whose usage or
    demand may have been written since the previous period (``None``: unknown, ask every running operation).
    """

    tree: RuntimeTree
    since: int | None
    revision: int
    operations: frozenset[str] | None
    resources: Collection[str] | None = None

    @property
    def unchanged(self) -> bool:
        """Whether the tree is the one of the previous period (only usage and demand may have moved)."""
        return self.since == self.revision

    def applies_to(self, tree: Any, built_at: int | None) -> bool:
        """Whether a consumer whose previous build read ``tree`` at revision ``built_at`` may bring that build up to
        date with this delta instead of walking the tree."""
        return (
            tree is self.tree
            and built_at is not None
            and built_at == self.since
            and self.operations is not None
        )


def period_delta(
    tree: RuntimeTree, since: int | None, resources: Collection[str] | None = None
) -> PeriodDelta:
    """The changes of ``tree`` since revision ``since`` (the previous period's; ``None``: no previous period)."""
    revision = tree.revision
    if since is None:
        operations: frozenset[str] | None = None
    elif since == revision:
        operations = frozenset()
    else:
        changed = tree.operations_changed_since(since)
        operations = None if changed is None else frozenset(changed)
    return PeriodDelta(tree, since, revision, operations, resources)
