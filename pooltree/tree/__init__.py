"""Pool tree runtime: pools and operations at run time, count limits, pending queues, ephemeral pools, live changes.

- :class:`PoolTree` — one tree: admission (``TooManyOperationsError``), running vs pending, activation, lightweight
  operations, ephemeral pools, runtime parameter changes, ``apply_config`` and orchid data.
- :class:`PoolTrees` — every tree of the scheduler: registration by spec (``pool_trees``,
  ``scheduling_options_per_pool_tree``, ``offloading_settings``), the operation lifecycle, activation across trees.
- :class:`OperationLifecycle` / :class:`OperationState` — the client-visible state machine with its events.
"""

from pooltree.tree.elements import EPHEMERAL_DELIMITER, ROOT_POOL_NAME, PoolElement, TreeOperation
from pooltree.tree.fair_share_input import (
    FairShareInput,
    InputRows,
    build_fair_share_input,
    read_input,
    tree_total_resources,
    update_settings,
)
from pooltree.tree.lifecycle import (
    FINAL_STATES,
    TRANSITIONS,
    InvalidOperationStateError,
    OperationEvent,
    OperationLifecycle,
    OperationState,
)
from pooltree.tree.pool_tree import (
    TOO_MANY_OPERATIONS_CODE,
    EffectiveParameters,
    ParametersUpdate,
    PoolPlacement,
    PoolTree,
    TooManyOperationsError,
)
from pooltree.tree.registry import Operation, PoolTrees, TreeRegistration

__all__ = [
    "EPHEMERAL_DELIMITER",
    "FINAL_STATES",
    "ROOT_POOL_NAME",
    "TOO_MANY_OPERATIONS_CODE",
    "TRANSITIONS",
    "EffectiveParameters",
    "FairShareInput",
    "InputRows",
    "InvalidOperationStateError",
    "Operation",
    "OperationEvent",
    "OperationLifecycle",
    "OperationState",
    "ParametersUpdate",
    "PoolElement",
    "PoolPlacement",
    "PoolTree",
    "PoolTrees",
    "TooManyOperationsError",
    "TreeOperation",
    "TreeRegistration",
    "build_fair_share_input",
    "read_input",
    "tree_total_resources",
    "update_settings",
]
