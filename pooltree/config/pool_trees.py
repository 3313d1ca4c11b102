"""The pool trees document: nested pools → validated :class:`PoolTreeDefinition` objects.

``parse_pool_trees`` is the single validator of a whole pool-tree configuration. It applies presets, checks
every pool, then the master-side rules that involve several pools (yt-semantics §b.3, §f): unique names,
FIFO pools without subpools, main-resource guarantees, child guarantees only on resources the parent guarantees,
children's guarantee sums, integral pools without integral children.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from pooltree.config.pool import PoolConfig
from pooltree.config.tree import ROOT_POOL, PoolTreeConfig
from pooltree.errors import ConfigError, join_path
from pooltree.resources import RESOURCES

TREE_KEYS = frozenset({"config", "pools"})
CHILDREN_KEY = "pools"
_GUARANTEE_KINDS: tuple[tuple[str, str], ...] = (
    ("Strong guarantee", "strong_guarantee_resources"),
    ("Burst guarantee", "integral_guarantees.burst_guarantee_resources"),
    ("Resource flow", "integral_guarantees.resource_flow"),
)


@dataclass(frozen=True)
class PoolDefinition:
    """One configured pool: its validated config (presets merged) and its place in the tree."""

    name: str
    parent: str
    """Parent pool name, ``"<Root>"`` for top-level pools."""
    config: PoolConfig
    children: tuple[str, ...]
    full_path: str
    """``/parent/child`` as the orchid reports it."""
    path: str
    """Where the pool is in the input document (for error messages)."""
    applied_presets: tuple[str, ...] = ()


@dataclass(frozen=True)
class PoolTreeDefinition:
    """A validated pool tree: tree config plus pools in pre-order (every parent before its children)."""

    name: str
    config: PoolTreeConfig
    pools: dict[str, PoolDefinition] = field(default_factory=dict)

    @property
    def top_level_pools(self) -> tuple[str, ...]:
        return tuple(name for name, pool in self.pools.items() if pool.parent == ROOT_POOL)

    def children_of(self, name: str) -> tuple[str, ...]:
        """Children of a pool, or the top-level pools for ``"<Root>"``."""
        if name == ROOT_POOL:
            return self.top_level_pools
        return self.pools[name].children

    def ancestors(self, name: str) -> Iterator[str]:
        """Parent, grandparent, ... of a pool up to (not including) the root."""
        parent = self.pools[name].parent
        while parent != ROOT_POOL:
            yield parent
            parent = self.pools[parent].parent

    def max_running_operation_count(self, name: str) -> int:
        """The pool's running-operation limit: its own value or the tree's per-pool default; root's for ``<Root>``."""
        if name == ROOT_POOL:
            return self.config.max_running_operation_count
        own = self.pools[name].config.max_running_operation_count
        return self.config.max_running_operation_count_per_pool if own is None else own

    def max_operation_count(self, name: str) -> int:
        """The pool's total-operation limit: its own value or the tree's per-pool default; root's for ``<Root>``."""
        if name == ROOT_POOL:
            return self.config.max_operation_count
        own = self.pools[name].config.max_operation_count
        return self.config.max_operation_count_per_pool if own is None else own

    def effective_option(self, name: str, option: str) -> Any:
        """An inherited option: the pool's own explicit value, else the nearest ancestor's, else the tree's.

        Meant for ``fair_share_starvation_tolerance``, ``fair_share_starvation_timeout``,
        ``enable_aggressive_starvation``, ``non_preemptible_resource_usage_threshold`` and the like. Options the
        tree does not have (``allow_aggressive_preemption``) yield ``None`` when no pool on the path sets them.
        """
        current = name
        while current != ROOT_POOL:
            pool = self.pools[current]
            value = getattr(pool.config, option)
            if pool.config.explicit(option) and value is not None:
                return value
            current = pool.parent
        return getattr(self.config, option, None)


def _check_pool_name(name: Any, path: str) -> str:
    if not isinstance(name, str) or not name:
        raise ConfigError(path, f"pool name must be a non-empty string, got {name!r}")
    if name == ROOT_POOL:
        raise ConfigError(path, f'pool name "{ROOT_POOL}" is reserved for the root of the tree')
    if "$" in name:
        raise ConfigError(path, f"pool name {name!r} must not contain '$' (reserved for ephemeral pools)")
    if "/" in name:
        raise ConfigError(path, f"pool name {name!r} must not contain '/'")
    return name


