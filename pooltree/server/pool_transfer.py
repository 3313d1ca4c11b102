"""``transfer_pool_resources``: move guarantees and operation-count limits between two pools of one tree.

As YTsaurus's master does it (``yt.wrapper``'s ``transfer_pool_resources(source_pool, destination_pool, pool_tree,
resource_delta)``): the delta is subtracted from the source pool and each of its ancestors below the lowest common
ancestor of the two pools, and added to the destination pool and each of its ancestors below it; the common
ancestor keeps its own values. ``<Root>`` names the tree itself (a pool below it gains, or gives back, the delta
alone). A value the source does not have counts as zero, so giving what a pool has not is refused, as is a negative
delta or the same pool on both sides. The change is one Cypress mutation: the whole pool tree is validated after
it (a child's guarantee above its parent's refuses it) and nothing is kept from a refused transfer.

The delta's keys: ``strong_guarantee_resources``, ``resource_flow`` and ``burst_guarantee_resources`` (resource
maps; the last two live in the pool's ``integral_guarantees``, whose ``guarantee_type`` is left as it is), and
``max_operation_count``, ``max_running_operation_count`` (counts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pooltree.resources import RESOURCES
from pooltree.server.cypress_nodes import POOL_TREES, ROOT_POOL, Node
from pooltree.server.protocol import YtError, resolve_error

RESOURCE_KEYS = ("strong_guarantee_resources", "resource_flow", "burst_guarantee_resources")
COUNT_KEYS = ("max_operation_count", "max_running_operation_count")
INTEGRAL = "integral_guarantees"
"""``resource_flow`` and ``burst_guarantee_resources`` are parts of a pool's ``integral_guarantees``."""
EPSILON = 1e-9


def parse_delta(value: Any) -> dict[str, Any]:
    """The ``resource_delta`` parameter: known keys only, non-negative amounts (errors name the field)."""
    if not isinstance(value, Mapping):
        raise YtError("resource_delta must be a map", attributes={"field": "resource_delta"})
    delta: dict[str, Any] = {}
    for key, amounts in value.items():
        field = f"resource_delta.{key}"
        if key in COUNT_KEYS:
            if isinstance(amounts, bool) or not isinstance(amounts, int) or amounts < 0:
                raise YtError(
                    f"{field} must be a non-negative integer, got {amounts!r}", attributes={"field": field}
                )
            delta[key] = amounts
        elif key in RESOURCE_KEYS:
            if not isinstance(amounts, Mapping):
                raise YtError(f"{field} must be a map of resources", attributes={"field": field})
            parsed: dict[str, float] = {}
            for resource, amount in amounts.items():
                where = f"{field}.{resource}"
                if resource not in RESOURCES:
                    raise YtError(f"{where}: unknown resource", attributes={"field": where})
                if isinstance(amount, bool) or not isinstance(amount, int | float) or amount < 0:
                    raise YtError(
                        f"{where} must be a non-negative number, got {amount!r}", attributes={"field": where}
                    )
                parsed[str(resource)] = float(amount)
            delta[key] = parsed
        else:
            known = ", ".join((*RESOURCE_KEYS, *COUNT_KEYS))
            raise YtError(f"{field}: unknown key; known: {known}", attributes={"field": field})
    return delta


def _chain(tree: Node, tree_name: str, pool: str) -> list[tuple[str, Node]]:
    """The pools from the top of ``tree`` down to ``pool`` (empty for ``<Root>``); a resolve error if missing."""
    if pool == ROOT_POOL:
        return []
    stack: list[tuple[list[tuple[str, Node]], Node]] = [([], tree)]
    while stack:
        path, node = stack.pop()
        for name, child in node.children.items():
            if child.type != "scheduler_pool":
                continue
            here = [*path, (name, child)]
            if name == pool:
                return here
            stack.append((here, child))
    raise resolve_error(
        f"//sys/pool_trees/{tree_name}", f'Pool "{pool}" does not exist in pool tree "{tree_name}"'
    )


def _section(node: Node, key: str, *, create: bool) -> dict[str, Any] | None:
    """Where ``key`` of the delta lives in the pool's attributes (a resource map; None when absent)."""
    if key == "strong_guarantee_resources":
        holder = node.attributes
    else:
        integral = node.attributes.get(INTEGRAL)
        if integral is None:
            if not create:
                return None
            integral = node.attributes[INTEGRAL] = {}
        holder = integral
    section = holder.get(key)
    if section is None and create:
        section = holder[key] = {}
    return section


def _apply(node: Node, name: str, delta: Mapping[str, Any], sign: int) -> None:
    for key, amount in delta.items():
        if key in COUNT_KEYS:
            current = int(node.attributes.get(key) or 0)
            updated = current + sign * amount
            if updated < 0:
                raise _negative(name, key, current, amount)
            node.attributes[key] = updated
            continue
        section = _section(node, key, create=sign > 0 or any(v > 0 for v in amount.values()))
        for resource, value in amount.items():
            current = float((section or {}).get(resource) or 0.0)
            updated = current + sign * value
            if updated < -EPSILON:
                raise _negative(name, f"{key}.{resource}", current, value)
            assert section is not None
            section[resource] = max(updated, 0.0)


def _negative(pool: str, key: str, current: float, amount: float) -> YtError:
    return YtError(
        f'Cannot transfer {amount:g} of {key} from pool "{pool}": it has {current:g}',
        attributes={"pool": pool, "field": key, "available": current, "requested": amount},
    )


def transfer_pool_resources(
    root: Node, tree_name: str, source: str, destination: str, delta: Mapping[str, Any]
) -> None:
    """Apply the transfer to ``root`` (a Cypress mutation's copy: on an error nothing of it is kept)."""
    if source == destination:
        raise YtError(
            "Source and destination pools must differ",
            attributes={"source_pool": source, "destination_pool": destination, "pool_tree": tree_name},
        )
    trees = root.children[POOL_TREES[0]].children[POOL_TREES[1]]
    tree = trees.children.get(tree_name)
    if tree is None or tree.type != "scheduler_pool_tree":
        raise resolve_error(f"//sys/pool_trees/{tree_name}", f'Pool tree "{tree_name}" does not exist')
    source_chain = _chain(tree, tree_name, source)
    destination_chain = _chain(tree, tree_name, destination)
    common = 0
    while (
        common < min(len(source_chain), len(destination_chain))
        and source_chain[common][1] is destination_chain[common][1]
    ):
        common += 1
    for name, node in source_chain[common:]:
        _apply(node, name, delta, -1)
    for name, node in destination_chain[common:]:
        _apply(node, name, delta, +1)
