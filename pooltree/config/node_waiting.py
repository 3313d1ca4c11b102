"""The tree's ``waiting_for_resources_on_node_timeout`` (alias ``waiting_job_timeout``): how long an allocation of the
tree may wait on its node for resources other jobs still hold before the node aborts it (``waiting_timeout``).

YTsaurus carries it from the tree config to the node in the allocation's attributes; unset, the node's own
``waiting_for_resources_timeout`` (30 s) applies. pooltree's scheduler puts it in the job spec it sends
(``waiting_for_resources_timeout``, seconds) and the node waits for its GPUs that long (``pooltree/node/gpu.py``).
"""

from __future__ import annotations

from typing import Any

from pooltree.config.base import raw_extras
from pooltree.errors import join_path
from pooltree.resources import parse_duration

OPTION = "waiting_for_resources_on_node_timeout"


def waiting_for_resources_timeout(tree_config: Any, path: str = "") -> float | None:
    """The option in seconds, or None when the tree does not set it (a ``ConfigError`` names a bad value)."""
    extra = raw_extras(tree_config)
    raw = extra.get(OPTION)
    return None if raw is None else parse_duration(raw, join_path(path, OPTION))
