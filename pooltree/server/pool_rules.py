"""YTsaurus's rules for pool names and pool trees' node sets, applied wherever a name or a tree enters the server.

Pool names (YTsaurus ``CheckPoolName``): not ``<Root>``, at most 100 characters, a full match of
``[-_a-z0-9:A-Z]+`` (the administrators' regex; ``$`` is reserved for ephemeral pools). Pool trees must not
share nodes: two trees whose ``node_tag_filter`` formulas can both hold for one node's tag set are refused, the
error naming both trees and such a tag set (an empty filter holds for every node).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from typing import Any

from pooltree.config.tags import TagFilter
from pooltree.server.protocol import YtError

ROOT_POOL = "<Root>"
POOL_NAME_MAX_LENGTH = 100
POOL_NAME_REGEX = "[-_a-z0-9:A-Z]+"
_POOL_NAME_RE = re.compile(POOL_NAME_REGEX)
MAX_WITNESS_TAGS = 12
"""Tag formulas over more distinct tags than this are not searched for a shared node (2^12 tag sets at most)."""


def pool_name_error(name: Any, kind: str = "Pool") -> YtError | None:
    """The YTsaurus error for an invalid pool (or pool tree) name, or None when ``name`` is valid."""
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
    if not _POOL_NAME_RE.fullmatch(name):
        return YtError(
            f'{kind} name "{name}" must match regular expression "{POOL_NAME_REGEX}"',
            attributes={"name": name, "regex": POOL_NAME_REGEX},
        )
    return None


def check_pool_name(name: Any, kind: str = "Pool", *, field: str | None = None) -> str:
    """``name`` when valid; otherwise the YTsaurus error (with ``field`` naming where the name came from)."""
    error = pool_name_error(name, kind)
    if error is None:
        return str(name)
    if field is None:
        raise error
    raise YtError(f"{error.message} (in {field})", attributes={**error.attributes, "field": field})


def shared_node_tags(first: TagFilter, second: TagFilter) -> frozenset[str] | None:
    """A tag set both filters hold for (a node both trees would claim), or None when there is none.

    Searches every subset of the tags the two formulas mention; beyond ``MAX_WITNESS_TAGS`` tags it answers None
    (the node-by-node check at heartbeat time still refuses a node matching two trees).
    """
    tags = sorted(first.tags() | second.tags())
    if len(tags) > MAX_WITNESS_TAGS:
        return None
    for size in range(len(tags) + 1):
        for chosen in itertools.combinations(tags, size):
            candidate = frozenset(chosen)
            if first.matches(candidate) and second.matches(candidate):
                return candidate
    return None


def check_disjoint_trees(filters: Mapping[str, TagFilter]) -> None:
    """Refuse pool trees whose node sets would overlap; the error names both trees and a shared tag set."""
    names = sorted(filters)
    for index, first in enumerate(names):
        for second in names[index + 1 :]:
            shared = shared_node_tags(filters[first], filters[second])
            if shared is None:
                continue
            tags = "{" + ", ".join(sorted(shared)) + "}" if shared else "no tags"
            raise YtError(
                f'Pool trees "{first}" and "{second}" would share nodes: a node with {tags} matches both '
                f'node_tag_filter "{filters[first].text}" and "{filters[second].text}" (an empty filter matches '
                "every node); give the trees disjoint node_tag_filter formulas",
                attributes={
                    "pool_trees": [first, second],
                    "node_tag_filters": {first: filters[first].text, second: filters[second].text},
                    "shared_tags": sorted(shared),
                    "path": f"//sys/pool_trees/{second}/@config/node_tag_filter",
                },
            )
