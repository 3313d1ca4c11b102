"""``pooltree fair-share --elements-dump``: pooltree's fair share on a YTsaurus element dump, against production.

The dump is what YTsaurus's ``fetch_scheduling_data`` script writes from a cluster's scheduler orchid (see
``pooltree.fairshare.elements_dump``): an operator can take one of their own trees and see, element by element,
where pooltree's fair share differs from their cluster's.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml
from rich.console import Console
from rich.table import Table

from pooltree.config.documents import load_document
from pooltree.config.tree import PoolTreeConfig
from pooltree.fairshare import Pool, UpdateSettings, update_fair_share
from pooltree.fairshare.elements_dump import (
    MATCH_TOLERANCE,
    GuaranteeMode,
    compare,
    load_elements_dump,
    unit_test_settings,
)
from pooltree.resources import RESOURCES

WORST_SHOWN = 20


def elements_dump_report(
    path: Path, *, guarantees: GuaranteeMode = "gpu", tree_config: Path | None = None
) -> dict[str, Any]:
    """Run the update on the dump and compare every element with production.

    Without ``tree_config``: YTsaurus's unit-test options and the main resource the dump implies (cpu when it does
    not say). With it (the tree's ``config``, e.g. ``yt get //sys/pool_trees/<tree>/@config``): that tree's
    ``main_resource`` (when set; else the implied one), gang step function, improved computation (and gap), and its
    ``enable_fair_share_truncation_in_fifo_pool`` for every FIFO pool; options pooltree does not know are listed in
    ``alerts``.
    """
    dump = load_elements_dump(path, guarantees=guarantees)
    alerts: list[str] = []
    if tree_config is None:
        main_resource = dump.main_resource or "cpu"
        settings = unit_test_settings(main_resource=main_resource)
        truncation = False
    else:
        config = PoolTreeConfig.parse(load_document(tree_config), str(tree_config))
        main_resource = (
            config.main_resource if config.explicit("main_resource") else (dump.main_resource or "cpu")
        )
        settings = UpdateSettings(
            main_resource=main_resource,
            enable_step_function_for_gang_operations=bool(config.enable_step_function_for_gang_operations),
            enable_improved_fair_share_by_fit_factor_computation=bool(
                config.enable_improved_fair_share_by_fit_factor_computation
            ),
            enable_improved_fair_share_by_fit_factor_computation_distribution_gap=bool(
                config.enable_improved_fair_share_by_fit_factor_computation_distribution_gap
            ),
        )
        truncation = bool(config.enable_fair_share_truncation_in_fifo_pool)
        for option_path, name, closest in config.unrecognized_options(str(tree_config)):
            hint = f" (did you mean {closest!r}?)" if closest else ""
            alerts.append(f"{option_path}: unrecognized option {name!r}{hint}, ignored")
    if truncation:
        stack = [dump.root]
        while stack:
            pool = stack.pop()
            pool.enable_fair_share_truncation_in_fifo_pool = pool.mode == "fifo"
            stack.extend(child for child in pool.children if isinstance(child, Pool))
    result = update_fair_share(dump.root, dump.total_resources, settings, 0.0)
    comparison = compare(result, dump)
    worst = []
    for name, difference, resource in comparison.worst(WORST_SHOWN):
        if difference <= comparison.tolerance:
            break
        worst.append(
            {
                "name": name,
                "type": "operation" if name in dump.operation_types else "pool",
                "resource": resource,
                "difference": difference,
                "pooltree": dict(zip(RESOURCES, result.elements[name].fair_share.tolist(), strict=True)),
                "production": dict(zip(RESOURCES, dump.production_fair_share[name].tolist(), strict=True)),
            }
        )
    return {
        "elements": comparison.total,
        "within_tolerance": comparison.matching,
        "fraction": comparison.fraction,
        "tolerance": MATCH_TOLERANCE,
        "guarantees": guarantees,
        "main_resource": main_resource,
        "main_resource_inferred": dump.main_resource is not None,
        "tree_config": None if tree_config is None else str(tree_config),
        "fifo_truncation": truncation,
        "settings": {
            "enable_step_function_for_gang_operations": settings.enable_step_function_for_gang_operations,
            "enable_improved_fair_share_by_fit_factor_computation": (
                settings.enable_improved_fair_share_by_fit_factor_computation
            ),
            "enable_improved_fair_share_by_fit_factor_computation_distribution_gap": (
                settings.enable_improved_fair_share_by_fit_factor_computation_distribution_gap
            ),
            "vanilla_operations_are_gangs": True,
        },
        "worst": worst,
        "alerts": alerts + [str(error) for error in result.errors],
    }


def print_elements_dump_report(report: dict[str, Any], output_format: str) -> None:
    if output_format == "yaml":
        sys.stdout.write(yaml.safe_dump(report, sort_keys=False))
        return
    if output_format == "json":
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
        return
    console = Console()
    console.print(
        f"{report['within_tolerance']} of {report['elements']} elements "
        f"({100 * report['fraction']:.1f}%) within {report['tolerance']:g} of production in every resource",
        highlight=False,
    )
    if report["worst"]:
        table = Table("element", "type", "resource", "difference", "pooltree", "production")
        for row in report["worst"]:
            resource = row["resource"]
            table.add_row(
                row["name"],
                row["type"],
                resource,
                f"{row['difference']:.6f}",
                f"{row['pooltree'][resource]:.6f}",
                f"{row['production'][resource]:.6f}",
            )
        console.print(table)
    for alert in report["alerts"]:
        console.print(f"[yellow]alert:[/] {alert}", highlight=False)
