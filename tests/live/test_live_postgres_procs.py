"""``pooltree scheduler --store postgresql://...`` as a real process on a real PostgreSQL server (started by the
server tests' fixture in a temp dir; skipped with the reason where PostgreSQL cannot run): ``--config`` loads the
pools once, an operation runs on a node, and after a SIGKILL + restart the pools and the operation are still
there while the file is not loaded twice."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from live_procs import Procs, client, free_port, state, vanilla
from polling import wait_for


def test_scheduler_on_postgresql_survives_kill(tmp_path: Path, postgres_url: str) -> None:
    config = tmp_path / "trees.json"
    config.write_text('{"default": {"config": {}, "pools": {"prod": {"weight": 5}}}}')
    procs = Procs(tmp_path)
    try:
        port = free_port()
        args = ["--store", postgres_url, "--config", str(config)]
        scheduler, url = procs.scheduler(tmp_path / "data", port, *args)
        procs.node(url, "n1")
        yt = client(url)
        op_id = yt.run_operation(vanilla("echo done >&2", 2, pool="prod"), sync=False).id
        wait_for(lambda: state(yt, op_id) == "completed", timeout=30)
        procs.stop(scheduler, signal.SIGKILL)
        config.write_text('{"other": {"config": {}, "pools": {}}}')
        procs.scheduler(tmp_path / "data", port, *args)
        assert yt.list("//sys/pool_trees") == ["default"]
        assert float(yt.get("//sys/pool_trees/default/prod/@weight")) == 5.0
        assert state(yt, op_id) == "completed"
        job = yt.list_jobs(op_id)["jobs"][0]
        assert yt.get_job_stderr(op_id, job["id"]).read() == b"done\n"
    finally:
        procs.close()
