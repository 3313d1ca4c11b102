"""How pool and tree options meet Cypress: custom pool attributes, YTsaurus's type strictness, effective configs.

* A pool's attributes are its options (``PoolConfig`` fields and their YTsaurus aliases) plus any custom
  attributes a user sets: YTsaurus stores and returns those, and so do we; only the options go to validation.
* YTsaurus reads options with typed YSON: a boolean is not an integer, ``"5"`` is not a number, ``1`` is not a
  boolean. pydantic's lax mode would accept all three, so options are checked against their declared types first.
* ``effective_config`` renders a tree config with every default filled in, durations in milliseconds as YTsaurus
  writes them (the orchid's ``pool_trees/<tree>/config``).
"""

from __future__ import annotations

import math
import types
import typing
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from pooltree.config.base import Resources
from pooltree.config.pool import PoolConfig
from pooltree.config.support import (
    POOL_ALIASES,
    POOL_IMPLEMENTED_EXTRA,
    POOL_UNSUPPORTED,
    TREE_ALIASES,
    TREE_IMPLEMENTED_EXTRA,
)
from pooltree.config.tree import PoolTreeConfig
from pooltree.errors import ConfigError, join_path

POOL_OPTION_NAMES = (
    frozenset(PoolConfig.model_fields)
    | frozenset(PoolConfig.ALIASES)
    | frozenset(POOL_IMPLEMENTED_EXTRA)
    | frozenset(POOL_UNSUPPORTED)
    | frozenset(POOL_ALIASES)
)
"""Pool attributes that configure the pool: the model's options, the implemented ones it keeps aside
(``allow_regular_allocations_on_ssd_nodes``, ...) and YTsaurus's options pooltree reports as unsupported; any
other attribute is the user's own."""
CHILDREN_KEY = "pools"


def split_pool_attributes(attributes: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(options, custom)``: what configures the pool and what is a user's own attribute."""
    options: dict[str, Any] = {}
    custom: dict[str, Any] = {}
    for key, value in attributes.items():
        (options if key in POOL_OPTION_NAMES else custom)[key] = value
    return options, custom


def _kind(annotation: Any) -> type | None:
    """``int``, ``float``, ``bool``, ``str`` or a model class for a field annotation (None: not checked here)."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return None  # a parsed scalar (duration, size, resources, tag filter) has its own parser
    if origin in (typing.Union, types.UnionType):
        kinds = {_kind(arg) for arg in typing.get_args(annotation) if arg is not type(None)}
        return kinds.pop() if len(kinds) == 1 else None
    if annotation in (int, float, bool, str):
        return typing.cast(type, annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, Mapping):
        return "map"
    if isinstance(value, list):
        return "list"
    return type(value).__name__


def check_types(model: type[BaseModel], options: Mapping[str, Any], path: str) -> None:
    """Refuse values whose YSON type differs from the option's (bool for int, string for number, ...)."""
    aliases: Mapping[str, str] = getattr(model, "ALIASES", {})
    for key, value in options.items():
        field = model.model_fields.get(aliases.get(key, key))
        if field is None or value is None:
            continue
        if field.metadata and any(callable(getattr(m, "func", None)) for m in field.metadata):
            continue
        kind = _kind(field.annotation)
        where = join_path(path, key)
        wrong = (
            (kind is bool and not isinstance(value, bool))
            or (kind is int and (isinstance(value, bool) or not isinstance(value, int)))
            or (kind is float and (isinstance(value, bool) or not isinstance(value, int | float)))
            or (kind is str and not isinstance(value, str))
        )
        if wrong:
            expected = {bool: "boolean", int: "integer", float: "double", str: "string"}[
                typing.cast(type, kind)
            ]
            raise ConfigError(where, f"expected {expected}, got {_type_name(value)} {value!r}")
        if isinstance(kind, type) and issubclass(kind, BaseModel) and isinstance(value, Mapping):
            check_types(kind, value, where)


def strict_types(trees: Mapping[str, Any], path: str = "pool_trees") -> None:
    """``check_types`` over a whole pool trees document ``{tree: {config, pools}}``."""
    for name, tree in trees.items():
        if not isinstance(tree, Mapping):
            continue
        tree_path = join_path(path, str(name))
        config = tree.get("config")
        if isinstance(config, Mapping):
            check_types(PoolTreeConfig, config, join_path(tree_path, "config"))
        stack = [(join_path(tree_path, CHILDREN_KEY), tree.get(CHILDREN_KEY))]
        while stack:
            pools_path, pools = stack.pop()
            if not isinstance(pools, Mapping):
                continue
            for pool_name, options in pools.items():
                if not isinstance(options, Mapping):
                    continue
                pool_path = join_path(pools_path, str(pool_name))
                check_types(PoolConfig, {k: v for k, v in options.items() if k != CHILDREN_KEY}, pool_path)
                stack.append((join_path(pool_path, CHILDREN_KEY), options.get(CHILDREN_KEY)))


def _plain(value: Any, *, duration: bool) -> Any:
    if isinstance(value, Resources):
        return {name: _number(amount) for name, amount in value.to_dict().items()}
    if isinstance(value, BaseModel):
        return effective_config(value)
    if isinstance(value, tuple | list):
        return [_plain(item, duration=False) for item in value]
    if isinstance(value, dict):
        return {str(key): _plain(item, duration=False) for key, item in value.items()}
    if duration and isinstance(value, int | float) and not isinstance(value, bool):
        return round(float(value) * 1000)
    if isinstance(value, float):
        return _number(value)
    return value


def _number(value: float) -> float | int | str:
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return value


def _is_duration(model: type[BaseModel], name: str) -> bool:
    field = model.model_fields[name]
    return any(getattr(getattr(m, "func", None), "__name__", "") == "parse_duration" for m in field.metadata)


def effective_config(config: BaseModel) -> dict[str, Any]:
    """Every option of ``config`` with its effective value; unset optional options are left out."""
    model = type(config)
    out: dict[str, Any] = {}
    for name in model.model_fields:
        value = getattr(config, name)
        if value is None:
            continue
        out[name] = _plain(value, duration=_is_duration(model, name))
    return out


def effective_tree_config(config: PoolTreeConfig) -> dict[str, Any]:
    """``effective_config`` of a tree as YTsaurus's postprocessor shows it: ``max_unpreemptible_running_job_count``
    fills the ``user_slots`` that ``non_preemptible_resource_usage_threshold`` leaves out. Implemented options the
    model keeps aside (``TREE_IMPLEMENTED_EXTRA``: ``ssd_priority_preemption``, ``packing``, ...) are shown as set,
    under their current names."""
    out = effective_config(config)
    for name, value in (config.model_extra or {}).items():
        current = TREE_ALIASES.get(name, name)
        if current in TREE_IMPLEMENTED_EXTRA and current not in out:
            out[current] = _plain(value, duration=False)
    threshold = config.non_preemptible_resource_usage_threshold
    count = config.max_unpreemptible_running_allocation_count
    if threshold is not None or count is not None:
        shown: dict[str, Any] = threshold.to_dict() if threshold is not None else {}
        if count is not None and "user_slots" not in shown:
            shown["user_slots"] = count
        out["non_preemptible_resource_usage_threshold"] = shown
    return out
