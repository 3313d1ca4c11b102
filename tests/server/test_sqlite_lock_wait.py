"""A scheduler starting on a SQLite store waits a little (``SQLITE_LOCK_WAIT``) for its lock: the scheduler it
replaces may still be letting it go (a process it was forking at its stop shares the lock's open file until that
process execs). CI once failed a restart on the same store this way."""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path

import httpx
from live_cluster import Loop, Scheduler, auth_headers

from pooltree.server.leader import SQLITE_LOCK_WAIT


def test_a_scheduler_waits_for_a_lock_let_go_soon_after_it_starts(tmp_path: Path) -> None:
    database = tmp_path / "state.db"
    fd = os.open(database, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # the predecessor's lock, still held
    let_go = threading.Timer(SQLITE_LOCK_WAIT / 6, os.close, (fd,))
    let_go.start()
    loop = Loop()
    try:
        scheduler = Scheduler(loop, f"sqlite:///{database}")  # fails at once on the old code
        try:
            listed = httpx.get(f"{scheduler.url}/api/v4/list?path=//sys", headers=auth_headers(), timeout=10)
            assert listed.status_code == 200, listed.text
        finally:
            scheduler.stop()
    finally:
        let_go.join()
        loop.close()
