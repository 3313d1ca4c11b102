"""Fuzz every endpoint of a live scheduler with seeded malformed requests; prints one JSON object.

Starts ``pooltree scheduler`` (SQLite in a temporary directory, 127.0.0.1), lists its commands from ``/api/v4``
and sends ``--requests`` requests over raw sockets (so header bytes no HTTP library would send get through:
control characters, non-Latin-1, broken YSON/JSON, deep nesting, 5,000-digit and 2^64 integers, weights of
1e308, wrong methods, bogus and mismatched ``Content-Encoding``, gzip bombs, oversized declared lengths). Every
command, ``/api``, ``/hosts``, ``/metrics``, ``/internal/node_heartbeat`` and unknown paths are hit.

Reported: requests tried, answers by status class, ``5xx``, tracebacks and ERROR lines in the scheduler's log, ``dropped`` (connection closed or reset without a
complete status line, or no answer within the timeout), ``internal_errors`` (answers whose YT error says
"Internal error": an unexpected exception reached the generic handler), the server's RSS growth, and whether the
state was consistent afterwards: every listed operation answers ``get_operation``, Cypress answers, and after a
restart on the same store the operations and pool trees are the same as before it.

Usage: .venv/bin/python bench/fuzz_api.py [--requests 5000] [--seed 1] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import platform
import random
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import zlib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # loopback.free_port
from loopback import free_port

READY = "listening on "
PARAMETER_NAMES = [
    "path", "attributes", "spec", "operation_id", "operation_alias", "job_id", "pool", "pool_tree", "type",
    "recursive", "force", "ignore_existing", "input_format", "output_format", "mutation_id", "retry", "limit",
    "max_size", "offset", "state", "user", "filter", "from_time", "to_time", "cursor_time", "include_archive",
    "return_only_value", "operation_type", "job_state", "sort_field", "value", "name", "permission",
    "transaction_id", "parameters", "tree", "weight", "abort_reason", "interrupt_timeout",
]  # fmt: skip
PATHS = [
    "//sys", "//sys/pool_trees", "//sys/pool_trees/default", "//sys/pool_trees/default/p", "//sys/scheduler",
    "//sys/scheduler/orchid/scheduler/pool_trees", "//sys/operations", "//tmp", "//tmp/x", "/", "", "//",
    "//sys/pool_trees/default/@weight", "//sys/pool_trees/@", "//sys/pool_trees/default/p/@max_operation_count",
    "#0-0-0-0", "//a\x01b", "//тест", "//sys/pool_trees/" + "x" * 300, "//sys/pool_trees/default/p/q/r/s",
]  # fmt: skip
ABSURD = [
    1e308, -1e308, 2**63, 2**64, -(2**63) - 1, 2**64 + 1, 10**30, -1, 0, 0.0, 1.5, True, None, "", "1e308",
    float("inf"), "∞", [], {}, "x" * 5000,
]  # fmt: skip


@dataclass
class FuzzRequest:
    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    body: bytes = b""
    declared_length: int | None = None
    """A Content-Length larger than the body sent: the server must refuse it (413) without waiting for it."""
    kind: str = ""
    keep_alive: bool = False
    """Ask for a persistent connection (uvicorn then reads and drops a body the answer did not need)."""


def _random_string(rng: random.Random) -> str:
    pick = rng.random()
    if pick < 0.5:
        return rng.choice(PATHS)
    if pick < 0.7:
        return "".join(chr(rng.randrange(0, 0x80)) for _ in range(rng.randrange(0, 12)))
    if pick < 0.85:
        return "".join(chr(rng.randrange(0x80, 0x3000)) for _ in range(rng.randrange(1, 8)))
    return rng.choice(["default", "root", "p", "json", "yson", "vanilla", "SIGINT", "fifo", "fair_share"])


def random_value(rng: random.Random, depth: int = 0) -> Any:
    pick = rng.random()
    if depth > 3 or pick < 0.35:
        return rng.choice([*ABSURD, _random_string(rng), rng.randrange(-5, 100), rng.random()])
    if pick < 0.7:
        keys = rng.sample(PARAMETER_NAMES, rng.randrange(0, 5))
        return {key: random_value(rng, depth + 1) for key in keys}
    return [random_value(rng, depth + 1) for _ in range(rng.randrange(0, 4))]


def random_spec(rng: random.Random) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "tasks": {"main": {"command": "true", "job_count": rng.choice([1, 0, -1, 2**63, 10**30, "x"])}}
    }
    for key in rng.sample(["pool", "weight", "resource_limits", "max_share_ratio", "pool_trees", "title"], 3):
        spec[key] = rng.choice([*ABSURD, "p", "default", {"user_slots": rng.choice(ABSURD)}])
    return spec


def _nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def _dump_json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")


def _parameters(rng: random.Random, command: str) -> bytes:
    pick = rng.random()
    if pick < 0.05:
        return _nested(rng.choice([200, 5000, 50000]))
    if pick < 0.1:
        return b'{"path": "//sys", "max_size": ' + b"9" * rng.choice([19, 25, 5000]) + b"}"
    if pick < 0.15:
        return bytes(rng.randrange(0, 256) for _ in range(rng.randrange(1, 64)))
    params: dict[str, Any] = {}
    if command in ("get", "list", "exists", "set", "create", "remove") or rng.random() < 0.3:
        params["path"] = rng.choice(PATHS)
    if command == "start_operation" or rng.random() < 0.1:
        params["spec"] = random_spec(rng)
        params["operation_type"] = rng.choice(["vanilla", "map", "", 7])
    if command == "create":
        params["type"] = rng.choice(["scheduler_pool", "scheduler_pool_tree", "map_node", "user", "x"])
        params["attributes"] = {
            "name": _random_string(rng),
            "pool_tree": "default",
            rng.choice(["weight", "max_operation_count", "max_running_operation_count"]): rng.choice(ABSURD),
        }
    for name in rng.sample(PARAMETER_NAMES, rng.randrange(0, 4)):
        params[name] = random_value(rng)
    return _dump_json(params)


def _body(rng: random.Random, command: str) -> bytes:
    pick = rng.random()
    if pick < 0.1:
        return _nested(rng.choice([200, 5000, 100000]))
    if pick < 0.2:
        return b"1" * rng.choice([19, 21, 4301, 6000])
    if pick < 0.3:
        return bytes(rng.randrange(0, 256) for _ in range(rng.randrange(0, 256)))
    if pick < 0.4:
        return rng.choice(
            [b"%inf", b"<a=1>#", b'{"a"=1}', b"[1;2;", b"1e308", b"-1e999", b"NaN", b"\x00\x01"]
        )
    if command == "node_heartbeat" or pick < 0.6:
        heartbeat = {
            "address": _random_string(rng),
            "resource_limits": {"user_slots": rng.choice(ABSURD), "cpu": rng.choice(ABSURD)},
            "resource_usage": random_value(rng),
            "running_jobs": [random_value(rng) for _ in range(rng.randrange(0, 3))],
            "finished_jobs": [random_value(rng) for _ in range(rng.randrange(0, 3))],
            "tags": random_value(rng),
        }
        return _dump_json(heartbeat)
    return _dump_json(random_value(rng))


def _encode(rng: random.Random, body: bytes) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    pick = rng.random()
    if pick < 0.6 or not body:
        return body, []
    if pick < 0.7:
        return zlib.compress(body), [(b"Content-Encoding", b"gzip")]
    if pick < 0.75:
        return gzip.compress(body), [(b"Content-Encoding", rng.choice([b"gzip", b"x-gzip"]))]
    if pick < 0.8:
        return body, [(b"Content-Encoding", rng.choice([b"gzip", b"deflate"]))]  # says compressed, is not
    if pick < 0.85:
        return body, [(b"Content-Encoding", rng.choice([b"br", b"z-lz4", b"\x01zz", "юникод".encode()]))]
    return zlib.compress(body)[: max(1, len(body) // 3)], [(b"Content-Encoding", b"gzip")]  # truncated


def _bomb(size: int) -> bytes:
    compressor = zlib.compressobj(9)
    chunk = b"\0" * (1 << 20)
    parts = [compressor.compress(chunk) for _ in range(size >> 20)]
    parts.append(compressor.flush())
    return b"".join(parts)


POOLS = ["a", "b", "a-b", "c_1", "weird.name"]
SOMETIMES_ABSURD = [1, 2, 0.5, 3, 1e308, 0, -1, 2**63, 2**31, "x", None]


def well_formed(rng: random.Random, token: str | None) -> FuzzRequest:
    """A request the official client could send (right method, JSON parameters), with values that are sometimes
    absurd: pools created, changed and removed, operations started, reads. Gives the state something to keep."""
    pool = rng.choice(POOLS)
    pick = rng.random()
    body = b""
    if pick < 0.25:
        command, method = "create", b"POST"
        attributes: dict[str, Any] = {"name": pool, "pool_tree": "default"}
        if rng.random() < 0.4:
            attributes["parent_name"] = rng.choice(POOLS)
        for key in rng.sample(["weight", "max_operation_count", "max_running_operation_count"], 2):
            attributes[key] = rng.choice(SOMETIMES_ABSURD)
        params: dict[str, Any] = {"type": "scheduler_pool", "attributes": attributes}
    elif pick < 0.5:
        command, method = "start_operation", b"POST"
        spec: dict[str, Any] = {
            "tasks": {"main": {"command": "true", "job_count": rng.choice([1, 2, 0, 2**63])}}
        }
        if rng.random() < 0.7:
            spec["pool"] = pool
        if rng.random() < 0.5:
            spec["weight"] = rng.choice(SOMETIMES_ABSURD)
        params = {"operation_type": "vanilla", "spec": spec}
    elif pick < 0.65:
        command, method = "set", b"PUT"
        attribute = rng.choice(["weight", "max_operation_count", "max_running_operation_count", "mode"])
        params = {"path": f"//sys/pool_trees/default/{pool}/@{attribute}"}
        body = _dump_json(rng.choice([*SOMETIMES_ABSURD, "fifo", "fair_share"]))
    elif pick < 0.7:
        command, method = "remove", b"POST"
        params = {"path": f"//sys/pool_trees/default/{pool}", "recursive": rng.random() < 0.5}
    else:
        command, method = rng.choice(["get", "list", "list_operations", "get_current_user"]), b"GET"
        params = {"path": rng.choice(["//sys/pool_trees/default", "//sys/scheduler/orchid/scheduler"])}
        if command == "list_operations":
            params = {"limit": rng.choice([1, 100, 0, 2**63])}
        elif command == "get_current_user":
            params = {}
    headers = [(b"X-YT-Header-Format", b"json"), (b"X-YT-Parameters", _dump_json(params))]
    if token:
        headers.append((b"Authorization", b"OAuth " + token.encode()))
    if body:
        headers.append((b"Content-Type", b"application/json"))
    return FuzzRequest(method, f"/api/v4/{command}".encode(), headers, body, kind=f"{command} (well-formed)")


def generate(
    rng: random.Random, commands: list[str], token: str | None, bomb: bytes, node_secret: str | None = None
) -> FuzzRequest:
    """One random request against a random endpoint (a quarter of them well formed)."""
    if rng.random() < 0.25:
        return well_formed(rng, token)
    pick = rng.random()
    if pick < 0.7:
        command = rng.choice(commands)
        target = f"/api/v4/{command}"
    elif pick < 0.85:
        command = "node_heartbeat"
        target = "/internal/node_heartbeat"
    else:
        command = ""
        target = rng.choice(
            ["/api", "/api/v4", "/api/v4/", "/hosts", "/metrics", "/x", "/api/v4/%00", "/api/v3/get"]
        )
        target += rng.choice(["", "?path=//sys", "?path=%01%7f", "?max_size=99999999999999999999", "?a=%ff"])
    method = rng.choice([b"GET", b"POST", b"PUT", b"PUT", b"POST", b"DELETE", b"HEAD", b"OPTIONS", b"PATCH"])
    request = FuzzRequest(method, target.encode(), kind=command or target)
    raw_target = False
    if rng.random() < 0.1:  # a path with control characters or non-ASCII in it
        suffix = rng.choice([b"%01", b"%0d%0a", "ж".encode(), b"%d0%b6", b"%e2%80%ae", b"%"])
        request.target += suffix
        raw_target = suffix == "ж".encode()
    headers = request.headers
    if command == "node_heartbeat" and node_secret and rng.random() < 0.9:
        headers.append((b"X-Pooltree-Node-Secret", node_secret.encode()))
    elif token and rng.random() < 0.9:
        headers.append((b"Authorization", b"OAuth " + token.encode()))
    elif rng.random() < 0.3:
        headers.append(
            (b"Authorization", rng.choice([b"OAuth", b"OAuth \x01", "OAuth ключ".encode(), b"Basic x"]))
        )
    if rng.random() < 0.6:
        header_format = rng.choice(
            [b"json", b"<format=text>yson", b"yson", b"<format=binary>yson", b"<x", b"\x7f"]
        )
        headers.append((b"X-YT-Header-Format", header_format))
        params = _parameters(rng, command)
        if header_format != b"json" and rng.random() < 0.8:
            params = params.replace(b'":', b'"=').replace(b",", b";")  # crude JSON -> YSON text
        headers.append((b"X-YT-Parameters", params.replace(b"\r", b"").replace(b"\n", b"")))
    if rng.random() < 0.2:
        headers.append((b"X-Started-By", _dump_json(random_value(rng))))
    if rng.random() < 0.1:
        headers.append((b"X-YT-Correlation-Id", bytes(rng.randrange(0x20, 0x100) for _ in range(20))))
    if raw_target:
        request.body = b"{}"
    elif method in (b"POST", b"PUT") or rng.random() < 0.1:
        if rng.random() < 0.03:
            request.body = bomb
            headers.append((b"Content-Encoding", b"gzip"))
            request.kind += " bomb"
        elif rng.random() < 0.03:
            request.body = b"{" * 1024
            # over the endpoint's limit (16 MiB for heartbeats, 64 MiB for commands): refused before it is read
            request.declared_length = rng.choice([65 << 20, 1 << 30])  # over every endpoint's limit
            request.kind += " oversized"
        else:
            body, encoding = _encode(rng, _body(rng, command))
            request.body = body
            headers.extend(encoding)
        headers.append(
            (
                b"Content-Type",
                rng.choice([b"application/json", b"application/x-yt-yson-text", b"text/plain", b""]),
            )
        )
    request.keep_alive = rng.random() < 0.5
    if raw_target or any(_CONTROL.search(value) for _, value in headers):
        # Not HTTP/1.1 (raw non-ASCII in the request line, control characters in a header value): uvicorn's
        # parser answers 400 and closes at once, so such a request gets no body (one still arriving when the
        # connection closes is reset by the kernel, answer included): that is the HTTP server's, not the API's.
        request.body = b""  # even a small body (or a long header) may still be arriving when uvicorn closes
        request.headers[:] = [(name, value[:512]) for name, value in headers]
        request.declared_length = None
        request.kind += " invalid-http"
    return request


_CONTROL = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")


@dataclass
class Answer:
    status: int | None
    dropped: bool
    internal_error: bool
    detail: str = ""


def _wire(request: FuzzRequest) -> bytes:
    length = request.declared_length if request.declared_length is not None else len(request.body)
    connection = b"Connection: keep-alive" if request.keep_alive else b"Connection: close"
    head = [request.method + b" " + request.target + b" HTTP/1.1", b"Host: 127.0.0.1", connection]
    head.append(b"Content-Length: " + str(length).encode())
    head.extend(name + b": " + value for name, value in request.headers)
    return b"\r\n".join(head) + b"\r\n\r\n" + request.body


async def _read_answer(reader: asyncio.StreamReader, keep_alive: bool, head_only: bool) -> bytes:
    """The whole answer: up to EOF, or (persistent connection) its head and Content-Length bytes of body (none
    for HEAD)."""
    if not keep_alive:
        return await reader.read(-1)
    head = await reader.readuntil(b"\r\n\r\n")
    if head_only:
        return head
    length = re.search(rb"(?im)^content-length:\s*(\d+)", head)
    body = await reader.readexactly(int(length.group(1))) if length else await reader.read(-1)
    return head + body


async def send(host: str, port: int, request: FuzzRequest, timeout: float = 30.0) -> Answer:
    """Send one request on a fresh connection and read the whole answer (or note that it was dropped)."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
    except (TimeoutError, OSError) as error:
        return Answer(None, True, False, f"connect: {error!r}")
    try:
        try:
            writer.write(_wire(request))
            await asyncio.wait_for(writer.drain(), timeout)
        except (TimeoutError, ConnectionError):
            pass  # the server may answer (413) and close before reading everything: read what it said
        try:
            data = await asyncio.wait_for(
                _read_answer(reader, request.keep_alive, request.method == b"HEAD"), timeout
            )
        except (TimeoutError, ConnectionError, asyncio.IncompleteReadError) as error:
            data = getattr(error, "partial", b"") or b""
            if not data:
                return Answer(None, True, False, f"read: {error!r}")
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError, asyncio.TimeoutError):
            await asyncio.wait_for(writer.wait_closed(), 5)
    match = re.match(rb"HTTP/1\.[01] (\d{3}) ", data)
    if match is None:
        return Answer(None, True, False, f"no status line: {data[:120]!r}")
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(match.group(1))
    internal = b"Internal error" in body or b"internal error" in head.lower()
    return Answer(status, False, internal, body[:4000].decode("utf-8", "replace"))


