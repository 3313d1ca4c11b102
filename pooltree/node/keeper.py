"""A job's keeper: the job dies when its node dies, without a race.

Each job's root process is a keeper. The executor gets them from one **zygote** per node (``zygotes.KeeperZygote``, the
node's side, starts it and sends it requests; run as
``python -I -S keeper.py --zygote SOCKET_FD LIFELINE_FD``, started with the node's first job): on each request it
forks a keeper with ``clone(CLONE_PARENT)``, so the keeper is the node's own child (the node reaps it and reads
its status as it would a ``Popen``'s) while the interpreter start is paid once per node, not once per job. A
keeper can also run alone, ``python -I -S keeper.py LIFELINE_FD -- ARGV...`` (``keeper_argv``). Either way the
keeper

1. becomes a child subreaper (``PR_SET_CHILD_SUBREAPER``): every process of the job that loses its parent is
   re-parented to the keeper (or to the pid 1 of the job's PID namespace, itself below the keeper), so nothing the
   job starts can leave the keeper's subtree, however it daemonizes;
2. starts ``ARGV`` (bubblewrap, or the job's shell without a sandbox) with every signal at its default disposition;
3. waits for either the job's exit or end-of-file on ``LIFELINE_FD``, the read end of a pipe whose only write end
   the node holds. The kernel closes a dead process's descriptors, so EOF arrives whenever the node is gone --
   killed with SIGKILL included, and even if it died before the keeper got this far (the pipe is at EOF already):
   there is no window such as the one between ``fork`` and ``prctl(PR_SET_PDEATHSIG)`` that bubblewrap's
   ``--die-with-parent`` leaves open in each of its two processes (a node killed while a sandbox was being set up
   left that job running). On EOF the keeper SIGKILLs its whole subtree (pid 1 of the namespace takes every
   process in it) and reaps until nothing is left. The zygote holds the read end from its own start, so a
   keeper it forks has it too, whenever the node died; the zygote just exits on EOF (it holds no job).

A keeper asked to start in a slot's sandbox (``slots.py``: the request carries the slot's mount namespace) is
cloned by the zygote from inside that namespace as pid 1 of new PID, IPC and mount namespaces; it mounts its own
``/proc`` and, instead of walking its subtree, ends the job with ``kill(-1, SIGKILL)`` (pid 1 spares itself) and
reaps until nothing is left; its own death takes the whole PID namespace with it.

When the job's root exits first, whatever it left behind is killed the same way and the keeper exits with the
root's status (``exit(code)``, or the same signal re-raised), so the executor sees the job's own exit status.
The executor sends catchable signals to the job's processes, never to the keeper; any that reach it anyway get a
no-op handler (not SIG_IGN, so the job's processes start with every disposition at its default after ``exec``).

Only the standard library, no import of ``pooltree``: the zygote costs one ``python -I -S`` start per node
(about 20 ms of CPU, 10 MB resident); a keeper forked from it about 1.5 ms of CPU and a few private pages per
job (not counted as the job's memory: see ``ProcessTreeMeter``), where a keeper started alone cost about 19 ms of
CPU and 4 MB private. A job that leaves nothing behind ends without a scan of the process table.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

KEEPER_PATH = os.path.abspath(__file__)
PR_SET_CHILD_SUBREAPER = 36
KEEPER_EXIT_USAGE = 126
"""The keeper's own failure (bad arguments, cannot fork): the shell's "cannot execute"."""
KEEPER_EXIT_NODE_GONE = 128 + signal.SIGKILL
"""The node went away: the job was killed, and nobody reads this status."""


def keeper_argv(lifeline: int, argv: list[str]) -> list[str]:
    """``argv`` behind a keeper that watches the pipe read end ``lifeline`` (pass it with ``pass_fds``)."""
    python = sys.executable or "/usr/bin/python3"
    return [python, "-I", "-S", KEEPER_PATH, str(lifeline), "--", *argv]


def _descendants(me: int) -> list[int]:
    """Every live process below ``me`` (one pass over ``/proc``), deepest last."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X"):
            continue
        children.setdefault(int(fields[1]), []).append(int(name))
    found: list[int] = []
    stack = list(children.get(me, ()))
    while stack:
        pid = stack.pop()
        found.append(pid)
        stack.extend(children.get(pid, ()))
    return found


