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

TOKEN = "s3cret-token-0123456789"


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
                "spec": {
                    "title": "demo",
                    "secure_vault": {"PASSWORD": "hunter2-secret"},
                    "tasks": {"main": {"command": "true", "job_count": 2}},
                },
            },
        )
        operation_id = started.json()["operation_id"]
        page = await web.get(f"/?page=operation&mode=detail&id={operation_id}&tab=details")
        assert page.status_code == 200
        assert operation_id in page.text and 'hx-trigger="every' in page.text
        assert "hunter2-secret" not in page.text  # the API drops secure_vault from the spec (as YTsaurus)
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

    class FakeCapture:  # a tree's captured view: the history reads its pools
        def pools_view(self) -> dict:
            return {"<Root>": {"fair_share_ratio": 1.0, "usage_ratio": 0.5}}

    class FakeViews(dict):
        def capture(self, tree: str) -> FakeCapture:
            return self[tree]

    class FakeScheduler:
        def __init__(self) -> None:
            self.update_listeners: list = []
            self.event_log: list = []
            self.event_count = 0
            self.views = FakeViews(t=FakeCapture())

    fake = FakeScheduler()
    history.attach(fake)  # type: ignore[arg-type]
    for moment in range(10):
        history.on_update("t", float(moment))
    series = history.series("t", "<Root>")
    assert series["time"] == [7.0, 8.0, 9.0]
    assert series["usage"] == [0.5, 0.5, 0.5]


def _heartbeat(service: SchedulerService, address: str, now: float, **extra: object) -> dict:
    from pooltree.server.heartbeats import parse_heartbeat

    data = {
        "node_address": address,
        "resource_limits": {"user_slots": 4, "cpu": 4, "memory": 8 << 30},
        **extra,
    }
    return service.scheduler.process_heartbeat(parse_heartbeat(data), now)


@pytest.fixture
async def open_service(tmp_path: Path) -> AsyncIterator[SchedulerService]:
    service = SchedulerService(open_store(f"sqlite:///{tmp_path / 'open.sqlite'}"), authentication=False)
    try:
        yield service
    finally:
        service.store.close()


@pytest.mark.anyio
async def test_trees_switch_and_show_their_alerts(open_service: SchedulerService) -> None:
    from pooltree.config import parse_pool_trees

    trees = {
        "cpu": {"config": {"node_tag_filter": "!gpu"}, "pools": {"batch": {"weight": 2}}},
        "gpu": {"config": {"node_tag_filter": "gpu"}, "pools": {"training": {}}},
    }
    scheduler = open_service.scheduler
    scheduler.apply_pool_trees(parse_pool_trees(trees), "cpu", 1.0)
    _heartbeat(open_service, "n1", 1.0)
    for tree in ("cpu", "gpu"):
        scheduler.update_fair_share(tree, 1.5)
    async with client(open_service) as web:
        cpu = (await web.get("/?page=scheduling&tree=cpu")).text
        assert (
            'id="tree-name">cpu<' in cpu and 'id="pool-batch"' in cpu and "pool_tree_without_nodes" not in cpu
        )
        gpu = (await web.get("/?page=scheduling&tree=gpu")).text
        assert 'id="tree-name">gpu<' in gpu and 'id="pool-training"' in gpu
        assert 'data-alert-type="pool_tree_without_nodes"' in gpu
        assert '<option value="gpu" selected>' in gpu


@pytest.mark.anyio
async def test_operation_page_names_the_preemptor(open_service: SchedulerService) -> None:
    from pooltree.config import parse_pool_trees

    trees = {
        "default": {
            "config": {"fair_share_starvation_timeout": 1000, "fair_share_starvation_tolerance": 1.0},
            "pools": {"a": {}, "b": {}},
        }
    }
    scheduler = open_service.scheduler
    scheduler.apply_pool_trees(parse_pool_trees(trees), "default", 0.0)
    _heartbeat(open_service, "n1", 0.5)
    task = {"main": {"command": "sleep 100", "job_count": 4, "cpu_limit": 1}}
    hog = scheduler.start_operation("vanilla", {"tasks": task, "pool": "a"}, "alice", 1.0)
    started = _heartbeat(open_service, "n1", 1.1)["start"]
    running = [{"job_id": s["job_id"], "operation_id": hog.id, "state": "running"} for s in started]
    late = scheduler.start_operation("vanilla", {"tasks": task, "pool": "b"}, "bob", 2.0)
    preempted = False
    for step in range(3, 12):
        scheduler.update_fair_share("default", float(step))
        answer = _heartbeat(open_service, "n1", step + 0.5, running_jobs=running)
        if answer["abort"] or answer["preempt"]:
            preempted = True
            break
    assert preempted
    scheduler.update_fair_share("default", 12.0)  # the pages read what the next update publishes
    async with client(open_service) as web:
        page = (await web.get(f"/?page=operation&mode=detail&id={hog.id}")).text
        table = page.split('id="preemptions"')[1].split("</table>")[0]
        assert f"id={late.id}" in table
        preemptor = (await web.get(f"/?page=operation&mode=detail&id={late.id}")).text
        assert "took from " + hog.id in preemptor
        scheduler.update_fair_share("default", 20.0)
        history = (await web.get("/history?tree=default&pool=a")).text
        marks = history.split('id="history-preemptions"')[1].split("</table>")[0]
        assert hog.id in marks and late.id in marks
        assert '"name":"preemption"' in history.replace(" ", "")


