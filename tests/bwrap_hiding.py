"""A machine without the distribution's bubblewrap, as the node's own lookup sees it: a ``PATH`` on which every
program of the real ``PATH`` is found (through symlinks in one directory) except ``bwrap``.

The node looks ``bwrap`` up on its ``PATH`` (``pooltree/node/bubblewrap.py``) and falls back to the wheel's;
``system_bwrap_hidden`` (a fixture in ``tests/conftest.py``) sets such a ``PATH`` for the test and its child
processes and forgets the cached lookup before and after. CI also runs the isolation tests with
``/usr/bin/bwrap`` masked in a mount namespace (``.ci/run``), where nothing at all can find it.
"""

from __future__ import annotations

import os
from pathlib import Path


def path_without_system_bwrap(directory: Path, path: str | None = None) -> str:
    """A ``PATH`` of one directory (``directory``, made here) holding a link to each program on ``path`` (default:
    the current ``PATH``) but ``bwrap``; the first program of a name wins, as on the real ``PATH``."""
    directory.mkdir(parents=True, exist_ok=True)
    for entry in (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep):
        if not entry or not os.path.isdir(entry):
            continue
        for name in os.listdir(entry):
            link = directory / name
            if name == "bwrap" or os.path.lexists(link):
                continue
            target = os.path.join(entry, name)
            if os.path.isfile(target) and os.access(target, os.X_OK):
                link.symlink_to(target)
    return str(directory)
