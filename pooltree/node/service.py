"""The exec-node heartbeat loop over HTTP: ``NodeAgent`` maps carried to the scheduler and back.

``run_node(scheduler_url, root_dir=...)`` builds a ``JobExecutor`` and a ``NodeAgent`` and runs ``NodeLoop``:
build heartbeat → ``POST /internal/node_heartbeat`` → apply the response → wait for the scheduler's
``heartbeat_period`` or for ``heartbeat_needed`` (set when a job finishes, so the freed slot is offered at once and
job start latency is not bound to the period). While the scheduler is unreachable or answers with an error, jobs
keep running and heartbeats are retried with bounded exponential backoff; the first heartbeat that gets through
carries every running job and every unacknowledged finished report, which is how the node re-registers after a
scheduler restart (revival). On stop the agent aborts its jobs (``node_shutdown``) and sends one last heartbeat
with their reports if the scheduler answers within a short deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import re
import socket
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from pooltree.errors import ConfigError, PooltreeError
from pooltree.node import wire
from pooltree.node.agent import NodeAgent, detect_resource_limits
from pooltree.node.executor import JobExecutor
from pooltree.node.files import BlobCache, http_blob_source, upload_stderr
from pooltree.node.gpu import GpuSlots, discover_gpus
from pooltree.node.topology import NodeTopology
from pooltree.resources import GPU, USER_SLOTS, resources_to_dict, zeros

log = logging.getLogger(__name__)

HEARTBEAT_PATH = "/internal/node_heartbeat"
NODE_SECRET_HEADER = "X-Pooltree-Node-Secret"
SHARD_GONE_STATUSES = frozenset({502, 503})
"""A node shard answering these has lost its scheduler: the heartbeat goes to the scheduler list instead."""
"""Must match ``pooltree.security.NODE_SECRET_HEADER`` (the node does not import the scheduler's packages)."""
BACKOFF_INITIAL = 0.05
BACKOFF_CAP = 2.0
REQUEST_TIMEOUT = 10.0
FINAL_HEARTBEAT_TIMEOUT = 3.0
MIN_PERIOD = 0.01
MAX_PERIOD = 60.0
_NUMBER_RE = re.compile(r"^\s*[0-9]+(?:\.[0-9]*)?\s*$|^\s*\.[0-9]+\s*$")
_TAG_RE = re.compile(r"^[A-Za-z0-9_.:/-]+$")


def parse_resources_option(text: str, path: str = "resources") -> dict[str, Any]:
    """``'cpu=4,memory=8Gi,user_slots=4'`` → ``{"cpu": 4.0, "memory": "8Gi", "user_slots": 4.0}``.

    Numbers become floats, other values (memory sizes like ``8Gi``) stay strings for ``parse_resources``, which
    names the bad field. Empty text means "detect everything".
    """
    if not isinstance(text, str):
        raise ConfigError(path, f"expected text like 'cpu=4,memory=8Gi', got {text!r}")
    result: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, sep, value = item.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or not value:
            raise ConfigError(path, f"expected name=value pairs separated by commas, got {item!r}")
        if name in result:
            raise ConfigError(f"{path}.{name}", "resource is given twice")
        result[name] = float(value) if _NUMBER_RE.match(value) else value
    return result


def parse_tags(tags: Iterable[str] | str, path: str = "tags") -> tuple[str, ...]:
    """Node tags from ``'a,b'`` or a list; each a non-empty word of letters, digits and ``_.:/-``."""
    items = tags.split(",") if isinstance(tags, str) else list(tags)
    out: list[str] = []
    for index, tag in enumerate(items):
        if not isinstance(tag, str):
            raise ConfigError(f"{path}[{index}]", f"expected a tag string, got {tag!r}")
        tag = tag.strip()
        if not tag:
            if isinstance(tags, str):
                continue
            raise ConfigError(f"{path}[{index}]", "a tag must not be empty")
        if not _TAG_RE.match(tag):
            raise ConfigError(f"{path}[{index}]", f"tag {tag!r} may only hold letters, digits and _.:/-")
        if tag not in out:
            out.append(tag)
    return tuple(out)


def backoff_delay(failures: int, *, initial: float = BACKOFF_INITIAL, cap: float = BACKOFF_CAP) -> float:
    """Delay before the retry after ``failures`` consecutive failed heartbeats: doubling, capped at ``cap``."""
    if failures <= 0:
        return 0.0
    return min(cap, initial * 2.0 ** min(failures - 1, 30))


@dataclass
class NodeLoopStats:
    """What the loop did, for logs and tests."""

    heartbeats: int = 0
    failures: int = 0
    consecutive_failures: int = 0
    registrations: int = 0
    """Times the scheduler answered after being unreachable (the first contact counts as one)."""
    started_jobs: int = 0
    throttled: int = 0
    """Answers that skipped scheduling because the scheduler was overloaded (``scheduling_skipped``)."""
    last_error: str | None = None
    errors: list[str] = field(default_factory=list)

    def record_error(self, message: str) -> None:
        self.failures += 1
        self.consecutive_failures += 1
        self.last_error = message
        self.errors.append(message)
        del self.errors[:-20]


@dataclass(frozen=True)
class HeartbeatClients:
    """A node's HTTP clients for its heartbeats: ``scheduler`` for the scheduler list's addresses (the API port),
    ``listener`` for the heartbeat listener or node shard the scheduler named (``heartbeat_url``). Each keeps an idle
    connection less long than its server does (``wire.NODE_API_KEEP_ALIVE``, ``wire.NODE_KEEP_ALIVE``), so the
    node closes an idle connection first and never sends a heartbeat on one the server is closing; and the
    listener's connection outlives the longest heartbeat period, so it carries every heartbeat."""

    scheduler: httpx.AsyncClient
    listener: httpx.AsyncClient


@contextlib.asynccontextmanager
async def heartbeat_clients(timeout: float) -> AsyncIterator[HeartbeatClients]:
    """`HeartbeatClients` with requests timed out after ``timeout`` seconds, closed on exit."""
    scheduler = httpx.AsyncClient(
        timeout=timeout, limits=httpx.Limits(keepalive_expiry=wire.NODE_API_KEEP_ALIVE)
    )
    listener = httpx.AsyncClient(timeout=timeout, limits=httpx.Limits(keepalive_expiry=wire.NODE_KEEP_ALIVE))
    async with scheduler, listener:
        yield HeartbeatClients(scheduler, listener)


class NodeLoop:
    """Carries one ``NodeAgent``'s heartbeats to a scheduler over its `HeartbeatClients`."""

    def __init__(
        self,
        agent: NodeAgent,
        scheduler_url: str,
        *,
        tags: Iterable[str] = (),
        node_secret: str | None = None,
        heartbeat_period: float = 1.0,
        backoff_cap: float = BACKOFF_CAP,
        topology: NodeTopology | None = None,
    ) -> None:
        check_period(heartbeat_period, "heartbeat_period")
        self.agent = agent
        self.scheduler_urls = parse_scheduler_urls(scheduler_url)
        """The schedulers to try in turn (a leader and its standbys): a failed heartbeat moves to the next."""
        self._current = 0
        self.topology = topology if topology is not None else NodeTopology()
        """Data center and InfiniBand cluster: sent as heartbeat fields and as YTsaurus's tags for them."""
        self.tags = parse_tags([*parse_tags(tags), *self.topology.tags()])
        self.node_secret = node_secret
        self.period = float(heartbeat_period)
        self.backoff_cap = backoff_cap
        self.stats = NodeLoopStats()
        self.connected = False
        self.draining = False
        """Set for the final heartbeat: zero resource limits, so the scheduler starts nothing more here."""
        self.throttled = False
        """The last answer skipped scheduling (the scheduler is overloaded): wait the whole period it gave."""
        self.shard_url: str | None = None
        """The node shard the scheduler named for this node's heartbeats (``wire.HEARTBEAT_URL``), if any."""

    @property
    def scheduler_url(self) -> str:
        return self.scheduler_urls[self._current]

    @property
    def headers(self) -> dict[str, str]:
        """The cluster node secret, in its own header: a node is not a user and sends no user token."""
        return {NODE_SECRET_HEADER: self.node_secret} if self.node_secret else {}

    def heartbeat_body(self) -> dict[str, Any]:
        body = self.agent.build_heartbeat()
        if self.tags:
            body[wire.TAGS] = list(self.tags)
        body.update(self.topology.heartbeat_fields())
        if self.draining:
            body[wire.RESOURCE_LIMITS] = resources_to_dict(zeros())
        return body

    async def heartbeat_once(self, clients: HeartbeatClients, timeout: float = REQUEST_TIMEOUT) -> bool:
        """One heartbeat round trip; True if the scheduler answered and its response was applied.

        A heartbeat goes to the node shard the scheduler named (``heartbeat_url``) when it named one; when the
        shard does not answer, the same heartbeat goes at once to the scheduler, which names the shard anew.
        ``clients``: the node's connections to each (`HeartbeatClients`)."""
        if self.agent.pending_stderr_uploads():
            await asyncio.to_thread(upload_stderr, self.agent, self.scheduler_url, self.headers)
        body = self.heartbeat_body()
        payload = wire.encode(body)
        headers = {**self.headers, "Content-Type": wire.MEDIA_TYPE}
        response = None
        if self.shard_url is not None:
            try:
                response = await clients.listener.post(
                    self.shard_url + HEARTBEAT_PATH, content=payload, headers=headers, timeout=timeout
                )
            except httpx.HTTPError as error:
                log.info("node shard %s unreachable (%s); back to the scheduler", self.shard_url, error)
            else:
                if response.status_code in SHARD_GONE_STATUSES:
                    log.info(
                        "node shard %s answered %d; back to the scheduler",
                        self.shard_url,
                        response.status_code,
                    )
                    response = None
            if response is None:
                self.shard_url = None
        if response is None:
            try:
                response = await clients.scheduler.post(
                    self.scheduler_url + HEARTBEAT_PATH, content=payload, headers=headers, timeout=timeout
                )
            except httpx.HTTPError as error:
                self._failed(f"scheduler {self.scheduler_url} unreachable: {type(error).__name__}: {error}")
                return False
        if response.status_code != 200:
            self._failed(f"heartbeat rejected with HTTP {response.status_code}: {_error_message(response)}")
            return False
        try:
            body = wire.decode(response.content)
        except ValueError as error:
            self._failed(f"heartbeat response is not JSON: {error}")
            return False
        try:
            body, control = wire.split_response(body)
        except ConfigError as error:
            self._failed(f"heartbeat response not applied: {error.message}")
            return False
        period = control.heartbeat_period
        if self.draining and body.get(wire.START):
            log.warning("the scheduler offered %d jobs to a node that is stopping", len(body[wire.START]))
            body[wire.START] = []
        try:
            summary = await self.agent.apply_response_map(body)
        except PooltreeError as error:
            self._failed(f"heartbeat response not applied: {error.message}")
            return False
        if period is not None:
            try:
                self.period = check_period(period, "heartbeat_period")
            except ConfigError as error:
                log.warning("ignoring the scheduler's %s", error.message)
        self.throttled = control.scheduling_skipped
        self._follow_shard(control.heartbeat_url)
        if self.throttled:
            self.stats.throttled += 1
        if not self.connected:
            self.stats.registrations += 1
            if self.stats.heartbeats:
                log.info("scheduler %s is back; node re-registered", self.scheduler_url)
        self.connected = True
        self.stats.heartbeats += 1
        self.stats.consecutive_failures = 0
        self.stats.started_jobs += len(summary["started"])
        return True

    def _follow_shard(self, url: str | None) -> None:
        """Send the next heartbeats to ``url`` (a node shard) if it is on the scheduler's own host: the node
        secret goes to no other host."""
        if url is None:
            return
        url = url.rstrip("/")
        if urlsplit(url).hostname != urlsplit(self.scheduler_url).hostname:
            log.warning("ignoring the scheduler's heartbeat_url %s: not on the scheduler's host", url)
            return
        self.shard_url = url

    def _failed(self, message: str) -> None:
        self.shard_url = None
        if self.connected or self.stats.consecutive_failures == 0:
            log.warning("%s (retrying with backoff)", message)
        self.connected = False
        self.stats.record_error(message)
        if len(self.scheduler_urls) > 1:
            self._current = (self._current + 1) % len(self.scheduler_urls)

    def retry_delay(self) -> float:
        """Backoff after a failure: none while other schedulers of the list are still untried in this round."""
        count = len(self.scheduler_urls)
        failures = self.stats.consecutive_failures
        if failures % count:
            return 0.0
        return backoff_delay(failures // count, cap=self.backoff_cap)

    async def run(self, stop: asyncio.Event) -> None:
        """Heartbeat until ``stop`` is set; never raises for scheduler failures (they are retried)."""
        async with heartbeat_clients(REQUEST_TIMEOUT) as clients:
            while not stop.is_set():
                ok = await self.heartbeat_once(clients)
                if stop.is_set():
                    break
                if ok:
                    # a throttled node backs off: no out-of-turn heartbeat until one is fully processed
                    needed = None if self.throttled else self.agent.heartbeat_needed
                    await _wait_any(stop, needed, self.period)
                else:
                    await _wait_any(stop, None, self.retry_delay())

    async def final_heartbeat(self, timeout: float = FINAL_HEARTBEAT_TIMEOUT) -> bool:
        """One last heartbeat (after the jobs were aborted) so the scheduler learns their fate at once; it reports
        zero resource limits, so the scheduler does not place the aborted jobs' replacements here."""
        self.draining = True
        async with heartbeat_clients(timeout) as clients:
            return await self.heartbeat_once(clients, timeout=timeout)


def parse_scheduler_urls(value: Any, path: str = "scheduler") -> list[str]:
    """``URL`` or ``URL1,URL2,...`` (a leader and its standbys): each an http:// or https:// URL."""
    if not isinstance(value, str):
        raise ConfigError(path, f"expected an http:// or https:// URL, got {value!r}")
    urls = [part.strip().rstrip("/") for part in value.split(",")]
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(path, f"expected an http:// or https:// URL, got {url!r}")
    return urls


def check_period(value: Any, path: str) -> float:
    """A heartbeat period in seconds within [0.01, 60]."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(path, f"expected seconds, got {value!r}")
    if not MIN_PERIOD <= value <= MAX_PERIOD:
        raise ConfigError(path, f"must be between {MIN_PERIOD} and {MAX_PERIOD} seconds, got {value!r}")
    return float(value)


def _error_message(response: httpx.Response) -> str:
    """The YT error message of a failed response, or the start of its body."""
    with contextlib.suppress(ValueError):
        body = response.json()
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            return body["message"]
    return response.text[:200]


async def _wait_any(stop: asyncio.Event, other: asyncio.Event | None, timeout: float) -> None:
    """Wait until ``stop`` or ``other`` is set, or ``timeout`` seconds pass."""
    if timeout <= 0:
        return
    waiters = [asyncio.ensure_future(stop.wait())]
    if other is not None:
        waiters.append(asyncio.ensure_future(other.wait()))
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


def gpu_limits(limits: Any, resources: Mapping[str, Any] | None, device_count: int) -> Any:
    """The node's ``gpu`` limit: its device count unless given; a given limit cannot exceed the devices found."""
    given = resources is not None and "gpu" in resources
    if not given:
        limits = limits.copy()
        limits[GPU] = float(device_count)
    elif device_count and limits[GPU] > device_count:
        raise ConfigError(
            "resources.gpu", f"{limits[GPU]:g} GPUs asked but the node has {device_count} devices"
        )
    return limits


def default_address() -> str:
    """The node's address when none is given: the host name."""
    return socket.gethostname() or "localhost"


async def run_node(
    scheduler_url: str,
    *,
    root_dir: str | Path,
    address: str | None = None,
    resources: Mapping[str, Any] | None = None,
    tags: Iterable[str] = (),
    node_secret: str | None = None,
    heartbeat_period: float = 1.0,
    stop: asyncio.Event | None = None,
    memory_meter: str = "auto",
    on_ready: Any = None,
    gpu_devices: str | Iterable[str] | None = None,
    topology: NodeTopology | None = None,
    isolation: str = "auto",
) -> NodeLoopStats:
    """Run one exec node until ``stop`` is set (or the task is cancelled); returns the loop's statistics.

    ``resources`` overrides detected limits (a map as in configs: ``{"cpu": 4, "memory": "8Gi"}``).
    ``on_ready(loop)`` is called with the ``NodeLoop`` before the first heartbeat. On exit every job is aborted
    (``node_shutdown``) and one last heartbeat reports them. ``gpu_devices`` is a configured GPU list
    (``node/gpu.py``; otherwise the node discovers its GPUs); ``topology`` its data center and InfiniBand cluster.
    ``isolation`` is the jobs' isolation mode (``node/isolation.py``: auto, sandbox, slot-uid, none).
    """
    gpus = GpuSlots(discover_gpus(gpu_devices))
    limits = gpu_limits(detect_resource_limits(resources), resources, gpus.count)
    node_loop: NodeLoop | None = None
    root_dir = Path(root_dir).absolute()
    executor = JobExecutor(Path(root_dir), memory_meter=memory_meter, gpus=gpus, isolation=isolation)
    stop = stop if stop is not None else asyncio.Event()
    try:
        agent = NodeAgent(address or default_address(), executor, limits)
        node_loop = NodeLoop(
            agent,
            scheduler_url,
            tags=tags,
            node_secret=node_secret,
            heartbeat_period=heartbeat_period,
            topology=topology,
        )
        loop = node_loop
        executor.file_source = BlobCache(
            Path(root_dir) / ".files", http_blob_source(lambda: loop.scheduler_url, lambda: loop.headers)
        ).get
        executor.prepare_slots(int(limits[USER_SLOTS]))  # the slots' sandboxes set up before the first job
        if on_ready is not None:
            on_ready(node_loop)
        await node_loop.run(stop)
    finally:
        await executor.shutdown()
        if node_loop is not None and node_loop.stats.heartbeats:
            with contextlib.suppress(Exception):
                await asyncio.shield(node_loop.final_heartbeat())
    return node_loop.stats
