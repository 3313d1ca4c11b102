"""The node's side of the job keepers (``keeper.py``): it starts the zygotes and asks them for keepers.

``keeper.py`` is what runs in the keeper and zygote processes (standard library only, started as
``python -I -S keeper.py``); this module is what runs in the node: ``KeeperZygote`` starts one zygote on the first
job and sends it one request at a time over a Unix socket (the descriptors the job gets travel with it);
``KeeperZygotes`` holds a few, so launches overlap; ``KeeperProcess`` is the keeper as the executor sees it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import socket
import subprocess
import sys
import threading
from typing import Any, Required, TypedDict, Unpack

from pooltree.node.keeper import KEEPER_PATH, SYS_CLONE, keeper_argv, receive_message, send_message


class SpawnOptions(TypedDict, total=False):
    """``KeeperZygote.spawn``'s keyword arguments (its docstring says what each is)."""

    env: Required[dict[str, str]]
    cwd: Required[str]
    stdout: Required[int]
    stderr: Required[int]
    stdin: int | None
    namespace: int | None
    pass_fds: tuple[int, ...]
    identity: tuple[int, int] | None
    pass_at: int
    tmpfs: list[tuple[str, int]] | None


class KeeperProcess:
    """What the executor needs of a keeper started by the zygote (the subset of ``subprocess.Popen`` it uses)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None


class KeeperZygote:
    """The node's side of the zygote: started on the first job, one request at a time (a lock), restarted if it
    died before a request was sent; ``close`` ends it."""

    def __init__(self, lifeline: int) -> None:
        self._lifeline = lifeline
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._process: subprocess.Popen | None = None

    def _start(self) -> socket.socket:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            python = sys.executable or "/usr/bin/python3"
            self._process = subprocess.Popen(
                [python, "-I", "-S", KEEPER_PATH, "--zygote", str(theirs.fileno()), str(self._lifeline)],
                stdin=subprocess.DEVNULL,
                pass_fds=(theirs.fileno(), self._lifeline),
                start_new_session=True,
            )
        finally:
            theirs.close()
        self._sock = ours
        return ours

    def _drop(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._process is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._process.wait(5)
            self._process = None

    def spawn(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str,
        stdout: int,
        stderr: int,
        stdin: int | None = None,
        namespace: int | None = None,
        pass_fds: tuple[int, ...] = (),
        identity: tuple[int, int] | None = None,
        pass_at: int = 3,
        tmpfs: list[tuple[str, int]] | None = None,
    ) -> KeeperProcess:
        """Start ``argv`` behind a keeper (a child of this process); ``OSError`` when it cannot be started.
        ``stdin`` (default ``/dev/null``) is the job's standard input. ``namespace``: a slot's mount namespace
        (``slots.py``) the keeper starts in, as pid 1 of namespaces of its own (``JOB_NAMESPACES``).
        ``pass_fds``: descriptors ``argv`` gets as ``pass_at``, ``pass_at`` + 1, ... (default 3: a slot's setup
        bubblewrap's ``--info-fd``; a job's statistics descriptor at 5).
        ``identity``: ``(uid, gid)`` the job runs as, with no group, capability nor new privileges: the keeper
        switches (``_spawn_as``) where a ``setpriv`` exec did it. ``tmpfs``: ``(path in the sandbox, bytes)`` the
        keeper mounts in a slot's job namespace before the job starts (``_mount_tmpfs``)."""
        if (namespace is not None or pass_fds or identity) and os.uname().machine not in SYS_CLONE:
            raise OSError(errno.ENOSYS, "jobs in a slot's namespace need the keeper zygote")
        if os.uname().machine not in SYS_CLONE:  # no zygote here: a keeper of its own, started as a program
            process = subprocess.Popen(
                keeper_argv(self._lifeline, argv),
                stdin=subprocess.DEVNULL if stdin is None else stdin,
                stdout=stdout,
                stderr=stderr,
                cwd=cwd,
                env=env,
                start_new_session=True,
                pass_fds=(self._lifeline,),
            )
            started = KeeperProcess(process.pid)
            process.returncode = 0  # reaped by the executor through the pid, never through this object
            return started
        message, fds = _request(
            argv, env, cwd, stdout, stderr, stdin, namespace, pass_fds, identity, pass_at, tmpfs
        )
        with self._lock:
            for attempt in range(2):
                sock = self._sock or self._start()
                try:
                    send_message(sock, message, fds)
                except OSError:  # the zygote is gone and got nothing: a new one may start the job
                    self._drop()
                    if attempt:
                        raise
                    continue
                try:
                    reply = receive_message(sock)
                except (OSError, ValueError):
                    reply = None
                if reply is None:  # whether the job started is unknown: never start it twice
                    self._drop()
                    raise OSError(errno.EPIPE, "the node's job keeper zygote died while starting the job")
                break
        answer, fds = reply
        for fd in fds:
            os.close(fd)
        if "pid" in answer:
            return KeeperProcess(int(answer["pid"]))
        raise OSError(int(answer.get("errno") or errno.EINVAL), str(answer.get("error")))

    def close(self) -> None:
        with self._lock:
            self._drop()


def _request(
    argv: list[str],
    env: dict[str, str],
    cwd: str,
    stdout: int,
    stderr: int,
    stdin: int | None,
    namespace: int | None,
    pass_fds: tuple[int, ...],
    identity: tuple[int, int] | None,
    pass_at: int,
    tmpfs: list[tuple[str, int]] | None,
) -> tuple[dict[str, Any], tuple[int, ...]]:
    """A zygote's request for ``KeeperZygote.spawn``'s arguments: the message and the descriptors riding with it
    (stdout, stderr, stdin if given, ``pass_fds``, the slot's namespace last)."""
    message: dict[str, Any] = {
        "argv": list(argv),
        "env": dict(env),
        "cwd": str(cwd),
        "namespace": namespace is not None,
        "pass": len(pass_fds),
        "pass_at": pass_at,
    }
    if identity is not None:
        message["identity"] = [int(identity[0]), int(identity[1])]
    if tmpfs:
        if namespace is None:
            raise OSError(errno.EINVAL, "a keeper mounts tmpfs only in a slot's namespace")
        message["tmpfs"] = [[str(path), int(size)] for path, size in tmpfs]
    fds = (stdout, stderr) if stdin is None else (stdout, stderr, stdin)
    fds += tuple(pass_fds)
    if namespace is not None:
        fds += (namespace,)
    return message, fds


class KeeperZygotes:
    """A few zygotes, each serving one request at a time: a launch waits for its keeper's ``setsid`` (the keeper
    must be scheduled to run), and one zygote made every launch of the node queue behind that wait (8 slots of
    trivial jobs spent most of their start time there). ``spawn`` takes a free zygote (each started on its
    first request), so up to ``count`` launches overlap; ``close`` ends them all."""

    def __init__(self, lifeline: int, count: int) -> None:
        if count < 1:
            raise ValueError(f"count must be at least 1, got {count}")
        self._zygotes = [KeeperZygote(lifeline) for _ in range(count)]
        self._free: queue.SimpleQueue[KeeperZygote] = queue.SimpleQueue()
        for zygote in self._zygotes:
            self._free.put(zygote)

    def spawn(self, argv: list[str], **options: Unpack[SpawnOptions]) -> KeeperProcess:
        """``KeeperZygote.spawn`` on a free zygote (waiting for one while all are busy)."""
        zygote = self._free.get()
        try:
            return zygote.spawn(argv, **options)
        finally:
            self._free.put(zygote)

    def close(self) -> None:
        for zygote in self._zygotes:
            zygote.close()
