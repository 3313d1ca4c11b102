"""Operation controllers' pure parts: job memory reserves from digests and job statistics."""

from pooltree.controllers.memory import (
    JobMemory,
    JobMemoryReserve,
    MemoryDigestSettings,
    MemoryDigestWarmStartStore,
    OverdraftVictims,
    RestartReserve,
    TaskMemoryOptions,
    TaskMemoryReserve,
    WarmStartState,
    estimate_job_proxy_memory,
    select_overdraft_victims,
)
from pooltree.controllers.statistics import JobStatistics, job_memory_statistics

__all__ = [
    "JobMemory",
    "JobMemoryReserve",
    "JobStatistics",
    "MemoryDigestSettings",
    "MemoryDigestWarmStartStore",
    "OverdraftVictims",
    "RestartReserve",
    "TaskMemoryOptions",
    "TaskMemoryReserve",
    "WarmStartState",
    "estimate_job_proxy_memory",
    "job_memory_statistics",
    "select_overdraft_victims",
]
