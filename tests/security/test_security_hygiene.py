"""Request hygiene (issue #24 item 11, API side), over real HTTP on loopback: bad strings and a pool given as a map
get clear errors naming the field, a client hanging up mid-body logs no traceback, a half-sent body is answered
408 within the idle timeout, and password checks are rate-limited per user before any hash is computed."""

from __future__ import annotations

import hashlib
import json
import logging
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from pooltree.security.throttle import PASSWORD_CHECK_LIMITS, PasswordThrottle
from pooltree.server import app as app_module
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TOKEN = "ytct-0000-" + "f6" * 16


@pytest.fixture
def server(tmp_path: Path, serve: Callable[[object], str]) -> tuple[SchedulerService, str, dict[str, str]]:
    service = SchedulerService(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token=TOKEN)
    service.cypress.create("scheduler_pool_tree", "//sys/pool_trees/default")
    tokens = {"root": TOKEN}
    for name in ("alice", "bob"):
        service.security.directory.create_user(name)
        tokens[name] = service.security.directory.issue_token(name)
    return service, serve(service.app), tokens


def call(url: str, token: str, method: str, command: str, params: str) -> httpx.Response:
    headers = {"Authorization": f"OAuth {token}", "X-YT-Header-Format": "json", "X-YT-Parameters": params}
    return httpx.request(method, f"{url}/api/v4/{command}", headers=headers, timeout=30)


def test_bad_strings_and_a_pool_map_name_the_field(
    server: tuple[SchedulerService, str, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    _, url, tokens = server
    caplog.set_level(logging.ERROR)
    vanilla = {"tasks": {"main": {"command": "true", "job_count": 1}}}
    cases: list[tuple[str, str, str, str]] = [
        ("alice", "POST", "create", '{"type": "map_node", "path": "//tmp/\\ud800"}'),
        ("alice", "GET", "get", '{"path": "//tmp", "attributes": ["\\udfff"]}'),
        ("root", "POST", "start_operation", '{"operation_type": "vanilla", "spec": {"title": "\\ud83d"}}'),
        (
            "alice",
            "POST",
            "start_operation",
            json.dumps({"operation_type": "vanilla", "spec": {**vanilla, "pool": {"a": 1}}}),
        ),
        (
            "alice",
            "POST",
            "start_operation",
            json.dumps(
                {
                    "operation_type": "vanilla",
                    "spec": {**vanilla, "scheduling_options_per_pool_tree": {"default": {"pool": ["x"]}}},
                }
            ),
        ),
    ]
    fields = []
    for who, method, command, params in cases:
        answer = call(url, tokens[who], method, command, params)
        assert answer.status_code == 400, answer.text
        error = answer.json()
        assert "Internal error" not in error["message"], error["message"]
        fields.append(error["attributes"]["field"])
    assert fields == [
        "X-YT-Parameters.path",
        "X-YT-Parameters.attributes[0]",
        "X-YT-Parameters.spec.title",
        "spec.pool",
        "spec.scheduling_options_per_pool_tree.default.pool",
    ]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def _raw(url: str, request: bytes) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), timeout=30)
    sock.sendall(request)
    return sock


