"""The scheduler's web UI: Scheduling, Operations (and one operation), History and Nodes pages.

``WebUI(service)`` adds its routes in front of the API catch-all. Pages are Jinja2 templates; each page's body is
a fragment the page re-fetches with htmx every few seconds (``hx-trigger="every 3s"``), so numbers move without a
reload. Every script is served from the installed packages: ``/static/htmx.min.js`` (vendored here with its
license) and ``/static/plotly.min.js`` (from Plotly's Python package). Charts are built with Plotly's Python API.

Authentication: with a token configured, a page needs ``Authorization: OAuth <token>`` (as every API call) or the
``pooltree_token`` cookie the login form at ``/login`` sets; otherwise it answers the login form (401). The
operation page lives at the URL the ``yt`` client prints: ``/?page=operation&mode=detail&id=<id>``.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import secrets
from collections.abc import Callable, Hashable, Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs

import plotly
from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Route

from pooltree.errors import PooltreeError
from pooltree.forecast.attribute import live_scheduling_forecast
from pooltree.gc_policy import POLICY
from pooltree.resources import RESOURCES, format_size
from pooltree.server.app import read_body
from pooltree.server.job_commands import job_attributes
from pooltree.server.live.model import LiveJob
from pooltree.server.live.snapshot import ReadSnapshot, TreeRead
from pooltree.server.operation_listing import live_brief
from pooltree.server.operation_maps import attribute_map
from pooltree.server.operation_times import iso_time
from pooltree.server.store import OperationFilter
from pooltree.web.charts import forecast_figure, history_figure
from pooltree.web.history import PoolHistory
from pooltree.web.kept import PageCache, Rendered, ago
from pooltree.web.summaries import gpu_plan_summary, segments_summary

if TYPE_CHECKING:
    from pooltree.server.service import SchedulerService

COOKIE = "pooltree_token"
REFRESH = "3s"
FORECAST_ROWS = 40
"""Waiting operations the Scheduling page shows with their forecast (the soonest)."""
MAX_LISTED_OPERATIONS = 200
STATIC = Path(str(resources.files("pooltree.web") / "static"))
PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


# ---------------------------------------------------------------------- formatting for people


def percent(value: Any) -> str:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "–"
    return f"{number * 100:.1f}%"


def amount(resource: str, value: Any) -> str:
    """A resource amount rounded for people (memory in binary units, cpu with at most 2 decimals)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return "–"
    if math.isinf(number):
        return "∞"
    if resource == "memory":
        return format_size(number)
    if number == int(number):
        return str(int(number))
    return f"{number:.2f}".rstrip("0").rstrip(".")


def attribute(value: Any) -> str:
    """An error or alert attribute for people: resource maps with units, lists joined, numbers rounded."""
    if isinstance(value, Mapping) and value and all(key in RESOURCES for key in value):
        return ", ".join(f"{key} {amount(key, v)}" for key, v in value.items() if v)
    if isinstance(value, list | tuple) and all(isinstance(item, str | int | float) for item in value):
        return ", ".join(str(item) for item in value)
    if isinstance(value, float):
        return f"{value:.4g}"
    return json.dumps(value, default=str) if isinstance(value, Mapping | list) else str(value)


def when(seconds: Any) -> str:
    if seconds is None:
        return "–"
    try:
        moment = dt.datetime.fromtimestamp(float(seconds), tz=dt.UTC)
    except (TypeError, ValueError, OverflowError):
        return str(seconds)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("pooltree.web", "templates"), autoescape=select_autoescape(["html"])
    )
    env.filters["percent"] = percent
    env.filters["amount"] = amount
    env.filters["amount_of"] = lambda value, resource: amount(resource, value)
    env.filters["when"] = when
    env.filters["attribute"] = attribute
    env.filters["tojson_pretty"] = pretty_json
    env.globals["RESOURCES"] = RESOURCES
    env.globals["REFRESH"] = REFRESH
    return env


# ---------------------------------------------------------------------- the UI


