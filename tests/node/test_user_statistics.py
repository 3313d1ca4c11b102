"""A job's own statistics on descriptor 5 (``node/user_statistics.py``): the node gives every job the descriptor,
takes what it writes into the job's statistics under ``custom/``, and fails a job whose statistics break
YTsaurus's rules (restated from its ``TestSchedulerUserStatistics``)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from node_support import executor, run, spec

from pooltree.errors import ConfigError
from pooltree.node import JobState
from pooltree.node.isolation import JobIsolation
from pooltree.node.job import USER_JOB_FAILED, JobSpec
from pooltree.node.keeper import SYS_CLONE
from pooltree.node.user_statistics import (
    MAX_STATISTICS_BYTES,
    STATISTICS_FILE,
    UserStatisticsError,
    parse_user_statistics,
)

if os.uname().machine not in SYS_CLONE:
    pytestmark = pytest.mark.skip(reason="descriptor 5 is given by the keeper zygote, not on this machine")

YT_TEST_LINE = 'echo "{ cpu={ k1=4; k3=7 }}; {k2=-7};{k2=1};" >&5'
"""The line YTsaurus's ``test_job_statistics`` runs in its mapper."""


def _modes() -> list[str]:
    modes = ["none"]
    if os.geteuid() == 0:
        modes += ["slot-uid", "sandbox"]
    return modes


@pytest.mark.parametrize("mode", _modes())
def test_a_job_s_descriptor_5_becomes_its_custom_statistics(tmp_path: Path, mode: str) -> None:
    isolation = JobIsolation(tmp_path / "slots", mode=mode)

    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path, isolation=isolation) as ex:
            await ex.start(spec("stats", f"{YT_TEST_LINE}; ls -a; ls /proc/self/fd"))
            return await ex.wait("stats", 30), ex.stdout("stats").decode(), ex.stderr("stats").decode()

    result, stdout, stderr = run(scenario(), 40)
    assert result.state is JobState.COMPLETED, stderr
    custom = {k: v for k, v in result.statistics.items() if k.startswith("custom/")}
    assert custom == {"custom/cpu/k1": 4.0, "custom/cpu/k3": 7.0, "custom/k2": 1.0}
    assert STATISTICS_FILE not in stdout.split(), "the file behind descriptor 5 is not in the job's sandbox"
    assert not (tmp_path / "slots" / "stats" / STATISTICS_FILE).exists(), (
        "read once the job ended, then removed"
    )


def test_running_statistics_include_what_the_job_wrote_so_far(tmp_path: Path) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path) as ex:
            await ex.start(spec("run", 'echo "{my_stat=10};" >&5; exec sleep 30'))
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 15
            while "custom/my_stat" not in ex.running_statistics("run"):
                assert loop.time() < deadline, "the running job's statistics never showed custom/my_stat"
                await asyncio.sleep(0.02)
            seen = ex.running_statistics("run")["custom/my_stat"]
            ex.abort("run", "test")
            await ex.wait("run", 15)
            return seen

    assert run(scenario(), 30) == 10.0


@pytest.mark.parametrize(
    ("command", "limit", "fault"),
    [
        (
            "".join(f'echo "{{name{i}=42}};" >&5; ' for i in range(17)),
            16,
            "custom_statistics_count_limit (16)",
        ),
        ('echo "{\\"\\"=42}" >&5', 128, "empty key"),
        ('echo "{ ' + "a" * 2048 + '=42};" >&5', 128, "longer than"),
        ('echo "{k=1.5}" >&5', 128, "must be an integer"),
        ('echo "{k=" >&5', 128, "cannot parse"),
    ],
    ids=["too-many", "empty-key", "long-name", "double", "broken-yson"],
)
def test_statistics_against_the_rules_fail_the_job(
    tmp_path: Path, command: str, limit: int, fault: str
) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path) as ex:
            await ex.start(spec("bad", command, custom_statistics_count_limit=limit))
            return await ex.wait("bad", 20)

    result = run(scenario(), 30)
    assert result.state is JobState.FAILED and result.exit_code == 0
    assert result.error is not None and result.error["code"] == USER_JOB_FAILED
    assert fault in result.error["inner_errors"][0]["message"], result.error


def test_a_failed_job_keeps_its_own_error_when_its_statistics_are_bad_too(tmp_path: Path) -> None:
    async def scenario():  # type: ignore[no-untyped-def]
        async with executor(tmp_path) as ex:
            await ex.start(spec("both", 'echo "{k=x}" >&5; exit 3'))
            return await ex.wait("both", 20)

    result = run(scenario(), 30)
    assert result.state is JobState.FAILED and result.exit_code == 3
    assert "exited with code 3" in result.error["inner_errors"][0]["message"]


def test_parse_rules() -> None:
    assert parse_user_statistics(b"") == {}
    assert parse_user_statistics(b'{"name/with/slashes"={"@table_index"=42}};') == {
        "custom/name/with/slashes/@table_index": 42.0
    }
    assert parse_user_statistics(b"{a=1};{a=5u};") == {"custom/a": 5.0}, "a path written twice keeps its last"
    assert parse_user_statistics(b"{a=1};{a=2};", count_limit=1) == {"custom/a": 2.0}, (
        "the same path counts once"
    )
    for bad in (b"[1;2]", b"{a=%true}", b'{a="x"}', b"{a=#}"):
        with pytest.raises(UserStatisticsError):
            parse_user_statistics(bad)
    with pytest.raises(UserStatisticsError, match="more than"):
        parse_user_statistics(b" " * (MAX_STATISTICS_BYTES + 1))


@pytest.mark.parametrize("bad", [0, 1025, True, "128"])
def test_the_count_limit_is_checked_where_the_spec_is_made(bad: object) -> None:
    with pytest.raises(ConfigError, match="custom_statistics_count_limit"):
        JobSpec(job_id="j", operation_id="o", command="true", custom_statistics_count_limit=bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"start\.custom_statistics_count_limit"):
        JobSpec.from_dict(
            {"job_id": "j", "operation_id": "o", "command": "true", "custom_statistics_count_limit": bad}
        )
