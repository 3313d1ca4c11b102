"""``pooltree node``: one exec node heartbeating to a scheduler, running its jobs as local processes.

Before it starts, a node kills the job processes and removes the job directories an earlier node left under its
root (`kill_orphans`). Its own module so that a node process imports the node's code only (`pooltree.cli.app`'s
``COMMANDS``); ``pooltree local`` shares its ``--isolation`` and resources options.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import signal
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import typer

from pooltree.cli.app import app, fail
from pooltree.cli.processes import DEFAULT_DATA, install_stop_handlers, setup_logging
from pooltree.cli.secrets_options import node_secret
from pooltree.errors import ConfigError, PooltreeError
from pooltree.node.agent import detect_resource_limits
from pooltree.node.isolation import CHOICES, resolve_isolation, sandbox_location
from pooltree.node.service import parse_resources_option, parse_scheduler_urls, parse_tags, run_node
from pooltree.node.topology import NodeTopology

log = logging.getLogger("pooltree.cli.node")


ORPHAN_KILL_TIMEOUT = 5.0
"""Seconds to wait for killed leftover job processes to exit before the node goes on regardless."""


def _inside(path: str, root: str) -> bool:
    path = path.removesuffix(" (deleted)")
    return path == root or path.startswith(root + os.sep)


def _is_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except OSError:
        return True  # gone
    return stat[stat.rfind(b")") + 2 : stat.rfind(b")") + 3] in (b"Z", b"X")


def processes_in_sandboxes(root: Path) -> list[int]:
    """Live processes that run in a sandbox under ``root``: their cwd, ``HOME`` or ``PWD`` (a job's environment
    points both at its sandbox) lies under it. Read from /proc; processes we may not inspect are skipped."""
    root_text = str(root.resolve())
    own = {os.getpid(), os.getppid()}
    found: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return found
    for name in entries:
        if not name.isdigit() or int(name) in own:
            continue
        pid = int(name)
        try:
            if _inside(os.readlink(f"/proc/{pid}/cwd"), root_text):
                found.append(pid)
                continue
        except OSError:
            pass
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                environment = handle.read()
        except OSError:
            continue
        for variable in environment.split(b"\0"):
            if variable.startswith((b"HOME=", b"PWD=")):
                value = variable.split(b"=", 1)[1].decode("utf-8", "replace")
                if _inside(value, root_text):
                    found.append(pid)
                    break
    return [pid for pid in found if not _is_zombie(pid)]


def kill_orphans(root: Path, timeout: float = ORPHAN_KILL_TIMEOUT) -> tuple[list[int], int]:
    """Before a node starts on ``root``: SIGKILL the job processes an earlier node left running there or in its
    slot-uid-only sandbox directory (their whole process groups; jobs run in sessions of their own) and remove
    the leftover job directories.

    Returns (killed pids, removed directories). The wait for the processes to exit is bounded by ``timeout``.
    """
    roots = [path for path in (root, sandbox_location(root)) if path.is_dir()]
    if not roots:
        return [], 0
    killed = [pid for path in roots for pid in processes_in_sandboxes(path)]
    _kill_groups_first(killed, root)
    deadline = time.monotonic() + timeout
    waiting = list(killed)
    for _ in range(int(timeout / 0.02) + 1):
        waiting = [pid for pid in waiting if not _is_zombie(pid)]
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(0.02)
    if waiting:
        log.warning("leftover job processes still alive after %.1f s: %s", timeout, waiting)
    removed = 0
    for entry in (entry for path in roots for entry in path.iterdir()):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
            removed += 1
    return killed, removed


def _kill_groups_first(pids: list[int], root: Path) -> None:
    """SIGKILL ``pids``: first the whole group of each one leading its own (a job runs in a session of its own),
    then the others outside those groups. A job's member killed alone first would wake its shell, which could
    run on (a trap, its exit status) before its group's signal came; /proc lists by pid, and pids wrap."""
    own_group = os.getpgrp()
    groups: set[int] = set()
    members: list[int] = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            group = os.getpgid(pid)
            if group == pid and group != own_group:
                groups.add(group)
            else:
                members.append(pid)
    for group in sorted(groups):
        _kill(os.killpg, group, root)
    for pid in members:
        with contextlib.suppress(ProcessLookupError):
            if os.getpgid(pid) not in groups:  # else its group was killed whole above
                _kill(os.kill, pid, root)


def _kill(kill: Callable[[int, int], None], target: int, root: Path) -> None:
    """``kill(target, SIGKILL)`` (a group or a process); one gone already is fine, one we may not kill is logged."""
    try:
        kill(target, signal.SIGKILL)
    except ProcessLookupError:
        pass
    except PermissionError:
        log.warning("cannot kill leftover job process %d under %s: permission denied", target, root)


