"""The ``scheduling_forecast`` attribute of an operation (``get_operation``, the web pages, the CLI).

Built from the latest forecast without the scheduler's lock (a `Forecast` is never changed once made):

- ``state``: ``ready``; ``computing`` (no forecast has been made since the service started, or the operation
  started after the latest one); ``unavailable`` (the last refresh failed: ``error`` says why).
- ``estimated_start_time`` / ``estimated_finish_time``: ``p10``, ``p50``, ``p90`` as times; an entity (null)
  means "after the horizon" (``horizon`` seconds from ``computed_at``). ``started``: the first job already ran,
  ``estimated_start_time`` is then when it did. ``simulated_horizon``: how far of the horizon the simulator
  itself covered in every run; past it the capacity hand-over carried the runs (`pooltree.forecast.tail`).
- ``assumed_arrivals``: the submissions to come the runs drew (`pooltree.forecast.arrivals`):
  ``operations_per_hour`` over ``pools`` pools, measured over the last ``observed_seconds`` (at most ``window``);
  null: none were drawn (no history yet, or arrivals off).
- ``waiting_for``: why its allocations are pending now (the same map as ``pending_allocations_reason``).
- ``preempts``: operations whose jobs are expected to be preempted for it (``jobs_p50`` over the runs,
  ``share_of_runs`` in which any was).
- ``job_durations``: per task, the run time the forecast assumed (``median`` seconds, ``sigma`` in log space,
  ``observed`` jobs, ``source``: ``operation``, ``pool`` or ``prior``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pooltree.forecast.live import tree_limitation
from pooltree.forecast.run import Forecast, OperationForecast


def _times(values: dict[str, float | None], time_format: Callable[[float], str | None]) -> dict[str, Any]:
    return {key: None if value is None else time_format(value) for key, value in values.items()}


def operation_forecast_map(
    found: OperationForecast, time_format: Callable[[float], str | None]
) -> dict[str, Any]:
    """The per-operation part of the attribute (also the dry run's answer)."""
    return {
        "started": found.started,
        "estimated_start_time": _times(found.start, time_format),
        "estimated_finish_time": _times(found.finish, time_format),
        "preempts": [dict(item) for item in found.preempts],
        "job_durations": {task: dict(values) for task, values in found.durations.items()},
    }


def live_scheduling_forecast(
    result: Forecast | None,
    operation_id: str,
    trees: Sequence[str],
    reasons: Sequence[dict[str, Any] | None],
    *,
    error: str | None,
    time_format: Callable[[float], str | None],
) -> dict[str, Any]:
    """A live operation's attribute in ``trees``: waiting for the first of ``reasons`` (per tree, in the trees'
    order) that holds, with the ``limitation`` of a forecast of several trees (``tree_limitation``)."""
    attribute = scheduling_forecast(
        result,
        operation_id,
        waiting_for=next((reason for reason in reasons if reason), None),  # its first tree's that holds it
        error=error,
        time_format=time_format,
    )
    limitation = tree_limitation(trees, result)
    if limitation is not None:
        attribute["limitation"] = limitation
    return attribute


def scheduling_forecast(
    result: Forecast | None,
    operation_id: str,
    *,
    waiting_for: dict[str, Any] | None,
    error: str | None,
    time_format: Callable[[float], str | None],
) -> dict[str, Any]:
    """The attribute of one live operation (see the module docstring)."""
    attribute: dict[str, Any] = {"waiting_for": waiting_for}
    found = None if result is None else result.operations.get(operation_id)
    if error is not None:
        attribute.update(state="unavailable", error=error)
    elif found is None:
        attribute["state"] = "computing"
    else:
        attribute["state"] = "ready"
    if result is not None:
        attribute.update(
            computed_at=time_format(result.now),
            horizon=result.horizon,
            simulated_horizon=result.horizon if result.simulated is None else result.simulated,
            seeds=result.seeds,
            assumed_arrivals=dict(result.arrivals) or None,
        )
    if found is not None:
        attribute.update(operation_forecast_map(found, time_format))
    return attribute