class WebUI:
    """Pages over one ``SchedulerService``."""

    def __init__(self, service: SchedulerService, *, history: PoolHistory | None = None) -> None:
        self.service = service
        self.scheduler = service.scheduler
        self.commands = service.commands
        self.env = _environment()
        self.history = history or PoolHistory()
        self.history.attach(self.scheduler)
        self.pages = PageCache()

    def routes(self) -> list[Route]:
        page = self._page
        return [
            Route("/", page(self.index), methods=["GET"]),
            Route("/ui/", page(self.index), methods=["GET"]),
            Route("/scheduling", page(self.scheduling), methods=["GET"]),
            Route("/operations", page(self.operations), methods=["GET"]),
            Route("/operation/{operation_id}", page(self.operation), methods=["GET"]),
            Route("/history", page(self.history_page), methods=["GET"]),
            Route("/nodes", page(self.nodes), methods=["GET"]),
            Route("/job_stderr", page(self.job_stderr), methods=["GET"]),
            Route("/login", self.login_form, methods=["GET"]),
            Route("/login", self.login, methods=["POST"]),
            Route("/logout", self.logout, methods=["POST", "GET"]),
            Route("/static/{name}", self.static, methods=["GET"]),
        ]

    # -- auth

    def _authenticated(self, request: Request) -> bool:
        if not self.service.security.authentication:
            request.state.user = "root"
            return True
        api = self.service.app.state.api
        header = request.headers.get("authorization")
        cookie = request.cookies.get(COOKIE)
        if not header and cookie:
            header = f"OAuth {cookie}"
        if not header:
            return False
        try:
            request.state.user = api.check_token(_HeaderOnly({"authorization": header}))
        except PooltreeError:
            return False
        return True

    def _page(self, handler: Callable[[Request], Any]) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            if not self._authenticated(request):
                html = self.env.get_template("login.html").render(
                    page="login", next=str(request.url.path) + ("?" + request.url.query if request.url.query else ""),
                    error=bool(request.cookies.get(COOKIE) or request.headers.get("authorization")),
                )  # fmt: skip
                return HTMLResponse(html, status_code=401)
            try:
                return await run_in_threadpool(handler, request)
            except PooltreeError as error:
                html = self.env.get_template("error.html").render(page="error", message=error.message)
                return HTMLResponse(html, status_code=404 if error.code == 1915 else 400)

        return endpoint

    async def login_form(self, request: Request) -> Response:
        html = self.env.get_template("login.html").render(
            page="login", next=request.query_params.get("next", "/"), error=False
        )
        return HTMLResponse(html)

    async def login(self, request: Request) -> Response:
        try:
            body = await read_body(request, 64 * 1024, "Login form")  # bounded in size and time
        except PooltreeError as error:
            return PlainTextResponse(error.message, status_code=getattr(error, "http_status", 400))
        form = parse_qs(body.decode("utf-8", "replace"))  # urlencoded, as the form posts it
        token = (form.get("token") or [""])[0].strip()
        target = (form.get("next") or ["/"])[0] or "/"
        if not target.startswith("/") or target.startswith("//"):
            target = "/"
        probe = _HeaderOnly({"authorization": f"OAuth {token}"})
        try:
            if self.service.security.authentication:
                self.service.app.state.api.check_token(probe)
        except PooltreeError:
            html = self.env.get_template("login.html").render(page="login", next=target, error=True)
            return HTMLResponse(html, status_code=401)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, token, httponly=True, samesite="strict", path="/")
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(COOKIE, path="/")
        return response

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        if name == "plotly.min.js":
            return FileResponse(PLOTLY_JS, media_type="text/javascript")
        allowed = {p.name for p in STATIC.iterdir() if p.is_file()}
        if name not in allowed:
            return PlainTextResponse("not found", status_code=404)
        media = (
            "text/javascript"
            if name.endswith(".js")
            else "text/css"
            if name.endswith(".css")
            else "text/plain"
        )
        return FileResponse(STATIC / name, media_type=media)

    # -- rendering

    def _render(self, request: Request, template: str, fragment: str, **context: Any) -> Response:
        """The whole page, or only its refreshing fragment when htmx asks (``HX-Request``)."""
        return HTMLResponse(self._render_text(request, template, fragment, **context))

    def _render_text(self, request: Request, template: str, fragment: str, **context: Any) -> str:
        context.setdefault("now", self.service.clock())
        name = fragment if request.headers.get("hx-request") else template
        return self._render_html(name, request=request, body_template=fragment, **context)

    def _render_html(self, name: str, **context: Any) -> str:
        """Template ``name`` rendered (every page goes through here)."""
        return self.env.get_template(name).render(**context)

    def _kept(
        self, request: Request, snapshot: ReadSnapshot, extra: Hashable, render: Callable[[], Rendered]
    ) -> Response:
        """The page ``render`` makes from ``snapshot``, rendered once per snapshot and what else its text reads:
        the path and query (the refreshing fragment's URL, the page's parameters), whole page or fragment, the
        user, and ``extra`` (what the page reads besides the snapshot). What shows the request's clock ("x s ago")
        is left out of the kept text and filled in per request (``Rendered.text``)."""
        key = (
            request.url.path,
            request.url.query,
            bool(request.headers.get("hx-request")),
            getattr(request.state, "user", None),
            extra,
        )
        return HTMLResponse(self.pages.get(snapshot, key, render).text(self.service.clock()))

    def index(self, request: Request) -> Response:
        params = request.query_params
        if params.get("page") == "operation" and params.get("id"):
            return self._operation(request, params["id"])
        if params.get("page") in ("operations", "history", "nodes"):
            return {"operations": self.operations, "history": self.history_page, "nodes": self.nodes}[
                params["page"]
            ](request)
        return self.scheduling(request)

    # -- Scheduling

    def _tree_name(self, request: Request, snapshot: ReadSnapshot) -> str | None:
        trees = sorted(snapshot.trees)
        wanted = request.query_params.get("tree")
        if wanted in trees:
            return wanted
        default = self.service._default_tree()
        return default if default in trees else (trees[0] if trees else None)

    def scheduling(self, request: Request) -> Response:
        self.scheduler.snapshots.watch_pages()  # its operations' alerts and pending reasons
        snapshot = self.scheduler.snapshots.current
        latest, error = self._forecast()  # read per request: a page view keeps the forecasts' refreshes going
        made = None if latest is None else (id(latest), latest.now)
        return self._kept(
            request,
            snapshot,
            ("scheduling", made, error),
            lambda: self._scheduling_page(request, snapshot, latest, error),
        )

    def _scheduling_page(self, request: Request, snapshot: ReadSnapshot, latest: Any, error: Any) -> Rendered:
        tree = self._tree_name(request, snapshot)
        read = snapshot.derived(("scheduling", tree), lambda: _scheduling(snapshot, tree))
        forecast_rows, forecast_chart, forecast_info = _tree_forecast(
            [row["id"] for row in read["rows"] if row["kind"] == "operation"], latest, error
        )
        text = self._render_text(
            request,
            "scheduling.html",
            "scheduling_body.html",
            page="scheduling",
            **read,
            forecast_rows=forecast_rows,
            forecast_chart=forecast_chart,
            forecast_info=forecast_info,
        )
        return Rendered((text,))

    def _forecast(self, operation_id: str | None = None) -> Any:
        """The latest forecast (a page view keeps refreshes going, and asks for one at once when the forecast is
        older than the operation ``operation_id`` it shows, as a ``get_operation`` does)."""
        forecasts = self.service.forecasts
        op = None if operation_id is None else self.scheduler.operations.get(operation_id)
        return forecasts.read(op), forecasts.last_error

    # -- Operations

    def operations(self, request: Request) -> Response:
        params = request.query_params
        state = params.get("state") or None
        pool = params.get("pool") or None
        user = params.get("user") or None
        records = self.scheduler.store.list_operations(
            OperationFilter(user=user, state=state, limit=MAX_LISTED_OPERATIONS)
        )
        items: list[dict[str, Any]] = []
        self.scheduler.snapshots.watch_pages()  # its live operations' maps
        snapshot = self.scheduler.snapshots.current
        visible = self.service.security.operation_visible
        for record in records:
            if not visible(
                request.state.user, record.id, record.user, record.spec, record.runtime_parameters
            ):
                continue  # the user may not read it (its ACL), as list_operations
            try:
                attributes = self._attributes(snapshot, record.id)
            except PooltreeError:
                continue
            pools = {
                options.get("pool")
                for options in attributes["runtime_parameters"]
                .get("scheduling_options_per_pool_tree", {})
                .values()
            }
            if pool is not None and pool != attributes.get("pool") and pool not in pools:
                continue
            items.append(self._operation_row(snapshot, attributes))
        return self._render(
            request,
            "operations.html",
            "operations_body.html",
            page="operations",
            operations=items,
            filters={"state": state or "", "pool": pool or "", "user": user or ""},
            states=["running", "pending", "completed", "failed", "aborted"],
        )

    def _attributes(self, snapshot: ReadSnapshot, operation_id: str) -> dict[str, Any]:
        """An operation's attribute map as the pages read it: a live one's from ``snapshot`` (its brief, error,
        alerts and the latest forecast), when the snapshot holds the pages' reads and the operation is still in
        the state they show; else ``get_operation``'s (a finished one's from the store). An operation that finished
        after the last publication is gone from the live map or in another state: the page then shows what the API
        answers, never the snapshot's older state."""
        read = snapshot.operation(operation_id)
        live = self.scheduler.operations.get(operation_id)
        if read is None or live is None or live.state != read.state:
            return self.commands.operation_attributes(operation_id)
        attributes = attribute_map(
            live_brief(read, read.jobs, snapshot.now), {}, read.error, [], read.alerts, [], {}
        )
        forecasts = self.service.forecasts
        attributes["scheduling_forecast"] = live_scheduling_forecast(
            forecasts.latest,
            read.id,
            read.trees,
            [read.explanations.get(tree) for tree in read.trees],
            error=forecasts.last_error,
            time_format=iso_time,
        )
        return attributes

    def _operation_row(self, snapshot: ReadSnapshot, attributes: Mapping[str, Any]) -> dict[str, Any]:
        shares: dict[str, Any] = {}
        for tree, read in snapshot.trees.items():
            op_view = read.view["operations"].get(attributes["id"])
            if op_view is not None:
                shares[tree] = {
                    "fair_share_ratio": op_view.get("fair_share_ratio", 0.0),
                    "usage_ratio": op_view.get("usage_ratio", 0.0),
                    "demand_ratio": op_view.get("demand_ratio", 0.0),
                    "starvation_status": op_view.get("starvation_status", "non_starving"),
                }
        return {
            "id": attributes["id"],
            "state": attributes["state"],
            "user": attributes["authenticated_user"],
            "pool": attributes.get("pool"),
            "title": attributes["brief_spec"].get("title"),
            "start_time": attributes["start_time"],
            "jobs": attributes["brief_progress"]["jobs"],
            "alerts": attributes.get("alerts", {}),
            "shares": shares,
        }

    def operation(self, request: Request) -> Response:
        return self._operation(request, request.path_params["operation_id"])

    def _operation(self, request: Request, operation_id: str) -> Response:
        self.service.security.require_operation(
            request.state.user, "read", operation_id
        )  # its ACL, as the API
        self.scheduler.snapshots.watch_pages()  # its map and pending reasons
        snapshot = self.scheduler.snapshots.current
        attributes = self._attributes(snapshot, operation_id)
        jobs = [job_attributes(job) for job in self._jobs(operation_id)]
        explanations, shares, preempting = snapshot.derived(
            ("operation", operation_id), lambda: _operation_reads(snapshot, operation_id)
        )
        preempted = [j for j in jobs if j.get("interruption_info")]
        spec = {k: ("<hidden>" if k == "secure_vault" else v) for k, v in attributes["spec"].items()}
        latest, _ = self._forecast(operation_id)
        found = None if latest is None else latest.operations.get(operation_id)
        forecast_chart = ""
        if latest is not None and found is not None:
            forecast_chart = forecast_figure([_forecast_row(operation_id, found, latest)], latest.now)
        return self._render(
            request,
            "operation.html",
            "operation_body.html",
            page="operations",
            op=attributes,
            jobs=jobs,
            explanations=explanations,
            shares=shares,
            preempted=preempted,
            preempting=preempting,
            error=(attributes.get("result") or {}).get("error"),
            spec=spec,
            forecast=attributes.get("scheduling_forecast"),
            forecast_chart=forecast_chart,
        )

    def _jobs(self, operation_id: str) -> list[LiveJob]:
        """The operation's jobs as last stored (started ones are stored before their nodes start them, finished
        ones before their nodes are told), oldest first: read from the store, not the scheduler's memory."""
        return [LiveJob.from_record(record) for record in self.scheduler.store.list_jobs(operation_id)]

    def job_stderr(self, request: Request) -> Response:
        operation_id = request.query_params.get("operation_id", "")
        job_id = request.query_params.get("job_id", "")
        self.service.security.require_operation(request.state.user, "read", operation_id)
        for job in self.commands.jobs.jobs(operation_id):
            if job.id == job_id:
                return PlainTextResponse(job.stderr)
        return PlainTextResponse(f"no job {job_id} in operation {operation_id}", status_code=404)

    # -- History

    def history_page(self, request: Request) -> Response:
        snapshot = self.scheduler.snapshots.current
        return self._kept(
            request, snapshot, ("history", self.history.version), lambda: self._history(request, snapshot)
        )

    def _history(self, request: Request, snapshot: ReadSnapshot) -> Rendered:
        tree, trees = self._tree_name(request, snapshot), sorted(snapshot.trees)
        pools = self.history.pools(tree) if tree else []
        pool = request.query_params.get("pool")
        if pool not in pools:
            pool = "<Root>" if "<Root>" in pools else (pools[0] if pools else None)
        chart = ""
        series: dict[str, Any] = {}
        if tree is not None and pool is not None:
            series = self.history.series(tree, pool)
            chart = history_figure(series, f"{tree} / {pool}")
        return Rendered(
            (
                self._render_text(
                    request,
                    "history.html",
                    "history_body.html",
                    page="history",
                    tree=tree,
                    trees=trees,
                    pool=pool,
                    pools=pools,
                    chart=chart,
                    samples=len(series.get("time", [])),
                    preemptions=series.get("preemptions", []),
                    period=self.history.period,
                    size=self.history.size,
                ),
            )
        )

    # -- Nodes

    def nodes(self, request: Request) -> Response:
        snapshot = self.scheduler.snapshots.current
        return self._kept(request, snapshot, "nodes", lambda: self._nodes(request, snapshot))

    def _nodes(self, request: Request, snapshot: ReadSnapshot) -> Rendered:
        """The Nodes page with each node's "x s ago" left as a mark the request's clock fills in."""
        mark = f"\x00{secrets.token_hex(8)}\x00"
        rows = _node_rows(snapshot, mark)
        text = self._render_text(request, "nodes.html", "nodes_body.html", page="nodes", nodes=rows)
        parts = tuple(text.split(mark))
        if len(parts) != len(rows) + 1:  # the template shows the age other than once a row: rendered whole
            now = self.service.clock()
            for row in rows:
                row["last_seen_ago"] = ago(row["last_seen"], now)
            return Rendered(
                (self._render_text(request, "nodes.html", "nodes_body.html", page="nodes", nodes=rows),),
                keep=False,
            )
        return Rendered(parts, tuple(row["last_seen"] for row in rows))


