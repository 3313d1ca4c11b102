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
  node keeps a descriptor of that namespace and the short-lived bubblewrap that made it exits at once. That
  bubblewrap runs behind a keeper (``keeper.py``) as a job does, so it dies with the node in every phase of the
  setup (its own ``--die-with-parent`` did not: a 0.8.0 outlived a node killed with -9 during a setup);
* a job in the slot: its keeper is forked by a zygote (``keeper.py``) that enters the slot's namespace
  (``setns``) and clones the keeper as **pid 1 of new PID, IPC and mount namespaces** (the mount namespace a
  copy of the slot's, with its own ``/proc``); the keeper starts ``/bin/sh -c`` as the slot's uid with no
  groups, capabilities nor new privileges (it drops them itself as ``setpriv`` would: ``keeper._spawn_as``). When the keeper ends, the kernel kills every
  process left in the job's PID namespace: no process of a job outlives it, as under a bubblewrap per job;
* between two jobs the node empties the slot (``give_back``, on a finisher thread after the job's result is out:
  ``take`` waits for a slot being emptied rather than set a new one up): every entry of the sandbox and of its ``tmp`` is
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
import signal
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pooltree.node.isolation import JobIsolation, Mode, Slot
from pooltree.node.keeper import SYS_CLONE
from pooltree.node.zygotes import KeeperProcess

SLOT_PREFIX = ".slot-"
SETUP_TIMEOUT = 30.0
HOLDER_END_TIMEOUT = 5.0
EMPTYING_WAIT = 10.0
"""How long a job waits for a slot being emptied before it sets a new one up."""
HOLDER_ENVIRONMENT = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}

_log = logging.getLogger(__name__)

Discard = Callable[[Path], None]
"""Makes a path disappear now and deletes it in the background (the executor's ``_discard``)."""
Spawn = Callable[..., KeeperProcess]
"""Starts an argv behind a keeper (``KeeperZygotes.spawn``): what ends a slot's setup with the node."""


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
        self, root: Path, isolation: JobIsolation, discard: Discard, spawn: Spawn, *, enabled: bool = True
    ) -> None:
        self.root = root
        self.isolation = isolation
        self.discard = discard
        self.spawn = spawn
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
        self._lock = threading.Condition()
        self._emptying: set[str] = set()
        """Slots whose job is over and that are being emptied (``emptying`` .. ``give_back``)."""
        self._preparing: set[str] = set()
        """Slots being set up ahead of any job (``prepare``)."""
        self._closed = False

    def take(self) -> SandboxSlot:
        """Worker thread: a free slot (the most recently used first), one being emptied or prepared once it is
        (a new slot costs a bubblewrap's setup), or a new one; ``OSError`` when a new one cannot be set up."""
        deadline = time.monotonic() + EMPTYING_WAIT
        with self._lock:
            while not self._free and (self._emptying or self._preparing) and not self._closed:
                if not self._lock.wait(max(deadline - time.monotonic(), 0)):
                    break
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

    def prepare(self, count: int) -> None:
        """Worker thread: set slots up until ``count`` exist, ahead of any job (as YTsaurus's slot manager prepares
        its slots when the node starts), so the node's first jobs do not each wait for a bubblewrap's setup. A
        slot that cannot be set up ends the preparation (jobs then make theirs on demand, and say why)."""
        while True:
            with self._lock:
                if self._closed or len(self._all) + len(self._preparing) >= count:
                    return
                name = f"{SLOT_PREFIX}{self._names}"
                self._names += 1
                self._preparing.add(name)
            try:
                made = self._make(name)
            except OSError as error:
                _log.warning("cannot prepare slot %s ahead of jobs: %s", name, error)
                with self._lock:
                    self._preparing.discard(name)
                    self._lock.notify_all()
                return
            with self._lock:
                self._preparing.discard(name)
                self._all[name] = made
                self._lock.notify_all()
                if not self._closed:
                    self._free.append(made)
                    continue
            self._retire(made)
            return

    def emptying(self, used: SandboxSlot) -> None:
        """The slot's job is over and ``give_back`` follows on another thread: ``take`` waits for it."""
        with self._lock:
            self._emptying.add(used.name)

    def give_back(self, used: SandboxSlot) -> None:
        """Worker thread, once every process of the slot's job is gone: empty the slot for the next job, or
        retire it when a job changed its layout (or the node is closing)."""
        used.jobs += 1
        try:
            reusable = not self._closed and self._empty(used)
        except OSError as error:
            _log.warning("cannot empty slot %s (retired): %s", used.name, error)
            reusable = False
        with self._lock:
            self._emptying.discard(used.name)
            self._lock.notify_all()
            if reusable and not self._closed:
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
            self._lock.notify_all()
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
        """A descriptor of a new mount namespace set up by bubblewrap for ``sandbox`` (its processes gone).

        The bubblewrap runs behind a keeper (``keeper.py``), as a job does: when the node dies, in whatever phase
        of the setup, the keeper SIGKILLs it. Its own ``--die-with-parent`` is no such guarantee: a system
        bubblewrap 0.8.0 outlived a node killed with -9 during a setup, asleep on its event descriptors."""
        assert self.isolation.bwrap is not None
        argv = [
            self.isolation.bwrap,
            *self.isolation.sandbox_arguments(sandbox),
            "--info-fd",
            "3",
            "--",
            "/bin/sh",
            "-c",
            "echo; read -r _",
        ]
        holder = _Holder(self.spawn, argv)
        try:
            if not holder.ready():
                raise OSError(f"bubblewrap did not set the slot up: {holder.error()}")
            info = json.loads(holder.info())
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
            holder.end()

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