def _reap() -> bool:
    """Collect every exited child; False once the keeper has no children left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


def _has_children() -> bool:
    """Whether any child is left (exited ones are reaped): with none, the keeper has no descendant at all."""
    return _reap()


def _children() -> list[int] | None:
    """The keeper's own children, from ``/proc/self/task/*/children`` (None where the kernel does not list them)."""
    pids: list[int] = []
    try:
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children", "rb") as handle:
                pids.extend(int(pid) for pid in handle.read().split())
    except (OSError, ValueError):
        return None
    return pids


def _wait_any(pids: list[int], timeout: float) -> None:
    """Until one of ``pids`` exits, at most ``timeout`` seconds (a pidfd poll, not a fixed sleep)."""
    fds: list[int] = []
    try:
        for pid in pids:
            with contextlib.suppress(OSError):
                fds.append(os.pidfd_open(pid))
        if not fds:
            return
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        with contextlib.suppress(InterruptedError):
            poller.poll(max(int(timeout * 1000), 1))
    finally:
        for fd in fds:
            os.close(fd)


def kill_subtree(deadline: float = 30.0) -> None:
    """SIGKILL every process below the keeper until none is left (orphans come back to the subreaper).

    The first round kills the keeper's own children only, found without a scan of the process table: under
    bubblewrap that is the sandbox's pid 1, often still tearing its namespaces down when its monitor has exited
    (it comes back to the keeper, the subreaper), and its death ends every process of the namespace. A full scan
    of ``/proc`` for every descendant (a few ms of CPU on a busy host) is left for what survives that round."""
    me = os.getpid()
    give_up = time.monotonic() + deadline
    direct = True
    while _has_children():  # the usual end of a job that left nothing behind: no scan of the process table
        listed = _children() if direct else None
        pids = listed if listed is not None else _descendants(me)
        direct = False
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        if not _reap() or time.monotonic() > give_up:
            return
        _wait_any(pids, 0.005)
        if not _reap():
            return


def _noop(signum: int, frame: object) -> None:
    pass


def _catchable() -> set[signal.Signals]:
    return set(signal.valid_signals()) - {signal.SIGKILL, signal.SIGSTOP, signal.SIGCHLD}


def _quiet_signals() -> set[signal.Signals]:
    """A no-op handler (not SIG_IGN: the job's processes get the default on exec) for every catchable signal
    but the faults; the set to reset to the default in the job."""
    catchable = _catchable()
    faults = {signal.SIGSEGV, signal.SIGBUS, signal.SIGILL, signal.SIGFPE, signal.SIGTRAP, signal.SIGSYS}
    for signum in catchable - faults:
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, _noop)
    return catchable


