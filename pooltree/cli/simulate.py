"""``pooltree simulate`` (what-if runs, PRODUCT.md §4) and ``pooltree workload generate`` (synthetic traces)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from pooltree.cli.app import app, fail
from pooltree.errors import PooltreeError
from pooltree.resources import parse_duration, parse_size

workload_app = typer.Typer(no_args_is_help=True, help="Workload traces for the simulator.")
app.add_typer(workload_app, name="workload")


@app.command("simulate")
def simulate(
    scenario: Path = typer.Argument(..., help="Scenario file (.yaml/.yml, .json or .yson)."),
    out: Path = typer.Option(
        ..., "--out", help="Directory for summary.json, operations.csv, timeline.csv, ..."
    ),
    seed: int | None = typer.Option(None, "--seed", help="Random seed (default: the scenario's, else 0)."),
    until: str | None = typer.Option(None, "--until", help="Stop at this simulated time (30m, 2h, 1d)."),
    no_plots: bool = typer.Option(False, "--no-plots", help="Skip report.html and the PNG plots."),
    variant: list[Path] = typer.Option(
        [],
        "--variant",
        help="Also run under this pool_trees (and scheduler) document, or a yt get //sys/pool_trees dump, "
        "and write comparison.html/.json/.csv to --out (repeatable).",
    ),
) -> None:
    """Run SCENARIO on a simulated clock with the scheduler core and write the reports to --out."""
    runs, horizon = _load_runs(scenario, until, seed, variant)
    results = _run_all(runs, out, seed=seed, horizon=horizon, plots=not no_plots)
    typer.echo(json.dumps(_summary_line(results, runs, out)))


def _load_runs(
    scenario: Path, until: str | None, seed: int | None, variant: list[Path]
) -> tuple[list[tuple[str, Any]], float | None]:
    """The baseline run and one per ``--variant``, each checked against the horizon; a clear error otherwise."""
    from pooltree.config import load_document
    from pooltree.sim import load_scenario
    from pooltree.sim.compare import BASELINE, parse_variants

    try:
        loaded = load_scenario(scenario)
        horizon = parse_duration(until, "--until") if until is not None else None
        if seed is not None and seed < 0:
            raise PooltreeError("--seed: expected an integer >= 0")
        variants = parse_variants(
            load_document(scenario), scenario.parent, files=variant, source=str(scenario)
        )
        runs = [(BASELINE, loaded), *((v.name, v.scenario) for v in variants)]
        for _name, run_scenario in runs:
            run_scenario.check_end(horizon)
    except PooltreeError as error:
        fail(error.message)
    except OSError as error:
        fail(f"{error.filename or scenario}: {error.strerror or error}")
    return runs, horizon


def _run_all(
    runs: list[tuple[str, Any]], out: Path, *, seed: int | None, horizon: float | None, plots: bool
) -> dict[str, Any]:
    """Each run to its directory (``out`` itself when there is one run) with a progress bar, then the
    comparison of several."""
    from pooltree.sim import run_to_directory
    from pooltree.sim.compare import compare, write_comparison

    console = Console(stderr=True)
    with Progress(
        TextColumn("[bold]simulating[/]"),
        BarColumn(),
        TextColumn("{task.fields[clock]}"),
        TextColumn("{task.fields[ops]}"),
        TimeElapsedColumn(),
        console=console,
        transient=False,
    ) as progress:
        results = {}
        for name, run_scenario in runs:
            task = progress.add_task("run", total=1.0, clock="", ops="")
            label = "" if len(runs) == 1 else f"{name}: "

            def report(
                now: float, horizon_: float, done: int, total: int, task: Any = task, label: str = label
            ) -> None:
                fraction = max(done / total if total else 0.0, now / horizon_ if horizon_ > 0 else 0.0)
                progress.update(
                    task,
                    completed=min(1.0, fraction),
                    clock=f"{label}t={now:,.0f}s",
                    ops=f"{done}/{total} operations",
                )

            try:
                results[name] = run_to_directory(
                    run_scenario,
                    out if len(runs) == 1 else out / name,
                    seed=seed,
                    until=horizon,
                    progress=report,
                    plots=plots,
                )
            except PooltreeError as error:
                fail(f"{label}{error.message}")
            except OSError as error:
                fail(f"{out}: {error.strerror or error}")
            progress.update(task, completed=1.0)
        if len(runs) > 1:
            try:
                write_comparison(compare(results), out)
            except OSError as error:
                fail(f"{out}: {error.strerror or error}")
    return results


def _summary_line(results: dict[str, Any], runs: list[tuple[str, Any]], out: Path) -> dict[str, Any]:
    """The one JSON line printed: the baseline's times, operations by state and preemptions."""
    from pooltree.sim.compare import BASELINE

    glob = results[BASELINE].summary["global"]
    states: dict[str, int] = {}
    for operation in results[BASELINE].summary["operations"]:
        states[operation["state"]] = states.get(operation["state"], 0) + 1
    return {
        "out": str(out),
        "simulated_time": glob["simulated_time"],
        "wall_time": glob["wall_time"],
        "operations": states,
        "preempted_allocation_count": glob["preempted_allocation_count"],
        **(
            {"comparison": str(out / "comparison.html"), "runs": [name for name, _ in runs]}
            if len(runs) > 1
            else {}
        ),
    }


@workload_app.command("generate")
def generate(
    out: Path = typer.Option(..., "--out", help="Trace file to write (.csv or .jsonl)."),
    rate: list[str] = typer.Option(
        ..., "--rate", help="POOL=OPERATIONS_PER_HOUR (repeat for each pool), e.g. --rate batch=20"
    ),
    hours: float = typer.Option(1.0, "--hours", help="Length of the trace in hours."),
    job_count: float = typer.Option(20.0, "--job-count", help="Median jobs per operation (lognormal)."),
    job_count_sigma: float = typer.Option(1.0, "--job-count-sigma"),
    cpu: float = typer.Option(1.0, "--cpu", help="Cores per job."),
    memory: str = typer.Option("4Gi", "--memory", help="Memory per job."),
    duration: str = typer.Option("5m", "--duration", help="Median job duration."),
    duration_sigma: float = typer.Option(0.5, "--duration-sigma"),
    interruptible_fraction: float = typer.Option(0.0, "--interruptible-fraction"),
    seed: int = typer.Option(0, "--seed"),
) -> None:
    """Write a synthetic workload trace: Poisson arrivals per pool, lognormal job counts and durations."""
    from pooltree.sim.workload import WorkloadParameters, generate_workload, write_trace

    try:
        rates: dict[str, float] = {}
        for item in rate:
            pool, sep, value = item.partition("=")
            if not sep or not pool:
                raise PooltreeError(f"--rate {item!r}: expected POOL=OPERATIONS_PER_HOUR")
            try:
                rates[pool] = float(value)
            except ValueError:
                raise PooltreeError(f"--rate {item!r}: {value!r} is not a number") from None
        params = WorkloadParameters(
            rates=rates,
            hours=hours,
            job_count=job_count,
            job_count_sigma=job_count_sigma,
            cpu=cpu,
            memory=parse_size(memory, "--memory"),
            duration=parse_duration(duration, "--duration"),
            duration_sigma=duration_sigma,
            interruptible_fraction=interruptible_fraction,
            seed=seed,
        )
        operations = generate_workload(params)
        write_trace(operations, out)
    except PooltreeError as error:
        fail(error.message)
    except OSError as error:
        fail(f"{out}: {error.strerror or error}")
    typer.echo(json.dumps({"out": str(out), "operations": len(operations)}))
