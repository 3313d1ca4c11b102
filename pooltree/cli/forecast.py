"""``pooltree forecast``: when an operation of a live scheduler will start and finish, or what a start would do.

``pooltree forecast OPERATION_ID`` prints the operation's ``scheduling_forecast`` (``get_operation``);
``pooltree forecast --spec SPEC.yaml`` sends ``start_operation`` with ``dry_run=%true`` (nothing is started) and
prints where the operation would run and its forecast. The scheduler is ``--proxy`` (or ``YT_PROXY``), the token
``--token`` (or ``YT_TOKEN``), as for the ``yt`` client.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import typer
from rich.console import Console
from rich.table import Table

from pooltree.cli.app import app, fail
from pooltree.config import load_document
from pooltree.errors import ConfigError


def _request(proxy: str, token: str | None, command: str, parameters: dict[str, Any]) -> Any:
    url = proxy if "://" in proxy else f"http://{proxy}"
    headers = {
        "X-YT-Parameters": json.dumps(parameters),
        "X-YT-Output-Format": '"json"',
        "X-YT-Header-Format": '"json"',
    }
    if token:
        headers["Authorization"] = f"OAuth {token}"
    method = httpx.post if command == "start_operation" else httpx.get
    try:
        response = method(f"{url.rstrip('/')}/api/v4/{command}", headers=headers, timeout=300)
    except httpx.HTTPError as error:
        fail(f"cannot reach the scheduler at {url}: {error}")
    if response.status_code != 200:
        try:
            message = response.json().get("message", response.text)
        except ValueError:
            message = response.text
        fail(f"{command} failed ({response.status_code}): {message}")
    return response.json()


def _when(value: str | None) -> str:
    return "after the horizon" if value is None else value[:19].replace("T", " ")


def render(forecast: dict[str, Any], console: Console) -> None:
    """The forecast attribute as a table plus its notes."""
    state = forecast.get("state")
    waiting = forecast.get("waiting_for")
    if waiting:
        console.print(f"waiting for: {waiting.get('message', waiting.get('reason'))}")
    limitation = forecast.get("limitation")
    if limitation:
        console.print(f"forecast limitation: {limitation['message']}")
    if state != "ready":
        console.print(f"forecast: {state}" + (f" ({forecast['error']})" if forecast.get("error") else ""))
        return
    table = Table(show_header=True, header_style="bold")
    table.add_column("")
    for q in ("p10", "p50", "p90"):
        table.add_column(q)
    start = forecast["estimated_start_time"]
    finish = forecast["estimated_finish_time"]
    table.add_row(
        "started" if forecast["started"] else "start", *(_when(start[q]) for q in ("p10", "p50", "p90"))
    )
    table.add_row("finish", *(_when(finish[q]) for q in ("p10", "p50", "p90")))
    console.print(table)
    for item in forecast.get("preempts", []):
        console.print(
            f"expected to preempt {item['operation_id']}: {item['jobs_p50']:g} jobs "
            f"(in {item['share_of_runs']:.0%} of the runs)"
        )
    for task, durations in forecast.get("job_durations", {}).items():
        console.print(
            f"task {task}: job run time median {durations['median']:.0f} s, sigma {durations['sigma']:.2f} "
            f"({durations['source']}, {durations['observed']} observed)"
        )
    simulated = forecast.get("simulated_horizon", forecast["horizon"])
    coarse = (
        f" (simulated {simulated:.0f} s, the rest by the capacity hand-over)"
        if simulated < forecast["horizon"]
        else ""
    )
    arrivals = forecast.get("assumed_arrivals")
    submissions = (
        f"new submissions assumed as seen recently: {arrivals['operations_per_hour']:.0f} operations per hour "
        f"in {arrivals['pools']} pools (over the last {arrivals['observed_seconds'] / 60:.0f} min)"
        if arrivals
        else "new submissions are not foreseen"
    )
    console.print(
        f"made {_when(forecast['computed_at'])} UTC over {forecast['seeds']} runs of "
        f"{forecast['horizon'] / 3600:g} h{coarse}; {submissions}; failures are not foreseen",
        style="dim",
    )


@app.command("forecast")
def forecast_command(
    operation_id: str | None = typer.Argument(None, help="The operation whose forecast to print."),
    spec: Path | None = typer.Option(
        None,
        "--spec",
        help="A vanilla operation spec (YAML/JSON/YSON): forecast it as if started now (dry run).",
    ),
    proxy: str | None = typer.Option(None, "--proxy", help="Scheduler URL (default: $YT_PROXY)."),
    token: str | None = typer.Option(None, "--token", help="Token (default: $YT_TOKEN)."),
    as_json: bool = typer.Option(False, "--json", help="Print the attribute as JSON."),
) -> None:
    """When an operation will start and finish (p10/p50/p90), or what starting SPEC would do (dry run)."""
    proxy = proxy or os.environ.get("YT_PROXY")
    token = token or os.environ.get("YT_TOKEN")
    if not proxy:
        fail("give --proxy or set YT_PROXY")
    if (operation_id is None) == (spec is None):
        fail("give an OPERATION_ID or --spec SPEC, not both")
    console = Console(soft_wrap=True, highlight=False)
    if spec is not None:
        try:
            document = load_document(spec)
        except ConfigError as error:
            fail(str(error))
        answer = _request(
            proxy, token, "start_operation", {"operation_type": "vanilla", "spec": document, "dry_run": True}
        )
        if as_json:
            console.print_json(json.dumps(answer))
            return
        trees = ", ".join(f"{tree}/{pool}" for tree, pool in answer["pool_trees"].items())
        console.print(f"dry run: nothing was started; it would run in {trees}")
        render(answer["scheduling_forecast"], console)
        return
    attributes = _request(
        proxy,
        token,
        "get_operation",
        {"operation_id": operation_id, "attributes": ["state", "scheduling_forecast"]},
    )
    found = attributes.get("scheduling_forecast")
    if as_json:
        console.print_json(json.dumps(found))
        return
    console.print(f"operation {operation_id}: {attributes.get('state')}")
    if found is None:
        console.print("no forecast: the operation has finished")
        return
    render(found, console)