def test_a_client_hanging_up_mid_body_logs_no_traceback(
    server: tuple[SchedulerService, str, dict[str, str]], caplog: pytest.LogCaptureFixture
) -> None:
    _, url, tokens = server
    caplog.set_level(logging.INFO)
    for index in range(20):
        head = (
            f"PUT /api/v4/write_file HTTP/1.1\r\nHost: x\r\nAuthorization: OAuth {TOKEN}\r\n"
            f'X-YT-Header-Format: json\r\nX-YT-Parameters: {{"path": "//tmp/f{index}"}}\r\n'
            "Content-Length: 100000\r\n\r\n"
        ).encode()
        _raw(url, head + b"x" * 1000).close()
    deadline = time.monotonic() + 20  # the server notices the hang-ups when it reads on
    while time.monotonic() < deadline and not any("hung up" in r.getMessage() for r in caplog.records):
        time.sleep(0.05)
    assert any("hung up" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert call(url, tokens["alice"], "GET", "get", '{"path": "//tmp"}').status_code == 200


def test_a_half_sent_body_times_out(
    server: tuple[SchedulerService, str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url, _ = server
    monkeypatch.setattr(app_module, "BODY_IDLE_TIMEOUT", 0.5)
    monkeypatch.setattr(app_module, "DRAIN_TIMEOUT", 0.5)
    head = (
        f"PUT /api/v4/set HTTP/1.1\r\nHost: x\r\nAuthorization: OAuth {TOKEN}\r\n"
        'X-YT-Header-Format: json\r\nX-YT-Parameters: {"path": "//tmp/k"}\r\n'
        "Content-Type: application/json\r\nContent-Length: 50\r\n\r\n"
    ).encode()
    started = time.monotonic()
    sock = _raw(url, head + b'{"a": ')
    answer = b""
    while b"\r\n\r\n" not in answer:
        piece = sock.recv(65536)
        if not piece:
            break
        answer += piece
    sock.close()
    assert answer.startswith(b"HTTP/1.1 408"), answer[:200]
    assert b"did not arrive" in answer or b"408" in answer
    assert time.monotonic() - started < 15


def test_password_checks_are_rate_limited_per_user(
    server: tuple[SchedulerService, str, dict[str, str]],
) -> None:
    service, url, tokens = server
    assert service.security.password_throttle.description == PASSWORD_CHECK_LIMITS
    directory = service.security.directory
    for name in ("alice", "bob"):
        directory.set_password(name, hashlib.sha256(f"{name}-pw".encode()).hexdigest())
    hashed: list[str] = []
    check = directory.check_password

    def counting(user: str, password_sha256: Any) -> bool:
        hashed.append(user)
        return check(user, password_sha256)

    directory.check_password = counting  # type: ignore[method-assign]
    # the default (5/second;60/minute) made deterministic for a loaded machine: a per-minute window only
    service.security.password_throttle = PasswordThrottle("5/minute")
    wrong = hashlib.sha256(b"guess").hexdigest()
    codes = []
    for _ in range(12):
        answer = call(
            url,
            tokens["alice"],
            "POST",
            "issue_token",
            json.dumps({"user": "alice", "password_sha256": wrong}),
        )
        codes.append((answer.status_code, answer.json()["code"]))
    assert codes[:5] == [(400, 901)] * 5  # wrong password, checked
    assert set(codes[5:]) == {(429, 904)}  # refused before any hash
    assert hashed.count("alice") == 5
    limited = call(
        url, tokens["alice"], "POST", "issue_token", json.dumps({"user": "alice", "password_sha256": wrong})
    ).json()
    assert limited["attributes"]["user"] == "alice" and "retry in" in limited["message"]
    # another user is not slowed down by alice's flood
    right = hashlib.sha256(b"bob-pw").hexdigest()
    ok = call(
        url, tokens["bob"], "POST", "issue_token", json.dumps({"user": "bob", "password_sha256": right})
    )
    assert ok.status_code == 200, ok.text


def test_half_sent_headers_are_timed_out(
    server: tuple[SchedulerService, str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """uvicorn alone holds a connection whose headers never end; the scheduler's protocol closes it."""
    import threading

    import uvicorn

    from pooltree.server import http_protocol

    service, _, tokens = server
    monkeypatch.setattr(http_protocol, "HEADER_TIMEOUT", 0.5)
    port = _free_port()
    config = uvicorn.Config(
        service.app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        lifespan="off",
        http=http_protocol.BoundedHeadersProtocol,
    )
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not uv.started and time.monotonic() < deadline:
            time.sleep(0.02)
        url = f"http://127.0.0.1:{port}"
        # a whole request is served as before, also on a connection kept alive
        with httpx.Client(base_url=url, timeout=10) as http:
            for _ in range(3):
                answer = http.get(
                    "/api/v4/get_current_user", headers={"Authorization": f"OAuth {tokens['bob']}"}
                )
                assert answer.json() == {"user": "bob"}
        started = time.monotonic()
        for partial in (b"GET /api/v4/get_current_user HTTP/1.1\r\nHost: x\r\nAuthoriz", b""):
            sock = _raw(url, partial)
            assert sock.recv(65536) == b""  # closed by the server (a recv timeout would raise)
            sock.close()
        assert time.monotonic() - started < 10
    finally:
        uv.should_exit = True
        thread.join(timeout=20)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