async def fuzz(
    host: str,
    port: int,
    commands: list[str],
    *,
    requests: int,
    seed: int,
    concurrency: int,
    token: str | None,
    node_secret: str | None = None,
) -> dict[str, Any]:
    """Send ``requests`` seeded random requests, ``concurrency`` at a time; the tallies."""
    rng = random.Random(seed)
    bomb = _bomb(1 << 30)
    generated = [generate(rng, commands, token, bomb, node_secret) for _ in range(requests)]
    statuses: Counter[str] = Counter()
    failures: list[dict[str, Any]] = []
    queue: asyncio.Queue[FuzzRequest] = asyncio.Queue()
    for request in generated:
        queue.put_nowait(request)

    async def worker() -> None:
        while not queue.empty():
            request = queue.get_nowait()
            answer = await send(host, port, request)
            statuses[f"{answer.status // 100}xx" if answer.status else "dropped"] += 1
            if answer.dropped or (answer.status or 0) >= 500 or answer.internal_error:
                failures.append(
                    {
                        "kind": request.kind,
                        "method": request.method.decode(),
                        "target": request.target.decode("utf-8", "replace"),
                        "status": answer.status,
                        "detail": answer.detail[:300],
                    }
                )

    began = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {
        "requests": requests,
        "seconds": round(time.monotonic() - began, 2),
        "by_status": dict(sorted(statuses.items())),
        "5xx": statuses["5xx"],
        "dropped": statuses["dropped"],
        "internal_errors": sum(1 for failure in failures if failure["status"] and failure["status"] < 500),
        "bombs": sum(1 for request in generated if request.kind.endswith(" bomb")),
        "oversized": sum(1 for request in generated if request.kind.endswith(" oversized")),
        "invalid_http": sum(1 for request in generated if request.kind.endswith(" invalid-http")),
        "failures": failures[:20],
    }


