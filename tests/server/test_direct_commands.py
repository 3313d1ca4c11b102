"""``/api/v4/<command>`` served straight by ``YtApi.command`` (``app.DirectCommands``), past Starlette's middleware
and route matching: the answers are the app's own, byte for byte (request ids and times aside), and the route the
app would pick for such a path is the command route, with its rule."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Match

from pooltree.security.policy import ROUTE_RULES
from pooltree.server.app import COMMAND_ROUTE, DirectCommands
from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store

TOKEN = "ytct-0000-" + "d1ec" * 8
AUTH = {"Authorization": f"OAuth {TOKEN}"}
STABLE_ATTEMPTS = 20
"""Reads of one command until two direct answers around the app's agree (the operation changes only a few times)."""
START = {"operation_type": "vanilla", "spec": {"tasks": {"main": {"command": "true", "job_count": 1}}}}


def _timeless(value: Any) -> Any:
    """``value`` without the times a read stamps (``build_time``, an error's ``datetime``)."""
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in ("build_time", "datetime")}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return value


def _comparable(response: httpx.Response) -> tuple[int, str | None, Any]:
    """Status, content type and body with what differs per request taken out (request id, times)."""
    body: Any = response.content
    if response.headers.get("content-type", "").startswith("application/json") and body:
        body = _timeless(json.loads(body))
    error = response.headers.get("x-yt-error")
    return (
        response.status_code,
        response.headers.get("content-type"),
        (body, None if error is None else _timeless(json.loads(error))),
    )


@pytest.mark.anyio
async def test_commands_answer_as_through_the_app(tmp_path: Path) -> None:
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), create_default_tree=True, token=TOKEN
    )
    await service.start()
    try:
        direct = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=service.asgi), base_url="http://test", headers=AUTH
        )
        through_app = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=service.app), base_url="http://test", headers=AUTH
        )
        started = await direct.post("/api/v4/start_operation", json=START)
        assert started.status_code == 200, started.text
        operation_id = started.json()["operation_id"]
        requests: list[tuple[str, str, dict[str, Any]]] = [
            ("GET", f"/api/v4/get_operation?operation_id={operation_id}", {}),
            ("GET", "/api/v4/get_operation?operation_id=0-0-0-0", {}),  # no such operation
            ("GET", "/api/v4/list_operations?limit=5", {}),
            ("GET", "/api/v4/get?path=//sys/pool_trees/default/@", {}),
            ("GET", "/api/v4/no_such_command", {}),
            ("GET", "/api/v4/start_operation", {}),  # a mutation sent with GET
            ("PUT", "/api/v4/set?path=//tmp/@x", {"json": 1, "headers": {"X-YT-Input-Format": "json"}}),
            ("GET", "/api/v4", {}),
            ("GET", "/api/v4/", {}),
        ]
        for method, url, options in requests:
            # The service's loop moves the new operation on (its state, its progress) at any moment: compare an
            # answer through the app with the direct ones made just before and after it, when those two agree.
            for _ in range(STABLE_ATTEMPTS):
                before = _comparable(await direct.request(method, url, **options))
                theirs = await through_app.request(method, url, **options)
                after = _comparable(await direct.request(method, url, **options))
                if before == after:
                    break
            assert before == after, (method, url, "the state never held still for three reads")
            assert after == _comparable(theirs), (method, url, after, theirs.text)
        anonymous = await direct.get("/api/v4/list_operations", headers={"Authorization": ""})
        assert anonymous.status_code == 401
        await direct.aclose()
        await through_app.aclose()
    finally:
        await service.stop()


def test_the_command_route_is_the_one_the_app_picks(tmp_path: Path) -> None:
    """Every route in front of ``COMMAND_ROUTE`` (the web pages', the internal ones) leaves a command's path to it,
    and no route without a rule matches it (``RouteGuard`` would refuse the request)."""
    service = SchedulerService(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token=TOKEN)
    assert COMMAND_ROUTE in ROUTE_RULES
    for method in ("GET", "POST", "PUT"):
        scope = {"type": "http", "method": method, "path": "/api/v4/get_operation", "root_path": ""}
        full = [route for route in service.app.router.routes if route.matches(scope)[0] == Match.FULL]
        assert getattr(full[0], "path", None) == COMMAND_ROUTE
        assert all(getattr(route, "path", None) in ROUTE_RULES for route in full)
    assert isinstance(service._direct.app, DirectCommands)


@pytest.mark.anyio
async def test_only_command_paths_go_direct(tmp_path: Path) -> None:
    """Paths that are not ``/api/v4/<name>`` (more segments, HEAD) reach the app as before."""
    service = SchedulerService(open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token=TOKEN)
    seen: list[str] = []
    direct = DirectCommands(service.app)
    inner = direct.app

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["path"])
        await inner(scope, receive, send)

    direct.app = app
    client = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=direct), base_url="http://test", headers=AUTH
    )
    assert (await client.get("/api/v4/get_operation")).status_code == 400  # no operation_id: the command's
    assert seen == []
    await client.get("/api/v4/get_operation/extra")
    await client.head("/api/v4/get_operation")
    await client.get("/api/v4")
    assert seen == ["/api/v4/get_operation/extra", "/api/v4/get_operation", "/api/v4"]
    await client.aclose()