class _Holder:
    """The bubblewrap that sets a slot up, behind a keeper: its shell prints a line once the namespace is made
    and waits for EOF on its input; bubblewrap's ``--info-fd`` (3) names its pid 1. The keeper is the node's
    child (``clone(CLONE_PARENT)``), reaped here."""

    def __init__(self, spawn: Spawn, argv: list[str]) -> None:
        self._pipes: dict[str, int] = {}
        ours: dict[str, int] = {}
        theirs: list[int] = []
        try:
            for name in ("stdout", "stderr", "stdin", "info"):
                read, write = os.pipe()
                ours[name], their = (write, read) if name == "stdin" else (read, write)
                theirs.append(their)
            self._pipes = ours
            self.keeper = spawn(
                argv,
                env=dict(HOLDER_ENVIRONMENT),
                cwd="/",
                stdout=theirs[0],
                stderr=theirs[1],
                stdin=theirs[2],
                pass_fds=(theirs[3],),
            )
        except BaseException:
            for fd in ours.values():
                os.close(fd)
            self._pipes = {}
            raise
        finally:
            for fd in theirs:
                os.close(fd)

    def ready(self) -> bool:
        """The shell inside the new namespace said it is there (bounded by ``SETUP_TIMEOUT``)."""
        stdout = self._pipes["stdout"]
        return bool(select.select([stdout], [], [], SETUP_TIMEOUT)[0]) and os.read(stdout, 1) == b"\n"

    def info(self) -> bytes:
        return _read_all(self._pipes["info"])

    def error(self) -> str:
        """What bubblewrap said on stderr (once it has ended), or its exit status."""
        status = self.end()
        text = b""
        with contextlib.suppress(OSError):
            if select.select([self._pipes["stderr"]], [], [], 0)[0]:
                text = os.read(self._pipes["stderr"], 65536)
        return text.decode(errors="replace").strip() or f"exit status {status}"

    def end(self) -> int | None:
        """EOF on the shell's input, then a bounded wait for the keeper. A bubblewrap still there after that is
        SIGKILLed (the keeper's children: the keeper then kills what is left below it and exits), then the
        keeper's session. The keeper's wait status."""
        stdin = self._pipes.pop("stdin", None)
        if stdin is not None:
            os.close(stdin)
        pid = self.keeper.pid
        if self.keeper.returncode is not None:
            return self.keeper.returncode
        for kill in (_kill_children, _kill_session):
            if _exited(pid, HOLDER_END_TIMEOUT):
                break
            _log.warning("the bubblewrap setting a slot up did not end; killing it (keeper %d)", pid)
            kill(pid)
        try:
            _, self.keeper.returncode = os.waitpid(pid, 0)
        except ChildProcessError:
            self.keeper.returncode = -1
        return self.keeper.returncode

    def close(self) -> None:
        for fd in self._pipes.values():
            os.close(fd)
        self._pipes = {}


def _exited(pid: int, timeout: float) -> bool:
    """Whether the child ``pid`` exits within ``timeout`` seconds (it stays unreaped)."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    try:
        return bool(select.select([pidfd], [], [], timeout)[0])
    finally:
        os.close(pidfd)


def _kill_children(pid: int) -> None:
    """SIGKILL the children of ``pid`` (``/proc/PID/task/*/children``)."""
    with contextlib.suppress(OSError, ValueError):
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", "rb") as handle:
                for child in handle.read().split():
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.kill(int(child), signal.SIGKILL)


def _kill_session(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