# ------------------------------------------------------------------------------------------------- the server


def rss_bytes(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of a process in bytes."""
    values = {}
    with open(f"/proc/{pid}/status") as handle:
        for line in handle:
            if line.startswith(("VmRSS:", "VmHWM:")):
                values[line.split(":")[0]] = int(line.split()[1]) * 1024
    return values["VmRSS"], values["VmHWM"]


def reset_peak(pid: int) -> bool:
    """Reset the process's VmHWM to its current RSS (``/proc/PID/clear_refs``: 5); False if not allowed."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as handle:
            handle.write("5")
    except OSError:
        return False
    return True


MEMORY_CAP = 4 << 30


def _cap_memory() -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def start_scheduler(
    data: Path, port: int, log: Path, token_file: Path, secret_file: Path
) -> tuple[subprocess.Popen[bytes], str]:
    """``pooltree scheduler`` authenticated as in production: the root token and the node secret from files."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pooltree.cli",
            "scheduler",
            "--data",
            str(data),
            "--port",
            str(port),
            "--create-default-tree",
            "--token-file",
            str(token_file),
            "--node-secret-file",
            str(secret_file),
        ],
        stdout=subprocess.PIPE,
        stderr=open(log, "ab"),  # noqa: SIM115
        stdin=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=_cap_memory,  # a request that makes the server balloon fails the run, not the machine
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = process.stdout.readline().decode()
        if not line:
            raise RuntimeError(f"scheduler exited ({process.wait(5)}); see {log}")
        if READY in line:
            return process, line.split(READY, 1)[1].strip()
    raise RuntimeError("scheduler did not start within 60 s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


def snapshot(url: str, token: str | None) -> dict[str, Any]:
    """What must survive a restart unchanged: the operations (id → state) and the pool trees' Cypress view."""
    import httpx

    headers = {"Authorization": f"OAuth {token}"} if token else {}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        listed = client.get("/api/v4/list_operations", params={"limit": 1000})
        listed.raise_for_status()
        operations = {op["id"]: op["state"] for op in listed.json()["operations"]}
        errors: dict[str, str] = {}
        for op_id in operations:
            got = client.get("/api/v4/get_operation", params={"operation_id": op_id})
            got.raise_for_status()
            error = (got.json().get("result") or {}).get("error") or got.json().get("error")
            if error:
                errors[op_id] = str(error.get("message", ""))
        trees = client.get("/api/v4/get", params={"path": "//sys/pool_trees"})
        trees.raise_for_status()
        client.get("/api/v4/get", params={"path": "//sys/scheduler/orchid/scheduler"}).raise_for_status()
    return {"operations": operations, "pool_trees": trees.json(), "errors": errors}


def _state(snap: dict[str, Any]) -> dict[str, Any]:
    return {"operations": snap["operations"], "pool_trees": snap["pool_trees"]}


def _differences(before: Any, after: Any, path: str = "") -> list[str]:
    """Where two snapshots differ (at most 10 places), for the report."""
    if isinstance(before, dict) and isinstance(after, dict):
        out: list[str] = []
        for key in sorted(set(before) | set(after), key=str):
            out += _differences(before.get(key, "<missing>"), after.get(key, "<missing>"), f"{path}/{key}")
        return out[:10]
    return [] if before == after else [f"{path}: {before!r} -> {after!r}"[:300]]


def discover_commands(url: str, token: str | None) -> list[str]:
    import httpx

    headers = {"Authorization": f"OAuth {token}"} if token else {}
    return [c["name"] for c in httpx.get(url + "/api/v4", headers=headers, timeout=30).json()]


def run(requests: int, seed: int, concurrency: int) -> dict[str, Any]:
    from pooltree.security.credentials import write_secret_file

    token = "ytct-fuzz-" + secrets.token_hex(16)
    node_secret = "ptns-fuzz-" + secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix="pooltree-fuzz-") as tmp:
        data, log = Path(tmp) / "data", Path(tmp) / "scheduler.log"
        token_file, secret_file = Path(tmp) / "token", Path(tmp) / "node-secret"
        write_secret_file(token_file, token)
        write_secret_file(secret_file, node_secret)
        port = free_port()
        process, url = start_scheduler(data, port, log, token_file, secret_file)
        try:
            commands = discover_commands(url, token)
            rss_before, _ = rss_bytes(process.pid)
            peak_reset = reset_peak(process.pid)
            result = asyncio.run(
                fuzz(
                    "127.0.0.1",
                    port,
                    commands,
                    requests=requests,
                    seed=seed,
                    concurrency=concurrency,
                    token=token,
                    node_secret=node_secret,
                )
            )
            rss_after, peak = rss_bytes(process.pid)
            alive = process.poll() is None
            before = snapshot(url, token)
        finally:
            stop(process)
        logged = log.read_text(errors="replace")  # the fuzzed run's log (a restart appends to it)
        process, url = start_scheduler(data, port, log, token_file, secret_file)
        try:
            after = snapshot(url, token)
        finally:
            stop(process)
    result.update(
        {
            "tracebacks_logged": logged.count("Traceback (most recent call last)"),
            "error_lines_logged": sum(
                1 for line in logged.splitlines() if " ERROR " in line or "ERROR:" in line
            ),
        }
    )
    result.update(
        {
            "commands": len(commands),
            "seed": seed,
            "concurrency": concurrency,
            "server_alive": alive,
            "rss_before_mib": round(rss_before / 2**20, 1),
            "rss_after_mib": round(rss_after / 2**20, 1),
            "rss_peak_growth_mib": round((peak - rss_before) / 2**20, 1) if peak_reset else None,
            "operations": len(before["operations"]),
            "consistent_after_restart": _state(before) == _state(after),
            "differences": _differences(_state(before), _state(after)),
            "revival_errors": {
                op: message
                for op, message in after["errors"].items()
                if before["operations"].get(op) != after["operations"].get(op)
            },
        }
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    args = parser.parse_args()
    result = run(args.requests, args.seed, args.concurrency)
    result["machine"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
