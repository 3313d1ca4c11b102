"""Ragged batches of piecewise-linear vector functions (``FunctionBatch``, ``FunctionTable``) and the generic
operations on them: gathering, concatenating, compressing (dropping repeated and collinear points) and evaluating
(left-continuous). The fair-share functions built from them are in `functions.py`.

A ``FunctionBatch`` holds many monotone vector functions at once as ragged arrays: function ``i`` owns
points ``offsets[i]:offsets[i+1]`` with arguments ``x`` (non-decreasing) and values ``y`` (rows of 5).
A jump is two consecutive points with the same ``x`` (left value first, right value second).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pooltree.fairshare.compiled import kernels

R = 5
# Near-collinear points are merged when the deviation is below this (CompressFunctionEpsilon).
COMPRESS_EPSILON = 1e-12


@dataclass(slots=True)
class FunctionBatch:
    """Ragged batch of piecewise-linear functions (see module docstring)."""

    offsets: np.ndarray  # (n + 1,) int64
    x: np.ndarray  # (K,)
    y: np.ndarray  # (K, 5)
    f: np.ndarray | None = None  # (K,) fit factor along FSBS, None for FSBFF batches

    @property
    def size(self) -> int:
        return len(self.offsets) - 1

    def owners(self) -> np.ndarray:
        """Function index of every point."""
        return np.repeat(np.arange(self.size), np.diff(self.offsets))

    def function(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Points of one function (for tests and diagnostics)."""
        lo, hi = self.offsets[i], self.offsets[i + 1]
        return self.x[lo:hi], self.y[lo:hi], None if self.f is None else self.f[lo:hi]


