"""A job's own statistics, as YTsaurus's job proxy takes them: what the user job writes to descriptor 5.

A job writes YSON maps to file descriptor 5 as a list fragment (``{rows={rejected=3}};{k=1};``; the Python
wrapper's ``yt.wrapper.write_statistics`` and every Python-callable job's ``python_job_preparation_time`` do
this). Each map's leaves are integer samples; the path of a leaf is ``custom/`` and the keys to it joined with
``/`` (a key may itself contain ``/``: it is kept as is, as YTsaurus does). The node gives the job that
descriptor (a file only the node can open, ``executor.py``) and reads it while the job runs (running
statistics) and once it has ended.

The rules, restated from YTsaurus's user statistics integration tests (``TestSchedulerUserStatistics``):

* values are integers (YTsaurus keeps statistics as int64 summaries); a map nests, any other value is an error;
* an empty key is an error;
* a job may name at most ``custom_statistics_count_limit`` distinct paths (the user job spec's option, default
  128, at most 1024); one more is an error;
* an error in the statistics fails the job (its own exit code notwithstanding).

pooltree's job statistics are one number per path, so a path written twice keeps its last sample (YTsaurus
keeps the job's sum/count/min/max/last summary). The bytes read are capped (``MAX_STATISTICS_BYTES``): a job
writing more fails, as one writing too many paths does; a path longer than ``MAX_PATH_LENGTH`` is an error
(YTsaurus refuses the 2,048-character name of its test; its exact limit is not restated here).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yt.yson as yson

from pooltree.config.operation import DEFAULT_CUSTOM_STATISTICS_COUNT_LIMIT
from pooltree.errors import yt_error
from pooltree.node.job import USER_JOB_FAILED
from pooltree.node.keeper import SYS_CLONE

STATISTICS_FD = 5
"""The descriptor a user job writes its statistics to (YTsaurus reserves 5 for them)."""
MAX_STATISTICS_BYTES = 1 << 20
"""What the node reads of a job's statistics at most; more is an error."""
MAX_PATH_LENGTH = 1024
"""The longest statistics path (``custom/...``) a job may name."""
CUSTOM_PREFIX = "custom"
INT64_MIN, UINT64_MAX = -(1 << 63), (1 << 64) - 1


class UserStatisticsError(ValueError):
    """Why a job's statistics cannot be taken (the job fails with it)."""


def parse_user_statistics(
    data: bytes, count_limit: int = DEFAULT_CUSTOM_STATISTICS_COUNT_LIMIT
) -> dict[str, float]:
    """``{custom/<keys>: last sample}`` of a job's descriptor-5 output; ``UserStatisticsError`` naming the fault."""
    if len(data) > MAX_STATISTICS_BYTES:
        raise UserStatisticsError(f"the job wrote more than {MAX_STATISTICS_BYTES} bytes of statistics")
    if not data.strip():
        return {}
    try:
        samples = list(yson.loads(data, yson_type="list_fragment"))
    except (yson.YsonError, ValueError, TypeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UserStatisticsError(f"cannot parse the job's statistics as YSON: {first}") from None
    found: dict[str, float] = {}
    for index, sample in enumerate(samples):
        if not isinstance(sample, Mapping):
            raise UserStatisticsError(f"statistics item {index} is not a map: {type(sample).__name__}")
        _flatten(sample, CUSTOM_PREFIX, found, count_limit)
    return found


def _flatten(node: Mapping[Any, Any], prefix: str, found: dict[str, float], limit: int) -> None:
    for key, value in node.items():
        if not isinstance(key, str | bytes) or not key:
            raise UserStatisticsError(f"empty key under {prefix!r}")
        name = key.decode(errors="replace") if isinstance(key, bytes) else key
        path = f"{prefix}/{name}"
        if len(path) > MAX_PATH_LENGTH:
            raise UserStatisticsError(f"statistics path {path[:64]!r}... is longer than {MAX_PATH_LENGTH}")
        if isinstance(value, Mapping):
            _flatten(value, path, found, limit)
            continue
        if (
            isinstance(value, bool | yson.YsonBoolean)
            or not isinstance(value, int)
            or not INT64_MIN <= value <= UINT64_MAX
        ):
            raise UserStatisticsError(f"statistics value at {path!r} must be an integer, got {value!r}")
        if path not in found and len(found) >= limit:
            raise UserStatisticsError(
                f"the job wrote more than custom_statistics_count_limit ({limit}) custom statistics"
            )
        found[path] = float(value)


STATISTICS_FILE = "statistics"
"""The file in the job's directory (beside ``stdout`` and ``stderr``, the node's only) behind descriptor 5."""


class StatisticsFile:
    """One job's descriptor-5 file, parsed again only when it has grown (running statistics read it per
    heartbeat)."""

    def __init__(self) -> None:
        self._size = -1
        self._found: dict[str, float] = {}
        self._fault: UserStatisticsError | None = None

    def read(self, directory: Path, count_limit: int) -> dict[str, float]:
        """The job's custom statistics so far; ``UserStatisticsError`` when what it wrote is not valid."""
        try:
            with open(directory / STATISTICS_FILE, "rb") as stream:
                size = os.fstat(stream.fileno()).st_size
                if size != self._size:
                    data = stream.read(MAX_STATISTICS_BYTES + 1)
                    self._size, self._found, self._fault = size, {}, None
                    try:
                        self._found = parse_user_statistics(data, count_limit)
                    except UserStatisticsError as fault:
                        self._fault = fault
        except FileNotFoundError:
            return {}
        if self._fault is not None:
            raise self._fault
        return dict(self._found)

    @staticmethod
    def discard(directory: Path) -> None:
        """Remove the file once its statistics are in the job's result (what the job wrote holds no disk)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(directory / STATISTICS_FILE)


@contextlib.contextmanager
def statistics_descriptor(directory: Path) -> Iterator[dict[str, Any]]:
    """The keeper arguments giving a job its descriptor 5: a new append-only file only the node's user can
    open (0600, in the job's 0700 directory), closed here once the keeper has its copy. Without the keeper
    zygote (a machine ``keeper.SYS_CLONE`` does not list) the job gets none, and writes fail as they would
    outside YTsaurus."""
    if os.uname().machine not in SYS_CLONE:
        yield {}
        return
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND | os.O_CLOEXEC
    fd = os.open(directory / STATISTICS_FILE, flags, 0o600)
    try:
        yield {"pass_fds": (fd,), "pass_at": STATISTICS_FD}
    finally:
        os.close(fd)


def user_statistics_error(reason: str) -> dict:
    """A completed job's failure for statistics it wrote wrong ("User job failed", the fault inside)."""
    inner = yt_error(1, f"Invalid custom statistics: {reason}", {"descriptor": STATISTICS_FD})
    return yt_error(USER_JOB_FAILED, "User job failed", {}, [inner])
