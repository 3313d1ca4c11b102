"""Configuration: input documents, pool tree / pool / operation spec models, validation, presets, tag filters.

Public API (stable names other packages build on):

- :func:`parse_pool_trees` → ``dict[str, PoolTreeDefinition]``: THE validator of a pool trees document.
- :class:`PoolTreeDefinition`, :class:`PoolDefinition`, :class:`PoolTreeConfig`, :class:`PoolConfig`.
- :class:`Resources`: the immutable resource map stored in every model (``.vector`` is a read-only numpy array).
- :class:`OperationSpec` (unknown keys kept, see ``unrecognized_spec()``).
- :class:`TagFilter`, :func:`nodes_of_trees`.
- :func:`load_document` / :func:`loads_document` (YAML, JSON, YSON), :func:`cypress_dump_to_pool_trees`.
- :func:`load_snapshot` / :func:`parse_snapshot` → :class:`Snapshot` (PRODUCT.md §2).
"""

from pooltree.config.base import ConfigModel, Resources
from pooltree.config.documents import (
    cypress_default_tree,
    cypress_dump_to_pool_trees,
    load_document,
    loads_document,
)
from pooltree.config.operation import OperationSpec, TreeSchedulingOptions, UserJobSpec, VanillaTaskSpec
from pooltree.config.pool import (
    EphemeralSubpoolConfig,
    OffloadingPoolSettings,
    PoolConfig,
    PoolIntegralGuaranteesConfig,
)
from pooltree.config.pool_trees import (
    PoolDefinition,
    PoolTreeDefinition,
    parse_pool_tree,
    parse_pool_trees,
    resolve_default_tree,
)
from pooltree.config.snapshot import (
    Cluster,
    FairShareUpdateState,
    JobGroup,
    NodeGroup,
    Snapshot,
    SnapshotOperation,
    load_snapshot,
    parse_snapshot,
)
from pooltree.config.tags import TagFilter, nodes_of_trees
from pooltree.config.tree import ROOT_POOL, PoolTreeConfig, TreeIntegralGuaranteesConfig

__all__ = [
    "ROOT_POOL",
    "Cluster",
    "ConfigModel",
    "EphemeralSubpoolConfig",
    "FairShareUpdateState",
    "JobGroup",
    "NodeGroup",
    "OffloadingPoolSettings",
    "OperationSpec",
    "PoolConfig",
    "PoolDefinition",
    "PoolIntegralGuaranteesConfig",
    "PoolTreeConfig",
    "PoolTreeDefinition",
    "Resources",
    "Snapshot",
    "SnapshotOperation",
    "TagFilter",
    "TreeIntegralGuaranteesConfig",
    "TreeSchedulingOptions",
    "UserJobSpec",
    "VanillaTaskSpec",
    "cypress_default_tree",
    "cypress_dump_to_pool_trees",
    "load_document",
    "load_snapshot",
    "loads_document",
    "nodes_of_trees",
    "parse_pool_tree",
    "parse_pool_trees",
    "parse_snapshot",
    "resolve_default_tree",
]
