"""Slot sandboxes: one bubblewrap sandbox per slot, set up once and entered by each job that runs in the slot.

A bubblewrap sandbox per job cost its setup and teardown every time (two execs, ~10 mount operations, a pivot
of the root; ~3 ms of CPU and more of wall time per job on a 2-core host, plus ``setpriv``'s exec), and 8 slots
of trivial sandboxed jobs were CPU-bound there. As YTsaurus's exec node keeps slots (a directory and a uid
each) that successive jobs run in, a node whose isolation is ``bwrap+uid`` keeps **slots**:

* a slot is ``<root>/.slot-N`` (root's, 0711) with ``sandbox`` and ``sandbox/tmp`` owned by the slot's uid (0700),
  the uid held for the slot (``JobIsolation.acquire``) for as long as the slot exists;
* its **mount namespace** is made once by bubblewrap with exactly a job's arguments for that sandbox
  (``JobIsolation.sandbox_arguments``: read-only ``/``, minimal ``/dev``, private ``/tmp`` ``/var/tmp``
  ``/dev/shm`` bound to the slot's ``tmp``, the node root masked, the sandbox bound back at its own path); the
  node keeps a descriptor of that namespace and the short-lived bubblewrap that made it exits at once;
* a job in the slot: its keeper is forked by a zygote (``keeper.py``) that enters the slot's namespace
  (``setns``) and clones the keeper as **pid 1 of new PID, IPC and mount namespaces** (the mount namespace a
  copy of the slot's, with its own ``/proc``); the keeper starts ``setpriv`` (the slot's uid, no groups,
  capabilities nor new privileges) ``/bin/sh -c`` as before. When the keeper ends, the kernel kills every
  process left in the job's PID namespace: no process of a job outlives it, as under a bubblewrap per job;
* between two jobs the node empties the slot (``give_back``): every entry of the sandbox and of its ``tmp`` is
  renamed into the node's trash (deleted in the background), the sandbox's and ``tmp``'s owner and modes are set
  again. A slot whose layout a job changed (``tmp`` replaced or moved, a mount point bubblewrap made inside
  ``tmp`` renamed: when the node root lies under ``/tmp`` bubblewrap makes the directories leading to its mask
  there) is not reused: it is retired and its directory discarded.

So successive jobs of a slot share, one after the other, its uid and its mount namespace (its view of the
filesystem: the same read-only system, the same mask, their sandbox at the same path); they never share a
process, a file (the sandbox and ``/tmp`` are empty when a job starts), a PID or IPC namespace or a ``/proc``.
Jobs that need sandbox arguments of their own (GPU devices, a network namespace of their own), a kept sandbox,
or a meter that wraps the job's argv (the cgroup meter's join) start in a bubblewrap of their own, as before.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import select
import stat
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pooltree.node.isolation import JobIsolation, Mode, Slot
from pooltree.node.keeper import SYS_CLONE

SLOT_PREFIX = ".slot-"
SETUP_TIMEOUT = 30.0
HOLDER_ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}

_log = logging.getLogger(__name__)

Discard = Callable[[Path], None]
"""Makes a path disappear now and deletes it in the background (the executor's ``_discard``)."""


@dataclass
class SandboxSlot:
    """One slot: its directory, sandbox, uid, the descriptor of its mount namespace, and what a job must not
    change: the identity of ``tmp`` (the directory bound to ``/tmp``) and of the entries bubblewrap made in it."""

    name: str
    directory: Path
    sandbox: Path
    slot: Slot | None
    namespace: int
    tmp_identity: tuple[int, int]
    skeleton: dict[str, tuple[int, int]] = field(default_factory=dict)
    jobs: int = 0


def _identity(path: Path) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of a real directory at ``path`` (not a link), else None."""
    try:
        info = os.lstat(path)
    except OSError:
        return None
    return (info.st_dev, info.st_ino) if stat.S_ISDIR(info.st_mode) else None


class SandboxSlots:
    """The node's slots (made on demand, one per job running at a time); thread-safe."""

    def __init__(
        self, root: Path, isolation: JobIsolation, discard: Discard, *, enabled: bool = True
    ) -> None:
        self.root = root
        self.isolation = isolation
        self.discard = discard
        self.enabled = (
            enabled
            and isolation.mode is Mode.BWRAP_UID
            and isolation.sandboxes == root
            and os.uname().machine in SYS_CLONE
            and os.path.exists("/proc/self/ns/mnt")
        )
        """Jobs run in slots: the node is root with bubblewrap and setpriv, and the keeper zygote works here."""
        for stale in root.glob(f"{SLOT_PREFIX}*"):  # slots of an earlier run of a node on this root
            discard(stale)
        self._free: list[SandboxSlot] = []
        self._all: dict[str, SandboxSlot] = {}
        self._names = 0
        self._lock = threading.Lock()
        self._closed = False

    def take(self) -> SandboxSlot:
        """Worker thread: a free slot (the most recently used first), or a new one; ``OSError`` when a new one
        cannot be set up."""
        with self._lock:
            if self._closed:
                raise OSError("the node's slots are closed")
            if self._free:
                return self._free.pop()
            name = f"{SLOT_PREFIX}{self._names}"
            self._names += 1
        made = self._make(name)
        with self._lock:
            self._all[name] = made
        return made

    def give_back(self, used: SandboxSlot) -> None:
        """Worker thread, once every process of the slot's job is gone: empty the slot for the next job, or
        retire it when a job changed its layout (or the node is closing)."""
        used.jobs += 1
        try:
            reusable = not self._closed and self._empty(used)
        except OSError as error:
            _log.warning("cannot empty slot %s (retired): %s", used.name, error)
            reusable = False
        if reusable:
            with self._lock:
                if not self._closed:
                    self._free.append(used)
                    return
        self._retire(used)

    def abandon(self, used: SandboxSlot) -> None:
        """A slot whose keeper's start is unknown (the zygote died answering): never used again, its uid kept
        held (a job may still run as it) until the node stops."""
        _log.warning("slot %s is abandoned: a job may have started in it", used.name)
        with contextlib.suppress(OSError):
            os.close(used.namespace)
        with self._lock:
            self._all.pop(used.name, None)

    def close(self) -> None:
        """Retire every free slot; a slot still in use is retired when given back."""
        with self._lock:
            self._closed = True
            free, self._free = self._free, []
        for idle in free:
            self._retire(idle)

    # ------------------------------------------------------------------------------------------ internals

    def _make(self, name: str) -> SandboxSlot:
        directory = self.root / name
        sandbox = directory / "sandbox"
        if directory.exists() or directory.is_symlink():  # left by an earlier run of this node
            self.discard(directory)
        directory.mkdir()
        sandbox.mkdir()
        (sandbox / "tmp").mkdir()
        slot = self.isolation.acquire(name)
        try:
            self.isolation.prepare(directory, sandbox, slot)
            namespace = self._namespace(sandbox)
        except BaseException:
            self.isolation.release(name)
            self.discard(directory)
            raise
        tmp = sandbox / "tmp"
        identity = _identity(tmp)
        assert identity is not None
        skeleton = {entry.name: _identity(tmp / entry.name) or (0, 0) for entry in os.scandir(tmp)}
        return SandboxSlot(name, directory, sandbox, slot, namespace, identity, skeleton)

    def _namespace(self, sandbox: Path) -> int:
        """A descriptor of a new mount namespace set up by bubblewrap for ``sandbox`` (its process gone)."""
        assert self.isolation.bwrap is not None
        info_read, info_write = os.pipe()
        argv = [
            self.isolation.bwrap,
            *self.isolation.sandbox_arguments(sandbox),
            "--info-fd",
            str(info_write),
            "--",
            "/bin/sh",
            "-c",
            "echo; read -r _",
        ]
        try:
            holder = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=(info_write,),
                env=dict(HOLDER_ENVIRONMENT),
                cwd="/",
                start_new_session=True,
            )
        finally:
            os.close(info_write)
        try:
            assert holder.stdout is not None and holder.stdin is not None
            if (
                not select.select([holder.stdout], [], [], SETUP_TIMEOUT)[0]
                or holder.stdout.readline() != b"\n"
            ):
                raise OSError(f"bubblewrap did not set the slot up: {self._stderr(holder)}")
            info = json.loads(_read_all(info_read))
            pid = int(info["child-pid"])
            namespace = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
            expected = info.get("mnt-namespace")
            if expected is not None and os.fstat(namespace).st_ino != int(expected):
                os.close(namespace)
                raise OSError(f"the slot's namespace changed under it (pid {pid} is another process now)")
            return namespace
        except (ValueError, KeyError, TypeError) as error:
            raise OSError(f"bubblewrap's --info-fd answer is not understood: {error}") from None
        finally:
            os.close(info_read)
            _end(holder)
            if holder.stderr is not None:
                holder.stderr.close()

    @staticmethod
    def _stderr(holder: subprocess.Popen[bytes]) -> str:
        _end(holder)
        assert holder.stderr is not None
        return holder.stderr.read().decode(errors="replace").strip() or f"exit {holder.returncode}"

    def _empty(self, used: SandboxSlot) -> bool:
        """Everything the job left in the sandbox and its ``tmp`` goes to the trash; False (not reusable) when
        ``tmp`` or an entry bubblewrap made in it is not the directory bound at setup any more."""
        sandbox, tmp = used.sandbox, used.sandbox / "tmp"
        if _identity(sandbox) is None or _identity(tmp) != used.tmp_identity:
            return False
        for name, identity in used.skeleton.items():
            if _identity(tmp / name) != identity:
                return False
        for entry in os.scandir(sandbox):
            if entry.name != "tmp":
                self.discard(sandbox / entry.name)
        for entry in os.scandir(tmp):
            if entry.name not in used.skeleton:
                self.discard(tmp / entry.name)
        self.isolation.prepare(used.directory, sandbox, used.slot)
        return True

    def _retire(self, used: SandboxSlot) -> None:
        with contextlib.suppress(OSError):
            os.close(used.namespace)
        with self._lock:
            self._all.pop(used.name, None)
        self.isolation.release(used.name)
        self.discard(used.directory)


def _read_all(fd: int) -> bytes:
    """Everything on a pipe until its writers are gone (bubblewrap closes its info descriptor after writing)."""
    chunks = []
    deadline = time.monotonic() + SETUP_TIMEOUT
    while time.monotonic() < deadline:
        if not select.select([fd], [], [], max(deadline - time.monotonic(), 0))[0]:
            break
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        chunks.append(chunk)
        with contextlib.suppress(ValueError):
            json.loads(b"".join(chunks))
            break
    return b"".join(chunks)


def _end(holder: subprocess.Popen[bytes]) -> None:
    """End the bubblewrap that set a slot up: EOF on its shell's input, then a bounded wait, then SIGKILL."""
    if holder.stdin is not None and not holder.stdin.closed:
        with contextlib.suppress(OSError):
            holder.stdin.close()
    try:
        holder.wait(5)
    except subprocess.TimeoutExpired:
        holder.kill()
        holder.wait(5)
    if holder.stdout is not None:
        holder.stdout.close()