def _deep_merge(base: dict[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """YTsaurus PatchNode: maps merge key by key, anything else in ``patch`` replaces ``base``."""
    result = copy.deepcopy(base)
    for key, value in patch.items():
        if isinstance(value, Mapping) and isinstance(result.get(key), dict):
            result[key] = _deep_merge(result[key], value)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _apply_presets(
    options: dict[str, Any], tree: PoolTreeConfig, path: str
) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Base the pool on its presets (an earlier preset in ``config_presets`` wins over a later one, as YTsaurus's
    test_multiple_presets shows) and patch its explicit options on top."""
    single = options.get("config_preset")
    listed = options.get("config_presets")
    if single is not None and listed:
        raise ConfigError(
            join_path(path, "config_presets"),
            '"config_preset" and "config_presets" cannot be specified together',
        )
    if single is not None:
        names: list[tuple[str, str]] = [(single, join_path(path, "config_preset"))]
    elif listed is not None:
        if not isinstance(listed, list | tuple):
            raise ConfigError(
                join_path(path, "config_presets"),
                f"expected a list of preset names, got {type(listed).__name__}",
            )
        names = [
            (item, join_path(join_path(path, "config_presets"), index)) for index, item in enumerate(listed)
        ]
    else:
        return options, ()
    merged: dict[str, Any] = {}
    for name, name_path in reversed(names):
        if not isinstance(name, str):
            raise ConfigError(name_path, f"preset name must be a string, got {name!r}")
        if name not in tree.pool_config_presets:
            raise ConfigError(name_path, f'Config preset "{name}" is not found')
        merged = _deep_merge(merged, tree.pool_config_presets[name])
    return _deep_merge(merged, options), tuple(name for name, _ in names)


def _format_amount(resource: str, amount: float) -> str:
    return f"{amount:g}" if resource == "cpu" else str(round(amount))


def _guarantee(config: PoolConfig, attribute: str) -> Any:
    value: Any = config
    for part in attribute.split("."):
        value = getattr(value, part)
    return value


def _check_guarantees(tree: PoolTreeDefinition) -> None:
    main = tree.config.main_resource
    for pool in tree.pools.values():
        for kind, attribute in _GUARANTEE_KINDS:
            resources = _guarantee(pool.config, attribute)
            field_path = join_path(pool.path, attribute)
            if resources.specified and main not in resources.specified:
                raise ConfigError(
                    field_path,
                    f"Main resource guarantee must be specified in order to set guarantees for any other resource "
                    f'(pool "{pool.name}", main resource "{main}", {kind.lower()} is set for '
                    f"{', '.join(sorted(resources.specified))})",
                )
            if pool.parent != ROOT_POOL:
                parent = tree.pools[pool.parent]
                parent_resources = _guarantee(parent.config, attribute)
                for resource in sorted(resources.specified - parent_resources.specified):
                    raise ConfigError(
                        join_path(field_path, resource),
                        f'{kind} of resource "{resource}" is explicitly configured at child pool "{pool.name}" '
                        f'but is not configured at parent pool "{parent.name}"',
                    )
                if resources.specified and not parent.config.allow_children_guarantees:
                    resource = sorted(resources.specified)[0]
                    raise ConfigError(
                        join_path(field_path, resource),
                        f'{kind} of resource "{resource}" is explicitly configured at child pool "{pool.name}" '
                        f'but parent pool "{parent.name}" does not allow children guarantees '
                        "(allow_children_guarantees is false)",
                    )
            if pool.children:
                for index, resource in enumerate(RESOURCES):
                    if resource not in resources.specified:
                        continue
                    children_sum = sum(
                        float(_guarantee(tree.pools[child].config, attribute).vector[index])
                        for child in pool.children
                    )
                    own = float(resources.vector[index])
                    if own + 1e-9 * max(1.0, abs(own)) < children_sum:
                        raise ConfigError(
                            join_path(field_path, resource),
                            f'{kind} of resource "{resource}" for pool "{pool.name}" is less than the sum of children '
                            f"guarantees: {_format_amount(resource, own)} < {_format_amount(resource, children_sum)}",
                        )
        if pool.config.integral_guarantees.is_integral:
            for child in pool.children:
                if tree.pools[child].config.integral_guarantees.has_integral_resources:
                    raise ConfigError(
                        join_path(tree.pools[child].path, "integral_guarantees"),
                        f'Integral pool "{pool.name}" cannot have children with integral resources '
                        f'(child pool "{child}" configures integral guarantees)',
                    )


def parse_pool_tree(name: str, document: Any, path: str) -> PoolTreeDefinition:
    """Validate one tree ``{config: {...}, pools: {...}}``; ``path`` is where it sits in the document."""
    document = _tree_document(name, document, path)
    config = PoolTreeConfig.parse(document.get("config"), join_path(path, "config"))

    pools: dict[str, PoolDefinition] = {}
    children_of: dict[str, list[str]] = {}
    pending: deque[tuple[str, str, Any, str, str]] = deque()  # (name, parent, options, path, full_path)

    def enqueue(children: Any, parent: str, parent_full_path: str, children_path: str) -> None:
        if children is None:
            return
        if not isinstance(children, Mapping):
            raise ConfigError(
                children_path,
                f"pools must be a map of pool name → pool options, got {type(children).__name__}",
            )
        for child, options in children.items():
            child_path = join_path(children_path, str(child)) if child not in ("", None) else children_path
            pending.append((child, parent, options, child_path, f"{parent_full_path}/{child}"))

    enqueue(document.get("pools"), ROOT_POOL, "", join_path(path, "pools"))
    first_path: dict[str, str] = {}
    while pending:
        pool_name, parent, options, pool_path, full_path = pending.popleft()
        _check_pool_name(pool_name, pool_path)
        if pool_name in first_path:
            raise ConfigError(
                pool_path,
                f'Duplicate pool "{pool_name}" in tree "{name}": pool names are unique within a tree '
                f"(first defined at {first_path[pool_name]})",
            )
        first_path[pool_name] = pool_path
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise ConfigError(pool_path, f"pool options must be a map, got {type(options).__name__}")
        own = {key: value for key, value in options.items() if key != CHILDREN_KEY}
        merged, presets = _apply_presets(own, config, pool_path)
        pool_config = PoolConfig.parse(merged, pool_path)
        children = options.get(CHILDREN_KEY)
        if pool_config.mode == "fifo" and children:
            raise ConfigError(
                join_path(pool_path, CHILDREN_KEY),
                f'Pool "{pool_name}" cannot have subpools since it is in FIFO mode',
            )
        pools[pool_name] = PoolDefinition(pool_name, parent, pool_config, (), full_path, pool_path, presets)
        children_of.setdefault(parent, []).append(pool_name)
        enqueue(children, pool_name, full_path, join_path(pool_path, CHILDREN_KEY))

    tree = PoolTreeDefinition(name, config, _preorder(pools, children_of))
    _check_guarantees(tree)
    return tree


def _tree_document(name: Any, document: Any, path: str) -> Mapping[str, Any]:
    """The tree's document once its name is a non-empty string and it is a map of ``config`` and ``pools`` only
    (``None``: an empty map)."""
    if not isinstance(name, str) or not name:
        raise ConfigError(path, f"pool tree name must be a non-empty string, got {name!r}")
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise ConfigError(
            path, f"a pool tree must be a map with keys config and pools, got {type(document).__name__}"
        )
    for key in document:
        if key not in TREE_KEYS:
            raise ConfigError(
                join_path(path, str(key)), f"unknown pool tree key {key!r}; expected config and pools"
            )
    return document


def _preorder(
    pools: dict[str, PoolDefinition], children_of: dict[str, list[str]]
) -> dict[str, PoolDefinition]:
    """The pools in pre-order with their final children lists (``parse_pool_tree`` reads them breadth-first)."""
    ordered: dict[str, PoolDefinition] = {}

    def visit(pool_name: str) -> None:
        pool = pools[pool_name]
        ordered[pool_name] = PoolDefinition(
            pool.name,
            pool.parent,
            pool.config,
            tuple(children_of.get(pool_name, ())),
            pool.full_path,
            pool.path,
            pool.applied_presets,
        )
        for child in children_of.get(pool_name, ()):
            visit(child)

    for top in children_of.get(ROOT_POOL, ()):
        visit(top)
    return ordered


def parse_pool_trees(document: Any, path: str = "pool_trees") -> dict[str, PoolTreeDefinition]:
    """Validate a whole pool trees document ``{tree: {config: {...}, pools: {...}}}``.

    Raises ConfigError naming the offending field (``pool_trees.physical.pools.a.weight``); callers that
    apply live changes keep their last good result when it raises.
    """
    if document is None:
        document = {}
    if not isinstance(document, Mapping):
        raise ConfigError(path, f"expected a map of pool tree name → tree, got {type(document).__name__}")
    return {name: parse_pool_tree(name, tree, join_path(path, str(name))) for name, tree in document.items()}


def resolve_default_tree(
    trees: Mapping[str, PoolTreeDefinition], default_tree: str | None, path: str = "default_pool_tree"
) -> str | None:
    """The default tree: the given name (must exist), else the only tree, else ``None`` (no trees)."""
    if default_tree is not None:
        if not isinstance(default_tree, str):
            raise ConfigError(path, f"expected a pool tree name, got {default_tree!r}")
        if default_tree not in trees:
            raise ConfigError(
                path,
                f'default pool tree "{default_tree}" is not a configured pool tree (trees: {", ".join(trees) or "none"})',
            )
        return default_tree
    if len(trees) == 1:
        return next(iter(trees))
    if not trees:
        return None
    raise ConfigError(
        path, f"default pool tree must be specified when there are several pool trees ({', '.join(trees)})"
    )
