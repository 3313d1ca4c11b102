"""Operation controllers' pure parts: job memory reserves from digests and job statistics."""

from pooltree.controllers.memory import (
    JobMemoryReserve,
    MemoryDigestSettings,
    RestartReserve,
    TaskMemoryOptions,
    TaskMemoryReserve,
    WarmStartState,
    estimate_job_proxy_memory,
)
from pooltree.controllers.overdraft import JobMemory, OverdraftVictims, select_overdraft_victims
from pooltree.controllers.statistics import JobStatistics, job_memory_statistics
from pooltree.controllers.warm_start import MemoryDigestWarmStartStore

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
