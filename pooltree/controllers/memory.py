"""Per-task job memory reserves from the user-job and job-proxy log digests (YTsaurus controller agent).

A task keeps two digests of memory *ratios*: the user job's peak over its ``memory_limit`` and the job proxy's
peak over its estimate. The reserve the scheduler counts for a new allocation is

    footprint + job_proxy_estimate × job_proxy_factor + memory_limit × user_job_factor

where each factor is a quantile (0.95 by default) of its digest. Samples come from completed jobs and from jobs
aborted with ``resource_overdraft``; failed jobs ("Memory limit exceeded") add nothing. Everything here is pure:
no clock, no I/O, deterministic (see memory-digest.md §1.5 and yt-semantics.md §g).

Choices where the sources are silent, all documented on the names below:

* the overdraft bump (``ratio × 1.1``, "docs") applies to the process that is blamed for the overdraft (the one
  above its reserve; if neither is, the one with the smaller free gap); the other process adds its plain ratio;
* the job proxy ratio is ``max_memory / (estimate + footprint)`` (yt-semantics §g.2), and the job proxy counts as
  above its reserve when ``max_memory > estimate × factor + footprint``;
* the job proxy estimate, when not given, comes from :func:`estimate_job_proxy_memory` (a fixed per-table model).
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Hashable, KeysView, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pooltree.digest import LogDigest
from pooltree.errors import ConfigError, PooltreeError, join_path
from pooltree.resources import parse_size

OverdraftSampleVariant = Literal["docs", "code", "newest"]
OVERDRAFT_SAMPLE_VARIANTS: tuple[str, ...] = ("docs", "code", "newest")
ReserveRule = Literal["quantile", "overdraft_cost"]
RESERVE_RULES: tuple[str, ...] = ("quantile", "overdraft_cost")

MiB = 1024.0**2
DEFAULT_MEMORY_LIMIT = 512 * MiB
DEFAULT_FOOTPRINT_MEMORY = 16 * MiB
JOB_PROXY_BASE_MEMORY = 64 * MiB
JOB_PROXY_INPUT_TABLE_MEMORY = 16 * MiB
JOB_PROXY_OUTPUT_TABLE_MEMORY = 32 * MiB

MEMORY_LIMIT_EXCEEDED = "Memory limit exceeded"
RESOURCE_OVERDRAFT = "resource_overdraft"


def checked_number(value: Any, path: str, *, low: float, high: float, low_open: bool = False) -> float:
    """A finite number within ``[low, high]`` (``(low, high]`` when ``low_open``)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(path, f"expected a number, got {value!r}")
    number = float(value)
    below = number <= low if low_open else number < low
    if not math.isfinite(number) or below or number > high:
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}]"
        raise ConfigError(path, f"must be in {interval}, got {value!r}")
    return number


