"""The compiled function passes (_kernels.c) against the numpy reference in functions.py.

Random batches with jumps, flat parts, collinear runs, cuts at limits and guarantees: the compiled
``fair_share_by_suggestion`` gives the same points bit for bit without collinear merging, and the same
function (values and fit factors at every breakpoint of either) with it; ``sum_functions`` gives the same
breakpoints and the same values up to summation order.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_operation_functions import _random_operations, _random_parents

from pooltree.fairshare import functions as fn


def test_the_compiled_kernels_are_built() -> None:
    """The install builds them (setup.py); without them the update runs on numpy, ~2.5x slower."""
    assert fn.COMPILED_KERNELS_AVAILABLE, "pooltree.fairshare._kernels was not built (no C compiler?)"
    assert fn.compiled_kernels_active()
    with fn.use_compiled_kernels(False):
        assert not fn.compiled_kernels_active()
    assert fn.compiled_kernels_active()


def _random_fsbff(rng: np.random.Generator, n: int) -> fn.FunctionBatch:
    """Monotone piecewise-linear functions on [0, right] with jumps, flats and collinear runs."""
    xs, ys, counts = [], [], []
    for _ in range(n):
        k = int(rng.integers(2, 14))
        right = float(rng.choice([1.0, 2.0, 3.0]))
        steps = rng.choice([0.0, 0.05, 0.1, 0.25], size=k - 1)
        x = np.concatenate([[0.0], np.cumsum(steps)])
        x = np.minimum(x / max(x[-1], 1e-9) * right, right) if x[-1] > 0 else np.linspace(0, right, k)
        x[-1] = right
        increments = rng.choice([0.0, 0.0, 0.01, 0.02, 0.05], size=(k - 1, 5))
        # Collinear runs: repeat the previous increment where the x step repeats.
        y = np.vstack([rng.choice([0.0, 0.01], size=(1, 5)), increments]).cumsum(axis=0)
        xs.append(x)
        ys.append(y)
        counts.append(k)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    return fn.compress(fn.FunctionBatch(offsets, np.concatenate(xs), np.vstack(ys)), collinear=False)


def _guarantees_and_limits(rng: np.random.Generator, batch: fn.FunctionBatch) -> tuple[np.ndarray, ...]:
    n = batch.size
    top = batch.y[batch.offsets[1:] - 1]
    guarantee = np.where(rng.random((n, 5)) < 0.3, top * rng.random((n, 5)), 0.0)
    guarantee[rng.random(n) < 0.5] = 0.0
    limits = np.where(rng.random((n, 5)) < 0.3, top * rng.random((n, 5)), 1.0)
    limits[rng.random(n) < 0.4] = 1.0
    return guarantee, limits


def _same_function(a: fn.FunctionBatch, b: fn.FunctionBatch, tolerance: float) -> None:
    """Values (and fit factors) agree at both ends and between every two consecutive breakpoints of either.

    Not at the breakpoints themselves, nor between two that are closer than 1e-9: where MFFBS jumps, a
    difference of 1e-17 in where the jump is (summation order) decides which side a probe there lands on.
    """
    assert a.size == b.size
    owners, probes = [], []
    for i in range(a.size):
        xs = np.unique(np.concatenate([a.function(i)[0], b.function(i)[0]]))
        wide = np.diff(xs) > 1e-9
        points = np.concatenate([xs[:1], ((xs[:-1] + xs[1:]) / 2)[wide], xs[-1:]])
        owners.append(np.full(len(points), i))
        probes.append(points)
    rows, at = np.concatenate(owners), np.concatenate(probes)
    va, fa = fn.evaluate(a, rows, at)
    vb, fb = fn.evaluate(b, rows, at)
    assert np.allclose(va, vb, atol=tolerance, rtol=0), np.max(np.abs(va - vb))
    if fa is not None and fb is not None:
        assert np.allclose(fa, fb, atol=tolerance, rtol=0), np.max(np.abs(fa - fb))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 60))
def test_fair_share_by_suggestion_matches_numpy(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    fsbff = _random_fsbff(rng, n)
    guarantee, limits = _guarantees_and_limits(rng, fsbff)
    reference = fn.fair_share_by_suggestion_numpy(fsbff, guarantee, limits, merge_collinear=False)
    compiled = fn.fair_share_by_suggestion(fsbff, guarantee, limits, merge_collinear=False)
    for name in ("offsets", "x", "y", "f"):
        assert np.array_equal(getattr(compiled, name), getattr(reference, name)), name
    # With collinear merging the two may merge different (collinear within 1e-12) points.
    reference = fn.fair_share_by_suggestion_numpy(fsbff, guarantee, limits)
    compiled = fn.fair_share_by_suggestion(fsbff, guarantee, limits)
    _same_function(compiled, reference, 1e-11)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 200), st.integers(1, 12))
def test_pool_functions_match_numpy(seed: int, n: int, parents: int) -> None:
    """Operations' FSBS summed into pools (fair-share and FIFO), then the pools' FSBS: both ways agree."""
    usage, demand, step, guarantee, limits = _random_operations(seed, n)
    with fn.use_compiled_kernels(False):
        children = fn.operation_fair_share_by_suggestion(usage, demand, step, guarantee, limits)
    rng = np.random.default_rng(seed + 7)
    # Children of a parent need not be contiguous.
    slot, scale, shift, right = _random_parents(rng, n, parents, contiguous=False)
    reference = fn.sum_functions_numpy(children, slot, scale, shift, right)
    compiled = fn.sum_functions(children, slot, scale, shift, right)
    assert np.array_equal(compiled.offsets, reference.offsets)
    assert np.array_equal(compiled.x, reference.x)
    assert np.allclose(compiled.y, reference.y, atol=1e-12, rtol=0)
    pool_guarantee = np.where(rng.random((parents, 5)) < 0.3, 0.05, 0.0)
    pool_limits = np.where(rng.random((parents, 5)) < 0.3, 0.1, 1.0)
    with fn.use_compiled_kernels(False):
        expected = fn.fair_share_by_suggestion(reference, pool_guarantee, pool_limits)
    got = fn.fair_share_by_suggestion(compiled, pool_guarantee, pool_limits)
    _same_function(got, expected, 1e-9)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 80))
def test_table_evaluation_matches_numpy(seed: int, n: int) -> None:
    """Values and fit factors of functions kept in several batches, at breakpoints, between them and past 1."""
    rng = np.random.default_rng(seed)
    batches = []
    for _ in range(int(rng.integers(1, 4))):
        fsbff = _random_fsbff(rng, n)
        guarantee, limits = _guarantees_and_limits(rng, fsbff)
        batches.append(fn.fair_share_by_suggestion_numpy(fsbff, guarantee, limits))
    owner = rng.integers(0, len(batches), 3 * n)
    row = rng.integers(0, n, 3 * n)
    table = fn.FunctionTable(batches, owner, row)
    elements = rng.permutation(3 * n)
    probes = [rng.choice([0.0, 1.0, 1.5]) if rng.random() < 0.2 else rng.random() for _ in elements]
    for k, e in enumerate(elements[: len(elements) // 2]):  # exactly at a breakpoint
        xs = batches[owner[e]].function(row[e])[0]
        probes[k] = float(xs[rng.integers(0, len(xs))])
    s = np.array(probes)
    values, fits = table.evaluate(elements, s)
    with fn.use_compiled_kernels(False):
        expected_values, expected_fits = table.evaluate(elements, s)
    assert np.array_equal(values, expected_values)
    assert np.array_equal(fits, expected_fits)


def test_bad_buffers_are_refused_not_read() -> None:
    """Inconsistent sizes or rows out of range raise ValueError instead of reading past a buffer."""
    from pooltree.fairshare import _kernels  # type: ignore[attr-defined]

    offsets = np.array([0, 3], dtype=np.int64)
    x = np.zeros(2)  # one point short
    y = np.zeros((3, 5))
    with pytest.raises(ValueError, match="inconsistent"):
        _kernels.fair_share_by_suggestion(
            offsets,
            x,
            y,
            np.zeros(5),
            np.ones(5),
            True,
            np.empty(2, np.int64),
            np.empty(9),
            np.empty((9, 5)),
            np.empty(9),
        )
    good = (offsets, np.zeros(3), y, np.zeros(3))

    def sum_one_child(source: tuple[np.ndarray, ...], row: int) -> None:
        one, zero = np.ones(1), np.zeros(1)
        slot = np.zeros(1, np.int64)
        outputs = (np.empty(2, np.int64), np.empty(9), np.empty((9, 5)))
        _kernels.sum_functions((source,), slot, np.array([row]), slot, one, zero, one, *outputs)

    with pytest.raises(ValueError, match="inconsistent"):
        sum_one_child((offsets, x, y), 0)
    with pytest.raises(ValueError, match="bad child source"):
        sum_one_child(good[:3], 1)
    with pytest.raises(ValueError, match="bad source or row"):
        _kernels.evaluate((good,), np.array([0]), np.array([5]), np.zeros(1), np.empty((1, 5)), np.empty(1))
    with pytest.raises(TypeError, match="sources"):
        _kernels.evaluate([good], np.array([0]), np.array([0]), np.zeros(1), np.empty((1, 5)), np.empty(1))


def test_read_vectors_copies_float_vectors_and_refuses_anything_else() -> None:
    """The fast input path takes only float64 vectors of 5; anything else goes to the validating slow path."""
    from pooltree.fairshare.compiled import read_vectors

    rows = [np.arange(5, dtype=float) * k for k in range(100)]
    assert np.array_equal(read_vectors(rows), np.array(rows))
    assert np.array_equal(read_vectors(tuple(rows)), np.array(rows))
    assert read_vectors([]) is not None and read_vectors([]).shape == (0, 5)
    for odd in (
        [0.0, 1.0, 2.0, 3.0, 4.0],  # a list
        np.arange(5),  # integers
        np.zeros(4),  # too short
        np.zeros((5, 1)),  # not a vector
        np.zeros(10)[::2],  # not contiguous
        np.zeros(5, dtype=np.float32),
        "12345",
        None,
    ):
        assert read_vectors([*rows[:3], odd, *rows[3:]]) is None, odd
    with fn.use_compiled_kernels(False):
        assert read_vectors(rows) is None


def _fsbs_arguments(functions: int) -> dict[str, object]:
    """Consistent arguments of the compiled fair_share_by_suggestion for one-point functions."""
    return {
        "offsets": np.arange(functions + 1, dtype=np.int64),
        "x": np.zeros(functions),
        "y": np.zeros((functions, 5)),
        "guarantee": np.zeros((functions, 5)),
        "limits": np.ones((functions, 5)),
        "merge_collinear": True,
        "out_offsets": np.empty(functions + 1, np.int64),
        "out_s": np.empty(9 * functions + 2),
        "out_y": np.empty((9 * functions + 2, 5)),
        "out_f": np.empty(9 * functions + 2),
    }


def test_misused_buffers_are_refused_not_reinterpreted() -> None:
    """Wrong item types, unaligned buffers and outputs sharing memory with inputs raise ValueError.

    Found under AddressSanitizer/UBSan: an output aliasing the offsets changed them after they were checked
    (reads past the points), and unaligned or float32 buffers were read as float64.
    """
    from pooltree.fairshare import _kernels  # type: ignore[attr-defined]

    args = _fsbs_arguments(4)
    assert _kernels.fair_share_by_suggestion(*args.values()) > 0  # the consistent call works
    unaligned = np.zeros(8 * 4 + 1, np.uint8)[1:].view(np.float64)
    for name, bad, message in (
        ("x", np.zeros(8, np.float32), "float64"),  # 32 bytes, as four float64 would be
        ("offsets", np.arange(5, dtype=np.int32), "int64"),
        ("y", np.zeros((4, 5), dtype=">f8"), "float64"),  # foreign byte order
        ("x", unaligned, "aligned"),
        ("out_offsets", args["offsets"], "shares memory"),  # the output is the offsets being read
        ("out_f", args["out_s"], "shares memory"),
        ("out_s", args["x"], "shares memory"),
    ):
        call = {**args, name: bad}
        with pytest.raises(ValueError, match=message):
            _kernels.fair_share_by_suggestion(*call.values())
    assert np.array_equal(args["offsets"], np.arange(5))  # nothing was written into an input

    source = (np.arange(4, dtype=np.int64), np.zeros(3), np.zeros((3, 5)))
    slots = np.arange(3, dtype=np.int64)
    ones = np.ones(3)
    with pytest.raises(ValueError, match="shares memory"):  # a sum's output offsets are a source's offsets
        _kernels.sum_functions(
            (source,),
            np.zeros(3, np.int64),
            slots,
            slots,
            ones,
            ones,
            ones,
            source[0],
            np.empty(20),
            np.empty((20, 5)),
        )
    shared = np.zeros(2)
    with pytest.raises(ValueError, match="shares memory"):  # fit factors written over the rows to read
        _kernels.evaluate(
            ((*source, np.zeros(3)),),
            np.zeros(1, np.int64),
            shared.view(np.int64)[:1],
            np.zeros(1),
            np.empty((1, 5)),
            shared[:1],
        )