class FunctionTable:
    """Functions of many elements kept in several batches, without copying them into one.

    Element i's function is row ``row_of[i]`` of ``batches[batch_of[i]]`` (``batch_of[i] = -1``: none).
    ``points`` (optional): every element's number of points, which spares ``sum_children`` looking them up.
    """

    __slots__ = ("_sources", "batch_of", "batches", "points", "row_of")

    def __init__(
        self,
        batches: list[FunctionBatch],
        batch_of: np.ndarray,
        row_of: np.ndarray,
        points: np.ndarray | None = None,
    ):
        self.batches = [
            FunctionBatch(
                np.ascontiguousarray(b.offsets, dtype=np.int64),
                np.ascontiguousarray(b.x, dtype=float),
                np.ascontiguousarray(b.y, dtype=float),
                None if b.f is None else np.ascontiguousarray(b.f, dtype=float),
            )
            for b in batches
        ]
        self.batch_of = batch_of
        self.row_of = row_of
        self.points = points
        self._sources: dict[bool, tuple[tuple[np.ndarray, ...], ...]] = {}

    def sources(self, *, with_f: bool) -> tuple[tuple[np.ndarray, ...], ...]:
        """The batches as the compiled passes take them: (offsets, x, y[, f]) tuples (built once per table)."""
        built = self._sources.get(with_f)
        if built is None:
            if with_f:
                built = tuple((b.offsets, b.x, b.y, b.f) for b in self.batches)  # type: ignore[misc]
            else:
                built = tuple((b.offsets, b.x, b.y) for b in self.batches)
            self._sources[with_f] = built
        return built

    def offsets_of(self, batch: np.ndarray, row: np.ndarray) -> np.ndarray:
        """(2, k): start and end of the points of functions (batch[k], row[k])."""
        out = np.zeros((2, len(batch)), dtype=np.int64)
        for b in np.unique(batch):
            sel = batch == b
            offsets = self.batches[int(b)].offsets
            out[0, sel] = offsets[row[sel]]
            out[1, sel] = offsets[row[sel] + 1]
        return out

    def gather(self, elements: np.ndarray) -> FunctionBatch:
        """The functions of ``elements`` copied into one batch, in that order."""
        batch = self.batch_of[elements]
        parts, order = [], []
        for b in np.unique(batch):
            sel = np.flatnonzero(batch == b)
            parts.append(gather(self.batches[int(b)], self.row_of[elements[sel]]))
            order.append(sel)
        if not parts:
            return FunctionBatch(np.zeros(1, dtype=np.int64), np.zeros(0), np.zeros((0, R)))
        combined = concatenate(parts)
        return gather(combined, np.argsort(np.concatenate(order), kind="stable"))

    def evaluate(self, elements: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Values and fit factors of the (FSBS) functions of ``elements`` at ``s`` (see ``evaluate``)."""
        elements = np.asarray(elements, dtype=np.int64)
        s = np.asarray(s, dtype=float)
        if s.shape != elements.shape:
            s = np.broadcast_to(s, elements.shape)
        batch = self.batch_of[elements]
        row = self.row_of[elements]
        module = kernels()
        if module is not None:
            values = np.empty((len(elements), R))
            fits = np.empty(len(elements))
            module.evaluate(
                self.sources(with_f=True),
                np.ascontiguousarray(batch),
                np.ascontiguousarray(row),
                np.ascontiguousarray(s),
                values,
                fits,
            )
            return values, fits
        values = np.zeros((len(elements), R))
        fits = np.zeros(len(elements))
        for b in np.unique(batch):
            sel = np.flatnonzero(batch == b)
            v, f = evaluate(self.batches[int(b)], row[sel], s[sel])
            values[sel] = v
            fits[sel] = f
        return values, fits


def row_max(a: np.ndarray) -> np.ndarray:
    """Maximum of every row of an (K, 5) array, column by column (other shapes: over the last axis).

    numpy reduces a short inner axis slowly (about 20x slower than five element-wise passes); the result is
    identical (max is exact).
    """
    if a.ndim != 2 or a.shape[1] != R:
        return a.max(axis=-1)
    return np.maximum(np.maximum(np.maximum(a[:, 0], a[:, 1]), np.maximum(a[:, 2], a[:, 3])), a[:, 4])


def row_min(a: np.ndarray) -> np.ndarray:
    """Minimum of every row of an (K, 5) array (see ``row_max``)."""
    if a.ndim != 2 or a.shape[1] != R:
        return a.min(axis=-1)
    return np.minimum(np.minimum(np.minimum(a[:, 0], a[:, 1]), np.minimum(a[:, 2], a[:, 3])), a[:, 4])


def row_any(m: np.ndarray) -> np.ndarray:
    """Whether any entry of every row of an (K, 5) boolean array is set (see ``row_max``)."""
    if m.ndim != 2 or m.shape[1] != R:
        return m.any(axis=-1)
    return m[:, 0] | m[:, 1] | m[:, 2] | m[:, 3] | m[:, 4]


def row_all(m: np.ndarray) -> np.ndarray:
    """Whether every entry of every row of an (K, 5) boolean array is set (see ``row_max``)."""
    if m.ndim != 2 or m.shape[1] != R:
        return m.all(axis=-1)
    return m[:, 0] & m[:, 1] & m[:, 2] & m[:, 3] & m[:, 4]


def sort_by_group(key: np.ndarray, group: np.ndarray, *, stable: bool = True) -> np.ndarray:
    """Order by ``group`` then ``key`` (as ``np.lexsort((key, group))``).

    Two passes: the key sort, then a stable integer sort of the groups (a radix sort when the group ids fit
    in 16 bits), which numpy does much faster than ``lexsort`` on float keys. ``stable=False`` lets equal
    (group, key) pairs come in any (deterministic) order, for callers that only sum such ties.
    """
    by_key = np.argsort(key, kind="stable" if stable else "quicksort")
    groups = group[by_key]
    if len(groups) and groups.min() >= 0 and groups.max() < 1 << 16:
        groups = groups.astype(np.uint16)
    return by_key[np.argsort(groups, kind="stable")]


def offsets_from_counts(counts: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets


def gather(batch: FunctionBatch, rows: np.ndarray) -> FunctionBatch:
    """A new batch with functions ``rows`` of ``batch`` in the given order."""
    rows = np.asarray(rows, dtype=np.int64)
    starts = batch.offsets[rows]
    lengths = batch.offsets[rows + 1] - starts
    offsets = offsets_from_counts(lengths)
    index = np.repeat(starts - offsets[:-1], lengths) + np.arange(offsets[-1])
    return FunctionBatch(offsets, batch.x[index], batch.y[index], None if batch.f is None else batch.f[index])


def concatenate(batches: list[FunctionBatch]) -> FunctionBatch:
    """All functions of ``batches`` in one batch, in order."""
    if len(batches) == 1:
        return batches[0]
    counts = np.concatenate([np.diff(b.offsets) for b in batches])
    with_f = all(b.f is not None for b in batches)
    return FunctionBatch(
        offsets_from_counts(counts),
        np.concatenate([b.x for b in batches]),
        np.concatenate([b.y for b in batches]),
        np.concatenate([b.f for b in batches]) if with_f else None,  # type: ignore[misc]
    )


def compress(batch: FunctionBatch, *, collinear: bool = True) -> FunctionBatch:
    """Drop redundant points: trim both ends, keep only the limits of every jump, merge collinear points."""
    x, y, f = batch.x, batch.y, batch.f
    n = batch.size
    count = len(x)
    owner = np.repeat(np.arange(n), np.diff(batch.offsets))
    same_next = np.zeros(count, dtype=bool)
    same_next[:-1] = (owner[:-1] == owner[1:]) & (x[:-1] == x[1:])
    same_prev = np.zeros(count, dtype=bool)
    same_prev[1:] = same_next[:-1]
    first = batch.offsets[:-1]
    last = batch.offsets[1:] - 1
    at_left_end = x == x[first][owner]
    at_right_end = x == x[last][owner]
    drop = same_prev & same_next  # interior of a jump
    drop |= at_left_end & same_next  # trim left: keep the last point at the left end
    drop |= at_right_end & same_prev  # trim right: keep the first point at the right end
    if np.any(drop):
        keep = ~drop
        x, y, owner = x[keep], y[keep], owner[keep]
        f = None if f is None else f[keep]
    # Equal consecutive points.
    count = len(x)
    dup = np.zeros(count, dtype=bool)
    dup[1:] = (owner[1:] == owner[:-1]) & (x[1:] == x[:-1]) & row_all(y[1:] == y[:-1])
    if f is not None:
        dup[1:] &= f[1:] == f[:-1]
    if np.any(dup):
        keep = ~dup
        x, y, owner = x[keep], y[keep], owner[keep]
        f = None if f is None else f[keep]
        count = len(x)
    if len(x) == len(batch.x):
        trimmed = batch  # nothing dropped
    else:
        trimmed = FunctionBatch(offsets_from_counts(np.bincount(owner, minlength=n)), x, y, f)
    return compress_collinear(trimmed) if collinear else trimmed


def compress_collinear(batch: FunctionBatch) -> FunctionBatch:
    """Merge near-collinear interior points (deviation ≤ COMPRESS_EPSILON in values and fit factors)."""
    x, y, f = batch.x, batch.y, batch.f
    n = batch.size
    count = len(x)
    owner = np.repeat(np.arange(n), np.diff(batch.offsets))
    if count > 2:
        mid = np.zeros(count, dtype=bool)
        inner = (owner[1:-1] == owner[:-2]) & (owner[1:-1] == owner[2:])
        x0, x1, x2 = x[:-2], x[1:-1], x[2:]
        inner &= (x0 < x1) & (x1 < x2)
        span = x2 - x0
        with np.errstate(invalid="ignore", divide="ignore"):
            w = np.where(inner, (x1 - x0) / np.where(span > 0, span, 1.0), 0.0)
        dev = row_max(np.abs(y[1:-1] - (y[:-2] + (y[2:] - y[:-2]) * w[:, None])))
        ok = inner & (dev <= COMPRESS_EPSILON)
        if f is not None:
            ok &= np.abs(f[1:-1] - (f[:-2] + (f[2:] - f[:-2]) * w)) <= COMPRESS_EPSILON
        mid[1:-1] = ok
        if np.any(mid):
            # Within a run of collinear candidates drop every other one, then look again: two neighbours
            # that are each collinear with the other cannot both go (they may be a near-duplicate pair).
            run_start = mid & ~np.concatenate([[False], mid[:-1]])
            run_id = np.cumsum(run_start)
            position = np.arange(count) - np.flatnonzero(run_start)[np.maximum(run_id - 1, 0)]
            drop_now = mid & (position % 2 == 0)
            keep = ~drop_now
            odd_left = np.any(mid & ~drop_now)
            compressed = (
                compress_collinear(
                    FunctionBatch(
                        offsets_from_counts(np.bincount(owner[keep], minlength=n)),
                        x[keep],
                        y[keep],
                        None if f is None else f[keep],
                    )
                )
                if odd_left
                else None
            )
            if compressed is not None:
                return compressed
            x, y, owner = x[keep], y[keep], owner[keep]
            f = None if f is None else f[keep]
    counts = np.bincount(owner, minlength=n)
    return FunctionBatch(offsets_from_counts(counts), x, y, f)


def evaluate(batch: FunctionBatch, rows: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """Values (and fit factors, for FSBS batches) of functions ``rows`` at arguments ``s`` (left-continuous)."""
    rows = np.asarray(rows, dtype=np.int64)
    s = np.asarray(s, dtype=float)
    lo = batch.offsets[rows].copy()
    hi = batch.offsets[rows + 1] - 1
    start = lo.copy()
    x = batch.x
    # First point with x >= s (or the last point).
    while True:
        active = lo < hi
        if not np.any(active):
            break
        mid = (lo + hi) // 2
        ge = x[mid] >= s
        hi = np.where(active & ge, mid, hi)
        lo = np.where(active & ~ge, mid + 1, lo)
    k = lo
    prev = np.maximum(k - 1, start)
    xk, xp = x[k], x[prev]
    exact = (xk <= s) | (k == start)
    span = xk - xp
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.clip(np.where(span > 0, (s - xp) / np.where(span > 0, span, 1.0), 1.0), 0.0, 1.0)
    t = np.where(exact, 1.0, t)
    yk, yp = batch.y[k], batch.y[prev]
    tc = t[:, None]
    values = np.where(tc < 0.5, yp + (yk - yp) * tc, yk - (yk - yp) * (1.0 - tc))
    values = np.where(exact[:, None], yk, values)
    fits = None
    if batch.f is not None:
        fk, fp = batch.f[k], batch.f[prev]
        fits = np.where(t < 0.5, fp + (fk - fp) * t, fk - (fk - fp) * (1.0 - t))
        fits = np.where(exact, fk, fits)
    return values, fits