@dataclass(frozen=True)
class MemoryDigestSettings:
    """Controller-agent options of the memory digests (YTsaurus names and defaults).

    ``overdraft_sample_variant`` picks the sample an overdraft-aborted job adds for the blamed process:
    ``"docs"`` (default, the seeds' wording) ``ratio × F``; ``"code"`` (older controller) ``max(ratio, factor × F)``;
    ``"newest"`` (newest ``task.cpp``) ``max(ratio, factor × F)`` only when ``ratio ≥ 1`` and the plain ratio
    otherwise; ``F = memory_digest_resource_overdraft_factor``.
    ``user_job_reserve_margin`` is a pooltree opt-in (1.0 = YTsaurus): the user-job factor is
    ``min(quantile × margin, 1)``.
    ``user_job_reserve_rule`` is a pooltree opt-in: ``"quantile"`` (YTsaurus) answers the digest quantile;
    ``"overdraft_cost"`` answers the bucket edge *r* minimising ``r + user_job_overdraft_cost × P(next job > r)``
    with ``P = (samples above r + 1) / (N + 1)`` (the chance that the next of exchangeable jobs beats the
    sample order statistic below *r*) and ``P = 0`` at the limit. A tight task thus gets a high quantile almost
    free, a wide one a lower quantile: the reserve an overdraft is worth ``user_job_overdraft_cost × limit``.
    ``user_job_recent_window`` (pooltree opt-in, 0 = off) is change detection for drifting tasks: a second
    digest holds the last W user-job samples, and once it has ``min(W, 10)`` of them the factor is the larger
    of the rule on all samples and the rule on the recent ones (usage that rises is followed within W jobs).
    """

    user_job_memory_digest_precision: float = 0.01
    user_job_memory_reserve_quantile: float = 0.95
    job_proxy_memory_reserve_quantile: float = 0.95
    memory_digest_resource_overdraft_factor: float = 1.1
    user_job_resource_overdraft_memory_multiplier: float | None = None
    job_proxy_resource_overdraft_memory_multiplier: float | None = None
    overdraft_sample_variant: OverdraftSampleVariant = "docs"
    ignore_memory_reserve_factor_less_than_one: bool = False
    footprint_memory: float = DEFAULT_FOOTPRINT_MEMORY
    user_job_reserve_margin: float = 1.0
    user_job_reserve_rule: ReserveRule = "quantile"
    user_job_overdraft_cost: float = 2.0
    user_job_recent_window: int = 0

    def __post_init__(self) -> None:
        checked_number(
            self.user_job_memory_digest_precision,
            "user_job_memory_digest_precision",
            low=0,
            high=1,
            low_open=True,
        )
        checked_number(
            self.user_job_memory_reserve_quantile, "user_job_memory_reserve_quantile", low=0, high=1
        )
        checked_number(
            self.job_proxy_memory_reserve_quantile, "job_proxy_memory_reserve_quantile", low=0, high=1
        )
        checked_number(
            self.memory_digest_resource_overdraft_factor,
            "memory_digest_resource_overdraft_factor",
            low=1,
            high=10,
        )
        for name in (
            "user_job_resource_overdraft_memory_multiplier",
            "job_proxy_resource_overdraft_memory_multiplier",
        ):
            value = getattr(self, name)
            if value is not None:
                checked_number(value, name, low=1, high=100)
        if self.overdraft_sample_variant not in OVERDRAFT_SAMPLE_VARIANTS:
            raise ConfigError(
                "overdraft_sample_variant",
                f"must be one of {', '.join(OVERDRAFT_SAMPLE_VARIANTS)}, got {self.overdraft_sample_variant!r}",
            )
        if not isinstance(self.ignore_memory_reserve_factor_less_than_one, bool):
            raise ConfigError("ignore_memory_reserve_factor_less_than_one", "expected a boolean")
        checked_number(self.footprint_memory, "footprint_memory", low=0, high=math.inf)
        checked_number(self.user_job_reserve_margin, "user_job_reserve_margin", low=1, high=10)
        if self.user_job_reserve_rule not in RESERVE_RULES:
            raise ConfigError(
                "user_job_reserve_rule",
                f"must be one of {', '.join(RESERVE_RULES)}, got {self.user_job_reserve_rule!r}",
            )
        checked_number(
            self.user_job_overdraft_cost, "user_job_overdraft_cost", low=0, high=1000, low_open=True
        )
        window = self.user_job_recent_window
        if isinstance(window, bool) or not isinstance(window, int) or not 0 <= window <= 100_000:
            raise ConfigError("user_job_recent_window", f"expected an integer in [0, 100000], got {window!r}")

    @classmethod
    def pooltree_improved(cls, **overrides: Any) -> MemoryDigestSettings:
        """pooltree's improved policy (opt-in; the defaults stay YTsaurus): the docs bump, the
        ``overdraft_cost`` rule with cost 2 and change detection over the last 40 samples.

        Chosen by ``bench/memory_reserve.py``: on the memory-digest.md §5 trace it needs less reserve than the
        quantile rule at equal overdraft (see pooltree/controllers/ARCHITECTURE.md). Pair it with
        :meth:`MemoryDigestWarmStartStore.pooltree_improved` for warm starts and the cluster prior.
        """
        values: dict[str, Any] = {
            "overdraft_sample_variant": "docs",
            "user_job_reserve_rule": "overdraft_cost",
            "user_job_overdraft_cost": 2.0,
            "user_job_recent_window": 40,
        }
        values.update(overrides)
        return cls(**values)

    @classmethod
    def from_mapping(
        cls, data: Mapping[str, Any] | None, path: str = "controller_agent"
    ) -> MemoryDigestSettings:
        """Settings from a config map; unknown keys are rejected with their path."""
        data = dict(data or {})
        if "memory_digest_resource_overdraft_factor" not in data and "resource_overdraft_factor" in data:
            data["memory_digest_resource_overdraft_factor"] = data.pop("resource_overdraft_factor")
        known = set(cls.__dataclass_fields__)
        for key in data:
            if key not in known:
                raise ConfigError(
                    join_path(path, key), f"unknown memory digest option; known: {', '.join(sorted(known))}"
                )
        if "footprint_memory" in data:
            data["footprint_memory"] = parse_size(
                data["footprint_memory"], join_path(path, "footprint_memory")
            )
        try:
            return cls(**data)
        except ConfigError as error:
            raise ConfigError(join_path(path, error.path), error.reason) from None


