"""The YTsaurus log digest (``TLogDigest``) and linear histogram digest (``THistogramDigest``).

``LogDigest`` is a fixed array of geometric buckets: bucket *k* covers ``[L·stepᵏ, L·stepᵏ⁺¹)`` with
``step = 1 + relative_precision``. A quantile query answers the upper edge of the bucket that holds the
``⌈α·N⌉``-th smallest sample (nearest rank, no interpolation), the default while empty, and ``U`` when that
sample sits in the last bucket. The bucketing and the quantile rule are bit-for-bit those of YTsaurus
(``yt/yt/core/misc/digest.cpp``; see memory-digest.md §1.1–1.3): the bucket index is
``ln(v/L) / ln(step)`` truncated and then clamped, and bucket edges are built by repeated multiplication.

The only departure is speed: instead of walking the buckets on every query, the counters are mirrored in a
Fenwick tree (``_BucketCounts``, shared by both digests), so both an insert and a query take O(log buckets)
steps and return exactly what the linear walk would return.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

from pooltree.errors import ConfigError, PooltreeError, join_path

MAX_BUCKET_COUNT = 1000
_INT32_MIN = -(2**31)
_INT32_MAX = 2**31 - 1


def _check_positive_number(value: Any, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(path, f"expected a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number <= 0:
        raise ConfigError(path, f"must be a finite number > 0, got {value!r}")
    return number


def _check_quantile(q: Any) -> float:
    if isinstance(q, bool) or not isinstance(q, int | float) or not 0.0 <= float(q) <= 1.0:
        raise ConfigError("quantile", f"must be a number in [0, 1], got {q!r}")
    return float(q)


def _fenwick_top(size: int) -> int:
    """Largest power of two not above ``size`` (the first step of a Fenwick descent)."""
    top = 1
    while top * 2 <= size:
        top *= 2
    return top


@functools.lru_cache(maxsize=64)
def _geometric_edges(lower: float, step: float, count: int) -> tuple[float, ...]:
    """The lower edges of ``count`` geometric buckets, built by repeated multiplication (as YTsaurus builds them);
    shared by the digests of one configuration (every task of every operation makes three)."""
    edges = [lower]
    for _ in range(count - 1):
        edges.append(edges[-1] * step)
    return tuple(edges)


class _BucketCounts:
    """Bucket counters mirrored in a Fenwick tree: the bucket logic both digests share.

    ``add`` counts one sample in a bucket and ``prefix_below`` finds how many leading buckets hold fewer than
    ``threshold`` samples (the bucket the running count first reaches it is the next one); both take
    O(log size) steps and answer exactly what a linear walk over the counters would.
    """

    __slots__ = ("_top", "_tree", "counts", "revision", "size", "total")

    def __init__(self, size: int):
        self.size = size
        self._top = _fenwick_top(size)
        self.revision = 1
        """Moves with every change of the counters (readers caching what they derived compare it)."""
        # what load([0] * size) makes, without its O(size) walk (each task of each start makes three digests)
        self.counts = [0] * size
        self._tree = [0] * (size + 1)
        self.total = 0

    def load(self, counts: list[int]) -> None:
        """Replace every counter (length ``size``) and rebuild the tree in O(size)."""
        size = self.size
        tree = [0] * (size + 1)
        for i in range(1, size + 1):
            tree[i] += counts[i - 1]
            parent = i + (i & -i)
            if parent <= size:
                tree[parent] += tree[i]
        self.counts = list(counts)
        self._tree = tree
        self.total = sum(counts)
        self.revision += 1

    def add(self, bucket: int) -> None:
        """Count one sample in ``bucket`` (0-based, already clamped into range)."""
        self.counts[bucket] += 1
        self.total += 1
        self.revision += 1
        tree = self._tree
        size = self.size
        i = bucket + 1
        while i <= size:
            tree[i] += 1
            i += i & -i

    def remove(self, bucket: int) -> None:
        """Uncount one sample from ``bucket`` (which must hold one)."""
        self.counts[bucket] -= 1
        self.total -= 1
        self.revision += 1
        tree = self._tree
        size = self.size
        i = bucket + 1
        while i <= size:
            tree[i] -= 1
            i += i & -i

    def copy(self) -> _BucketCounts:
        """An independent copy (no rebuild)."""
        twin = _BucketCounts.__new__(_BucketCounts)
        twin.size, twin.total, twin._top, twin.revision = self.size, self.total, self._top, 0
        twin.counts, twin._tree = list(self.counts), list(self._tree)
        return twin

    def prefix_below(self, threshold: float) -> int:
        """The largest ``k`` such that buckets ``0 … k−1`` together hold fewer than ``threshold`` samples."""
        tree = self._tree
        size = self.size
        pos = 0
        acc = 0
        step = self._top
        while step:
            nxt = pos + step
            if nxt <= size and acc + tree[nxt] < threshold:
                pos = nxt
                acc += tree[nxt]
            step >>= 1
        return pos


class LogDigest:
    """YTsaurus ``TLogDigest``: geometric buckets between ``lower_bound`` and ``upper_bound``.

    ``default_value`` (``lower_bound`` if omitted) is answered while no sample has been accepted.
    ``path`` prefixes configuration errors (``job_proxy_memory_digest`` → ``job_proxy_memory_digest.lower_bound``).
    """

    __slots__ = (
        "_edges",
        "_log_step",
        "bucket_count",
        "counters",
        "default_value",
        "lower_bound",
        "relative_precision",
        "step",
        "upper_bound",
    )

    def __init__(
        self,
        lower_bound: float,
        upper_bound: float,
        relative_precision: float = 0.01,
        default_value: float | None = None,
        *,
        path: str = "",
    ):
        lower = _check_positive_number(lower_bound, join_path(path, "lower_bound"))
        upper = _check_positive_number(upper_bound, join_path(path, "upper_bound"))
        precision = _check_positive_number(relative_precision, join_path(path, "relative_precision"))
        if upper < lower:
            raise ConfigError(
                join_path(path, "upper_bound"), f"must be >= lower_bound ({lower!r}), got {upper!r}"
            )
        step = 1.0 + precision
        log_step = math.log(step)
        if log_step <= 0:
            raise ConfigError(
                join_path(path, "relative_precision"),
                f"is too small to form buckets, got {relative_precision!r}",
            )
        raw_count = math.log(upper / lower) / log_step
        if raw_count > MAX_BUCKET_COUNT:
            raise ConfigError(
                path,
                f"bucket count log(upper_bound/lower_bound)/log(1+relative_precision) = {raw_count:.1f} "
                f"exceeds {MAX_BUCKET_COUNT}; the digest would be inefficient",
            )
        if default_value is None:
            default = lower
        else:
            default = _check_positive_number(default_value, join_path(path, "default_value"))
            if not lower <= default <= upper:
                raise ConfigError(
                    join_path(path, "default_value"),
                    f"must lie within [lower_bound, upper_bound] = [{lower!r}, {upper!r}], got {default_value!r}",
                )
        self.lower_bound = lower
        self.upper_bound = upper
        self.relative_precision = precision
        self.default_value = default
        self.step = step
        self._log_step = log_step
        self.bucket_count = max(1, math.ceil(raw_count))
        self._edges = _geometric_edges(lower, step, self.bucket_count)
        self.counters = _BucketCounts(self.bucket_count)
        """The bucket counters; their object and ``revision`` are the digest's version (``version``), which readers
        caching what they derive from the digest compare attribute by attribute, without the property's tuple."""

    @property
    def sample_count(self) -> int:
        """Number of accepted samples."""
        return self.counters.total

    @property
    def version(self) -> tuple[object, int]:
        """Equal versions, equal counters: the counters' object and their revision (a copy is another object)."""
        return self.counters, self.counters.revision

    @property
    def buckets(self) -> tuple[int, ...]:
        """A copy of the bucket counters, lowest bucket first."""
        return tuple(self.counters.counts)

    def bucket_index(self, value: float) -> int | None:
        """Bucket a sample goes to, or ``None`` if YTsaurus discards it (v ≤ 0, NaN, ±inf, out of int32)."""
        if not value > 0.0:  # also catches NaN
            return None
        ratio = value / self.lower_bound
        if ratio == math.inf:
            return None
        index = math.log(ratio) / self._log_step
        if not _INT32_MIN <= index <= _INT32_MAX:
            return None
        bucket = int(index)  # truncation toward zero, as static_cast<int>
        if bucket < 0:
            return 0
        last = self.bucket_count - 1
        return last if bucket > last else bucket

    def add_sample(self, value: float) -> None:
        """Count one sample; invalid values are dropped silently, as in YTsaurus."""
        bucket = self.bucket_index(value)
        if bucket is not None:
            self.counters.add(bucket)

    def discard_sample(self, value: float) -> bool:
        """Uncount one earlier sample of this value (a pooltree extension for sliding windows; YTsaurus never
        removes samples). Returns whether a sample was removed (invalid values and empty buckets: no)."""
        bucket = self.bucket_index(value)
        if bucket is None or self.counters.counts[bucket] == 0:
            return False
        self.counters.remove(bucket)
        return True

    def get_quantile(self, q: float) -> float:
        """The α-quantile: upper edge of the bucket holding the ⌈α·N⌉-th sample; default while empty."""
        q = _check_quantile(q)
        count = self.counters.total
        if count == 0:
            return self.default_value
        threshold = q * count
        if threshold <= 0:
            return self.lower_bound
        # Buckets 0 … pos−1 hold fewer than the threshold; the YTsaurus walk stops at bucket pos + 1 and
        # answers its lower edge, which is the upper edge of bucket pos.
        k = self.counters.prefix_below(threshold) + 1
        return self._edges[k] if k < self.bucket_count else self.upper_bound

    def get_quantile_linear(self, q: float) -> float:
        """The same quantile by the literal YTsaurus bucket walk (reference for tests)."""
        q = _check_quantile(q)
        total = self.counters.total
        if total == 0:
            return self.default_value
        value = self.lower_bound
        running = 0
        for count in self.counters.counts:
            if running >= q * total:
                return value
            running += count
            value *= self.step
        return self.upper_bound

    def predictive_reserve(self, overdraft_cost: float) -> float:
        """The bucket upper edge *r* minimising ``r + overdraft_cost × (samples above r + 1) / (N + 1)``.

        ``(samples above r + 1) / (N + 1)`` is the chance that one more exchangeable sample lands above the
        largest sample at or below *r*; ``upper_bound`` costs itself alone (the limit cannot be overdrafted).
        A pooltree extension (not in YTsaurus); the default value while empty. Walks down only while a lower
        edge could still be cheaper, so a query touches the upper tail only.
        """
        cost = _check_positive_number(overdraft_cost, "overdraft_cost")
        total = self.counters.total
        if total == 0:
            return self.default_value
        counts = self.counters.counts
        edges = self._edges
        last = self.bucket_count - 1
        best_value = self.upper_bound
        best = self.upper_bound
        above = counts[last]  # samples in the last bucket sit at or beyond the upper bound
        per_sample = cost / (total + 1)
        # No candidate lies below the upper edge of the lowest non-empty bucket.
        lowest = self.counters.prefix_below(1)
        floor = edges[lowest + 1] if lowest < last else self.upper_bound
        # Buckets above the largest sample's bucket only lower the candidate edge down to that bucket's edge.
        highest = min(self.counters.prefix_below(total), last)
        for k in range(min(highest, last - 1), -1, -1):
            penalty = per_sample * (above + 1)
            if floor + penalty >= best:
                break
            count = counts[k]
            if count:
                candidate = edges[k + 1] + penalty
                if candidate < best:
                    best, best_value = candidate, edges[k + 1]
                above += count
        return best_value

    def reset(self) -> None:
        """Forget every sample (YTsaurus ``Reset``)."""
        self.counters.load([0] * self.bucket_count)

    def _same_layout(self, other: LogDigest) -> bool:
        return (
            self.lower_bound == other.lower_bound
            and self.upper_bound == other.upper_bound
            and self.relative_precision == other.relative_precision
        )

    def merge(self, other: LogDigest) -> None:
        """Add another digest's counters (same bounds and precision required); the default is kept."""
        if not isinstance(other, LogDigest) or not self._same_layout(other):
            raise PooltreeError(
                "cannot merge log digests with different bounds or precision",
                attributes={
                    "self": self.config(),
                    "other": other.config() if isinstance(other, LogDigest) else None,
                },
            )
        self.counters.load([a + b for a, b in zip(self.counters.counts, other.counters.counts, strict=True)])

    def config(self) -> dict[str, float]:
        """The digest's configuration as a YTsaurus ``TLogDigestConfig`` map."""
        return {
            "lower_bound": self.lower_bound,
            "upper_bound": self.upper_bound,
            "relative_precision": self.relative_precision,
            "default_value": self.default_value,
        }

    def copy(self) -> LogDigest:
        """An independent digest with the same configuration and counters (the edges list is shared: it is
        never modified)."""
        twin = LogDigest.__new__(LogDigest)
        for name in LogDigest.__slots__:
            setattr(twin, name, getattr(self, name))
        twin.counters = self.counters.copy()
        return twin

    def to_state(self) -> dict[str, Any]:
        """Plain-data state (config plus counters) for snapshots and warm starts."""
        return {**self.config(), "sample_count": self.counters.total, "buckets": list(self.counters.counts)}

    @classmethod
    def from_state(cls, state: Mapping[str, Any], *, path: str = "") -> LogDigest:
        """Rebuild a digest from ``to_state()`` output, checking the counters against the configuration."""
        if not isinstance(state, Mapping):
            raise ConfigError(path, f"expected a digest state map, got {type(state).__name__}")
        for key in ("lower_bound", "upper_bound", "relative_precision", "buckets"):
            if key not in state:
                raise ConfigError(join_path(path, key), "is missing from the digest state")
        digest = cls(
            state["lower_bound"],
            state["upper_bound"],
            state["relative_precision"],
            state.get("default_value"),
            path=path,
        )
        buckets = state["buckets"]
        if not isinstance(buckets, list | tuple) or len(buckets) != digest.bucket_count:
            raise ConfigError(
                join_path(path, "buckets"),
                f"expected a list of {digest.bucket_count} counters, got "
                f"{len(buckets) if isinstance(buckets, list | tuple) else type(buckets).__name__}",
            )
        for index, count in enumerate(buckets):
            if isinstance(count, bool) or not isinstance(count, int) or count < 0:
                raise ConfigError(
                    join_path(join_path(path, "buckets"), index), f"expected a count >= 0, got {count!r}"
                )
        digest.counters.load(list(buckets))
        if "sample_count" in state and state["sample_count"] != digest.counters.total:
            raise ConfigError(
                join_path(path, "sample_count"),
                f"is {state['sample_count']!r} but the buckets hold {digest.counters.total}",
            )
        return digest

    def __repr__(self) -> str:
        return (
            f"LogDigest(lower_bound={self.lower_bound!r}, upper_bound={self.upper_bound!r}, "
            f"relative_precision={self.relative_precision!r}, default_value={self.default_value!r}, "
            f"sample_count={self.counters.total})"
        )