class _HeaderOnly:
    """What ``YtApi.check_token`` reads of a request: its headers."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        self.headers = headers


def _tree_forecast(
    operation_ids: list[str], latest: Any, error: Any
) -> tuple[list[dict[str, Any]], str, dict[str, Any]]:
    """The waiting operations among ``operation_ids`` with their forecast ``latest``, soonest first (at most
    ``FORECAST_ROWS``), the chart of their ranges, and when the forecast was made."""
    info: dict[str, Any] = {"error": error, "now": None if latest is None else latest.now}
    if latest is None:
        return [], "", info
    rows = []
    for operation_id in operation_ids:
        found = latest.operations.get(operation_id)
        if found is None or found.started:
            continue
        rows.append(_forecast_row(operation_id, found, latest))
    rows.sort(key=lambda row: (row["start"]["p50"] is None, row["start"]["p50"] or 0.0, row["label"]))
    rows = rows[:FORECAST_ROWS]
    return rows, forecast_figure(rows, latest.now) if rows else "", info


def _forecast_row(operation_id: str, found: Any, latest: Any) -> dict[str, Any]:
    """One operation's ranges for the forecast chart and table (absolute seconds)."""
    return {
        "label": operation_id,
        "start": found.start,
        "finish": found.finish,
        "horizon": latest.now + latest.horizon,
        "preempts": found.preempts,
    }


