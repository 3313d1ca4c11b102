"""Setting, reading and removing a Cypress node's attributes, with the rules YTsaurus's master adds for pools.

* Keys go down into maps and lists (``@acl/0/action``, ``@strong_guarantee_resources/cpu``); a part of ``@acl``
  may be set, and the ACL it leaves must still be valid (an invalid one is refused, the old one kept).
* A pool's deprecated ``min_share_resources`` is its ``strong_guarantee_resources`` (YTsaurus's
  ``TSchedulerPool::RemapDeprecatedKey``): setting, reading and checking either name reach the same value.
* Pool options (``weight``, ``max_operation_count``, ...) are no attributes of a pool tree: YTsaurus's tree is its
  root pool, which lists them as builtin attributes never present, so setting one is refused and reading one is
  "not found" (tree options go in ``@config``).
"""

from __future__ import annotations

from typing import Any

from pooltree.errors import PooltreeError
from pooltree.security.acl import parse_acl
from pooltree.server.cypress_nodes import SYSTEM_ATTRIBUTES, Node, is_index
from pooltree.server.protocol import YtError, resolve_error
from pooltree.server.tree_options import POOL_OPTION_NAMES
from pooltree.ypath import YPath

DEPRECATED_POOL_KEYS = {"min_share_resources": "strong_guarantee_resources"}
"""A pool's deprecated attribute names and the attribute each one means (YTsaurus ``RemapDeprecatedKey``)."""
TREE_TYPE = "scheduler_pool_tree"
POOL_TYPE = "scheduler_pool"


def canonical_keys(node: Node, keys: tuple[str, ...]) -> tuple[str, ...]:
    """``keys`` with a pool's deprecated first key replaced by the attribute it names."""
    if keys and node.type == POOL_TYPE and keys[0] in DEPRECATED_POOL_KEYS:
        return (DEPRECATED_POOL_KEYS[keys[0]], *keys[1:])
    return keys


def canonical_pool_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """A new pool's attributes under their current names (a deprecated name given alone is renamed; both names
    given are left for the options' validation to refuse as the same option given twice)."""
    for old, new in DEPRECATED_POOL_KEYS.items():
        if old in attributes and new not in attributes:
            attributes = {(new if key == old else key): value for key, value in attributes.items()}
    return attributes


def refuse_pool_option_on_tree(node: Node, keys: tuple[str, ...], path: str, *, reading: bool) -> None:
    """A pool option named on a pool tree: "not found" when read, refused when set or removed."""
    if node.type != TREE_TYPE or not keys or keys[0] not in POOL_OPTION_NAMES:
        return
    name = keys[0]
    if reading:
        raise resolve_error(path, f'Attribute "{name}" is not found')
    raise YtError(
        f'Attribute "{name}" cannot be set on pool tree {path.rsplit("/@", 1)[0]}: it is a pool option; '
        "a pool tree's options go in its @config",
        attributes={"path": path, "attribute": name},
    )


def set_attribute(node: Node, ypath: YPath, value: Any, recursive: bool) -> None:
    """Set ``ypath``'s attribute (the whole map for ``/@``) of ``node`` to ``value``."""
    keys = canonical_keys(node, ypath.attribute or ())
    refuse_pool_option_on_tree(node, keys, ypath.text, reading=False)
    if not keys:
        if not isinstance(value, dict):
            raise YtError(f"Setting {ypath.text} needs a map of attributes", attributes={"path": ypath.text})
        clash = sorted(set(value) & SYSTEM_ATTRIBUTES)
        if clash:
            raise YtError(f'Attribute "{clash[0]}" cannot be set', attributes={"path": ypath.text})
        node.attributes = canonical_pool_attributes(value) if node.type == POOL_TYPE else value
        return
    name = keys[0]
    if name in SYSTEM_ATTRIBUTES:
        raise YtError(f'Attribute "{name}" cannot be set', attributes={"path": ypath.text, "attribute": name})
    if len(keys) == 1:
        node.attributes[name] = value
        return
    if name not in node.attributes:
        if not recursive:
            raise resolve_error(ypath.text, f'Attribute "{name}" is not found')
        node.attributes[name] = {}
    target = node.attributes[name]
    for key in keys[1:-1]:
        if isinstance(target, dict):
            if key not in target:
                if not recursive:
                    raise resolve_error(ypath.text, f'Node has no child with key "{key}"')
                target[key] = {}
            target = target[key]
        elif isinstance(target, list) and is_index(key, len(target)):
            target = target[int(key)]
        else:
            raise resolve_error(ypath.text, f'Node has no child with key "{key}"')
    last = keys[-1]
    if isinstance(target, dict):
        target[last] = value
    elif isinstance(target, list) and is_index(last, len(target)):
        target[int(last)] = value
    elif isinstance(target, list) and last == "end":  # YPath's "end": append to the list
        target.append(value)
    else:
        raise resolve_error(ypath.text, f'Cannot set key "{last}" inside a {type(target).__name__}')
    if name == "acl":
        _check_acl(node, ypath.text)


def remove_attribute(node: Node, ypath: YPath, force: bool) -> None:
    """Remove ``ypath``'s attribute of ``node`` (every attribute for ``/@``); ``force`` ignores absence."""
    keys = canonical_keys(node, ypath.attribute or ())
    refuse_pool_option_on_tree(node, keys, ypath.text, reading=False)
    if not keys:
        node.attributes = {}
        return
    if keys[0] in SYSTEM_ATTRIBUTES and keys[0] not in node.attributes:
        raise YtError(f'Attribute "{keys[0]}" cannot be removed', attributes={"path": ypath.text})
    try:
        holder: Any = node.attributes
        for key in keys[:-1]:
            holder = holder[int(key)] if isinstance(holder, list) else holder[key]
        if isinstance(holder, list):
            del holder[int(keys[-1])]
        else:
            del holder[keys[-1]]
    except (KeyError, IndexError, ValueError, TypeError) as error:
        if force:
            return
        raise resolve_error(ypath.text, f'Attribute "{"/".join(keys)}" is not found') from error
    if len(keys) > 1 and keys[0] == "acl":
        _check_acl(node, ypath.text)


def _check_acl(node: Node, path: str) -> None:
    """The ACL a partial change leaves must be a valid ACL (the change is refused otherwise)."""
    try:
        parse_acl(node.attributes.get("acl"), path)
    except PooltreeError as error:
        raise YtError(
            f"Changing {path} would leave an invalid ACL: {error.message}",
            attributes={"path": path, **error.attributes},
        ) from error