def _resolve(name: str, env: dict[str, str]) -> str:
    """``name`` looked up in the job's own ``PATH`` (as ``execvpe`` would), so a zygote started with the node's
    environment finds the same program a keeper started with the job's environment did."""
    if "/" in name:
        return name
    for directory in env.get("PATH", os.defpath).split(os.pathsep):
        candidate = os.path.join(directory or ".", name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return name


def kill_namespace() -> None:
    """As pid 1 of the job's own PID namespace: SIGKILL every other process in it (``kill(-1)`` from pid 1 spares
    only the caller) and reap them all; every process of the job is in the namespace, orphans come back to pid 1."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(-1, signal.SIGKILL)
    while True:
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return
        except InterruptedError:
            continue


def _keep(
    lifeline: int,
    command: list[str],
    env: dict[str, str],
    catchable: set[signal.Signals],
    identity: tuple[int, int] | None = None,
) -> int:
    """The keeper's work once it is a subreaper (or pid 1 of the job's PID namespace): start ``command`` unless
    the node is gone (as ``identity``'s uid and gid when given: ``_spawn_as``), watch it and the lifeline, kill
    what is left; the job's wait status (``KEEPER_EXIT_*`` as an exit code for the keeper's own endings)."""
    end = kill_namespace if os.getpid() == 1 else kill_subtree
    poller = select.poll()
    poller.register(lifeline, select.POLLIN)
    if poller.poll(0):  # the node is already gone: do not start the job at all
        return _exit_status(KEEPER_EXIT_NODE_GONE)
    try:
        if identity is None:
            child = os.posix_spawn(_resolve(command[0], env), command, env, setsigdef=catchable)
        else:
            child = _spawn_as(identity, _resolve(command[0], env), command, env, catchable)
    except OSError as error:
        sys.stderr.write(f"keeper: cannot start {command[0]}: {error.strerror or error}\n")
        return _exit_status(KEEPER_EXIT_USAGE)
    exited = os.pidfd_open(child)
    poller.register(exited, select.POLLIN)
    while True:
        try:
            ready = {fd for fd, _ in poller.poll()}
        except InterruptedError:
            continue
        if exited in ready:
            break
        if lifeline in ready:  # EOF (the node never writes): the node is gone
            end()
            return _exit_status(KEEPER_EXIT_NODE_GONE)
    _, status = os.waitpid(child, 0)
    end()  # what the job left behind does not outlive it
    return status


HELD_FD = 3
"""Where a job started by ``_spawn_as`` finds the pipe it waits on before anything else."""


def _spawn_as(
    identity: tuple[int, int],
    path: str,
    command: list[str],
    env: dict[str, str],
    catchable: set[signal.Signals],
) -> int:
    """Start ``command`` (``/bin/sh -c SCRIPT``) as ``identity`` (uid, gid), from a keeper that
    ``_drop_privileges`` prepared, without an exec of ``setpriv`` (and without a fork of this Python process,
    which cost more than that exec): the keeper's real ids become the job's for the spawn only, and
    ``posix_spawn``'s ``resetids`` gives them to the child as its effective ids; ``execve`` copies them to the
    saved ones, so the job holds no capability. A job may signal a process whose real id is its own: the shell
    first waits for EOF on a pipe (``HELD_FD``, closed before the script runs) that the keeper closes only once
    its real ids are root's again, so the job never runs while it could signal its keeper."""
    uid, gid = identity
    if command[:2] != ["/bin/sh", "-c"] or len(command) < 3:
        raise OSError(errno.EINVAL, "a job started as another uid must be /bin/sh -c SCRIPT")
    held, release = os.pipe()  # both close-on-exec: the child gets the read end as HELD_FD only
    argv = [*command[:2], f"read -r _ <&{HELD_FD}; exec {HELD_FD}<&-\n{command[2]}", *command[3:]]
    try:
        os.setresgid(gid, -1, -1)
        os.setresuid(uid, -1, -1)
        try:
            actions = [(os.POSIX_SPAWN_DUP2, held, HELD_FD)]
            return os.posix_spawn(path, argv, env, file_actions=actions, setsigdef=catchable, resetids=True)
        finally:
            os.setresuid(0, -1, -1)
            os.setresgid(0, -1, -1)
    finally:
        os.close(held)
        os.close(release)  # the job's shell goes on from here


PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
LINUX_CAPABILITY_VERSION_3 = 0x20080522


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def last_capability() -> int:
    """The highest capability number this kernel knows (read once by the zygote: each keeper drops them all);
    -1 when unknown (a keeper asked to switch uids then refuses to start the job)."""
    try:
        fd = os.open("/proc/sys/kernel/cap_last_cap", os.O_RDONLY | os.O_CLOEXEC)
        try:
            return int(os.read(fd, 32))
        finally:
            os.close(fd)
    except (OSError, ValueError):
        return -1


