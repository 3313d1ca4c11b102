"""``pooltree local``'s cluster on one machine: the scheduler and its nodes as child processes (``cluster.py``),
sized so that every node can run a default job (``sizing.py``)."""

from pooltree.local.cluster import LocalCluster
from pooltree.local.sizing import NodeSizing, size_nodes

__all__ = ["LocalCluster", "NodeSizing", "size_nodes"]
