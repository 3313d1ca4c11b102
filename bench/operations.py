"""Benchmark: register then unregister 10,000 operations in a 1,000-pool tree, a third of them pending.

Ten top-level pools with 99 leaf pools each (1,000 pools). Operations go round-robin to the 990 leaves (about
10 per leaf); every leaf runs at most 7, so about 30% wait in pending queues. Unregistering in start order frees a
slot for each pending operation, exercising activation. Prints one JSON object; the figure is the median of the
runs of (register + unregister) operations per second, with the timed loop going through ``PoolTrees``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from pooltree.config import OperationSpec, parse_pool_trees
from pooltree.tree import PoolTrees

OPERATIONS = 10_000
TOP_POOLS = 10
LEAVES_PER_TOP = 99
LEAF_RUNNING_LIMIT = 7


def build_document() -> dict:
    pools: dict = {}
    for top in range(TOP_POOLS):
        leaves = {
            f"leaf-{top}-{leaf}": {
                "max_running_operation_count": LEAF_RUNNING_LIMIT,
                "max_operation_count": 50,
            }
            for leaf in range(LEAVES_PER_TOP)
        }
        pools[f"top-{top}"] = {
            "max_running_operation_count": 5000,
            "max_operation_count": 5000,
            "pools": leaves,
        }
    config = {"max_running_operation_count": 100_000, "max_operation_count": 100_000}
    return {"physical": {"config": config, "pools": pools}}


def run_once(definitions: dict, specs: list[tuple[str, OperationSpec]]) -> tuple[float, int]:
    trees = PoolTrees(definitions)
    began = time.perf_counter()
    pending = 0
    for op_id, spec in specs:
        if trees.register_operation(op_id, spec, user="bench", operation_type="map").state.value == "pending":
            pending += 1
    for op_id, _spec in specs:
        trees.unregister_operation(op_id)
    elapsed = time.perf_counter() - began
    assert not trees.operations and trees.trees["physical"].root.operation_count == 0
    return elapsed, pending


def main(runs: int = 5) -> dict:
    definitions = parse_pool_trees(build_document())
    leaves = [f"leaf-{top}-{leaf}" for top in range(TOP_POOLS) for leaf in range(LEAVES_PER_TOP)]
    specs = [(f"op-{i}", OperationSpec.parse({"pool": leaves[i % len(leaves)]})) for i in range(OPERATIONS)]
    results = [run_once(definitions, specs) for _ in range(runs)]
    rates = [OPERATIONS / elapsed for elapsed, _ in results]
    return {
        "benchmark": "register+unregister operations",
        "operations": OPERATIONS,
        "pools": len(definitions["physical"].pools),
        "pending_fraction": results[0][1] / OPERATIONS,
        "runs": runs,
        "operations_per_second_median": round(statistics.median(rates)),
        "operations_per_second_runs": [round(rate) for rate in rates],
        "target_operations_per_second": 20_000,
    }


if __name__ == "__main__":
    print(json.dumps(main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)))
