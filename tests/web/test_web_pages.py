"""The web UI without a browser (ASGI): authentication by login cookie or ``Authorization: OAuth``, the login
form, static assets served from the packages, the operation URL the ``yt`` client prints, htmx fragments."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from pooltree.server.service import SchedulerService
from pooltree.server.store import open_store
from pooltree.web.app import COOKIE, amount, percent
from pooltree.web.history import PoolHistory

TOKEN = "s3cret-token"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[SchedulerService]:
    service = SchedulerService(
        open_store(f"sqlite:///{tmp_path / 'db.sqlite'}"), token=TOKEN, create_default_tree=True
    )
    await service.start()
    try:
        yield service
    finally:
        await service.stop()
        service.store.close()


def client(service: SchedulerService, **kwargs: object) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=service.app), base_url="http://test", **kwargs)


@pytest.mark.anyio
async def test_pages_need_the_token_by_cookie_or_header(service: SchedulerService) -> None:
    async with client(service) as web:
        for path in ("/", "/operations", "/nodes", "/history", "/?page=operation&mode=detail&id=x"):
            response = await web.get(path)
            assert response.status_code == 401, path
            assert 'name="token"' in response.text
        bad = await web.post("/login", data={"token": "wrong", "next": "/nodes"})
        assert bad.status_code == 401 and "not valid" in bad.text
        assert COOKIE not in bad.cookies
        good = await web.post("/login", data={"token": TOKEN, "next": "/nodes"})
        assert good.status_code == 303 and good.headers["location"] == "/nodes"
        cookie = good.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("samesite", "SameSite")
        web.cookies.set(COOKIE, TOKEN)
        page = await web.get("/nodes")
        assert page.status_code == 200 and "<h1>Nodes</h1>" in page.text
    async with client(service, headers={"Authorization": f"OAuth {TOKEN}"}) as api_user:
        page = await api_user.get("/")
        assert page.status_code == 200 and "Scheduling" in page.text
    async with client(service) as web:
        evil = await web.post("/login", data={"token": TOKEN, "next": "//evil.example/"})
        assert evil.headers["location"] == "/"


@pytest.mark.anyio
async def test_assets_are_served_from_the_packages(service: SchedulerService) -> None:
    async with client(service) as web:
        htmx = await web.get("/static/htmx.min.js")
        assert htmx.status_code == 200 and "htmx" in htmx.text[:200]
        plotly = await web.get("/static/plotly.min.js")
        assert plotly.status_code == 200 and len(plotly.content) > 1_000_000
        escaped = await web.get("/static/..%2Fapp.py")
        assert escaped.status_code in (400, 404) and "import" not in escaped.text
        assert (await web.get("/static/nothing.js")).status_code == 404


@pytest.mark.anyio
async def test_operation_url_fragment_and_unknown_operation(service: SchedulerService) -> None:
    headers = {"Authorization": f"OAuth {TOKEN}"}
    async with client(service, headers=headers) as web:
        started = await web.post(
            "/api/v4/start_operation",
            json={
                "operation_type": "vanilla",
                "spec": {"title": "demo", "tasks": {"main": {"command": "true", "job_count": 2}}},
            },
        )
        operation_id = started.json()["operation_id"]
        page = await web.get(f"/?page=operation&mode=detail&id={operation_id}&tab=details")
        assert page.status_code == 200
        assert operation_id in page.text and 'hx-trigger="every' in page.text
        fragment = await web.get(
            f"/?page=operation&mode=detail&id={operation_id}&tab=details", headers={"HX-Request": "true"}
        )
        assert fragment.status_code == 200 and "<html" not in fragment.text and operation_id in fragment.text
        missing = await web.get("/?page=operation&mode=detail&id=0-0-0-0")
        assert missing.status_code in (400, 404) and "0-0-0-0" in missing.text


def test_numbers_are_rounded_for_people() -> None:
    assert percent(0.123456) == "12.3%"
    assert amount("memory", 4 * 1024**3) == "4.0Gi"
    assert amount("cpu", 1.5) == "1.5" and amount("cpu", 2.0) == "2" and amount("cpu", float("inf")) == "∞"


def test_history_is_bounded() -> None:
    history = PoolHistory(period=0.0, size=3)

    class FakeScheduler:
        def __init__(self) -> None:
            self.update_listeners: list = []
            self.event_log: list = []
            self.event_count = 0
            self.views = {
                "t": {"pools": {"<Root>": {"fair_share_ratio": 1.0, "usage_ratio": 0.5}}, "operations": {}}
            }

    fake = FakeScheduler()
    history.attach(fake)  # type: ignore[arg-type]
    for moment in range(10):
        history.on_update("t", float(moment))
    series = history.series("t", "<Root>")
    assert series["time"] == [7.0, 8.0, 9.0]
    assert series["usage"] == [0.5, 0.5, 0.5]
