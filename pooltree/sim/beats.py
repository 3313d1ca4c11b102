"""Node heartbeat times: beat ``k`` of a node is a pure function ``phase + k·period + jitter(k)`` of the seed, the
node index and ``k`` (a splitmix64 hash, not a shared stream), one beat at a time or many at once in numpy with the
same doubles; and the preemptive-backoff chain over slept beats that `Simulation._catch_up` replays."""

from __future__ import annotations

import numpy as np

from pooltree.sim.state import _MASK64


def beat_time(phase: float, salt: int, period: float, jitter: float, k: int) -> float:
    """Time of beat ``k`` of a node with ``phase`` and ``salt``: `Simulation.beat_time` (splitmix64 inlined)."""
    if jitter <= 0:
        return phase + k * period
    x = ((salt ^ (k * 0xD1B54A32D192ED03 & _MASK64)) + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return phase + k * period + jitter * (((x ^ (x >> 31)) >> 11) / float(1 << 53))


_U64 = np.uint64


_HASH = (
    _U64(0xD1B54A32D192ED03),
    _U64(0x9E3779B97F4A7C15),
    _U64(0xBF58476D1CE4E5B9),
    _U64(0x94D049BB133111EB),
)
_SHIFTS = (_U64(30), _U64(27), _U64(31), _U64(11))


def beat_times(phase: float, salt: int, period: float, jitter: float, start: int, stop: int) -> np.ndarray:
    """`beat_time` of beats ``start .. stop - 1`` at once: the same hash in uint64 arithmetic (wrapping like
    the masked Python integers) and the same float operations in the same order, so the same doubles (in place:
    no temporary array per operation)."""
    k = np.arange(start, stop, dtype=np.uint64)
    base = k.astype(np.float64)
    base *= period
    base += phase
    if jitter <= 0:
        return base
    c1, c2, c3, c4 = _HASH
    s30, s27, s31, s11 = _SHIFTS
    x = k
    x *= c1
    x ^= _U64(salt)
    x += c2
    y = x >> s30
    x ^= y
    x *= c3
    np.right_shift(x, s27, out=y)
    x ^= y
    x *= c4
    np.right_shift(x, s31, out=y)
    x ^= y
    x >>= s11
    fraction = x.astype(np.float64)
    fraction /= float(1 << 53)
    fraction *= jitter
    base += fraction
    return base


VECTOR_GAP = 48
"""Slept beats above which `_catch_up` follows the backoff chain over an array of their times."""


def replay_chain(
    phase: float,
    salt: int,
    period: float,
    jitter: float,
    backoff: float,
    start: int,
    stop: int,
    last: float | None,
) -> tuple[float | None, int]:
    """The backoff chain over beats ``start .. stop - 1`` (see `Simulation._catch_up`): the last timestamp and
    how many beats moved it. Each beat's successor (the first beat after its time + backoff) is found for all
    of them at once; the chain then follows those links."""
    times = beat_times(phase, salt, period, jitter, start, stop)
    count = stop - start
    position = 0 if last is None else int(np.searchsorted(times, last + backoff, side="right"))
    if position >= count:
        return last, 0
    # each beat's successor, read through a memoryview of the int64 array: the walk converts only the ~count ·
    # period / backoff entries it visits to Python integers, not all of them (``tolist`` was most of the cost)
    found = np.searchsorted(times, times + backoff, side="right").astype(np.int64, copy=False)
    following = memoryview(found).cast("B").cast("q")
    replayed = 1
    successor = following[position]
    while successor < count:
        position = successor
        replayed += 1
        successor = following[position]
    return float(times[position]), replayed