def estimate_job_proxy_memory(input_table_count: int = 1, output_table_count: int = 1) -> float:
    """The job proxy's expected memory from the job's configuration, in bytes.

    Shaped like YTsaurus's estimate (a base plus reader buffers per input table and writer windows per output
    table); the constants are pooltree's: 64 MiB + 16 MiB per input table + 32 MiB per output table.
    """
    for name, value in (("input_table_count", input_table_count), ("output_table_count", output_table_count)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigError(name, f"expected a table count >= 0, got {value!r}")
    return (
        JOB_PROXY_BASE_MEMORY
        + input_table_count * JOB_PROXY_INPUT_TABLE_MEMORY
        + output_table_count * JOB_PROXY_OUTPUT_TABLE_MEMORY
    )


@dataclass(frozen=True)
class TaskMemoryOptions:
    """A task's memory options from the operation spec, already normalized (YTsaurus rules of §g.2).

    Build with :meth:`from_spec`; the constructor expects normalized values.
    """

    memory_limit: float
    user_job_digest_lower_bound: float
    user_job_digest_default_value: float
    tmpfs_size: float
    job_proxy_digest_lower_bound: float
    job_proxy_digest_upper_bound: float
    job_proxy_digest_default_value: float
    job_proxy_digest_precision: float
    job_proxy_memory: float
    footprint_memory: float

    @classmethod
    def from_spec(
        cls,
        spec: Mapping[str, Any] | None = None,
        settings: MemoryDigestSettings | None = None,
        *,
        path: str = "spec",
    ) -> TaskMemoryOptions:
        """Normalize a user-job spec: ``memory_limit`` (512Mi), ``user_job_memory_digest_default_value`` (0.5),
        ``user_job_memory_digest_lower_bound`` (0.05), ``memory_reserve_factor`` (pins both), ``tmpfs_size`` or
        ``tmpfs_volumes`` (raise both to tmpfs/limit), ``job_proxy_memory_digest`` ({0.5, 2.0, 1.0}),
        ``footprint_memory``, ``job_proxy_memory`` (else estimated from ``input_table_count`` and
        ``output_table_count``)."""
        settings = settings or MemoryDigestSettings()
        spec = dict(spec or {})
        known = {
            "memory_limit",
            "user_job_memory_digest_default_value",
            "user_job_memory_digest_lower_bound",
            "memory_reserve_factor",
            "tmpfs_size",
            "tmpfs_volumes",
            "job_proxy_memory_digest",
            "footprint_memory",
            "job_proxy_memory",
            "input_table_count",
            "output_table_count",
        }
        for key in spec:
            if key not in known:
                raise ConfigError(
                    join_path(path, key), f"unknown memory option; known: {', '.join(sorted(known))}"
                )

        memory_limit = parse_size(
            spec.get("memory_limit", DEFAULT_MEMORY_LIMIT), join_path(path, "memory_limit")
        )
        if memory_limit <= 0:
            raise ConfigError(join_path(path, "memory_limit"), "must be > 0")
        lower, default = _user_job_digest(spec, settings, path)
        tmpfs_size = cls._tmpfs_total(spec, path)
        if tmpfs_size > memory_limit:
            raise ConfigError(
                join_path(path, "tmpfs_size" if "tmpfs_size" in spec else "tmpfs_volumes"),
                f"total tmpfs size {tmpfs_size:.0f} bytes exceeds memory_limit {memory_limit:.0f} bytes; "
                "tmpfs lives inside the job's memory",
            )
        tmpfs_fraction = (
            tmpfs_size / memory_limit
        )  # tmpfs lives inside the job's memory: the digest starts above
        default = min(1.0, max(default, tmpfs_fraction))
        lower = min(1.0, max(lower, tmpfs_fraction))
        default = max(lower, default)
        jp_lower, jp_upper, jp_default, jp_precision = _job_proxy_digest(spec, settings, path)
        footprint = parse_size(
            spec.get("footprint_memory", settings.footprint_memory), join_path(path, "footprint_memory")
        )
        return cls(
            memory_limit=memory_limit,
            user_job_digest_lower_bound=lower,
            user_job_digest_default_value=default,
            tmpfs_size=tmpfs_size,
            job_proxy_digest_lower_bound=jp_lower,
            job_proxy_digest_upper_bound=jp_upper,
            job_proxy_digest_default_value=jp_default,
            job_proxy_digest_precision=jp_precision,
            job_proxy_memory=_job_proxy_memory(spec, path),
            footprint_memory=footprint,
        )

    @staticmethod
    def _tmpfs_total(spec: Mapping[str, Any], path: str) -> float:
        total = 0.0
        if "tmpfs_size" in spec:
            total += parse_size(spec["tmpfs_size"], join_path(path, "tmpfs_size"))
        volumes = spec.get("tmpfs_volumes") or []
        if not isinstance(volumes, list):
            raise ConfigError(join_path(path, "tmpfs_volumes"), "expected a list of {size, path} maps")
        for index, volume in enumerate(volumes):
            volume_path = join_path(join_path(path, "tmpfs_volumes"), index)
            if not isinstance(volume, Mapping) or "size" not in volume:
                raise ConfigError(volume_path, "expected a map with a size")
            total += parse_size(volume["size"], join_path(volume_path, "size"))
        return total


@dataclass(frozen=True)
class JobMemoryReserve:
    """The memory reserve a job starts with (factors and bytes); ``restarted`` marks a dedicated reserve.

    A value: the jobs of a task started while its factors are the same share one (``TaskMemoryReserve``
    remembers which reserve each running job, by its cookie, started with), so a start makes no object here."""

    user_job_reserve_factor: float
    job_proxy_reserve_factor: float
    memory_limit: float
    job_proxy_estimate: float
    footprint_memory: float
    restarted: bool = False

    @property
    def user_job_memory_reserve(self) -> float:
        """Bytes reserved for the user process: ``memory_limit × user_job_factor``."""
        return self.memory_limit * self.user_job_reserve_factor

    @property
    def job_proxy_memory_reserve(self) -> float:
        """Bytes reserved for the job proxy: ``estimate × job_proxy_factor``."""
        return self.job_proxy_estimate * self.job_proxy_reserve_factor

    @property
    def memory_demand(self) -> float:
        """The allocation's memory demand: footprint + job proxy reserve + user job reserve."""
        return self.footprint_memory + self.job_proxy_memory_reserve + self.user_job_memory_reserve


@dataclass(frozen=True)
class RestartReserve:
    """Dedicated factors for the re-run of an output cookie after ``resource_overdraft`` (``None``: use the digest)."""

    user_job_reserve_factor: float | None
    job_proxy_reserve_factor: float | None
    overdraft_count: int


@dataclass(frozen=True)
class WarmStartState:
    """What a warm start carries over: the bucket counters of both digests (and their layout).

    Nothing else is carried: not the restart reserves, not running jobs, not the spec's default value.
    """

    user_job_digest: dict[str, Any]
    job_proxy_digest: dict[str, Any]


def overdraft_cost_reserve(digest: LogDigest, overdraft_cost: float) -> float:
    """The ``"overdraft_cost"`` rule on a digest: see :meth:`LogDigest.predictive_reserve`."""
    try:
        return digest.predictive_reserve(overdraft_cost)
    except ConfigError as error:
        raise ConfigError("user_job_overdraft_cost", error.reason) from None


def scaled_counts(buckets: list[int], limit: int) -> list[int]:
    """Counters scaled down to at most ``limit`` samples (largest remainder), keeping the shape."""
    total = sum(buckets)
    if total <= limit:
        return list(buckets)
    exact = [count * limit / total for count in buckets]
    scaled = [int(x) for x in exact]
    order = sorted(range(len(exact)), key=lambda i: (scaled[i] - exact[i], -i))
    for i in order[: limit - sum(scaled)]:
        scaled[i] += 1
    return scaled


class TaskMemoryReserve:
    """Memory reserves of one task (job type): two digests, the reserves of running jobs, restart reserves.

    Typical flow: ``start_job(cookie)`` → run → ``on_job_completed`` / ``on_job_aborted_resource_overdraft`` /
    ``on_job_failed`` / ``on_job_aborted``.
    """

    def __init__(
        self,
        options: TaskMemoryOptions | None = None,
        settings: MemoryDigestSettings | None = None,
        *,
        warm_start: WarmStartState | None = None,
        cold_start_prior: LogDigest | None = None,
    ):
        """``warm_start`` merges a previous run's counters; ``cold_start_prior`` (pooltree opt-in, e.g.
        :meth:`MemoryDigestWarmStartStore.cluster_prior`) replaces the default value while the user-job digest
        is empty: the reserve rule is applied to it instead."""
        self.settings = settings or MemoryDigestSettings()
        self.options = options or TaskMemoryOptions.from_spec({}, self.settings)
        o = self.options
        self.user_job_digest = LogDigest(
            o.user_job_digest_lower_bound,
            1.0,
            self.settings.user_job_memory_digest_precision,
            o.user_job_digest_default_value,
            path="user_job_memory_digest",
        )
        self.job_proxy_digest = LogDigest(
            o.job_proxy_digest_lower_bound,
            o.job_proxy_digest_upper_bound,
            o.job_proxy_digest_precision,
            o.job_proxy_digest_default_value,
            path="job_proxy_memory_digest",
        )
        if cold_start_prior is not None and not isinstance(cold_start_prior, LogDigest):
            raise ConfigError(
                "cold_start_prior", f"expected a LogDigest, got {type(cold_start_prior).__name__}"
            )
        self.cold_start_prior = cold_start_prior
        self.warm_started = False
        if warm_start is not None:
            self.warm_started = self._apply_warm_start(warm_start)
        self._running: dict[Hashable, JobMemoryReserve] = {}
        self._restarts: dict[Hashable, RestartReserve] = {}
        window = self.settings.user_job_recent_window
        self._recent: deque[float] = deque()
        self.recent_user_job_digest: LogDigest | None = None
        if window:
            self.recent_user_job_digest = LogDigest(
                o.user_job_digest_lower_bound,
                1.0,
                self.settings.user_job_memory_digest_precision,
                o.user_job_digest_default_value,
                path="user_job_memory_digest",
            )
        self.resource_overdraft_count = 0
        self._factors_key: tuple[object, ...] | None = None
        """What ``_factors`` was computed from: the settings, the options and the versions of the digests and the
        prior (each as its counters' object and revision)."""
        self._factors = (0.0, 0.0, 0.0)
        """The (user job, job proxy) factors of a new job and its memory demand, recomputed only when a digest
        they read moved."""
        self._shared: JobMemoryReserve | None = None
        """The reserve of a new job without a restart reserve (``_make_reserve``): kept while the factors and the
        options it was made from are the same, so the jobs started meanwhile share it."""

    def _apply_warm_start(self, state: WarmStartState) -> bool:
        """Load carried counters where the digest layout (bounds, precision) is unchanged; report success."""
        loaded = False
        for digest, saved in (
            (self.user_job_digest, state.user_job_digest),
            (self.job_proxy_digest, state.job_proxy_digest),
        ):
            previous = LogDigest.from_state(saved, path="warm_start")
            if previous.sample_count and (
                previous.lower_bound,
                previous.upper_bound,
                previous.relative_precision,
            ) == (digest.lower_bound, digest.upper_bound, digest.relative_precision):
                digest.merge(previous)
                loaded = True
        return loaded

    # Reserve selection.

    def user_job_reserve_factor(self) -> float:
        """The user-job factor for a new job: the configured rule on the digest (× the opt-in margin), ≤ 1.

        While the digest is empty the answer is the default value, or, with a cold-start prior, the rule
        applied to the prior (never below the task's lower bound).
        """
        digest = self.user_job_digest
        lower = digest.lower_bound
        if digest.sample_count == 0 and self.cold_start_prior is not None:
            digest = self.cold_start_prior
        factor = self._apply_rule(digest)
        recent = self.recent_user_job_digest
        if recent is not None and recent.sample_count >= min(self.settings.user_job_recent_window, 10):
            factor = max(factor, self._apply_rule(recent))
        return min(max(factor, lower) * self.settings.user_job_reserve_margin, 1.0)

    def _apply_rule(self, digest: LogDigest) -> float:
        if self.settings.user_job_reserve_rule == "overdraft_cost":
            return overdraft_cost_reserve(digest, self.settings.user_job_overdraft_cost)
        return digest.get_quantile(self.settings.user_job_memory_reserve_quantile)

    def job_proxy_reserve_factor(self) -> float:
        """The job-proxy factor for a new job: the job-proxy digest quantile."""
        return self.job_proxy_digest.get_quantile(self.settings.job_proxy_memory_reserve_quantile)

    def _new_job_factors(self) -> tuple[float, float, float]:
        """``(user_job_reserve_factor(), job_proxy_reserve_factor())`` and the new job's memory demand from them,
        kept while the settings, the options, the prior and the counters of every digest they read are unchanged
        (a start reads them; only samples move them)."""
        prior, recent = self.cold_start_prior, self.recent_user_job_digest
        user, proxy = self.user_job_digest.counters, self.job_proxy_digest.counters
        # each digest's ``version`` read as its two attributes (two property calls less a read, four reads a start)
        key = (
            self.settings,
            self.options,
            user,
            user.revision,
            proxy,
            proxy.revision,
            None if recent is None else recent.counters,
            None if recent is None else recent.counters.revision,
            None if prior is None else prior.counters,
            None if prior is None else prior.counters.revision,
        )
        if key != self._factors_key:
            uj, jp = self.user_job_reserve_factor(), self.job_proxy_reserve_factor()
            o = self.options  # JobMemoryReserve.memory_demand's sum, in its order
            self._factors = (uj, jp, o.footprint_memory + o.job_proxy_memory * jp + o.memory_limit * uj)
            self._factors_key = key
        return self._factors

    def memory_demand(self, cookie: Hashable | None = None) -> float:
        """Allocation memory demand in bytes for the next job (of ``cookie``, honouring a restart reserve)."""
        if cookie is not None and cookie in self._restarts:
            return self._make_reserve(cookie).memory_demand
        return self._new_job_factors()[2]

    def restart_cookies(self) -> KeysView[Hashable]:
        """The cookies with a dedicated restart reserve: the only ones whose ``memory_demand(cookie)`` differs from
        ``memory_demand()``."""
        return self._restarts.keys()

    def reserve_for_restart(self, cookie: Hashable) -> RestartReserve | None:
        """The dedicated reserve the re-run of ``cookie`` gets after an overdraft abort, if any."""
        return self._restarts.get(cookie)

    def _make_reserve(self, cookie: Hashable | None) -> JobMemoryReserve:
        restart = self._restarts.get(cookie) if cookie is not None else None
        uj, jp, _ = self._new_job_factors()
        if restart is None:
            shared = self._shared
            o = self.options
            if (
                shared is None
                or shared.user_job_reserve_factor != uj
                or shared.job_proxy_reserve_factor != jp
                or shared.memory_limit != o.memory_limit
                or shared.job_proxy_estimate != o.job_proxy_memory
                or shared.footprint_memory != o.footprint_memory
            ):
                shared = self._shared = JobMemoryReserve(
                    user_job_reserve_factor=uj,
                    job_proxy_reserve_factor=jp,
                    memory_limit=o.memory_limit,
                    job_proxy_estimate=o.job_proxy_memory,
                    footprint_memory=o.footprint_memory,
                )
            return shared
        uj = restart.user_job_reserve_factor if restart.user_job_reserve_factor is not None else uj
        jp = restart.job_proxy_reserve_factor if restart.job_proxy_reserve_factor is not None else jp
        return JobMemoryReserve(
            user_job_reserve_factor=uj,
            job_proxy_reserve_factor=jp,
            memory_limit=self.options.memory_limit,
            job_proxy_estimate=self.options.job_proxy_memory,
            footprint_memory=self.options.footprint_memory,
            restarted=True,
        )

    def start_job(self, cookie: Hashable | None = None) -> JobMemoryReserve:
        """Pick and remember the reserve of a job being started for ``cookie``."""
        reserve = self._make_reserve(cookie)
        if cookie is not None:
            self._running[cookie] = reserve
        return reserve

    def cancel_start(self, cookie: Hashable) -> None:
        """The job ``start_job(cookie)`` started never ran (its allocation was taken back before any node got it):
        its reserve is forgotten, as if never started (a job's cookie is remembered only while it runs: every
        end forgets it, so nothing was there before the start)."""
        self._running.pop(cookie, None)

    def running_reserve(self, cookie: Hashable) -> JobMemoryReserve | None:
        """The reserve a running job of ``cookie`` was started with."""
        return self._running.get(cookie)

    # Samples.

    def _user_job_ratio(self, max_memory: float) -> float:
        return max_memory / self.options.memory_limit

    def _job_proxy_ratio(self, max_memory: float) -> float:
        return max_memory / (self.options.job_proxy_memory + self.options.footprint_memory)

    @staticmethod
    def _check_memory(value: float | None, name: str) -> float | None:
        if value is None:
            return None
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not value >= 0
            or math.isinf(value)
        ):
            raise ConfigError(name, f"expected a finite number of bytes >= 0, got {value!r}")
        return float(value)

    def on_job_completed(
        self,
        user_job_max_memory: float | None,
        job_proxy_max_memory: float | None = None,
        *,
        cookie: Hashable | None = None,
    ) -> None:
        """A completed job adds its plain ratios; it also ends the cookie's dedicated restart reserve."""
        if user_job_max_memory is not None or job_proxy_max_memory is not None:  # no statistics: no sample
            user = self._check_memory(user_job_max_memory, "user_job/max_memory")
            proxy = self._check_memory(job_proxy_max_memory, "job_proxy/max_memory")
            if user is not None:
                self._add_user_job_sample(self._user_job_ratio(user))
            if proxy is not None:
                self.job_proxy_digest.add_sample(self._job_proxy_ratio(proxy))
        if cookie is not None:
            self._running.pop(cookie, None)
            self._restarts.pop(cookie, None)

    def on_job_failed(self, cookie: Hashable | None = None, error: str = MEMORY_LIMIT_EXCEEDED) -> None:
        """A failed job (e.g. "Memory limit exceeded") adds no sample; the cookie is no longer running."""
        if cookie is not None:
            self._running.pop(cookie, None)

    def on_job_aborted(self, cookie: Hashable | None = None, reason: str = "other") -> None:
        """An abort for any reason other than ``resource_overdraft`` adds no sample."""
        if reason == RESOURCE_OVERDRAFT:
            raise PooltreeError("use on_job_aborted_resource_overdraft for resource_overdraft aborts")
        if cookie is not None:
            self._running.pop(cookie, None)

    def _add_user_job_sample(self, value: float) -> None:
        self.user_job_digest.add_sample(value)
        recent = self.recent_user_job_digest
        if recent is not None and recent.bucket_index(value) is not None:
            recent.add_sample(value)
            self._recent.append(value)
            if len(self._recent) > self.settings.user_job_recent_window:
                recent.discard_sample(self._recent.popleft())

    def _overdraft_sample(self, ratio: float, factor: float) -> float:
        bump = self.settings.memory_digest_resource_overdraft_factor
        variant = self.settings.overdraft_sample_variant
        if variant == "docs":
            return ratio * bump
        if variant == "code" or ratio >= 1.0:
            return max(ratio, factor * bump)
        return ratio

    def on_job_aborted_resource_overdraft(
        self,
        cookie: Hashable | None,
        user_job_max_memory: float,
        job_proxy_max_memory: float | None = None,
        *,
        reserve: JobMemoryReserve | None = None,
    ) -> RestartReserve | None:
        """A job aborted with ``resource_overdraft``: add bumped samples and give the re-run a dedicated reserve.

        ``reserve`` is what the job ran with (by default the one remembered by ``start_job(cookie)``, else the
        current factors). The blamed process (above its reserve; if neither is, the smaller free gap) adds the
        bumped sample of the configured variant and gets, for the re-run, ``min(factor × multiplier, upper)``
        on the cookie's first overdraft when a multiplier is configured, otherwise the upper bound.
        """
        user = self._check_memory(user_job_max_memory, "user_job/max_memory")
        proxy = self._check_memory(job_proxy_max_memory, "job_proxy/max_memory")
        if reserve is None:
            reserve = self._running.get(cookie) if cookie is not None else None
        if reserve is None:
            reserve = self._make_reserve(cookie)
        if cookie is not None:
            self._running.pop(cookie, None)
        self.resource_overdraft_count += 1

        user_gap = reserve.user_job_memory_reserve - (user or 0.0)
        proxy_gap = reserve.job_proxy_memory_reserve + reserve.footprint_memory - (proxy or 0.0)
        blame_user = user is not None and user_gap < 0
        blame_proxy = proxy is not None and proxy_gap < 0
        if not blame_user and not blame_proxy:
            if proxy is not None and (user is None or proxy_gap < user_gap):
                blame_proxy = True
            else:
                blame_user = True

        if user is not None:
            ratio = self._user_job_ratio(user)
            sample = self._overdraft_sample(ratio, reserve.user_job_reserve_factor) if blame_user else ratio
            self._add_user_job_sample(sample)
        if proxy is not None:
            ratio = self._job_proxy_ratio(proxy)
            sample = self._overdraft_sample(ratio, reserve.job_proxy_reserve_factor) if blame_proxy else ratio
            self.job_proxy_digest.add_sample(sample)

        if cookie is None:
            return None
        previous = self._restarts.get(cookie)
        first = previous is None
        uj_factor = previous.user_job_reserve_factor if previous else None
        jp_factor = previous.job_proxy_reserve_factor if previous else None
        if blame_user:
            uj_factor = self._restart_factor(
                reserve.user_job_reserve_factor,
                1.0,
                self.settings.user_job_resource_overdraft_memory_multiplier,
                first,
            )
        if blame_proxy:
            jp_factor = self._restart_factor(
                reserve.job_proxy_reserve_factor,
                self.job_proxy_digest.upper_bound,
                self.settings.job_proxy_resource_overdraft_memory_multiplier,
                first,
            )
        restart = RestartReserve(uj_factor, jp_factor, (previous.overdraft_count if previous else 0) + 1)
        self._restarts[cookie] = restart
        return restart

    @staticmethod
    def _restart_factor(factor: float, upper: float, multiplier: float | None, first: bool) -> float:
        if first and multiplier is not None:
            return min(factor * multiplier, upper)
        return upper

    # Warm start.

    def warm_start_state(self, max_samples: int | None = None, scale: float = 1.0) -> WarmStartState:
        """The state a later operation may start from (counters only; at most ``max_samples`` per digest).

        ``scale`` ≥ 1 moves the user-job counters up by that factor (whole buckets), a safety margin for the
        drift between runs of the same task.
        """
        checked_number(scale, "scale", low=1, high=10)
        states = []
        for digest in (self.user_job_digest, self.job_proxy_digest):
            state = digest.to_state()
            if digest is self.user_job_digest and scale > 1.0:
                shift = round(math.log(scale) / math.log(digest.step))
                moved = [0] * digest.bucket_count
                for index, count in enumerate(state["buckets"]):
                    moved[min(index + shift, digest.bucket_count - 1)] += count
                state["buckets"] = moved
            if max_samples is not None:
                state["buckets"] = scaled_counts(state["buckets"], max_samples)
                state["sample_count"] = sum(state["buckets"])
            states.append(state)
        return WarmStartState(states[0], states[1])


