"""``pooltree fair-share``: one fair-share update on a snapshot (config → tree runtime → fair-share update → orchid)."""

from __future__ import annotations

import dataclasses
import json
import statistics
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Any

import numpy as np
import typer
import yaml
from rich.console import Console
from rich.markup import escape
from rich.tree import Tree

from pooltree.cli.app import app, fail
from pooltree.cli.elements_dump import elements_dump_report, print_elements_dump_report
from pooltree.config import load_snapshot
from pooltree.config.snapshot import Snapshot
from pooltree.config.support import unrecognized_options, unsupported_options
from pooltree.errors import ConfigError, PooltreeError
from pooltree.fairshare import update_fair_share
from pooltree.fairshare.model import UpdateState
from pooltree.gc_policy import survivors_frozen
from pooltree.orchid import ROOT, snapshot_strategy, tree_view
from pooltree.resources import zeros
from pooltree.strategy.build import build_scheduling_tree
from pooltree.strategy.kept import KeptState
from pooltree.strategy.scheduler import TreeScheduler
from pooltree.strategy.snapshot import SchedulingTree, StrategyConfig
from pooltree.strategy.tentative import (
    asks_for_tentative_trees,
    non_tentative_types,
    spec_options,
    tentative_trees,
    with_tentative_trees,
)
from pooltree.tree.fair_share_input import read_input
from pooltree.tree.registry import PoolTrees


class OutputFormat(StrEnum):
    json = "json"
    yaml = "yaml"
    table = "table"


def _register(snapshot: Snapshot) -> PoolTrees:
    """Start the snapshot's operations in start-time order; a start the tree refuses names the operation's pool.

    A snapshot is one moment of a real cluster, so an operation its own limits would have refused (too many
    operations, a forbidden pool, too many ephemeral pools) is an error in the snapshot, not a partial result.
    """
    trees = PoolTrees(snapshot.pool_trees, default_tree=snapshot.default_pool_tree)
    types = non_tentative_types({name: tree.config for name, tree in snapshot.pool_trees.items()})
    ordered = sorted(enumerate(snapshot.operations), key=lambda item: (item[1].start_time, item[1].id))
    for index, op in ordered:
        try:
            spec = op.spec
            if asks_for_tentative_trees(spec):  # its tentative trees too, as the live service places it
                tentative = tentative_trees(
                    spec_options(spec),
                    op.type,
                    snapshot.pool_trees,
                    types,
                    f"operations[{index}].spec",
                    defaults=snapshot.default_tentative_pool_trees,
                )
                spec = with_tentative_trees(spec, op.pool_trees, tentative)
            trees.register_operation(op.id, spec, user=op.user, operation_type=op.type, now=op.start_time)
        except ConfigError:
            raise
        except PooltreeError as error:
            raise ConfigError(
                f"operations[{index}].spec.pool",
                f"operation {op.id} cannot start: {error.message}",
                attributes=error.attributes,
            ) from error
    return trees


def _snapshot_now(snapshot: Snapshot) -> float:
    """The update time: ``fair_share_update.now``, else the latest operation start."""
    update = snapshot.fair_share_update
    return update.now if update else max((op.start_time for op in snapshot.operations), default=0.0)