@pytest.mark.anyio
async def test_operation_page_never_shows_an_older_state_than_the_api(open_service: SchedulerService) -> None:
    """The page reads a live operation from the last published snapshot; one that failed after it shows failed,
    with its error, as ``get_operation`` answers (the browser test once saw 'running' after the API said failed)."""
    from pooltree.config import parse_pool_trees

    scheduler = open_service.scheduler
    scheduler.apply_pool_trees(parse_pool_trees({"default": {"pools": {"a": {}}}}), "default", 0.0)
    _heartbeat(open_service, "n1", 0.5)
    task = {"main": {"command": "sleep 100", "job_count": 1, "cpu_limit": 1}}
    op = scheduler.start_operation("vanilla", {"tasks": task}, "alice", 1.0)
    _heartbeat(open_service, "n1", 1.1)
    async with client(open_service) as web:
        await web.get(f"/?page=operation&mode=detail&id={op.id}")  # the page is watched: snapshots capture it
        scheduler.snapshots.publish()
        assert scheduler.snapshots.current.operation(op.id) is not None
        running = (await web.get(f"/?page=operation&mode=detail&id={op.id}")).text
        assert 'id="operation-state">running<' in running
        error = {"code": 4410, "message": "No online node can satisfy the resource demand", "attributes": {}}
        scheduler.finish_operation(op.id, "failed", 2.0, error=error)
        assert scheduler.snapshots.current.operation(op.id) is not None  # not published since
        failed = (await web.get(f"/?page=operation&mode=detail&id={op.id}")).text
        assert 'id="operation-state">failed<' in failed
        assert "No online node can satisfy the resource demand" in failed
        listing = (await web.get("/operations")).text
        assert "running" not in listing.split(op.id, 1)[1].split("</tr>", 1)[0]


@pytest.mark.anyio
async def test_scheduling_rows_are_depth_first_and_leave_no_reference_cycle(
    open_service: SchedulerService,
) -> None:
    """The Scheduling page lists pools depth-first, each pool's pools before its operations. Making the rows
    leaves no reference cycle behind: the old recursive closure held its own cell, a cycle that kept the view's
    maps and the rows until a collection found it (or forever, once the collector's policy froze it)."""
    import gc

    from pooltree.config import parse_pool_trees
    from pooltree.web.app import _scheduling

    trees = {"default": {"pools": {"a": {"pools": {"b": {}, "c": {}}}, "d": {}}}}
    scheduler = open_service.scheduler
    scheduler.apply_pool_trees(parse_pool_trees(trees), "default", 0.0)
    _heartbeat(open_service, "n1", 0.5)
    task = {"main": {"command": "sleep 100", "job_count": 1, "cpu_limit": 1}}
    ops = {
        pool: scheduler.start_operation("vanilla", {"tasks": task, "pool": pool}, "alice", 1.0).id
        for pool in ("a", "b", "d")
    }
    scheduler.update_fair_share("default", 2.0)
    scheduler.snapshots.publish()
    snapshot = scheduler.snapshots.current
    _scheduling(snapshot, "default")  # first-use objects made (the view assembled)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        rows = _scheduling(snapshot, "default")["rows"]
        del rows[:]  # the rows' own objects are not what is counted
        found = gc.collect()
        kinds = sorted({type(garbage).__qualname__ for garbage in gc.garbage})
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()
    assert found == 0, kinds
    listed = [(row["kind"], row["id"], row["depth"]) for row in _scheduling(snapshot, "default")["rows"]]
    assert listed == [
        ("pool", "<Root>", 0),
        ("pool", "a", 1),
        ("pool", "b", 2),
        ("operation", ops["b"], 3),
        ("pool", "c", 2),
        ("operation", ops["a"], 2),
        ("pool", "d", 1),
        ("operation", ops["d"], 2),
    ]


def test_charts_and_pretty_json_leave_nothing_frozen_in_cycles() -> None:
    """Plotly's figure objects and the Python JSON encoder's closures form reference cycles. The History and
    forecast charts and a page's pretty-printed spec are made while the collector's policy does not freeze
    (``GcPolicy.unfrozen``): with every collection freezing its survivors and collections every few dozen
    allocations, none of them is frozen alive, so a vent afterwards finds no garbage (before: the charts' objects)."""
    import gc

    from pooltree.gc_policy import POLICY
    from pooltree.web.app import pretty_json
    from pooltree.web.charts import forecast_figure, history_figure

    series = {
        "time": [1_000.0 + step for step in range(20)],
        "fair_share": [0.5] * 20,
        "usage": [0.25 + step / 100 for step in range(20)],
        "demand": [0.75] * 20,
        "starving": [step % 7 == 0 for step in range(20)],
        "preemptions": [{"time": 1_005.0, "operation_id": "a", "preemptor_operation_id": "b", "reason": "r"}],
    }
    ranges = [
        {
            "label": "op",
            "start": {"p10": 1_000.0, "p50": 1_010.0, "p90": 1_020.0},
            "finish": {},
            "horizon": 2_000.0,
        }
    ]
    history_figure(series, "first use")  # Plotly's validators and templates made once
    forecast_figure(ranges, 1_000.0)
    collections = [0]

    def count(phase: str, info: dict[str, object]) -> None:
        collections[0] += phase == "start"

    POLICY.acquire(at_collection=False, young=True)
    gc.callbacks.append(count)
    try:
        POLICY.settle()
        gc.set_threshold(50, 1, 1)
        for _ in range(3):
            assert "history-chart" in history_figure(series, "pool")
            assert "forecast-chart" in forecast_figure(ranges, 1_000.0)
            spec = {
                "tasks": {f"task{index}": {"job_count": index, "env": [{"x": None}]} for index in range(100)}
            }
            assert pretty_json(spec).startswith("{\n")
        ran = collections[0]
        vent = POLICY.vent()
    finally:
        gc.callbacks.remove(count)
        POLICY.release(at_collection=False, young=True)
    assert ran > 30  # collections ran inside the renders
    assert vent.found == 0, vent.kinds
