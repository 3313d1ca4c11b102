"""Job and operation options outside the scheduling strategy that pooltree does not implement (a container
image, Porto layers, tables for output or cores, a stderr count) are never ignored silently: a live operation
that sets one carries the "unsupported options" alert naming it, through the official client; the values that
are what pooltree does anyway raise nothing."""

from __future__ import annotations

import sys
from pathlib import Path

import yt.wrapper as ytw

sys.path.insert(0, str(Path(__file__).parent))
from live_cluster import Cluster, wait_for


def _alerts(client: ytw.YtClient, op_id: str) -> dict:
    wait_for(lambda: client.get_operation(op_id)["state"] in ("completed", "failed", "aborted"), timeout=60)
    return client.get_operation(op_id)["alerts"]


def test_options_without_an_effect_here_are_reported(cluster: Cluster) -> None:
    client = cluster.client()
    task = {
        "command": "true",
        "job_count": 1,
        "docker_image": "registry.example/ml:1",
        "layer_paths": ["//layers/base"],
        "enable_core_dump": True,
        "max_stderr_size": 1024,
        "restart_exit_code": 17,
    }
    spec = ytw.VanillaSpecBuilder().task("main", task).spec({"max_stderr_count": 5})
    op = client.run_operation(spec, sync=False)
    alert = _alerts(client, op.id)["unsupported_options"]
    paths = {entry["path"] for entry in alert["attributes"]["options"]}
    assert paths == {
        f"operations.{op.id}.spec.tasks.main.{name}"
        for name in (
            "docker_image",
            "layer_paths",
            "enable_core_dump",
            "max_stderr_size",
            "restart_exit_code",
        )
    } | {f"operations.{op.id}.spec.{name}" for name in ("max_stderr_count",)}
    reasons = {entry["option"]: entry["reason"] for entry in alert["attributes"]["options"]}
    assert "not in the image" in reasons["docker_image"]


def test_values_pooltree_follows_anyway_raise_nothing(cluster: Cluster) -> None:
    client = cluster.client()
    task = {
        "command": "true",
        "job_count": 1,
        "enable_core_dump": False,
        "make_rootfs_writable": False,
        "restart_completed_jobs": False,
        "output_table_paths": [],
        "use_yamr_descriptors": False,
        "check_input_fully_consumed": False,
        "title": "t",
    }
    op = client.run_operation(ytw.VanillaSpecBuilder().task("main", task), sync=False)
    alerts = _alerts(client, op.id)
    assert "unsupported_options" not in alerts and "unrecognized_spec" not in alerts, alerts