class _TreeStep:
    """The per-period step of one tree as the live service pays it: input from the tree runtime (kept in a
    `read_input`'s rows), the fair-share update, and publishing to a strategy (`build_scheduling_tree` + `publish`).

    ``--repeat`` runs this step K times on one `_TreeStep`, so from the second run on the caches hold, as they do
    from one period to the next in the service; ``update_first_s`` reports the first (cold) run.
    """

    def __init__(self, snapshot: Snapshot, trees: PoolTrees, name: str):
        self.snapshot = snapshot
        self.name = name
        self.tree = trees.tree(name)
        self.resources = {
            op.id: (op.resource_usage, op.resource_demand - op.resource_usage)
            for op in snapshot.operations
            if name in trees.operation(op.id).trees
        }
        self.total = snapshot.tree_total_resources[name]
        self.job_resources = {
            op.id: np.minimum.reduce([group.resources for group in op.jobs])
            for op in snapshot.operations
            if op.jobs and op.id in self.resources
        }
        """Per operation with job groups: one job's resources (the componentwise minimum over its groups), the
        per-job vector of discretized fair share; an operation without groups keeps its continuous function."""
        self.config = StrategyConfig.from_options(self.tree.config, f"pool_trees.{name}.config")
        self.kept = KeptState.new()
        """What the last step returned for the next (`pooltree.strategy.kept`), as a period of the live service does."""
        self.strategy = TreeScheduler(SchedulingTree(zeros(), [], self.config, name=name))
        self.split: dict[str, list[float]] = {"input_s": [], "fair_share_s": [], "publish_s": []}

    def run(self) -> Any:
        begin = time.perf_counter()
        kept = self.kept
        self.kept = kept.failed()  # until this step's update returns
        delta = kept.delta(self.tree)
        read = read_input(
            self.tree,
            self.resources,
            nodes=None,
            projection=kept.projection,
            previous=kept.input,
            delta=delta,
        )
        kept = kept.read(read.rows)
        settings = read.settings
        built = time.perf_counter()
        if settings.enable_discretized_fair_share:
            settings = dataclasses.replace(settings, discretized_job_resources=self.job_resources)
        update = self.snapshot.fair_share_update
        now = _snapshot_now(self.snapshot)
        # every step is the snapshot's update again, taking what the previous step derived from the same tree
        base = UpdateState()
        if update is not None:
            base.previous_update_time = update.previous_update_time
            base.accumulated_resource_volume = dict(update.accumulated_resource_volume)
        result = update_fair_share(read.root, self.total, settings, now, kept.update_state(read, base))
        self.kept = kept = kept.updated(result.state)
        updated = time.perf_counter()
        published, rows = build_scheduling_tree(
            self.tree, result, self.total, self.config, kept.projection, kept.build, delta
        )
        self.kept = kept.built(rows)
        self.strategy.publish(published, now)
        done = time.perf_counter()
        self.split["input_s"].append(built - begin)
        self.split["fair_share_s"].append(updated - built)
        self.split["publish_s"].append(done - updated)
        return result


def _split(steps: dict[str, _TreeStep]) -> dict[str, list[list[float]]]:
    """Per part of the step (input, fair share, publish): each tree's durations, run by run."""
    return {
        key: [step.split[key] for step in steps.values()] for key in ("input_s", "fair_share_s", "publish_s")
    }


# Width of the table when stdout is not a terminal (long enough for every element's line).
TABLE_WIDTH_OFF_TERMINAL = 400


def _bar(value: float, width: int = 10) -> str:
    filled = max(0, min(width, round(value * width)))
    return "█" * filled + "·" * (width - filled)


def _status_suffix(element: dict[str, Any]) -> str:
    status = element["starvation_status"]
    return "" if status == "non_starving" else f" [red]{status}[/]"


def _pool_counts(pool: dict[str, Any]) -> str:
    """Running/limit, lightweight running, total/limit and the pool's pending queue."""
    text = (
        f" ops running {pool['running_operation_count']}/{pool['max_running_operation_count']}"
        f" total {pool['operation_count']}/{pool['max_operation_count']}"
    )
    if pool["lightweight_running_operation_count"]:
        text += f" lightweight {pool['lightweight_running_operation_count']}"
    if pool["pending_operation_ids"]:
        text += " queue " + escape("[" + ", ".join(pool["pending_operation_ids"]) + "]")
    return text


def _operation_placement(op: dict[str, Any]) -> str:
    """Where a pending operation waits (pool and 1-based queue position); lightweight ones say so."""
    if "pending_pool" in op:
        return f" [yellow]pending in {escape(op['pending_pool'])} #{op['pending_position'] + 1}[/]"
    return " lightweight" if op.get("lightweight") else ""


