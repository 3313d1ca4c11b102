"""Forecasts of a cluster's own future: its state forked into the simulator and run forward over several seeds
(see ARCHITECTURE.md)."""

from pooltree.forecast.durations import DurationFit, DurationSettings
from pooltree.forecast.run import Forecast, ForecastSettings, OperationForecast, forecast
from pooltree.forecast.state import ClusterState, NodeState, OperationState, RunningJob, TaskState

__all__ = [
    "ClusterState",
    "DurationFit",
    "DurationSettings",
    "Forecast",
    "ForecastSettings",
    "NodeState",
    "OperationForecast",
    "OperationState",
    "RunningJob",
    "TaskState",
    "forecast",
]
