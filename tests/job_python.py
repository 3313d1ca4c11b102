"""The interpreter test jobs run: one that a job's unprivileged slot uid can execute.

As root the node runs each job under a per-slot uid (pooltree/node/isolation.py). This suite's own interpreter
often lives under a home directory other users cannot enter (``/root/.pyenv``…), so job commands use the
system's ``python3`` when there is one; the job snippets need only the standard library.
"""

from __future__ import annotations

import os
import shutil
import sys


def _reachable_by_others(path: str) -> bool:
    """Every directory on the way is searchable and the file executable by any user (o+x)."""
    real = os.path.realpath(path)
    parts = real.split(os.sep)
    for end in range(2, len(parts) + 1):
        try:
            mode = os.stat(os.sep.join(parts[:end]) or os.sep).st_mode
        except OSError:
            return False
        if not mode & 0o001:
            return False
    return True


def _pick() -> str:
    if _reachable_by_others(sys.executable):
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3", shutil.which("python3") or ""):
        if candidate and _reachable_by_others(candidate):
            return candidate
    return sys.executable


JOB_PYTHON = _pick()
