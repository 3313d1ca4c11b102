"""The exec-node side of pooltree: run jobs as real processes, measure and police their memory, report results.

``JobExecutor`` owns the processes; ``NodeAgent`` is the node state a heartbeat carries and the place where a
heartbeat response turns into starts, interruptions and aborts.
"""

from pooltree.node.agent import NodeAgent, detect_resource_limits
from pooltree.node.arbitration import (
    ArbitrationDecision,
    JobMemoryUsage,
    OverdraftPolicy,
    arbitrate_node_memory,
)
from pooltree.node.executor import JobExecutor
from pooltree.node.job import JobResult, JobSpec, JobState
from pooltree.node.launch import job_environment
from pooltree.node.memory import CgroupMeter, ProcessTreeMeter, make_meter, probe_cgroup_v2

__all__ = [
    "ArbitrationDecision",
    "CgroupMeter",
    "JobExecutor",
    "JobMemoryUsage",
    "JobResult",
    "JobSpec",
    "JobState",
    "NodeAgent",
    "OverdraftPolicy",
    "ProcessTreeMeter",
    "arbitrate_node_memory",
    "detect_resource_limits",
    "job_environment",
    "make_meter",
    "probe_cgroup_v2",
]