def _print_table(view: dict[str, Any]) -> None:
    console = Console()
    if not console.is_terminal:
        # Piped or redirected: rich would wrap at 80 columns and split an element's line in two; one line
        # per element keeps the file readable and greppable (a terminal still wraps at its own width).
        console = Console(width=max(console.width, TABLE_WIDTH_OFF_TERMINAL))
    for tree_name, tree in view["pool_trees"].items():
        pools, operations = tree["pools"], tree["operations"]
        header = f"[bold]{tree_name}[/]  pools={tree['pool_count']}  operations={len(operations)}"
        nodes: dict[str, Tree] = {ROOT: Tree(header)}
        children: dict[str, list[str]] = {}
        for name, pool in pools.items():
            if pool["parent"] is not None:
                children.setdefault(pool["parent"], []).append(name)
        for op_id, op in operations.items():
            children.setdefault(op["pool"], []).append(op_id)

        def line(name: str, element: dict[str, Any], is_pool: bool) -> str:
            fs, usage = element["fair_share_ratio"], element["usage_ratio"]
            label = f"[cyan]{escape(name)}[/]" if is_pool else f"[green]{escape(name)}[/]"
            return (
                f"{label} fair {fs:6.3f} {_bar(fs)} usage {usage:6.3f} {_bar(usage)} "
                f"demand {element['demand_ratio']:6.3f} {escape('[' + element['dominant_resource'] + ']')} "
                f"{element['scheduling_status']}{_status_suffix(element)}"
                + (_pool_counts(element) if is_pool else _operation_placement(element))
            )

        order = [ROOT]
        while order:
            name = order.pop(0)
            for child in children.get(name, []):
                is_pool = child in pools
                element = pools[child] if is_pool else operations[child]
                nodes[child] = nodes[name].add(line(child, element, is_pool))
                if is_pool:
                    order.append(child)
        console.print(nodes[ROOT])
        for alert in tree["alerts"]:
            console.print(f"[yellow]alert:[/] {escape(alert)}", highlight=False)
        for op_id, op in operations.items():
            for kind, alert in op.get("alerts", {}).items():
                attributes = ", ".join(f"{key}={value}" for key, value in alert["attributes"].items())
                console.print(
                    f"[yellow]{escape(kind)}[/] {escape(op_id)}: {escape(alert['message'])} ({escape(attributes)})",
                    highlight=False,
                )


def _warn_unsupported(snapshot: Snapshot, names: list[str]) -> None:
    """The "unsupported options" and "unrecognized options" alerts on stderr: options the snapshot sets that
    pooltree ignores (YTsaurus options it does not implement; names it does not know, with the closest one)."""
    trees = [snapshot.pool_trees[name] for name in names]
    operations = [(op.id, op.spec) for op in snapshot.operations if set(op.pool_trees) & set(names)]
    entries = unsupported_options(trees, operations, offline=True)
    if entries:
        sys.stderr.write(
            f"warning: {len(entries)} option(s) accepted but not implemented by pooltree (no effect):\n"
        )
        for entry in entries:
            sys.stderr.write(f"  {entry['path']}: {entry['reason']}\n")
    unknown = unrecognized_options(trees, operations)
    if unknown:
        sys.stderr.write(f"warning: {len(unknown)} unrecognized option(s), kept and ignored (no effect):\n")
        for entry in unknown:
            sys.stderr.write(f"  {entry['path']}: {entry['reason']}\n")


def _warn_pending_usage(snapshot: Snapshot, trees: PoolTrees, names: list[str]) -> None:
    """A snapshot operation that the tree's running limits hold pending but that has usage: pending operations are
    not elements of the fair-share update (as in YTsaurus), so that usage is not counted; say so on stderr."""
    held = []
    for op in snapshot.operations:
        if not any(op.resource_usage):
            continue
        for name in names:
            tree = trees.tree(name)
            if tree.has_operation(op.id) and not tree.operation(op.id).running:
                held.append((op.id, name))
    if not held:
        return
    sys.stderr.write(
        f"warning: {len(held)} operation(s) with resource usage are pending (held by a running operation limit); "
        "pending operations are not part of the fair-share update, so their usage is not counted:\n"
    )
    for op_id, name in held[:20]:
        sys.stderr.write(f"  {op_id} in tree {name}\n")
    if len(held) > 20:
        sys.stderr.write(f"  ... and {len(held) - 20} more\n")


