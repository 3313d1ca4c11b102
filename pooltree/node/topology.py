"""Where a node stands: its data center and InfiniBand cluster, as YTsaurus exec nodes report them.

A YTsaurus node's descriptor carries ``data_center`` (from its rack) and ``infiniband_cluster`` (from its
annotations); its tags include the data center's name and ``infiniband_cluster:NAME``. The scheduler's scheduling
segments bind full-host GPU operations to one *module*: a data center or an InfiniBand cluster, as the tree's
``scheduling_segments.module_type`` says. A pooltree node reports both fields in its heartbeat and adds the same
tags, so ``node_tag_filter`` can select them and the strategy can find a node's module from its tags alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pooltree.errors import ConfigError

INFINIBAND_CLUSTER_TAG_PREFIX = "infiniband_cluster:"
"""YTsaurus's ``InfinibandClusterNameKey`` + ``:``: the tag naming a node's InfiniBand cluster."""
_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


def infiniband_cluster_tag(name: str) -> str:
    return INFINIBAND_CLUSTER_TAG_PREFIX + name


@dataclass(frozen=True)
class NodeTopology:
    """The node's data center and InfiniBand cluster (either may be unknown)."""

    data_center: str | None = None
    infiniband_cluster: str | None = None

    def __post_init__(self) -> None:
        for field_name in ("data_center", "infiniband_cluster"):
            value = getattr(self, field_name)
            if value is not None and (not isinstance(value, str) or not _NAME_RE.match(value)):
                raise ConfigError(field_name, f"expected a name of letters, digits and _.-, got {value!r}")

    def tags(self) -> tuple[str, ...]:
        """The tags YTsaurus gives a node for them: the data center's name, ``infiniband_cluster:NAME``."""
        found: list[str] = []
        if self.data_center:
            found.append(self.data_center)
        if self.infiniband_cluster:
            found.append(infiniband_cluster_tag(self.infiniband_cluster))
        return tuple(found)

    def heartbeat_fields(self) -> dict[str, str]:
        fields: dict[str, str] = {}
        if self.data_center:
            fields["data_center"] = self.data_center
        if self.infiniband_cluster:
            fields["infiniband_cluster"] = self.infiniband_cluster
        return fields
