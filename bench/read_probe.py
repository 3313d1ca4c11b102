"""A reader of the orchid and the web pages beside a benchmark's load (``live_nodes.py --read-every``): one thread,
one keep-alive connection per kind, a read of each kind every ``every`` seconds (a read that answers late delays
the next; none overlap), each read's latency (request sent to whole answer) kept with its send time so a phase's
window selects its own.

Kinds: ``orchid`` (``GET /api/v4/get`` of ``//sys/scheduler/orchid/scheduler/...`` paths in turn: the default
tree's pools, its resource usage, the scheduler's alerts, the cluster) and ``page`` (the Scheduling page's and the
Nodes page's htmx fragments and the History page, in turn: what a browser open on them re-fetches every 3 s).
"""

from __future__ import annotations

import http.client
import threading
import time
import urllib.parse
from typing import Any

from live_common import quantile_ms

ORCHID_PATHS = (
    "pool_trees/default/pools",
    "pool_trees/default/resource_usage",
    "alerts",
    "cluster",
)
PAGES = ("/?page=scheduling&tree=default", "/nodes", "/history")
TIMEOUT = 60.0
KINDS = ("orchid", "page")


class ReadProbe:
    """Reads of each kind every ``every`` seconds against ``url`` (with ``token``) until ``close``."""

    def __init__(self, url: str, token: str, every: float, kinds: tuple[str, ...] = KINDS) -> None:
        parsed = urllib.parse.urlsplit(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80
        self.token = token
        self.every = every
        self.stopping = threading.Event()
        self.reads: dict[str, list[tuple[float, float, int]]] = {kind: [] for kind in kinds}
        """kind → (sent at, seconds to the whole answer, status) per read."""
        self.threads = [
            threading.Thread(target=self._loop, args=(kind,), daemon=True, name=f"read-{kind}")
            for kind in self.reads
        ]
        for thread in self.threads:
            thread.start()

    def _request(self, kind: str, index: int) -> tuple[str, dict[str, str]]:
        headers = {"Authorization": f"OAuth {self.token}"}
        if kind == "orchid":
            path = ORCHID_PATHS[index % len(ORCHID_PATHS)]
            query = urllib.parse.urlencode({"path": f"//sys/scheduler/orchid/scheduler/{path}"})
            return f"/api/v4/get?{query}", {**headers, "Accept": "application/json"}
        page = PAGES[index % len(PAGES)]
        return page, {**headers, "HX-Request": "true"} if page != "/history" else headers

    def _loop(self, kind: str) -> None:
        connection = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT)
        index = 0
        next_at = time.monotonic()
        while not self.stopping.is_set():
            target, headers = self._request(kind, index)
            index += 1
            sent = time.time()
            began = time.perf_counter()
            try:
                connection.request("GET", target, headers=headers)
                response = connection.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                connection.close()
                connection = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT)
                status = 0
            self.reads[kind].append((sent, time.perf_counter() - began, status))
            next_at = max(next_at + self.every, time.monotonic())
            self.stopping.wait(max(0.0, next_at - time.monotonic()))
        connection.close()

    def figures(self, begin: float, finish: float) -> dict[str, Any]:
        """Per kind, the reads sent in [begin, finish): count, failures, p50 / p99 / max latency (ms)."""
        out: dict[str, Any] = {}
        for kind, reads in self.reads.items():
            window = [(seconds, status) for sent, seconds, status in list(reads) if begin <= sent < finish]
            latencies = [seconds for seconds, _ in window]
            out[kind] = {
                "reads": len(window),
                "failed": sum(1 for _, status in window if status != 200),
                "p50_ms": quantile_ms(latencies, 0.5),
                "p99_ms": quantile_ms(latencies, 0.99),
                "max_ms": quantile_ms(latencies, 1.0),
            }
        return out

    def close(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(TIMEOUT + 5)