def _drop_privileges(libc: ctypes.CDLL, last: int) -> str | None:
    """In a keeper whose job runs as another uid (``_spawn_as``): what ``setpriv --clear-groups --inh-caps=-all
    --bounding-set=-all --no-new-privs`` does, done to the keeper itself (its job inherits it), which saves the
    job an exec of ``setpriv``. The keeper keeps its effective root and capabilities (it still ends the job);
    a reason when any step fails (the job is then not started)."""
    if last < 0:
        return "keeper: the kernel's last capability (/proc/sys/kernel/cap_last_cap) is unknown\n"
    try:
        os.setgroups([])
    except OSError as error:
        return f"keeper: setgroups: {error}\n"
    for capability in range(last + 1):
        if libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0) != 0:
            return f"keeper: prctl(PR_CAPBSET_DROP, {capability}): {os.strerror(ctypes.get_errno())}\n"
    if libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0:
        return f"keeper: prctl(PR_CAP_AMBIENT_CLEAR_ALL): {os.strerror(ctypes.get_errno())}\n"
    header, data = _CapHeader(LINUX_CAPABILITY_VERSION_3, 0), (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return f"keeper: capget: {os.strerror(ctypes.get_errno())}\n"
    for word in data:
        word.inheritable = 0
    if libc.capset(ctypes.byref(header), data) != 0:
        return f"keeper: capset: {os.strerror(ctypes.get_errno())}\n"
    if libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        return f"keeper: prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(ctypes.get_errno())}\n"
    return None


def _exit_status(code: int) -> int:
    return (code & 0xFF) << 8


def _end_like(status: int) -> int:
    """Leave the way the job did: the same signal re-raised, or its exit code (returned for ``sys.exit``)."""
    if os.WIFSIGNALED(status) and os.getpid() == 1:  # init ignores its own signals: bwrap's 128 + N
        return 128 + os.WTERMSIG(status)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        with contextlib.suppress(OSError, ValueError):
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return 128 + signum
    return os.waitstatus_to_exitcode(status)


def _make_subreaper(libc: ctypes.CDLL) -> str | None:
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        return f"keeper: prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(ctypes.get_errno())}\n"
    return None


def main(argv: list[str]) -> int:
    if argv[:1] == ["--zygote"]:
        return zygote(argv[1:])
    if len(argv) < 3 or argv[1] != "--" or not argv[0].isdigit():
        sys.stderr.write(
            "usage: keeper.py LIFELINE_FD -- ARGV... | keeper.py --zygote SOCKET_FD LIFELINE_FD\n"
        )
        return KEEPER_EXIT_USAGE
    lifeline = int(argv[0])
    os.set_inheritable(lifeline, False)
    failure = _make_subreaper(ctypes.CDLL(None, use_errno=True))
    if failure:
        sys.stderr.write(failure)
        return KEEPER_EXIT_USAGE
    catchable = _quiet_signals()
    return _end_like(_keep(lifeline, argv[2:], dict(os.environ), catchable))


# ------------------------------------------------------------------------------------------------- the zygote

CLONE_PARENT = 0x00008000
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWPID = 0x20000000
JOB_NAMESPACES = CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC
"""What a keeper started in a slot's sandbox gets of its own: a copy of the slot's mount namespace (where its
``/proc`` is mounted), a PID namespace it is pid 1 of, and an IPC namespace (System V objects and POSIX message
queues die with the job)."""
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x8, 0x4000, 0x40000
SYS_CLONE = {"x86_64": 56, "aarch64": 220}
"""``clone``'s number where its arguments come in the order ``flags, stack, ...`` (elsewhere: a keeper per job)."""
_HEADER = struct.Struct("!I")
MAX_REQUEST = 64 * 1024 * 1024


def _clone_parent(libc: ctypes.PyDLL, namespaces: int = 0) -> int:
    """``fork``, but the child is the child of this process's parent (the node), as with ``posix_spawn`` there:
    the node reaps it, sees its exit through a pidfd and its status through ``waitpid``; ``namespaces`` are
    ``CLONE_NEW*`` flags the child gets new namespaces of. Only in a process with a single thread (the zygote's)."""
    number = SYS_CLONE.get(os.uname().machine)
    if number is None:
        raise OSError(errno.ENOSYS, f"clone(CLONE_PARENT) is not wired for {os.uname().machine}")
    flags = CLONE_PARENT | namespaces | signal.SIGCHLD
    pid = libc.syscall(ctypes.c_long(number), ctypes.c_long(flags), ctypes.c_long(0), ctypes.c_long(0))
    if pid < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return pid


def _setns(libc: ctypes.PyDLL, fd: int) -> None:
    """Enter the mount namespace ``fd`` (its root and working directory become that namespace's root)."""
    if libc.setns(ctypes.c_int(fd), ctypes.c_int(CLONE_NEWNS)) != 0:
        raise OSError(ctypes.get_errno(), f"setns: {os.strerror(ctypes.get_errno())}")


def _own_proc(libc: ctypes.PyDLL) -> str | None:
    """In a keeper that is pid 1 of its PID namespace: its mounts private (nothing propagates back to the slot's
    namespace), then a ``/proc`` of its own namespace over the slot's (the job sees its own processes only)."""
    for source, target, kind, flags in (
        (None, b"/", None, MS_REC | MS_PRIVATE),
        (b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC),
    ):
        if libc.mount(source, target, kind, ctypes.c_ulong(flags), None) != 0:
            return f"keeper: mount {target.decode()}: {os.strerror(ctypes.get_errno())}\n"
    return None


def _mount_tmpfs(libc: ctypes.PyDLL, volumes: object, identity: tuple[int, int] | None) -> str | None:
    """In a keeper that has a mount namespace of its own (a slot's job), in its working directory (the job's
    sandbox): for each ``[path, size]`` of the request's ``tmpfs`` (relative to the sandbox, checked by the
    node) a new tmpfs of that size whose root is the job's (``identity``), gone with the namespace when the job
    ends. The directory is made if missing; a path that leads through a link or is not a directory is an error,
    as is a failed mount: the job does not start."""
    if not volumes:
        return None
    if not isinstance(volumes, list):
        return "keeper: tmpfs: expected a list of [path, size]\n"
    owner = "" if identity is None else f",uid={identity[0]},gid={identity[1]}"
    sandbox = os.path.realpath(os.getcwd())
    for entry in volumes:
        if (
            not isinstance(entry, list)
            or len(entry) != 2
            or not isinstance(entry[0], str)
            or entry[0].startswith("/")
            or ".." in entry[0].split("/")
            or not isinstance(entry[1], int)
            or isinstance(entry[1], bool)
            or entry[1] <= 0
        ):
            return f"keeper: tmpfs: expected [path in the sandbox, size], got {entry!r}\n"
        path = os.path.join(sandbox, entry[0])
        try:
            os.makedirs(path, mode=0o755, exist_ok=True)
        except OSError as error:
            return f"keeper: tmpfs {entry[0]}: {error.strerror or error}\n"
        if os.path.realpath(path) != path or not os.path.isdir(path):
            return f"keeper: tmpfs {entry[0]}: not a directory of the sandbox\n"
        data = f"size={entry[1]},mode=0700{owner}".encode()
        flags = ctypes.c_ulong(MS_NOSUID | MS_NODEV)
        if libc.mount(b"tmpfs", path.encode(), b"tmpfs", flags, data) != 0:
            return f"keeper: mount tmpfs {entry[0]}: {os.strerror(ctypes.get_errno())}\n"
    return None


def _read_exact(sock: socket.socket, size: int) -> bytes | None:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            return None
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def receive_message(sock: socket.socket) -> tuple[dict, list[int]] | None:
    """One request: a length, the descriptors riding with it, then that many bytes of JSON; None at EOF."""
    data, fds, _, _ = socket.recv_fds(sock, _HEADER.size, 8)
    if not data:
        for fd in fds:
            os.close(fd)
        return None
    rest = _read_exact(sock, _HEADER.size - len(data)) if len(data) < _HEADER.size else b""
    (size,) = _HEADER.unpack(data + (rest or b""))
    payload = _read_exact(sock, size) if rest is not None and size <= MAX_REQUEST else None
    if payload is None:
        for fd in fds:
            os.close(fd)
        return None
    return json.loads(payload), fds


def send_message(sock: socket.socket, message: dict, fds: tuple[int, ...] = ()) -> None:
    """One message the other way: its length and the descriptors riding with it, then its JSON."""
    payload = json.dumps(message).encode()
    header = _HEADER.pack(len(payload))
    if fds:
        sent = socket.send_fds(sock, [header], list(fds))
        if sent != len(header):
            sock.sendall(header[sent:])
    else:
        sock.sendall(header)
    sock.sendall(payload)


class _ZygoteContext:
    """What the zygote set up once and every keeper it forks starts from (a plain class: the zygote imports as
    little as it can)."""

    def __init__(
        self,
        sock: socket.socket,
        lifeline: int,
        libc: ctypes.PyDLL,
        catchable: set[signal.Signals],
        last_cap: int,
        devnull: int,
        home: int,
    ) -> None:
        self.sock = sock
        self.lifeline = lifeline
        self.libc = libc
        self.catchable = catchable
        self.last_cap = last_cap
        self.devnull = devnull
        self.home = home
        """The zygote's own mount namespace (a descriptor), to come back to from a slot's."""


def _serve(context: _ZygoteContext, message: dict, fds: list[int]) -> dict | None:
    """One request: fork a keeper for it (in the slot's namespaces when it names one); the answer for the node,
    ``{pid}`` or ``{error, errno}``, or None when the zygote must exit. The forked child never returns here."""
    settled = settling = -1
    in_slot = message.get("namespace") is True and bool(fds)  # the last descriptor: a slot's namespace
    passed, first = 0, 3
    try:
        passed = _passed(message, fds, in_slot)
        first = _pass_at(message)
        if in_slot:
            _setns(context.libc, fds[-1])
        os.chdir(message["cwd"])
        settled, settling = os.pipe()
        pid = _clone_parent(context.libc, JOB_NAMESPACES if in_slot else 0)
    except (OSError, KeyError, TypeError) as error:
        pid = -1
        reply = {"error": str(error), "errno": getattr(error, "errno", None) or errno.EINVAL}
    if pid == 0:
        os.close(settled)
        _keeper_child(
            context.sock,
            context.lifeline,
            context.devnull,
            fds,
            message,
            context.libc,
            context.catchable,
            settling,
            in_slot,
            passed,
            context.last_cap,
            first,
        )
    try:
        if in_slot:  # back to the node's own view before anything else: never serve from a slot's
            _setns(context.libc, context.home)
    except OSError:
        return None  # a zygote that cannot leave a slot's namespace must not fork any more keepers
    os.chdir("/")  # the zygote never stays in a sandbox (a sweep of processes in sandboxes kills them)
    if pid < 0:
        for fd in (*fds, settled, settling):
            if fd >= 0:
                os.close(fd)
    else:
        for fd in (*fds, settling):
            os.close(fd)
        # Answer once the keeper leads its own session (as ``Popen(start_new_session=True)`` returns after
        # ``setsid``): the node may signal the keeper's process group as soon as it has the pid.
        with contextlib.suppress(OSError):
            os.read(settled, 1)
        os.close(settled)
        reply = {"pid": pid}
    return reply


def zygote(argv: list[str]) -> int:
    """``keeper.py --zygote SOCKET_FD LIFELINE_FD``: one per node, started once; it forks a keeper per job.

    Requests come over ``SOCKET_FD`` (one end of a socket pair only the node holds): ``{argv, env, cwd}`` with
    the job's stdout and stderr as ``SCM_RIGHTS`` descriptors. The answer is ``{pid}`` of a keeper made with
    ``clone(CLONE_PARENT)`` -- the node's own child, so the node waits for it as for any child -- or ``{error,
    errno}``. The keeper child makes itself a subreaper and does exactly what a keeper started alone does
    (``_keep``), with the lifeline inherited from the zygote. The zygote holds no job: on EOF of the lifeline or
    the socket it just exits (each keeper watches the lifeline itself).
    """
    if len(argv) != 2 or not all(arg.isdigit() for arg in argv):
        sys.stderr.write("usage: keeper.py --zygote SOCKET_FD LIFELINE_FD\n")
        return KEEPER_EXIT_USAGE
    sock = socket.socket(fileno=int(argv[0]))
    lifeline = int(argv[1])
    os.set_inheritable(sock.fileno(), False)
    os.set_inheritable(lifeline, False)
    libc = ctypes.PyDLL(None, use_errno=True)  # the GIL stays held across clone: the child resumes holding it
    catchable = _quiet_signals()
    last_cap = last_capability()  # once: a keeper that drops every capability need not read it again
    devnull = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
    home = os.open("/proc/self/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)  # the zygote's own mount namespace
    os.chdir("/")
    context = _ZygoteContext(sock, lifeline, libc, catchable, last_cap, devnull, home)
    poller = select.poll()
    poller.register(lifeline, select.POLLIN)
    poller.register(sock.fileno(), select.POLLIN)
    while True:
        try:
            ready = {fd for fd, _ in poller.poll()}
        except InterruptedError:
            continue
        if lifeline in ready:
            return 0
        try:
            request = receive_message(sock)
        except (OSError, ValueError):
            return 0
        if request is None:
            return 0
        reply = _serve(context, *request)
        if reply is None:
            return 0
        try:
            send_message(sock, reply)
        except OSError:
            return 0


MAX_PASS_AT = 64
"""The highest first number a request may ask its passed descriptors to be placed at."""


def _pass_at(message: dict) -> int:
    """Where a request's passed descriptors start for the job (default 3: 3, 4, ...); ``OSError`` (EINVAL)."""
    first = message.get("pass_at", 3)
    if not isinstance(first, int) or isinstance(first, bool) or not 3 <= first <= MAX_PASS_AT:
        raise OSError(errno.EINVAL, f"expected a descriptor number from 3 to {MAX_PASS_AT}, got {first!r}")
    return first


def _passed(message: dict, fds: list[int], in_slot: bool) -> int:
    """How many of a request's descriptors go to the job as 3, 4, ... (they come after stdout, stderr and the
    optional stdin, before a slot's namespace); ``OSError`` (EINVAL) when the descriptors do not add up."""
    passed = message.get("pass", 0)
    if not isinstance(passed, int) or isinstance(passed, bool) or not 0 <= passed <= len(fds):
        raise OSError(errno.EINVAL, f"expected a count of passed descriptors, got {passed!r}")
    if len(fds) - in_slot - passed not in (2, 3):
        raise OSError(errno.EINVAL, f"expected stdout, stderr [and stdin] descriptors, got {len(fds)}")
    return passed


def _keeper_child(
    sock: socket.socket,
    lifeline: int,
    devnull: int,
    fds: list[int],
    message: dict,
    libc: ctypes.PyDLL,
    catchable: set[signal.Signals],
    settling: int,
    in_slot: bool,
    passed: int = 0,
    last_cap: int = 0,
    first: int = 3,
) -> None:
    """In the clone: become the job's keeper; never returns to the zygote's loop. ``settling`` is closed once
    the keeper leads its session and is a subreaper (the zygote answers the node then). ``in_slot``: the clone
    is pid 1 of new namespaces inside a slot's sandbox (``JOB_NAMESPACES``), and mounts its own ``/proc``.
    ``passed``: the last descriptors (before a slot's namespace) go to the job as ``first``, ``first`` + 1, ...
    (3, 4, ... by default; a job's statistics descriptor is 5)."""
    status = _exit_status(KEEPER_EXIT_USAGE)
    try:
        sock.close()
        os.setsid()
        streams = fds[: len(fds) - in_slot - passed]
        top = first + passed
        extra = [
            fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, top) for fd in fds[len(streams) : len(streams) + passed]
        ]
        os.dup2(streams[2] if len(streams) > 2 else devnull, 0)
        os.dup2(streams[0], 1)
        os.dup2(streams[1], 2)
        for fd in (devnull, *fds):
            os.close(fd)
        identity = _identity(message.get("identity"))
        failure = _own_proc(libc) if in_slot else None
        failure = failure or (_mount_tmpfs(libc, message.get("tmpfs"), identity) if in_slot else None)
        failure = failure or _make_subreaper(libc)
        failure = failure or (_drop_privileges(libc, last_cap) if identity is not None else None)
        os.close(settling)
        lifeline = _place(extra, lifeline, first)
        if failure:
            os.write(2, failure.encode())
        else:
            status = _keep(lifeline, list(message["argv"]), dict(message["env"]), catchable, identity)
        status = _end_like(status)  # returns the exit code, unless the signal ended this process
    except BaseException:  # whatever happens, never back into the zygote's loop
        with contextlib.suppress(BaseException):
            os.write(2, b"keeper: failed to start the job\n")
        os._exit(KEEPER_EXIT_USAGE)
    os._exit(status)


def _identity(value: object) -> tuple[int, int] | None:
    """A request's ``identity``: ``[uid, gid]`` the job runs as (not 0), or None."""
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(part, int) and not isinstance(part, bool) and part > 0 for part in value)
    ):
        raise ValueError(f"identity must be [uid, gid] of a user other than root, got {value!r}")
    return value[0], value[1]


def _place(extra: list[int], lifeline: int, first: int = 3) -> int:
    """In a keeper: the descriptors passed for the job (``extra``, close-on-exec copies above the target
    numbers) at ``first``, ``first`` + 1, ... and inherited by the job, the lifeline moved out of their way; the
    lifeline's number."""
    top = first + len(extra)
    if lifeline < top:
        lifeline = fcntl.fcntl(lifeline, fcntl.F_DUPFD_CLOEXEC, top)
    for number, fd in enumerate(extra, first):
        os.dup2(fd, number)  # inheritable, as ``Popen(pass_fds=...)`` leaves it
        os.close(fd)
    return lifeline


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
