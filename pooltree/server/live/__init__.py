"""The live scheduler (see ``scheduler.py``): operations, jobs and heartbeats (``jobs.py``), revival (``revival.py``)."""

from pooltree.server.live.model import (
    ACTIVE_STATES,
    NO_SUCH_JOB,
    NO_SUCH_OPERATION,
    LiveJob,
    LiveOperation,
    LiveVanillaController,
    NodeState,
    new_guid,
    no_such_operation,
)
from pooltree.server.live.scheduler import LiveScheduler

__all__ = [
    "ACTIVE_STATES",
    "NO_SUCH_JOB",
    "NO_SUCH_OPERATION",
    "LiveJob",
    "LiveOperation",
    "LiveScheduler",
    "LiveVanillaController",
    "NodeState",
    "new_guid",
    "no_such_operation",
]
