"""The pool trees of the live scheduler: applying the trees document and the users' default parent pools.

A part of ``LiveScheduler`` (``scheduler.py``, ``scheduler.pool_trees``) that works on the scheduler's state under
its lock: one ``SchedulerCore`` per tree, made or reconfigured when the trees change.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pooltree.alerts import default_tree_missing, nodes_in_several_trees
from pooltree.server.live.orphans import leave_removed_trees
from pooltree.strategy.core import SchedulerCore

if TYPE_CHECKING:
    from pooltree.server.live.scheduler import LiveScheduler


class LivePoolTrees:
    """The pool trees of ``LiveScheduler``."""

    def __init__(self, scheduler: LiveScheduler) -> None:
        self.scheduler = scheduler
        self.node_trees: dict[frozenset[str], list[str]] = {}
        """Node tags → the trees whose ``node_tag_filter`` they match (cleared when pool trees change)."""

    def apply_pool_trees(
        self,
        definitions: Mapping[str, Any],
        default_tree: str | None,
        now: float,
        *,
        single_tree_default: bool = True,
    ) -> None:
        """Apply the last good pool trees document (from Cypress) to the runtime.

        As YTsaurus's scheduler does, a ``default_tree`` that names no tree refuses the whole update: the trees
        stay as they were, operations without ``pool_trees`` are refused (no default tree), and the
        ``update_pools`` alert says why until ``@default_tree`` is fixed or removed. With ``default_tree`` None
        the only tree is the default when ``single_tree_default`` (callers without a Cypress); the service passes
        False: on YTsaurus only ``@default_tree`` makes a default tree, even when there is one tree.
        """
        scheduler = self.scheduler
        with scheduler.lock:
            scheduler.generation.bump()
            if default_tree is not None and default_tree not in definitions:
                scheduler.pool_trees_error = default_tree_missing(default_tree, definitions)
                scheduler.registry.default_tree = None
                return
            filters = {name: definition.config.tag_filter for name, definition in definitions.items()}
            current = {name: tree.config.tag_filter for name, tree in scheduler.registry.trees.items()}
            if {n: f.text for n, f in filters.items()} != {n: f.text for n, f in current.items()}:
                # YTsaurus checks the known nodes only when trees or their filters change
                overlap = nodes_in_several_trees(
                    filters, {a: node.tags for a, node in scheduler.nodes.items()}
                )
                if overlap is not None:
                    scheduler.pool_trees_error = overlap
                    return
            scheduler.pool_trees_error = None
            removed = [name for name in scheduler.registry.trees if name not in definitions]
            if removed:  # as YTsaurus: operations leave removed trees, those left without one are aborted
                leave_removed_trees(scheduler, removed, now)
            scheduler.registry.default_tree = (
                default_tree  # apply_config keeps the old default when given None
            )
            activated = scheduler.registry.apply_config(definitions, default_tree, now)
            if not single_tree_default:
                scheduler.registry.default_tree = default_tree  # apply_config makes a single tree the default
            self.node_trees.clear()
            for name, tree in scheduler.registry.trees.items():
                core = scheduler.cores.get(name)
                if core is None or core.pool_tree is not tree:
                    scheduler.cores[name] = SchedulerCore(tree)
                    scheduler.cores[name].connection_time = scheduler.connection_time
                    scheduler.cores[name].strategy.clock = time.monotonic  # schedule_allocations_timeout
                else:
                    core.config = type(core.config).from_options(tree.config, f"pool_trees.{name}.config")
            for name in list(scheduler.cores):
                if name not in scheduler.registry.trees:
                    del scheduler.cores[name]
                    scheduler.views.forget(name)
            scheduler.updates.dirty.update(scheduler.cores)
            scheduler.commands.on_activated(activated, now)
            scheduler.updates.refresh_stale_trees(now)

    def set_user_default_parent_pools(self, mapping: Mapping[str, str], now: float) -> None:
        """Apply ``//sys/scheduler/user_to_default_pool`` (from Cypress): the pools under which each user's
        ephemeral pools are created in trees with ``use_user_default_parent_pool_map``; existing ones move."""
        scheduler = self.scheduler
        with scheduler.lock:
            scheduler.generation.bump()
            activated = scheduler.registry.set_user_default_parent_pools(mapping, now)
            scheduler.updates.dirty.update(scheduler.cores)
            scheduler.commands.on_activated(activated, now)
            scheduler.updates.refresh_stale_trees(now)
