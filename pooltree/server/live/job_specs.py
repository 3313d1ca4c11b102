"""The job spec a started allocation's node gets, from a template kept per operation, task and tree.

Most of a spec is the same for every job of a task (command, environment, limits, tmpfs, the tree's waiting
timeout, ...); building it from the operation's spec cost a start ~50 µs. ``JobSpecs.spec`` builds the first job's
spec of each (task, tree) with the plain builder (``LiveJobs.built_job_spec``) and keeps it as the template; a
later job's spec is the template with its own values (``PER_JOB``) put in the same places, so the spec is the plain
builder's, key order included (``tests/server/test_job_specs.py`` compares them). A template is dropped when what
it was built from may differ: the tree's config object or the scheduler's job network setting. Gang operations
(their incarnation moves, and a rank belongs to a job) and jobs whose memory reserve does not match the template's
shape take the plain builder.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pooltree.resources import resources_to_dict
from pooltree.strategy.model import Allocation

if TYPE_CHECKING:
    from pooltree.server.live.model import LiveJob, LiveOperation
    from pooltree.server.live.scheduler import LiveScheduler

RESERVE_KEYS = ("memory_reserve", "job_proxy_memory_reserve", "job_proxy_estimated_memory")
PER_JOB = frozenset({"job_id", "job_index", "environment", "resources", "files", *RESERVE_KEYS})
"""The keys of a job spec that are the job's own; every other key is the task's (on one tree)."""

Builder = Callable[["LiveOperation", "LiveJob", Allocation], dict[str, Any]]


class JobSpecs:
    """Job specs from templates; ``build`` is the plain builder (a template is its output for the first job)."""

    def __init__(self, scheduler: LiveScheduler, build: Builder) -> None:
        self.scheduler = scheduler
        self.build = build
        self.built_plain = 0
        """Specs made by the plain builder (first jobs, gangs, reserve shapes that differ); tests read it."""

    def spec(self, op: LiveOperation, job: LiveJob, allocation: Allocation) -> dict[str, Any]:
        """The spec of ``job`` (started in ``allocation``), equal to ``build(op, job, allocation)``."""
        scheduler = self.scheduler
        if op.controller.is_gang:
            return self._plain(op, job, allocation)
        tree = scheduler.registry.trees.get(job.tree) if job.tree else None
        config = tree.config if tree is not None else None
        key = (job.task_name, job.tree)
        kept = op.job_spec_templates.get(key)
        if kept is None or kept[0] is not config or kept[1] != scheduler.isolate_job_network:
            spec = self._plain(op, job, allocation)
            op.job_spec_templates[key] = (
                config,
                scheduler.isolate_job_network,
                spec,
                allocation.amounts,  # ``resources.tolist()``'s floats, as the allocation keeps them
            )
            return _copy(spec)
        template = kept[2]
        reserve = op.controller.running_memory_reserve(job.task_name, job.job_index)
        if (reserve is not None) != ("memory_reserve" in template):
            return self._plain(op, job, allocation)
        # the template's map with the job's own values put in their places (every key set here is one of the
        # template's, so the order is kept): no map of them and no update
        spec = dict(template)
        spec["job_id"] = job.id
        spec["job_index"] = job.job_index
        environment = spec["environment"] = dict(template["environment"])
        environment["YT_JOB_ID"] = job.id
        environment["YT_JOB_INDEX"] = str(job.job_index)
        amounts = allocation.amounts
        # most jobs of a task get the same resources: the template's output map, copied, unless they differ
        spec["resources"] = (
            dict(template["resources"]) if amounts == kept[3] else resources_to_dict(list(amounts))
        )
        if reserve is not None:
            spec["memory_reserve"] = min(reserve.user_job_memory_reserve, template["memory_limit"])
            spec["job_proxy_memory_reserve"] = reserve.job_proxy_memory_reserve
            spec["job_proxy_estimated_memory"] = reserve.job_proxy_estimate
        if "files" in template:
            spec["files"] = _own_files(template["files"])
        return spec

    def _plain(self, op: LiveOperation, job: LiveJob, allocation: Allocation) -> dict[str, Any]:
        self.built_plain += 1
        return self.build(op, job, allocation)


def _copy(spec: dict[str, Any]) -> dict[str, Any]:
    """A spec whose per-job parts are its own (the template keeps the original)."""
    copied = dict(spec)
    copied["environment"] = dict(spec["environment"])
    if "files" in spec:
        copied["files"] = _own_files(spec["files"])
    return copied


def _own_files(files: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A copy of a spec's ``files`` entries (and their blob lists) that no other spec shares."""
    return [{**entry, "blobs": list(entry["blobs"])} for entry in files]