def _user_job_digest(
    spec: Mapping[str, Any], settings: MemoryDigestSettings, path: str
) -> tuple[float, float]:
    """The user job's digest as specified (lower bound, default value): the spec's (0.05, 0.5), both pinned by
    ``memory_reserve_factor``."""
    default, lower = (
        checked_number(spec.get(key, fallback), join_path(path, key), low=0, high=1, low_open=True)
        for key, fallback in (
            ("user_job_memory_digest_default_value", 0.5),
            ("user_job_memory_digest_lower_bound", 0.05),
        )
    )
    factor = spec.get("memory_reserve_factor")
    if factor is not None:
        factor = checked_number(
            factor, join_path(path, "memory_reserve_factor"), low=0, high=1, low_open=True
        )
        if factor == 1.0 or not settings.ignore_memory_reserve_factor_less_than_one:
            lower = default = factor
    return lower, default


def _job_proxy_digest(
    spec: Mapping[str, Any], settings: MemoryDigestSettings, path: str
) -> tuple[float, float, float, float]:
    """``job_proxy_memory_digest``: (lower bound, upper bound, default value, relative precision), validated as a
    log digest's configuration."""
    jp_path = join_path(path, "job_proxy_memory_digest")
    jp = spec.get("job_proxy_memory_digest") or {}
    if not isinstance(jp, Mapping):
        raise ConfigError(jp_path, f"expected a map, got {type(jp).__name__}")
    for key in jp:
        if key not in ("lower_bound", "upper_bound", "default_value", "relative_precision"):
            raise ConfigError(join_path(jp_path, key), "unknown log digest option")
    jp_lower, jp_upper, jp_default, jp_precision = (
        checked_number(jp.get(key, fallback), join_path(jp_path, key), low=0, high=math.inf, low_open=True)
        for key, fallback in (
            ("lower_bound", 0.5),
            ("upper_bound", 2.0),
            ("default_value", 1.0),
            ("relative_precision", settings.user_job_memory_digest_precision),
        )
    )
    LogDigest(jp_lower, jp_upper, jp_precision, jp_default, path=jp_path)  # validates the digest config
    return jp_lower, jp_upper, jp_default, jp_precision


def _job_proxy_memory(spec: Mapping[str, Any], path: str) -> float:
    """``job_proxy_memory``, else estimated from ``input_table_count`` and ``output_table_count``."""
    if "job_proxy_memory" in spec:
        return parse_size(spec["job_proxy_memory"], join_path(path, "job_proxy_memory"))
    try:
        return estimate_job_proxy_memory(spec.get("input_table_count", 1), spec.get("output_table_count", 1))
    except ConfigError as error:
        raise ConfigError(join_path(path, error.path), error.reason) from None
