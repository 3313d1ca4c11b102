"""The simulator: what-if runs of a workload against pool trees on a simulated clock (PRODUCT.md §4).

- :func:`load_scenario` / :func:`parse_scenario` → :class:`Scenario` (validated; errors name the field).
- :class:`Simulation` (the event engine driving one `SchedulerCore` per tree) → :class:`SimulationResult`.
- :func:`run_to_directory`: run and write summary.json, operations.csv, timeline.csv, events.jsonl, report.html.
- :func:`load_trace`, :func:`write_trace`, :func:`generate_workload`, :class:`WorkloadParameters`: traces.
"""

from pooltree.sim.engine import Simulation, SimulationResult
from pooltree.sim.report import run_to_directory
from pooltree.sim.scenario import Scenario, load_scenario, parse_scenario
from pooltree.sim.workload import WorkloadParameters, generate_workload, load_trace, write_trace

__all__ = [
    "Scenario",
    "Simulation",
    "SimulationResult",
    "WorkloadParameters",
    "generate_workload",
    "load_scenario",
    "load_trace",
    "parse_scenario",
    "run_to_directory",
    "write_trace",
]
