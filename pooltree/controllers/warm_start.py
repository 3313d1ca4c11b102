"""Opt-in warm start of the memory digests: what finished operations learned, kept for the next run of the same
task (``MemoryDigestWarmStartStore``), and a cluster-wide prior for tasks never seen."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from pooltree.controllers.memory import TaskMemoryReserve, WarmStartState, checked_number, scaled_counts
from pooltree.digest import LogDigest
from pooltree.errors import ConfigError

WarmStartKey = tuple[str, str, str]


@dataclass
class MemoryDigestWarmStartStore:
    """Opt-in warm start: digest counters of finished operations, keyed by (user, pool, task command or title).

    Bounded to ``capacity`` keys with least-recently-used eviction. ``max_carried_samples`` scales the carried
    counters down (keeping their shape) so the new operation's own samples take over quickly;
    ``carried_scale`` (≥ 1) moves the carried user-job counters up by that factor (runs of a task drift).

    It also keeps a cluster-wide prior for tasks never seen: every remembered operation adds its user-job
    counters (at most ``max_carried_samples`` of them, at their buckets' middles) to one digest on
    ``[0.05, 1]``; :meth:`cluster_prior` hands it out once it holds ``min_prior_samples``.
    """

    capacity: int = 1024
    max_carried_samples: int | None = None
    carried_scale: float = 1.0
    min_prior_samples: int = 200
    _entries: OrderedDict[WarmStartKey, WarmStartState] = field(default_factory=OrderedDict, repr=False)
    _prior: LogDigest = field(default_factory=lambda: LogDigest(0.05, 1.0, 0.01, 1.0), repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.capacity, bool) or not isinstance(self.capacity, int) or self.capacity < 1:
            raise ConfigError("capacity", f"expected an integer >= 1, got {self.capacity!r}")
        if self.max_carried_samples is not None and (
            isinstance(self.max_carried_samples, bool)
            or not isinstance(self.max_carried_samples, int)
            or self.max_carried_samples < 1
        ):
            raise ConfigError(
                "max_carried_samples", f"expected an integer >= 1, got {self.max_carried_samples!r}"
            )
        checked_number(self.carried_scale, "carried_scale", low=1, high=10)
        if (
            isinstance(self.min_prior_samples, bool)
            or not isinstance(self.min_prior_samples, int)
            or self.min_prior_samples < 1
        ):
            raise ConfigError(
                "min_prior_samples", f"expected an integer >= 1, got {self.min_prior_samples!r}"
            )

    @classmethod
    def pooltree_improved(cls, capacity: int = 1024) -> MemoryDigestWarmStartStore:
        """The store of pooltree's improved policy: at most 50 carried samples, moved up ×1.1."""
        return cls(capacity=capacity, max_carried_samples=50, carried_scale=1.1)

    @staticmethod
    def key(user: str, pool: str, task: str) -> WarmStartKey:
        """The warm-start key; every part must be a non-empty string."""
        for name, value in (("user", user), ("pool", pool), ("task", task)):
            if not isinstance(value, str) or not value:
                raise ConfigError(name, f"expected a non-empty string, got {value!r}")
        return (user, pool, task)

    def remember(self, user: str, pool: str, task: str, reserve: TaskMemoryReserve) -> bool:
        """Keep a finished operation's digests under its key (skipped when it has no samples)."""
        key = self.key(user, pool, task)
        if reserve.user_job_digest.sample_count == 0 and reserve.job_proxy_digest.sample_count == 0:
            return False
        self._entries[key] = reserve.warm_start_state(self.max_carried_samples, self.carried_scale)
        self._entries.move_to_end(key)
        user = reserve.user_job_digest
        counts = user.buckets
        if self.max_carried_samples is not None:
            counts = scaled_counts(list(counts), self.max_carried_samples)
        for index, count in enumerate(counts):
            # the bucket's geometric middle (the last bucket: the limit) lands in the same bucket of the prior
            middle = user.lower_bound * user.step ** (index + 0.5) if index < user.bucket_count - 1 else 1.0
            for _ in range(count):
                self._prior.add_sample(min(middle, 1.0))
        while len(self._entries) > self.capacity:
            self._entries.popitem(last=False)
        return True

    def lookup(self, user: str, pool: str, task: str) -> WarmStartState | None:
        """The carried state for a new operation with this key, or ``None`` (cold start)."""
        key = self.key(user, pool, task)
        state = self._entries.get(key)
        if state is not None:
            self._entries.move_to_end(key)
        return state

    def cluster_prior(self) -> LogDigest | None:
        """A copy of the cluster-wide user-job prior, or ``None`` while it holds fewer than ``min_prior_samples``."""
        if self._prior.sample_count < self.min_prior_samples:
            return None
        return self._prior.copy()

    def __len__(self) -> int:
        return len(self._entries)

    def keys(self) -> list[WarmStartKey]:
        """Keys from least to most recently used."""
        return list(self._entries)