def _unique(alerts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    result = []
    for item in alerts:
        key = json.dumps(item, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            result.append(item)
    return result


def _scheduling(snapshot: ReadSnapshot, tree: str | None) -> dict[str, Any]:
    """What the Scheduling page shows of ``tree`` in ``snapshot``."""
    rows: list[dict[str, Any]] = []
    tree_alerts: list[dict[str, Any]] = []
    summary: dict[str, Any] = {}
    segments: dict[str, Any] | None = None
    gpu_plan: dict[str, Any] | None = None
    read = snapshot.trees.get(tree) if tree is not None else None
    if read is not None:
        view = read.view
        rows = _pool_rows(snapshot, tree, read)
        segments = segments_summary(view.get("scheduling_segments"))
        gpu_plan = gpu_plan_summary(view.get("gpu_assignment_plan"))
        tree_alerts = read.alerts
        summary = {
            "resource_limits": view["resource_limits"],
            "resource_usage": view["resource_usage"],
            "pool_count": view["pool_count"],
            "operation_count": len(view["operations"]),
        }
    scheduler_alerts = [
        a for a in snapshot.scheduler_alerts if a["attributes"].get("pool_tree") in (None, tree)
    ]
    operation_alerts = [
        (row["id"], kind) for row in rows if row["kind"] == "operation" for kind in row["alerts"]
    ]
    return {
        "tree": tree,
        "trees": sorted(snapshot.trees),
        "rows": rows,
        "alerts": _unique(tree_alerts + scheduler_alerts),
        "operation_alerts": operation_alerts,
        "summary": summary,
        "segments": segments,
        "gpu_plan": gpu_plan,
    }


def _operation_reads(
    snapshot: ReadSnapshot, operation_id: str
) -> tuple[dict[str, Any], dict[str, Any], list[dict[str, Any]]]:
    """The operation page's reads of ``snapshot``: why its allocations wait per tree, its shares per tree, and the
    preemptions it caused."""
    explanations: dict[str, Any] = {}
    op = snapshot.operation(operation_id)
    if op is not None:
        explanations = {tree: reason for tree, reason in op.explanations.items() if reason is not None}
    shares = {
        tree: read.view["operations"][operation_id]
        for tree, read in snapshot.trees.items()
        if operation_id in read.view["operations"]
    }
    preempting = [
        e
        for e in snapshot.event_log
        if e.get("event") == "allocation_preempted" and e.get("preemptor_operation_id") == operation_id
    ]
    return explanations, shares, preempting


def _node_rows(snapshot: ReadSnapshot, last_seen_ago: str) -> list[dict[str, Any]]:
    """The Nodes page's rows, by address (``last_seen_ago``: what each shows as its age, filled in later)."""
    return [
        {
            "address": node.address,
            "limits": {r: float(node.resource_limits[i]) for i, r in enumerate(RESOURCES)},
            "usage": {
                r: float(node.usage[i]) if node.usage is not None else 0.0 for i, r in enumerate(RESOURCES)
            },
            "tags": sorted(node.tags),
            "trees": list(node.trees),
            "last_seen": node.last_seen,
            "last_seen_ago": last_seen_ago,
            "running_jobs": node.running_jobs,
            "alerts": list(node.alerts),
        }
        for node in sorted(snapshot.nodes, key=lambda node: node.address)
    ]


def pretty_json(value: Any) -> str:
    """``value`` as indented JSON (a page's spec). ``indent`` takes the standard library's Python encoder, whose
    closures form a reference cycle per call: made while the collector's policy does not freeze
    (``GcPolicy.unfrozen``), so that it is collected after."""
    with POLICY.unfrozen():
        return json.dumps(value, indent=2, sort_keys=True, default=str)


def _pool_rows(snapshot: ReadSnapshot, tree: str, read: TreeRead) -> list[dict[str, Any]]:
    """Pools depth-first (as YTsaurus's Scheduling page lists them), each with its pools and then its operations
    below it. Walked with a stack, not a recursive closure: a nested function that calls itself holds its own cell,
    a reference cycle that outlives the call with everything the closure reads (the view's maps and the rows) until
    a collection finds it, and the collector's policy may freeze it first (``pooltree/gc_policy.py``)."""
    pools = read.view["pools"]
    operations = read.view["operations"]
    children: dict[str | None, list[str]] = {}
    for name, pool in pools.items():
        children.setdefault(pool.get("parent"), []).append(name)
    op_children: dict[str, list[str]] = {}
    for op_id, op in operations.items():
        op_children.setdefault(op.get("parent") or op.get("pool"), []).append(op_id)
    rows: list[dict[str, Any]] = []
    # (pool, depth, its parent, whether its pools were visited: then its operations are listed)
    stack: list[tuple[str, int, str | None, bool]] = [
        (root, 0, None, False)
        for root in sorted((name for name, pool in pools.items() if pool.get("parent") is None), reverse=True)
    ]
    while stack:
        name, depth, parent, visited = stack.pop()
        if visited:
            rows.extend(_operation_rows(snapshot, tree, operations, name, depth, op_children.get(name, [])))
            continue
        pool = pools[name]
        settings = read.pools.get(name)
        rows.append(
            {
                "kind": "pool",
                "id": name,
                "parent": parent,
                "depth": depth,
                "has_children": bool(children.get(name) or op_children.get(name)),
                "view": pool,
                "integral_type": settings.integral_type if settings is not None else "none",
                "limits": settings.resource_limits if settings is not None else {},
                "running": pool.get("running_operation_count", 0),
                "max_running": pool.get("max_running_operation_count"),
                "total": pool.get("operation_count", 0),
                "max_total": pool.get("max_operation_count"),
                "pending": pool.get("pending_operation_count", 0),
            }
        )
        stack.append((name, depth, parent, True))
        stack.extend(
            (child, depth + 1, name, False) for child in sorted(children.get(name, []), reverse=True)
        )
    return rows


def _operation_rows(
    snapshot: ReadSnapshot,
    tree: str,
    operations: dict[str, Any],
    pool: str,
    depth: int,
    operation_ids: list[str],
) -> list[dict[str, Any]]:
    """The Scheduling page's rows of ``pool``'s operations (the pool at ``depth``), by id."""
    rows: list[dict[str, Any]] = []
    for op_id in sorted(operation_ids):
        op = operations[op_id]
        live = snapshot.operation(op_id)
        rows.append(
            {
                "kind": "operation",
                "id": op_id,
                "parent": pool,
                "depth": depth + 1,
                "has_children": False,
                "view": op,
                "user": op.get("user"),
                "limits": live.limits.get(tree, {}) if live is not None else {},
                "alerts": list(live.alert_types) if live is not None else [],
                "state": live.state if live is not None else "",
                "explanation": live.explanations.get(tree) if live is not None else None,
            }
        )
    return rows