def parse_node_resources(text: str | None) -> dict[str, Any] | None:
    """``--resources`` text → the override map, validated now (so a typo fails before anything starts)."""
    if not text:
        return None
    overrides = parse_resources_option(text, "--resources")
    detect_resource_limits(overrides, "--resources")
    return overrides


ISOLATION_OPTION = typer.Option(
    "auto",
    "--isolation",
    help="How jobs are isolated: auto (the strongest this host allows), sandbox (bubblewrap: read-only /, private "
    "/tmp, PID namespace; per-slot uids as root), slot-uid (per-slot uids only, needs root) or none.",
)


def check_isolation_option(value: str) -> str:
    if value not in CHOICES:
        raise ConfigError("--isolation", f"expected one of {', '.join(CHOICES)}, got {value!r}")
    return value


@app.command("node")
def node_command(
    scheduler: str = typer.Option(
        ...,
        "--scheduler",
        help="Scheduler URL, e.g. http://127.0.0.1:8000, or several (a leader and its standbys) comma separated.",
    ),
    resources: str = typer.Option(
        None, "--resources", help="Resource limits, e.g. 'cpu=4,memory=8Gi,user_slots=4' (others detected)."
    ),
    tags: str = typer.Option("", "--tags", help="Node tags, comma separated (for node_tag_filter)."),
    root: Path = typer.Option(
        None, "--root", help="Directory for job sandboxes (default .pooltree/node-ADDRESS)."
    ),
    address: str = typer.Option(
        None, "--address", help="Node address reported to the scheduler (default: host)."
    ),
    node_secret_file: Path = typer.Option(
        None,
        "--node-secret-file",
        help="File (mode 0600) with the cluster node secret (the scheduler's DATA/node_secret); "
        "else $POOLTREE_NODE_SECRET.",
    ),
    memory_meter: str = typer.Option("auto", "--memory-meter", help="auto, cgroup or psutil."),
    gpu_devices: str = typer.Option(
        None,
        "--gpu-devices",
        help="GPU device files, e.g. '0=/dev/nvidia0,1=/dev/nvidia1' (default: nvidia-smi, else /dev/nvidiaN).",
    ),
    data_center: str = typer.Option(None, "--data-center", help="The node's data center (a module)."),
    infiniband_cluster: str = typer.Option(
        None, "--infiniband-cluster", help="The node's InfiniBand cluster (a module)."
    ),
    isolation: str = ISOLATION_OPTION,
) -> None:
    """Run one exec node: heartbeats to the scheduler, runs its jobs as local processes."""
    setup_logging()
    from pooltree.node.service import default_address

    try:
        overrides = parse_node_resources(resources)
        tag_list = parse_tags(tags, "--tags")
        parse_scheduler_urls(scheduler, "--scheduler")
        if memory_meter not in ("auto", "cgroup", "psutil"):
            raise ConfigError("--memory-meter", f"expected auto, cgroup or psutil, got {memory_meter!r}")
        resolve_isolation(check_isolation_option(isolation))  # a mode this host cannot give fails here
        secret, _, _ = node_secret(node_secret_file, None)
        placement = {
            "gpu_devices": gpu_devices,
            "topology": NodeTopology(data_center=data_center, infiniband_cluster=infiniband_cluster),
            "isolation": isolation,
        }
        node_address = address or default_address()
        root_dir = root if root is not None else DEFAULT_DATA / f"node-{node_address}"
        killed, removed = kill_orphans(root_dir)
        if killed or removed:
            log.warning(
                "node %s: killed %d job processes and removed %d job directories left under %s by an earlier node",
                node_address,
                len(killed),
                removed,
                root_dir,
            )
        asyncio.run(
            _run_node(scheduler, root_dir, node_address, overrides, tag_list, secret, memory_meter, placement)
        )
    except PooltreeError as error:
        fail(error.message)


async def _run_node(
    scheduler: str,
    root_dir: Path,
    address: str,
    resources: dict[str, Any] | None,
    tags: Sequence[str],
    secret: str,
    memory_meter: str,
    placement: dict[str, Any],
) -> None:
    stop = asyncio.Event()
    install_stop_handlers(stop)
    log.info("node %s heartbeating to %s (sandboxes under %s)", address, scheduler, root_dir)
    stats = await run_node(
        scheduler,
        root_dir=root_dir,
        address=address,
        resources=resources,
        tags=tags,
        node_secret=secret,
        stop=stop,
        memory_meter=memory_meter,
        **placement,
    )
    log.info("node %s stopped after %d heartbeats (%d failed)", address, stats.heartbeats, stats.failures)
