"""Job specs from templates (``live/job_specs.py``) are the plain builder's, key order included, for every started
job: across tasks, trees, a tree config change, the job network setting, secure vaults, files, tmpfs, redirected
stdout and gangs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pooltree.config import parse_pool_trees
from pooltree.server.heartbeats import parse_heartbeat
from pooltree.server.live import LiveScheduler
from pooltree.server.store import open_store

GIB = 1 << 30


def _trees(waiting: str | None) -> dict[str, Any]:
    config: dict[str, Any] = {} if waiting is None else {"waiting_for_resources_on_node_timeout": waiting}
    return {"default": {"config": config, "pools": {"p": {}}}}


def test_template_specs_are_the_plain_builders(tmp_path: Path) -> None:
    scheduler = LiveScheduler(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"))
    scheduler.apply_pool_trees(parse_pool_trees(_trees(None)), "default", 0.0)
    files = {"main": [{"name": "f.txt", "executable": False, "blobs": ["b1", "b2"], "size": 3}]}
    scheduler.job_files = lambda operation_id, task: [dict(entry) for entry in files.get(task, [])]
    specs = scheduler.heartbeats.specs
    compared: list[str] = []
    memories: set[tuple[str, int]] = set()
    spec_of = specs.spec

    def checked(op: Any, job: Any, allocation: Any) -> dict[str, Any]:
        spec = spec_of(op, job, allocation)
        plain = specs.build(op, job, allocation)
        assert json.dumps(spec) == json.dumps(plain)  # same keys, values and order
        compared.append(job.id)
        memories.add((job.task_name, spec["resources"]["memory"]))
        return spec

    specs.spec = checked  # type: ignore[method-assign]
    scheduler.start_operation(
        "vanilla",
        {
            "pool": "p",
            "secure_vault": {"TOKEN": "s3cret"},
            "tasks": {
                "main": {
                    "command": "echo",
                    "job_count": 100,
                    "cpu_limit": 1,
                    "environment": {"A": "1", "YT_JOB_ID": "user"},
                    "redirect_stdout_to_stderr": True,
                    "tmpfs_volumes": [{"path": "tmp", "size": GIB}],
                    "memory_limit": 2 * GIB,
                },
                "side": {
                    "command": "true",
                    "job_count": 20,
                    "cpu_limit": 0.5,
                    "interruption_signal": "SIGUSR1",
                },
            },
        },
        "alice",
        0.5,
    )
    scheduler.start_operation(
        "vanilla",
        {"pool": "p", "tasks": {"g": {"command": "true", "job_count": 4, "cpu_limit": 1, "gang_size": 4}}},
        "bob",
        0.5,
    )
    now = 1.0
    limits = {"user_slots": 8, "cpu": 8, "memory": 64 * GIB}
    for step in range(12):
        if step == 4:
            scheduler.apply_pool_trees(parse_pool_trees(_trees("7s")), "default", now)  # a new config object
        if step == 8:
            scheduler.isolate_job_network = True
        scheduler.update_fair_share("default", now)
        for index in range(3):
            address = f"n{index}"
            on_node = [job for job in scheduler.jobs.values() if job.address == address]
            done = [job for job in on_node if job.start_time < now - 1.5]  # so later starts reuse templates
            data = {
                "node_address": address,
                "resource_limits": limits,
                "running_jobs": [
                    {"job_id": job.id, "operation_id": job.operation_id, "task_name": job.task_name}
                    for job in on_node
                    if job not in done
                ],
                "finished_jobs": [
                    {
                        "job_id": job.id,
                        "operation_id": job.operation_id,
                        "task_name": job.task_name,
                        "state": "completed",
                        # measured memory moves the task's reserve: later jobs' resources differ from the template's
                        "statistics": {"user_job/max_memory": (step + 1) * GIB // 4},
                    }
                    for job in done
                ],
            }
            scheduler.process_heartbeat(parse_heartbeat(data), now)
        now += 1.0
    assert len(compared) >= 40
    assert len({memory for task, memory in memories if task == "main"}) > 1  # templates met other resources
    assert specs.built_plain < len(compared) // 2  # most came from templates
