"""Configuration: input documents, pool tree / pool / operation spec models, validation, presets, tag filters.

Public API (stable names other packages build on):

- :func:`parse_pool_trees` → ``dict[str, PoolTreeDefinition]``: THE validator of a pool trees document.
- :class:`PoolTreeDefinition`, :class:`PoolDefinition`, :class:`PoolTreeConfig`, :class:`PoolConfig`.
- :class:`Resources`: the immutable resource map stored in every model (``.vector`` is a read-only numpy array).
- :class:`TagFilter`, :func:`nodes_of_trees`.
"""

from pooltree.config.base import ConfigModel, Resources
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
from pooltree.config.tags import TagFilter, nodes_of_trees
from pooltree.config.tree import ROOT_POOL, PoolTreeConfig, TreeIntegralGuaranteesConfig

__all__ = [
    "ROOT_POOL",
    "ConfigModel",
    "EphemeralSubpoolConfig",
    "OffloadingPoolSettings",
    "PoolConfig",
    "PoolDefinition",
    "PoolIntegralGuaranteesConfig",
    "PoolTreeConfig",
    "PoolTreeDefinition",
    "Resources",
    "TagFilter",
    "TreeIntegralGuaranteesConfig",
    "nodes_of_trees",
    "parse_pool_tree",
    "parse_pool_trees",
    "resolve_default_tree",
]
