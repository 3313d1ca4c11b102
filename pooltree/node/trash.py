"""The node's trash: a directory disappears at once (a rename into ``<root>/.trash``) and is deleted by a few
background threads, because deleting costs milliseconds of disk latency that neither the event loop nor a job's
launch should wait for. Sandboxes that live outside the node root (slot-uid-only mode) get a trash beside them.
``track`` keeps any background removal's future so that ``drain`` (the executor's shutdown) waits for them all."""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

TRASH_DIRECTORY = ".trash"
CLEANUP_THREADS = 4


class Trash:
    """Renames into the trash and deletes in the background; thread-safe."""

    def __init__(self, root: Path, sandboxes: Path) -> None:
        self.root = root
        self.directory = root / TRASH_DIRECTORY
        shutil.rmtree(self.directory, ignore_errors=True)  # left over by an earlier executor on this root
        self.directory.mkdir()
        self.sandbox_directory = self.directory
        if sandboxes != root:  # slot-uid-only sandboxes elsewhere: a trash beside them
            self.sandbox_directory = sandboxes / TRASH_DIRECTORY
            shutil.rmtree(self.sandbox_directory, ignore_errors=True)
            self.sandbox_directory.mkdir(mode=0o700)
        self._names = itertools.count()
        self._cleaner = concurrent.futures.ThreadPoolExecutor(
            CLEANUP_THREADS, thread_name_prefix="pooltree-node-cleanup"
        )
        self.removals: set[concurrent.futures.Future] = set()

    def discard(self, path: Path) -> None:
        """Make ``path`` disappear now (a rename into the trash) and delete it in the background; any thread."""
        trash = self.directory if self.root in path.parents else self.sandbox_directory
        target = trash / f"{next(self._names)}-{path.name}"
        try:
            os.rename(path, target)
        except FileNotFoundError:
            return
        except OSError:  # not renamable (another filesystem, permissions): delete in place
            shutil.rmtree(path, ignore_errors=True)
            return
        try:
            removal = self._cleaner.submit(shutil.rmtree, target, True)
        except RuntimeError:  # the executor is shut down: nobody is waiting, delete here
            shutil.rmtree(target, ignore_errors=True)
            return
        self.track(removal)

    def fresh_directory(self, path: Path) -> None:
        """Worker thread: a new empty directory at ``path`` (one left by an earlier run of this node goes)."""
        try:
            path.mkdir()
        except FileExistsError:
            self.discard(path)
            path.mkdir()

    def submit(self, work: Callable[..., Any], *args: Any) -> concurrent.futures.Future:
        """Run ``work(*args)`` on a cleanup thread, tracked (``RuntimeError`` once shut down)."""
        future = self._cleaner.submit(work, *args)
        self.track(future)
        return future

    def track(self, future: concurrent.futures.Future) -> None:
        """``drain`` waits for ``future`` too."""
        self.removals.add(future)
        future.add_done_callback(self.removals.discard)

    async def drain(self, timeout: float) -> None:
        """Wait (at most ``timeout`` seconds) for every tracked removal, those added meanwhile included."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.removals and loop.time() < deadline:  # a forget's rename adds its deletion meanwhile
            removals = [asyncio.wrap_future(future) for future in list(self.removals)]
            await asyncio.wait(removals, timeout=max(deadline - loop.time(), 0.0))

    def shutdown(self) -> None:
        self._cleaner.shutdown(wait=False)
