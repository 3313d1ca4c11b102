"""Pre-started sandboxes: bubblewrap set up before the job that will use it arrives.

Setting a bubblewrap sandbox up costs ~20 ms of wall time per job here (mount and PID namespaces, the read-only
bind of ``/``, a minimal ``/dev``, the mask of the node root), most of it in the kernel, and every job's start
waited for it. A node therefore keeps a few sandboxes started ahead: the job's keeper, bwrap and the uid switch run
with a placeholder directory (``<root>/.warm-N``, its ``sandbox`` owned by a slot uid held for it), and the chain
ends in ``/bin/sh -s`` reading its commands from a socket whose other end only the node holds. When a job comes:

1. its directory is the warm one renamed to ``<root>/<job id>`` (stdout/stderr already open in it; inside the
   sandbox the directory stays bound where it was set up, so the job's ``HOME``/``PWD``/``TMPDIR`` name that
   path, as a job sees its own sandbox at the path the sandbox was bound to);
2. the slot uid is handed to the job and its files are written and chowned as for any job;
3. one line goes down the socket (once the waiting shell has answered the first line, ``echo >&0``, which says
   bubblewrap has finished setting the sandbox up: only then may its directory be renamed): ``cd SANDBOX && exec env -i VAR=VALUE... /bin/sh -c SCRIPT </dev/null`` (every
   word shell-quoted), and the pipe is closed: the shell that waited becomes the job's shell, with exactly the job's
   environment.

Nothing about isolation changes: the same keeper (the job dies with its node: a warm chain whose node dies is
killed by its keeper like any job), the same sandbox arguments, uid switch and signals. Jobs that need devices
(GPUs, bound per job), jobs with a network namespace of their own and meters that wrap the job's argv (the cgroup meter's join) start cold, as before. A
warm chain that died while waiting is reaped and the job starts cold. ``close`` kills and reaps what is left.
"""

from __future__ import annotations

import collections
import contextlib
import itertools
import logging
import os
import select
import shlex
import shutil
import signal
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from pooltree.node.isolation import JobIsolation, Slot
from pooltree.node.keeper import KeeperProcess, KeeperZygotes

WARM_PREFIX = ".warm-"
READY_LINE = b"echo >&0\n"
"""The first line a waiting shell reads: it writes a newline back on its standard input (a socket), which says
bubblewrap has set the sandbox up (its directory may be renamed) and the shell waits for the job's line."""
READY_TIMEOUT = 30.0
WAITING_ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}
"""The environment of a waiting chain (the job's own replaces it whole through ``env -i``)."""

_log = logging.getLogger(__name__)

OutputOpener = Callable[[Path], int]
"""Opens a new private output file, returning its descriptor (the executor's ``_private_output``)."""


@dataclass
class WarmSandbox:
    """One pre-started chain: its directory, sandbox, slot, keeper and the write end of its command pipe."""

    name: str
    directory: Path
    sandbox: Path
    slot: Slot | None
    process: KeeperProcess
    line: int


