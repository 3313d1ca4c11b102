"""YTsaurus's rules for pool names and pool trees' node sets, applied wherever a name or a tree enters the server.

Pool names (YTsaurus ``CheckPoolName``): not ``<Root>``, at most 100 characters, a full match of
``[-_a-z0-9:A-Z]+`` (the administrators' regex; ``$`` is reserved for ephemeral pools). Pools nest at most
``MAX_POOL_DEPTH`` levels. (Trees with overlapping ``node_tag_filter`` formulas are accepted, as by YTsaurus's
master; the scheduler refuses the update while a known node matches several trees: ``alerts.nodes_in_several_trees``.)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from pooltree.server.protocol import YtError

ROOT_POOL = "<Root>"
POOL_NAME_MAX_LENGTH = 100
POOL_NAME_REGEX = "[-_a-z0-9:A-Z]+"
"""The administrators' pool name regex (YTsaurus's default ``pool_name_regex_for_administrators``)."""
USER_POOL_NAME_REGEX = "[-_a-z0-9]+"
"""The pool name regex of users without ``administer`` on ``//sys/schemas/scheduler_pool`` (YTsaurus's default
``pool_name_regex_for_users``)."""
POOL_MANAGER_KEYS = ("pool_name_regex_for_users", "pool_name_regex_for_administrators")
"""What pooltree models of the master's ``//sys/@config/scheduler_pool_manager``."""
MAX_POOL_DEPTH = 30
"""Nested pools below a tree's root at most. YTsaurus's master bounds a pool tree's depth too (its
test_max_depth_structure_loads_from_snapshot creates pools until refused); pooltree's bound also keeps every
walk over a tree far from Python's recursion limit (without it, 163 levels made every later change of Cypress fail
with RecursionError)."""


def pool_name_regexes(sys_attributes: Mapping[str, Any]) -> tuple[str, str]:
    """``(users', administrators')`` pool name regexes from ``//sys``'s attributes (``@config/scheduler_pool_manager``)."""
    config = sys_attributes.get("config")
    manager = (config.get("scheduler_pool_manager") if isinstance(config, Mapping) else None) or {}
    return (
        str(manager.get("pool_name_regex_for_users", USER_POOL_NAME_REGEX)),
        str(manager.get("pool_name_regex_for_administrators", POOL_NAME_REGEX)),
    )


def check_pool_manager_config(sys_attributes: Mapping[str, Any]) -> None:
    """Refuse a ``//sys/@config/scheduler_pool_manager`` pooltree cannot apply: an unknown (unmodelled) key or a
    regex that does not compile, naming the field."""
    config = sys_attributes.get("config")
    if config is None:
        return
    if not isinstance(config, Mapping):
        raise YtError("//sys/@config must be a map", attributes={"field": "//sys/@config"})
    manager = config.get("scheduler_pool_manager")
    if manager is None:
        return
    where = "//sys/@config/scheduler_pool_manager"
    if not isinstance(manager, Mapping):
        raise YtError(f"{where} must be a map", attributes={"field": where})
    for key, value in manager.items():
        field = f"{where}/{key}"
        if key not in POOL_MANAGER_KEYS:
            raise YtError(
                f"{field} is not supported; pooltree models {', '.join(POOL_MANAGER_KEYS)}",
                attributes={"field": field},
            )
        try:
            re.compile(str(value))
        except re.error as error:
            raise YtError(
                f"{field}: invalid regular expression: {error}", attributes={"field": field}
            ) from None


def pool_name_error(name: Any, kind: str = "Pool", regex: str = POOL_NAME_REGEX) -> YtError | None:
    """The YTsaurus error for an invalid pool (or pool tree) name, or None when ``name`` is valid (``regex``: the
    pool name regex that applies)."""
    if not isinstance(name, str) or not name:
        return YtError(
            f"{kind} name must be a non-empty string, got {name!r}", attributes={"name": repr(name)}
        )
    if name == ROOT_POOL:
        return YtError(
            f"{kind} name cannot be equal to root pool name", attributes={"root_pool_name": ROOT_POOL}
        )
    if len(name) > POOL_NAME_MAX_LENGTH:
        return YtError(
            f"{kind} name {name[:40]!r}... is too long",
            attributes={"name": name, "length": len(name), "max_length": POOL_NAME_MAX_LENGTH},
        )
    if not re.fullmatch(regex, name):
        return YtError(
            f'{kind} name "{name}" must match regular expression "{regex}"',
            attributes={"name": name, "regex": regex},
        )
    return None


def check_pool_name(
    name: Any, kind: str = "Pool", *, field: str | None = None, regex: str = POOL_NAME_REGEX
) -> str:
    """``name`` when valid; otherwise the YTsaurus error (with ``field`` naming where the name came from)."""
    error = pool_name_error(name, kind, regex)
    if error is None:
        return str(name)
    if field is None:
        raise error
    raise YtError(f"{error.message} (in {field})", attributes={**error.attributes, "field": field})


def check_pool_depth(trees: Mapping[str, Any]) -> None:
    """Refuse a pool trees document ``{tree: {config, pools}}`` whose pools nest deeper than ``MAX_POOL_DEPTH``
    (walked without recursion), naming the tree and the first pool too deep."""
    for tree, document in trees.items():
        stack = [(name, pool, 1) for name, pool in ((document or {}).get("pools") or {}).items()]
        while stack:
            name, pool, depth = stack.pop()
            if depth > MAX_POOL_DEPTH:
                raise YtError(
                    f'Pool tree "{tree}" is too deep: pool "{name}" would be at depth {depth}, more than '
                    f"{MAX_POOL_DEPTH}",
                    attributes={"pool_tree": tree, "pool": name, "depth": depth, "max_depth": MAX_POOL_DEPTH},
                )
            children = (pool or {}).get("pools") or {} if isinstance(pool, Mapping) else {}
            stack.extend((child, body, depth + 1) for child, body in children.items())
