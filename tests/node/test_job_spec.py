"""Job specs from heartbeat maps: defaults, environment, and errors that name the field."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from pooltree.errors import ConfigError
from pooltree.node.job import JobSpec, exit_error
from pooltree.node.launch import job_environment
from pooltree.resources import MEMORY, USER_SLOTS


def test_from_dict_parses_sizes_signal_and_default_resources():
    spec = JobSpec.from_dict(
        {
            "job_id": "j1",
            "operation_id": "op",
            "command": "true",
            "memory_limit": "512Mi",
            "memory_reserve": "256Mi",
            "job_proxy_memory_reserve": "16Mi",
            "interruption_signal": "SIGUSR1",
        }
    )
    assert spec.memory_limit == 512 * 2**20
    assert spec.interruption_signal is signal.SIGUSR1
    assert spec.resources[USER_SLOTS] == 1
    assert spec.resources[MEMORY] == (256 + 16) * 2**20


def test_from_dict_keeps_explicit_resources():
    spec = JobSpec.from_dict(
        {
            "job_id": "j1",
            "operation_id": "op",
            "command": "true",
            "resources": {"cpu": 2, "user_memory": "1Gi"},
        }
    )
    assert spec.resources[USER_SLOTS] == 1 and spec.resources[MEMORY] == 2**30


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        ({"operation_id": "op", "command": "true"}, "start.job_id", "required"),
        ({"job_id": "j", "operation_id": "op", "command": "  "}, "start.command", "non-empty"),
        (
            {"job_id": "j", "operation_id": "op", "command": "x", "memory_limit": "lots"},
            "start.memory_limit",
            "parse size",
        ),
        (
            {"job_id": "j", "operation_id": "op", "command": "x", "interruption_signal": "SIGNOPE"},
            "start.interruption_signal",
            "unknown signal",
        ),
        (
            {"job_id": "j", "operation_id": "op", "command": "x", "colour": 1},
            "start.colour",
            "unknown job field",
        ),
        ({"job_id": "../x", "operation_id": "op", "command": "x"}, "start.job_id", "sandbox"),
        (
            {"job_id": "j", "operation_id": "op", "command": "x", "environment": {"A=B": "1"}},
            "start.environment.A=B",
            "names",
        ),
        (
            {"job_id": "j", "operation_id": "op", "command": "x", "memory_limit": 100, "memory_reserve": 200},
            "start.memory_reserve",
            "exceeds memory_limit",
        ),
    ],
)
def test_from_dict_errors_name_the_field(data, path, reason):
    with pytest.raises(ConfigError) as info:
        JobSpec.from_dict(data)
    assert info.value.path == path
    assert reason in info.value.reason


def test_environment_is_minimal_and_identity_wins():
    spec = JobSpec(
        job_id="j9",
        operation_id="op",
        command="true",
        environment={"YT_JOB_ID": "fake", "X": "1"},
        job_index=7,
    )
    env = job_environment(spec, Path("/tmp/sb"))
    assert env["YT_JOB_ID"] == "j9" and env["YT_JOB_INDEX"] == "7" and env["X"] == "1"
    assert env["HOME"] == "/tmp/sb" and env["PATH"].startswith("/usr/local/bin")
    assert "PYTHONPATH" not in env


def test_exit_errors_distinguish_codes_and_signals():
    assert exit_error(3)["inner_errors"][0]["attributes"] == {"exit_code": 3}
    assert exit_error(-9)["inner_errors"][0]["attributes"]["signal_name"] == "SIGKILL"