class WarmSandboxes:
    """Up to ``size`` pre-started sandboxes under ``root`` (0 disables them); thread-safe."""

    def __init__(
        self,
        root: Path,
        isolation: JobIsolation,
        keepers: KeeperZygotes,
        open_output: OutputOpener,
        *,
        size: int,
        env_program: str | None,
    ) -> None:
        self.root = root
        self.isolation = isolation
        self.keepers = keepers
        self.open_output = open_output
        self.env_program = env_program
        self.size = size if isolation.sandboxed and env_program is not None else 0
        self._ready: collections.deque[WarmSandbox] = collections.deque()
        self._starting = 0
        self._names = itertools.count()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)
        """Notified whenever a start ends (``_starting`` drops): ``close`` waits for the starts in flight."""
        self._closed = False
        self._close_returned = False
        """``close`` has handed its list over: a start that ends later cleans up after itself."""

    @property
    def enabled(self) -> bool:
        return self.size > 0

    def take(self) -> WarmSandbox | None:
        """A ready sandbox (oldest first), or None when none is."""
        with self._lock:
            return self._ready.popleft() if self._ready else None

    def fill(self) -> None:
        """Worker thread: start sandboxes until ``size`` are ready or starting (a failure is logged and ends it)."""
        while True:
            with self._lock:
                if self._closed or len(self._ready) + self._starting >= self.size:
                    return
                self._starting += 1
            try:
                warm = self._start()
            except (OSError, ValueError) as error:
                _log.warning("cannot pre-start a job sandbox (jobs start cold): %s", error)
                with self._lock:
                    self._starting -= 1
                    self._settled.notify_all()
                return
            with self._lock:
                self._starting -= 1
                self._settled.notify_all()
                if not self._close_returned:  # open, or closing and waiting for this start: it ends it
                    self._ready.append(warm)
                    if not self._closed:
                        continue
                    return
            self._end(warm)  # closed and handed over long ago: nobody else will end or remove it
            shutil.rmtree(warm.directory, ignore_errors=True)
            return

    def _start(self) -> WarmSandbox:
        name = f"{WARM_PREFIX}{next(self._names)}"
        directory = self.root / name
        sandbox = directory / "sandbox"
        directory.mkdir()
        sandbox.mkdir()
        (sandbox / "tmp").mkdir()
        slot = self.isolation.acquire(name)
        try:
            self.isolation.prepare(directory, sandbox, slot)
            argv = self.isolation.wrap(["/bin/sh", "-s"], sandbox, slot)
            theirs, ours = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            read_end, write_end = theirs.detach(), ours.detach()
            os.set_inheritable(write_end, False)
            os.write(write_end, READY_LINE)  # the waiting shell answers it once the sandbox is set up
            stdout = self.open_output(directory / "stdout")
            stderr = self.open_output(directory / "stderr")
            try:
                process = self.keepers.spawn(
                    argv,
                    env=dict(WAITING_ENVIRONMENT),
                    cwd=str(sandbox),
                    stdout=stdout,
                    stderr=stderr,
                    stdin=read_end,
                )
            except BaseException:
                os.close(write_end)
                raise
            finally:
                for fd in (read_end, stdout, stderr):
                    os.close(fd)
        except BaseException:
            self.isolation.release(name)
            shutil.rmtree(directory, ignore_errors=True)
            raise
        return WarmSandbox(name, directory, sandbox, slot, process, write_end)

    def hand_over(
        self,
        warm: WarmSandbox,
        job_id: str,
        directory: Path,
        script: str,
        env: Mapping[str, str],
        prepare: Callable[[Path, Slot | None], None],
    ) -> KeeperProcess | None:
        """Worker thread: make ``warm`` job ``job_id``'s (its directory renamed to ``directory``, its slot the
        job's, ``prepare(sandbox, slot)`` writing the job's files) and send it the command. None, touching
        nothing of the job, when the chain did not come up (it died, or did not answer within
        ``READY_TIMEOUT``): it is ended and the job may start cold. ``OSError`` when a later step fails; the
        chain is then killed and reaped, and the job fails to start like a cold one would."""
        if not _ready(warm.line, READY_TIMEOUT):
            self._end(warm)
            return None
        try:
            os.rename(warm.directory, directory)
            self.isolation.rename_slot(warm.name, job_id)
            prepare(directory / "sandbox", warm.slot)
            assert self.env_program is not None
            words = [self.env_program, "-i", *(f"{key}={value}" for key, value in env.items())]
            words += ["/bin/sh", "-c", script]
            line = f"cd {shlex.quote(str(warm.sandbox))} && exec {shlex.join(words)} </dev/null\n"
            data = line.encode()
            while data:
                data = data[os.write(warm.line, data) :]
        except BaseException:
            self._end(warm)
            raise
        finally:
            _close_line(warm)
        return warm.process

    def alive(self, warm: WarmSandbox) -> bool:
        """Whether the chain still waits (one that died is reaped here, its slot given back)."""
        try:
            pid, _ = os.waitpid(warm.process.pid, os.WNOHANG)
        except ChildProcessError:
            pid = warm.process.pid
        if pid == 0:
            return True
        warm.process.returncode = -signal.SIGKILL
        _close_line(warm)
        self.isolation.release(warm.name)
        return False

    def close(self, timeout: float = 10.0) -> list[WarmSandbox]:
        """Stop starting sandboxes, wait (up to ``timeout``) for the starts in flight, and end every ready one
        (killed and reaped); the ended, for their cleanup. A start still running after ``timeout`` ends and
        removes its own sandbox."""
        with self._lock:
            self._closed = True
            self._settled.wait_for(lambda: self._starting == 0, timeout)
            ended = list(self._ready)
            self._ready.clear()
            self._close_returned = True
        for warm in ended:
            self._end(warm)
        return ended

    def _end(self, warm: WarmSandbox) -> None:
        """Kill a chain that will run no job, reap its keeper, give its slot back."""
        _close_line(warm)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(warm.process.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(warm.process.pid, 0)
        warm.process.returncode = -signal.SIGKILL
        self.isolation.release(warm.name)


def _close_line(warm: WarmSandbox) -> None:
    """Close the command pipe once (a descriptor number closed twice may by then be another file's)."""
    if warm.line >= 0:
        with contextlib.suppress(OSError):
            os.close(warm.line)
        warm.line = -1


def _ready(fd: int, timeout: float) -> bool:
    """Whether the waiting shell said it is up (a newline on its socket) within ``timeout`` seconds."""
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    if not poller.poll(int(timeout * 1000)):
        return False
    try:
        return os.read(fd, 1) == b"\n"
    except OSError:
        return False
