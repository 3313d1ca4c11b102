"""A cluster for the forecast's live tests: one node with two slots and a pool ``queue`` that runs one operation
at a time, so a second operation waits in its queue behind the first (a queued operation to forecast)."""

from __future__ import annotations

from pathlib import Path

import yt.wrapper as ytw

from pooltree.forecast.worker import WorkerSettings
from tests.server.live_cluster import Cluster


def queue_cluster(root: Path, settings: WorkerSettings) -> Cluster:
    cluster = Cluster(root, nodes=1, slots=2, forecast_settings=settings)
    cluster.client().create(
        "scheduler_pool",
        attributes={"name": "queue", "pool_tree": "default", "max_running_operation_count": 1},
    )
    return cluster


def start_in_queue(client: ytw.YtClient, command: str, jobs: int) -> str:
    """A vanilla operation of ``jobs`` one-cpu jobs running ``command`` in pool ``queue``; its id."""
    builder = (
        ytw.VanillaSpecBuilder().begin_task("main").command(command).job_count(jobs).cpu_limit(1).end_task()
    )
    return client.run_operation(builder.pool("queue"), sync=False).id