@app.command("fair-share")
def fair_share(
    snapshot_path: Path = typer.Argument(
        ..., metavar="SNAPSHOT", help="Snapshot file (.yaml/.yml, .json, .yson)."
    ),
    output_format: OutputFormat = typer.Option(OutputFormat.json, "--format", help="Output format."),
    tree: str | None = typer.Option(None, "--tree", help="Only this pool tree."),
    timings: bool = typer.Option(False, "--timings", help="Add parse/build/update timings."),
    repeat: int = typer.Option(1, "--repeat", min=1, help="Run the update K times; report the median."),
    elements_dump: bool = typer.Option(
        False,
        "--elements-dump",
        help="SNAPSHOT is a YTsaurus element dump (fetch_scheduling_data, .yson or .yson.gz): compare "
        "pooltree's fair share of every element with the production value it carries.",
    ),
    tree_config: Path | None = typer.Option(
        None,
        "--tree-config",
        help="With --elements-dump: the tree's config (YAML/JSON/YSON map of pool tree options) to run with "
        "instead of YTsaurus's unit-test options.",
    ),
) -> None:
    """Run one fair-share update on a snapshot and print the scheduler's view (orchid layout)."""
    if tree_config is not None and not elements_dump:
        fail("--tree-config: only with --elements-dump (a snapshot carries its trees' configs)")
    if elements_dump:
        try:
            report = elements_dump_report(snapshot_path, tree_config=tree_config)
        except PooltreeError as error:
            fail(str(error))
        print_elements_dump_report(report, output_format.value)
        return
    try:
        # the process's gc policy (pooltree/gc_policy.py), as the live service and the simulator run the step
        with survivors_frozen():
            started = time.perf_counter()
            snapshot = load_snapshot(snapshot_path)
            parsed = time.perf_counter()
            trees = _register(snapshot)
            built = time.perf_counter()
            names = [tree] if tree is not None else list(snapshot.pool_trees)
            if tree is not None and tree not in snapshot.pool_trees:
                fail(f"--tree: unknown pool tree {tree!r}; known: {', '.join(snapshot.pool_trees)}")
            view: dict[str, Any] = {"pool_trees": {}}
            durations: list[float] = []
            steps = {name: _TreeStep(snapshot, trees, name) for name in names}
            results: dict[str, Any] = {}
            for _ in range(repeat):
                begin = time.perf_counter()
                results = {name: step.run() for name, step in steps.items()}
                durations.append(time.perf_counter() - begin)
            now = _snapshot_now(snapshot)
            for name, result in results.items():
                pool_tree = trees.tree(name)
                total = steps[name].total
                strategy = snapshot_strategy(pool_tree, result, total, now)
                view["pool_trees"][name] = tree_view(pool_tree, result, total, strategy)
    except PooltreeError as error:
        fail(str(error))
    _warn_unsupported(snapshot, names)
    _warn_pending_usage(snapshot, trees, names)
    if timings:
        view["timings"] = {
            "parse_s": parsed - started,
            "build_s": built - parsed,
            "update_s": statistics.median(durations),
            "update_first_s": durations[0],
            **{
                key: statistics.median(sum(values) for values in zip(*parts, strict=True))
                for key, parts in _split(steps).items()
            },
            "repeat": repeat,
        }
    if output_format is OutputFormat.table:
        _print_table(view)
        if timings:
            Console().print(view["timings"])
    elif output_format is OutputFormat.yaml:
        sys.stdout.write(yaml.safe_dump(view, sort_keys=False))
    else:
        sys.stdout.write(json.dumps(view, indent=2) + "\n")