class HistogramDigest:
    """YTsaurus ``THistogramDigest``: linear buckets of width ``absolute_precision`` on ``[L, U]``.

    A sample is clamped into ``[L, U]`` and goes to bucket ``round((v − L) / step)``; the α-quantile is
    ``L + i·step`` for the first bucket *i* at which the running count (after adding it) reaches ``α·N``.
    """

    __slots__ = (
        "_counts",
        "absolute_precision",
        "bucket_count",
        "default_value",
        "lower_bound",
        "upper_bound",
    )

    def __init__(
        self,
        lower_bound: float = 0.0,
        upper_bound: float = 2.0,
        absolute_precision: float = 0.001,
        default_value: float | None = None,
        *,
        path: str = "",
    ):
        for name, value in (("lower_bound", lower_bound), ("upper_bound", upper_bound)):
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(float(value))
            ):
                raise ConfigError(join_path(path, name), f"expected a finite number, got {value!r}")
        lower, upper = float(lower_bound), float(upper_bound)
        if upper <= lower:
            raise ConfigError(
                join_path(path, "upper_bound"), f"must be > lower_bound ({lower!r}), got {upper!r}"
            )
        step = _check_positive_number(absolute_precision, join_path(path, "absolute_precision"))
        count = round((upper - lower) / step) + 1
        if count > 100_000:
            raise ConfigError(path, f"{count} buckets is too many; raise absolute_precision")
        default = lower if default_value is None else float(default_value)
        if not lower <= default <= upper:
            raise ConfigError(
                join_path(path, "default_value"),
                f"must lie within [lower_bound, upper_bound] = [{lower!r}, {upper!r}], got {default_value!r}",
            )
        self.lower_bound = lower
        self.upper_bound = upper
        self.absolute_precision = step
        self.default_value = default
        self.bucket_count = count
        self._counts = _BucketCounts(count)

    @property
    def sample_count(self) -> int:
        """Number of accepted samples."""
        return self._counts.total

    def add_sample(self, value: float) -> None:
        """Clamp into ``[L, U]`` and count; NaN is dropped."""
        if value != value:  # NaN
            return
        clamped = min(max(float(value), self.lower_bound), self.upper_bound)
        # std::round: halves away from zero (Python's round() would round halves to even)
        bucket = min(
            math.floor((clamped - self.lower_bound) / self.absolute_precision + 0.5), self.bucket_count - 1
        )
        self._counts.add(bucket)

    def get_quantile(self, q: float) -> float:
        """``L + i·step`` for the first bucket whose running count reaches ``α·N``; default while empty."""
        q = _check_quantile(q)
        total = self._counts.total
        if total == 0:
            return self.default_value
        pos = self._counts.prefix_below(q * total)
        if pos >= self.bucket_count:
            return self.upper_bound
        return self.lower_bound + pos * self.absolute_precision

    def reset(self) -> None:
        """Forget every sample."""
        self._counts.load([0] * self.bucket_count)
