"""Tensor metrics: exact values on hand-made arrays, and agreement with a plain float64 reference.

The reference below recomputes every metric the obvious way (whole arrays, float64, Python ints
for ULPs); the property tests check that the chunked, float32, shortcut-taking implementation
gives the same answers for every chunk size, dtype and special value.
"""

from __future__ import annotations

import json
import math
import struct
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracer.metrics import METRICS, TensorMetrics, compare_arrays, summary_stats, within_tolerance
from tracer.metrics.result import MEASURED, exact_result

try:  # installed with TensorFlow; metrics must work without it
    import ml_dtypes

    BF16: np.dtype | None = np.dtype(ml_dtypes.bfloat16)
except ImportError:
    BF16 = None
needs_bf16 = pytest.mark.skipif(BF16 is None, reason="ml_dtypes is not installed")
FLOATS = [dt for dt in (np.dtype(np.float16), BF16, np.dtype("f4"), np.dtype("f8")) if dt is not None]
INT_OF = {2: np.int16, 4: np.int32, 8: np.int64}
# fields that must come out exactly equal whatever the chunking (the float sums may not)
RTOLS = (0.0, 1e-5, 0.25)
EXACT_FIELDS = (
    "identical", "mismatch_count", "max_abs", "max_rel", "ulp_max",
    "nan_a", "nan_b", "inf_a", "inf_b", "nan_mismatch", "inf_mismatch",
)


def f32_bits(v: float) -> int:
    return struct.unpack("<i", struct.pack("<f", v))[0]


# --------------------------------------------------------------------------- the reference


def ulp_key(bits: int, width: int) -> int:
    """Monotonic integer line: negative floats mirrored below zero, -0.0 at -1."""
    return bits if bits >= 0 else -(bits & ((1 << (width - 1)) - 1)) - 1


def reference(a: np.ndarray, b: np.ndarray, k: int = 5) -> dict[str, Any]:
    """Every float metric computed directly on whole float64 arrays (same dtype on both sides)."""
    with np.errstate(all="ignore"):  # inf - inf and float32 overflow are part of the inputs
        return _reference(a, b, k)


def _reference(a: np.ndarray, b: np.ndarray, k: int) -> dict[str, Any]:
    a64, b64 = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    na, nb = np.isnan(a64), np.isnan(b64)
    ia, ib = np.isinf(a64), np.isinf(b64)
    fin = ~(na | nb | ia | ib)
    bits = INT_OF[a.dtype.itemsize]
    ba, bb = a.ravel().view(bits).tolist(), b.ravel().view(bits).tolist()
    width = 8 * a.dtype.itemsize
    differ = np.array([x != y for x, y in zip(ba, bb)], dtype=bool)
    d = np.abs(a64 - b64)[fin]
    m = np.maximum(np.abs(a64), np.abs(b64))[fin]
    saa, sdd = float(np.sum(a64[fin] ** 2)), float(np.sum(d**2))
    sbb, sab = float(np.sum(b64[fin] ** 2)), float(np.sum(a64[fin] * b64[fin]))
    ulps = [abs(ulp_key(x, width) - ulp_key(y, width)) for x, y, f in zip(ba, bb, fin) if f]
    # ranking: NaN/Inf mismatches by position, then |a-b| as the compared precision sees it
    special = np.flatnonzero((na ^ nb) | ((ia | ib) & (a64 != b64)))
    pipe = np.float64 if a.dtype == np.float64 else np.float32  # float32 may overflow, as the rank
    size = np.abs(a.ravel().astype(pipe) - b.ravel().astype(pipe)).astype(np.float64)
    finite_mis = [int(i) for i in np.flatnonzero(fin & differ)]
    finite_mis.sort(key=lambda i: (-size[i], i))
    order = [int(i) for i in special] + finite_mis
    return {
        "mismatch_count": int(np.sum(differ & ~(na & nb))),
        "identical": not differ.any(),
        "max_abs": float(d.max()) if d.size else 0.0,
        "max_rel": float((d[m > 0] / m[m > 0]).max()) if (m > 0).any() else 0.0,
        "mean_abs": float(d.mean()) if d.size else 0.0,
        "rel_l2": math.sqrt(sdd / saa) if saa > 0 else (0.0 if sdd == 0 else math.inf),
        "cosine": 1.0 if saa == sbb == 0 else 0.0 if 0 in (saa, sbb) else sab / math.sqrt(saa * sbb),
        "sqnr_db": math.inf if sdd == 0 else (10 * math.log10(saa / sdd) if saa > 0 else -math.inf),
        "ulp_max": max(ulps, default=0),
        "nan_a": int(na.sum()), "nan_b": int(nb.sum()), "inf_a": int(ia.sum()), "inf_b": int(ib.sum()),
        "nan_mismatch": int((na ^ nb).sum()),
        "inf_mismatch": int(((ia | ib) & (a64 != b64)).sum()),
        "worst_positions": order[:k],
        "excess": {r: max(0.0, float((d - r * np.abs(a64[fin])).max(initial=0.0))) for r in RTOLS},
    }


def same_float(x: float, y: float, rel: float, abs_: float = 0.0) -> bool:
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    if math.isinf(x) or math.isinf(y):
        return x == y
    return math.isclose(x, y, rel_tol=rel, abs_tol=abs_)


def check_against_reference(m: TensorMetrics, a: np.ndarray, b: np.ndarray) -> None:
    ref = reference(a, b)
    for name in EXACT_FIELDS:
        assert getattr(m, name) == ref[name], name
    rel = 1e-12 if a.dtype == np.float64 else 1e-5  # float32 dots in blocks
    assert same_float(m.mean_abs, ref["mean_abs"], rel), (m.mean_abs, ref["mean_abs"])
    assert same_float(m.rel_l2, ref["rel_l2"], rel), (m.rel_l2, ref["rel_l2"])
    assert same_float(m.sqnr_db, ref["sqnr_db"], rel, 1e-4), (m.sqnr_db, ref["sqnr_db"])
    assert same_float(m.cosine, ref["cosine"], 0, 1e-5), (m.cosine, ref["cosine"])
    flat = [int(np.ravel_multi_index(i, a.shape)) if a.ndim else 0 for i, _, _ in m.worst]
    assert flat == ref["worst_positions"]
    assert dict(m.excess_at_rtol) == {r: ref["excess"][r] for r, _ in m.excess_at_rtol}


# --------------------------------------------------------------------------- hand-made values


def test_hand_made_float32_pair_gives_exact_values() -> None:
    a = np.array([1, 2, 3], np.float32)
    b = np.array([1, 2, 3.5], np.float32)
    m = compare_arrays(a, b)
    assert (m.kind, m.dtype_a, m.shape, m.size, m.identical) == ("float", "float32", (3,), 3, False)
    assert m.mismatch_count == 1
    assert m.max_abs == 0.5
    assert m.max_rel == pytest.approx(0.5 / 3.5, rel=1e-12)
    assert m.mean_abs == pytest.approx(0.5 / 3, rel=1e-12)
    assert m.rel_l2 == pytest.approx(0.5 / math.sqrt(14), rel=1e-9)
    assert m.ulp_max == f32_bits(3.5) - f32_bits(3.0) == 2097152
    assert m.cosine == pytest.approx(15.5 / math.sqrt(14 * 17.25), rel=1e-9)
    assert m.sqnr_db == pytest.approx(10 * math.log10(14 / 0.25), rel=1e-9)
    assert m.worst == (((2,), 3.0, 3.5),)
    assert (m.nan_mismatch, m.inf_mismatch, m.nan_a, m.inf_b) == (0, 0, 0, 0)


def test_identical_arrays() -> None:
    a = np.linspace(-3, 3, 1000, dtype=np.float32).reshape(10, 100)
    m = compare_arrays(a, a.copy(), chunk_elems=64)
    assert m.identical and m.mismatch_count == 0 and m.ulp_max == 0
    assert (m.max_abs, m.max_rel, m.mean_abs, m.rel_l2) == (0.0, 0.0, 0.0, 0.0)
    assert m.sqnr_db == math.inf and m.cosine == 1.0 and m.worst == ()
    assert m.within(0.0, 0.0)


def test_signed_zeros_are_a_one_ulp_mismatch_of_size_zero() -> None:
    m = compare_arrays(np.array([0.0, 1.0], np.float32), np.array([-0.0, 1.0], np.float32))
    assert not m.identical and m.mismatch_count == 1 and m.ulp_max == 1
    assert m.max_abs == 0.0 and m.sqnr_db == math.inf
    ((index, a, b),) = m.worst
    assert index == (0,) and math.copysign(1, a) == 1 and math.copysign(1, b) == -1
    assert m.within(0.0, 0.0)  # equal as values


def test_nan_on_one_side_heads_the_worst_list() -> None:
    a = np.array([1.0, np.nan, 3.0, 5.0])
    b = np.array([1.0, 2.0, 4.0, 5.5])
    m = compare_arrays(a, b)
    assert (m.nan_mismatch, m.nan_a, m.nan_b, m.mismatch_count) == (1, 1, 0, 3)
    assert m.max_abs == 1.0  # over the finite pairs only
    assert m.worst[0][0] == (1,) and math.isnan(m.worst[0][1]) and m.worst[0][2] == 2.0
    assert m.worst[1:] == (((2,), 3.0, 4.0), ((3,), 5.0, 5.5))
    assert not m.within(10.0, 10.0)


def test_nans_with_different_payloads_are_equal_but_not_identical() -> None:
    a = np.array([np.nan, 1.0], np.float32)
    b = a.copy()
    b.view(np.uint32)[0] |= 1  # another quiet NaN
    m = compare_arrays(a, b)
    assert not m.identical and m.mismatch_count == 0 and m.nan_mismatch == 0
    assert m.nan_a == m.nan_b == 1 and m.worst == () and m.within(0.0, 0.0)


def test_infinities() -> None:
    a = np.array([np.inf, -np.inf, np.inf, 2.0], np.float32)
    b = np.array([np.inf, np.inf, 1.0, 2.0], np.float32)
    m = compare_arrays(a, b)
    assert (m.inf_a, m.inf_b, m.inf_mismatch, m.nan_mismatch, m.mismatch_count) == (3, 2, 2, 0, 2)
    assert [w[0] for w in m.worst] == [(1,), (2,)]
    assert m.max_abs == 0.0 and not m.within(1e9, 1e9)


@needs_bf16
def test_float16_bfloat16_float64_neighbours_are_one_ulp() -> None:
    h = compare_arrays(np.array([1.0], np.float16), np.array([1.0 + 2**-10], np.float16))
    assert (h.ulp_max, h.max_abs, h.dtype_a) == (1, 2**-10, "float16")
    bf = compare_arrays(np.array([1.0], BF16), np.array([1.0 + 2**-7], BF16))
    assert (bf.ulp_max, bf.max_abs, bf.dtype_b, bf.kind) == (1, 2**-7, "bfloat16", "float")
    d = compare_arrays(np.array([1.0]), np.array([np.nextafter(1.0, 2.0)]))
    assert (d.ulp_max, d.max_abs) == (1, 2**-52)


def test_ulps_across_zero_count_both_magnitudes_and_the_signed_zero_step() -> None:
    tiny = np.float32(2**-149)  # the smallest subnormal: bits 1
    m = compare_arrays(np.array([-tiny], np.float32), np.array([tiny], np.float32))
    assert m.ulp_max == 3  # -tiny -> -0 -> +0 -> +tiny
    big = compare_arrays(np.array([-1e300]), np.array([1e300]))
    bits = struct.unpack("<q", struct.pack("<d", 1e300))[0]
    assert big.ulp_max == 2 * bits + 1 and big.ulp_max > 2**63  # beyond int64, still exact


@needs_bf16
def test_mixed_float_dtypes_compare_in_float64_without_ulps() -> None:
    a = np.array([1.0, 2.0, 3.0], np.float32)
    m = compare_arrays(a, a.astype(BF16))
    assert m.kind == "float" and m.ulp_max == -1 and not m.identical and m.mismatch_count == 0
    m = compare_arrays(np.array([1, 2, 3], np.int32), np.array([1.0, 2.5, 3.0], np.float32))
    assert (m.kind, m.mismatch_count, m.max_abs, m.ulp_max) == ("float", 1, 0.5, -1)


def test_int32_ranks_by_difference() -> None:
    m = compare_arrays(np.array([1, 2, 3, 4], np.int32), np.array([1, 7, 2, 4], np.int32))
    assert (m.kind, m.identical, m.mismatch_count, m.ulp_max) == ("exact", False, 2, -1)
    assert m.worst == (((1,), 2, 7), ((2,), 3, 2))
    # How far apart, not only how many: max |a-b| = |2-7| = 5 and max |a-b|/max(|a|,|b|) = 5/7
    # (it was 0.0, which printed "max abs 0" next to the mismatches of a shifted gather index).
    assert (m.max_abs, m.max_rel, m.cosine, m.sqnr_db) == (5.0, 5 / 7, 1.0, math.inf)
    assert not m.within(100, 100) and compare_arrays(np.arange(3), np.arange(3)).within(0, 0)


def test_integer_magnitudes_do_not_overflow() -> None:
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max
    m = compare_arrays(np.array([lo, 5, 0], np.int64), np.array([hi, 5, 1], np.int64))
    assert m.max_abs == float(2**64 - 1) and m.mismatch_count == 2 and m.max_rel == (2**64 - 1) / 2**63
    u = compare_arrays(np.array([2**64 - 1], np.uint64), np.array([-1], np.int64))  # apart by 2**64
    assert u.max_abs == float(2**64)
    small = compare_arrays(np.array([-128, 3], np.int8), np.array([127, 3], np.int8))  # int8 would wrap to -1
    assert (small.max_abs, small.max_rel, small.mismatch_count) == (255.0, 255 / 128, 1)
    assert compare_arrays(np.array([True]), np.array([False])).max_abs == 0.0  # bool: count only


def test_bool_and_bytes_list_mismatches_by_position() -> None:
    m = compare_arrays(np.array([True, False, True]), np.array([True, True, False]))
    assert m.worst == (((1,), False, True), ((2,), True, False)) and m.mismatch_count == 2
    s = compare_arrays(np.array([[b"ab", b"\xff"]]), np.array([[b"ab", b"c"]]))
    assert (s.kind, s.dtype_a, s.mismatch_count) == ("exact", "S2", 1)
    assert s.worst == (((0, 1), "\\xff", "c"),)
    mixed = compare_arrays(np.array(["ab"]), np.array([b"ab"]))  # str vs bytes never equal
    assert mixed.mismatch_count == 1 and not mixed.identical
    objects = np.array([b"x", b"yz", b"w"], dtype=object)  # what a TF string tensor arrives as
    changed = objects.copy()
    changed[2] = b"v"
    o = compare_arrays(objects, changed, chunk_elems=2)
    assert (o.kind, o.dtype_a, o.mismatch_count, o.worst) == ("exact", "object", 1, (((2,), "w", "v"),))
    assert compare_arrays(objects, objects.copy()).identical


def test_zero_dimensional_and_empty_arrays() -> None:
    m = compare_arrays(np.float32(1.0), np.float32(2.0))
    assert m.shape == () and m.size == 1 and m.worst == (((), 1.0, 2.0),) and m.max_abs == 1.0
    e = compare_arrays(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.float32))
    assert e.identical and e.size == 0 and e.mismatch_count == 0 and e.sqnr_db == math.inf
    assert compare_arrays(np.zeros(0, "S3"), np.zeros(0, "S3")).identical


def test_shape_mismatch_names_both_shapes() -> None:
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(3, 2\)"):
        compare_arrays(np.zeros((2, 3)), np.zeros((3, 2)))


def test_overflowing_float32_differences_stay_exact() -> None:
    a = np.array([3e38, 1.0, -3e38], np.float32)
    b = np.array([-3e38, 1.0, 3e38], np.float32)
    m = compare_arrays(a, b)
    check_against_reference(m, a, b)
    assert m.max_abs == 2 * float(np.float32(3e38)) and m.max_rel == 2.0


@needs_bf16
@pytest.mark.parametrize(("a", "b", "dtype"), [
    ([520192, 0, 0, 65536], [1, 0, 0, 1.00117e-07], "bfloat16"),  # found by hypothesis
    ([-3122.055193507378, 16841.95001608635, 18523.872338916353, -4433.371589412735],
     [-0.0041718249967549435, 0.0, -0.010662565674625325, 0.0], "float64"),
    ([158720.0, -36096.0, -32256.0], [-0.03369140625, 0.193359375, -0.0], "bfloat16"),
])
def test_cosine_when_b_is_tiny_next_to_a(a: list[float], b: list[float], dtype: str) -> None:
    """|b|^2 = |a|^2 - 2 a.d + |d|^2 cancels here: the cosine must not trust it (it was 3e-5
    off for the first pair, 2e-4 for the second), whatever the chunking."""
    dt = BF16 if dtype == "bfloat16" else np.dtype(dtype)
    xa, xb = np.array(a, dt), np.array(b, dt)
    a64, b64 = xa.astype(np.float64), xb.astype(np.float64)
    exact = float(a64 @ b64) / math.sqrt(float(a64 @ a64) * float(b64 @ b64))
    for chunk in (1, 2, 4):
        m = compare_arrays(xa, xb, chunk_elems=chunk, rtols=RTOLS)
        assert abs(m.cosine - exact) <= 1e-9, (chunk, m.cosine, exact)
        check_against_reference(m, xa, xb)


def test_many_sign_changes_in_one_block() -> None:
    rng = np.random.default_rng(1)
    a = rng.standard_normal(5000).astype(np.float32)
    b = a.copy()
    b[::7] *= -1  # hundreds of pairs straddling zero
    b[3] = -0.0
    a[3] = 0.0
    check_against_reference(compare_arrays(a, b, chunk_elems=1000), a, b)


def test_non_contiguous_input_matches_its_copy() -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((40, 30)).astype(np.float32)
    b = a + rng.standard_normal((40, 30)).astype(np.float32) * 1e-3
    m = compare_arrays(a.T, b.T, chunk_elems=97)
    assert m.to_json() == compare_arrays(a.T.copy(), b.T.copy(), chunk_elems=97).to_json()
    check_against_reference(m, a.T.copy(), b.T.copy())


def test_memory_mapped_input(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((64, 100)).astype(np.float32)
    b = a.copy()
    b[5, 7] += 1e-3
    b[60, 1] = np.nan
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    ma = np.load(tmp_path / "a.npy", mmap_mode="r")
    mb = np.load(tmp_path / "b.npy", mmap_mode="r")
    m = compare_arrays(ma, mb, chunk_elems=1000)
    assert m.to_json() == compare_arrays(a, b, chunk_elems=1000).to_json()
    assert m.mismatch_count == 2 and m.nan_mismatch == 1 and m.worst[0][0] == (60, 1)
    assert m.worst[1][0] == (5, 7) and m.max_abs == abs(float(b[5, 7]) - float(a[5, 7]))
    assert summary_stats(ma, chunk_elems=999) == summary_stats(a)


def test_extra_memory_is_bounded_by_the_chunk_not_the_tensor(tmp_path: Path) -> None:
    n = 1 << 21  # 8 MiB per side
    rng = np.random.default_rng(4)
    a = rng.standard_normal(n).astype(np.float32)
    b = a + rng.standard_normal(n).astype(np.float32) * 1e-6
    b[::1000] = np.nan  # every block takes the NaN/Inf path too
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    ma, mb = (np.load(tmp_path / f, mmap_mode="r") for f in ("a.npy", "b.npy"))
    del a, b
    tracemalloc.start()
    try:
        m = compare_arrays(ma, mb, chunk_elems=1 << 14, rtols=[1e-5])
        stats = summary_stats(mb, chunk_elems=1 << 14)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert m.nan_mismatch == n // 1000 + 1 and stats["nan"] == n // 1000 + 1
    assert peak < 4 << 20, peak  # well under one side's 8 MiB


def test_small_tensors_are_compared_by_the_calling_thread_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below HELPER_MIN elements a helper thread's start costs more than it takes over."""
    from tracer.metrics import arrays  # noqa: PLC0415

    a = np.linspace(-3, 3, arrays.HELPER_MIN - 1, dtype=np.float32)
    b = a * np.float32(1.001)
    expected = compare_arrays(a, b, workers=1, rtols=RTOLS)

    def no_pool() -> None:
        raise AssertionError("a small tensor asked for a helper thread")

    monkeypatch.setattr(arrays, "_pool", no_pool)
    assert compare_arrays(a, b, rtols=RTOLS) == expected
    with pytest.raises(AssertionError, match="helper"):
        compare_arrays(a, b, rtols=RTOLS, workers=2)  # asked for explicitly: still honoured


def test_a_helper_that_never_starts_is_not_waited_for(monkeypatch: pytest.MonkeyPatch) -> None:
    """On a busy machine a helper may start after the calling thread took every block: it is
    dropped, and the result is the one worker's."""
    import threading  # noqa: PLC0415
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from tracer.metrics import arrays  # noqa: PLC0415

    rng = np.random.default_rng(4)
    a = rng.standard_normal(200_000).astype(np.float32)
    b = a + rng.standard_normal(200_000).astype(np.float32) * 1e-4
    expected = compare_arrays(a, b, workers=1, chunk_elems=20_000, rtols=RTOLS)
    busy, gate = ThreadPoolExecutor(1), threading.Event()
    busy.submit(gate.wait)  # its one thread is taken: whatever is submitted next waits
    monkeypatch.setattr(arrays, "_pool", lambda: busy)
    got: list[TensorMetrics] = []
    t = threading.Thread(target=lambda: got.append(compare_arrays(a, b, workers=2, chunk_elems=20_000, rtols=RTOLS)))
    t.start()
    t.join(timeout=30)
    waited = t.is_alive()  # still waiting for the helper that cannot start
    gate.set()
    busy.shutdown()
    t.join()
    assert not waited and got == [expected]


def test_release_gives_back_mapped_pages_and_changes_nothing(tmp_path: Path) -> None:
    from tracer.metrics.arrays import _Mapped  # noqa: PLC0415

    rng = np.random.default_rng(5)
    a = rng.standard_normal(300_000).astype(np.float32)
    b = a + np.float32(1e-4)
    b[1234] = np.nan
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    ma, mb = (np.load(tmp_path / f, mmap_mode="r") for f in ("a.npy", "b.npy"))
    kept = compare_arrays(ma, mb, rtols=[1e-5], chunk_elems=50_000)
    released = compare_arrays(ma, mb, rtols=[1e-5], chunk_elems=50_000, release=True)
    assert json.dumps(released.to_json()) == json.dumps(kept.to_json())
    assert np.array_equal(ma, a) and np.isnan(mb[1234])  # the pages come back when read again
    assert _Mapped.of(np.asarray(ma)) is not None and _Mapped.of(np.asarray(ma[::2])) is None
    assert _Mapped.of(a) is None and _Mapped.of(np.load(tmp_path / "a.npy", mmap_mode="c")) is None
    assert compare_arrays(a, b, release=True).to_json() == compare_arrays(a, b).to_json()


def test_json_round_trip_keeps_inf_and_nan() -> None:
    a = np.array([1.0, np.nan, 0.0, 4.0], np.float32)
    b = np.array([1.0, 5.0, 0.0, 4.0], np.float32)
    m = compare_arrays(a, b, rtols=[1e-3])
    assert m.sqnr_db == math.inf
    text = json.dumps(m.to_json(), allow_nan=False)
    assert '"sqnr_db": "inf"' in text and '"a": "nan"' in text
    back = TensorMetrics.from_json(json.loads(text))
    assert back.to_json() == m.to_json() and back.shape == (4,) and back.worst[0][0] == (1,)
    assert math.isnan(back.worst[0][1]) and back.excess_at_rtol == m.excess_at_rtol
    ints = compare_arrays(np.array(["inf", "x"]), np.array(["nan", "x"]))
    assert TensorMetrics.from_json(json.loads(json.dumps(ints.to_json()))).worst == (((0,), "inf", "nan"),)


def test_every_metric_is_declared_once_and_the_rest_follows() -> None:
    """The declarations drive the result of both kinds, the JSON encoding and the display."""
    names = [m.name for m in METRICS]
    assert names == ["identical", "mismatch_count", "max_abs", "max_rel", "mean_abs", "rel_l2", "ulp_max",
                     "cosine", "sqnr_db", "nan_mismatch", "inf_mismatch", "nan_a", "nan_b", "inf_a", "inf_b"]
    assert [m.name for m in METRICS if m.type == "float"] == ["max_abs", "max_rel", "mean_abs", "rel_l2", "cosine",
                                                              "sqnr_db"]
    exact = compare_arrays(np.array([1, 5], np.int32), np.array([1, 2], np.int32))
    for m in METRICS:  # exact kinds: measured, or the declared constant
        if m.exact is not MEASURED:
            assert getattr(exact, m.name) == m.exact, m.name
    assert (exact.mismatch_count, exact.max_abs, exact.max_rel) == (1, 3.0, 0.6)
    f = compare_arrays(np.array([1, 2, 3], np.float32), np.array([1, 2, 3.5], np.float32))
    assert f.describe().startswith("identical False, mismatches 1, max abs 0.5, max rel 0.142857, mean abs 0.166667")
    assert "SQNR dB 17.4819" in f.describe() and json.loads(json.dumps(f.to_json()))["sqnr_db"] == f.sqnr_db
    with pytest.raises(ValueError, match="must measure"):
        exact_result({"identical": True}, dtype_a="int32", dtype_b="int32", shape=(1,), worst=())


# --------------------------------------------------------------------------- tolerances


@pytest.mark.parametrize("seed", range(6))
def test_within_agrees_with_allclose(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(3000) * 10 ** rng.uniform(-3, 3, 3000)).astype(np.float32)
    b = (a * (1 + rng.standard_normal(3000) * 1e-4) + rng.standard_normal(3000) * 1e-6).astype(np.float32)
    a[::500] = 0.0
    b[::500] = 0.0 if seed % 2 else 1e-7
    a[7] = b[7] = np.nan
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    for atol in (0.0, 1e-7, 1e-6, 1e-5, 1e-3):
        for rtol in (0.0, 1e-5, 1e-4, 3e-4, 1e-3):
            expected = np.allclose(b64, a64, rtol=rtol, atol=atol, equal_nan=True)
            probed = compare_arrays(a, b, rtols=[rtol], chunk_elems=700)
            assert probed.within(atol, rtol) == expected, (atol, rtol)
            assert within_tolerance(probed, atol, rtol) == expected
            try:
                assert compare_arrays(a, b).within(atol, rtol) == expected, (atol, rtol)
            except ValueError as exc:  # undecidable from the summary alone: says how to fix it
                assert "rtols=" in str(exc)


def test_within_raises_when_the_summary_cannot_decide() -> None:
    a = np.linspace(1, 100, 50)
    b = a * (1 + 1e-5)
    a[0], b[0] = 1e-3, 1e-3 + 1e-6  # the only offender: large relative, small absolute error
    m = compare_arrays(a, b, k_worst=3)
    with pytest.raises(ValueError, match=r"rtols=\[2e-05\]"):
        m.within(1e-7, 2e-5)
    assert m.within(1e-7, 0.0) is False and m.within(2e-3, 0.0) is True  # rtol 0: max_abs decides
    probed = compare_arrays(a, b, k_worst=3, rtols=[2e-5])
    assert probed.within(1e-7, 2e-5) is False and probed.within(2e-6, 2e-5) is True
    assert probed.excess_at_rtol[0][1] == pytest.approx(1e-6 - 2e-5 * 1e-3, rel=1e-9)


# --------------------------------------------------------------------------- properties

SPECIALS = [0.0, -0.0, 1.0, -1.0, np.nan, np.inf, -np.inf, 1e-40, -1e-45, 3e38, 65504.0, 1e-7]


@st.composite
def float_pairs(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray]:
    dtype = draw(st.sampled_from(FLOATS))
    shape = draw(st.lists(st.integers(0, 5), min_size=0, max_size=3).map(tuple))
    n = math.prod(shape)
    values = st.one_of(st.sampled_from(SPECIALS), st.floats(-1e6, 1e6, width=32))
    with np.errstate(over="ignore"):  # 3e38 becomes inf in float16: wanted
        a = np.array(draw(st.lists(values, min_size=n, max_size=n)), np.float64).astype(dtype)
    a = a.reshape(shape)
    b = a.copy().ravel()
    for i in range(n):
        how = draw(st.sampled_from(["keep", "keep", "step", "value", "flip"]))
        if how == "step":
            bits = b.view(f"u{b.itemsize}")
            bits[i] = (int(bits[i]) + draw(st.sampled_from([-3, -1, 1, 2]))) % (1 << 8 * b.itemsize)
        elif how == "value":
            with np.errstate(over="ignore"):
                b[i] = draw(values)
        elif how == "flip":
            b[i] = -b[i]
    return a, b.reshape(shape)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(float_pairs(), st.integers(1, 7), st.integers(0, 6))
def test_chunking_never_changes_the_answer(
    pair: tuple[np.ndarray, np.ndarray], chunk: int, k: int
) -> None:
    a, b = pair
    whole = compare_arrays(a, b, k_worst=k, rtols=RTOLS)
    check_against_reference(compare_arrays(a, b, rtols=RTOLS), a, b)
    part = compare_arrays(a, b, k_worst=k, chunk_elems=chunk, rtols=RTOLS)
    for name in EXACT_FIELDS + ("excess_at_rtol",):
        assert getattr(part, name) == getattr(whole, name), name
    assert json.dumps(part.to_json()["worst"]) == json.dumps(whole.to_json()["worst"])
    alone = compare_arrays(a, b, k_worst=k, chunk_elems=chunk, rtols=RTOLS, workers=1)
    assert json.dumps(alone.to_json()) == json.dumps(part.to_json())  # threads change nothing
    rel = 1e-12 if a.dtype == np.float64 else 1e-5
    for name in ("mean_abs", "rel_l2", "sqnr_db", "cosine"):
        assert same_float(getattr(part, name), getattr(whole, name), rel, 1e-5), name


@settings(max_examples=100, deadline=None)
@given(
    st.sampled_from([np.int8, np.int32, np.uint64, np.bool_]),
    st.lists(st.integers(0, 100), min_size=0, max_size=40),
    st.lists(st.integers(0, 39), max_size=10),
    st.integers(1, 7),
)
def test_exact_kinds_chunking(dtype: Any, values: list[int], flips: list[int], chunk: int) -> None:
    a = np.array(values, dtype=dtype)
    b = a.copy()
    for i in flips:
        if i < a.size:
            b[i] = not b[i] if dtype is np.bool_ else b[i] + 1
    whole, part = compare_arrays(a, b, k_worst=3), compare_arrays(a, b, k_worst=3, chunk_elems=chunk)
    assert part == whole
    assert whole.mismatch_count == int(np.sum(a != b)) and whole.identical == (whole.mismatch_count == 0)
    if dtype is not np.bool_:
        exact = max((abs(int(x) - int(y)) for x, y in zip(a.tolist(), b.tolist())), default=0)
        assert whole.max_abs == float(exact)


# --------------------------------------------------------------------------- summaries


@needs_bf16
def test_summary_stats() -> None:
    f = np.array([[1.0, np.nan], [-3.0, np.inf]], np.float32)
    assert summary_stats(f) == {"min": -3.0, "max": 1.0, "mean": -1.0, "nan": 1, "inf": 1}
    assert summary_stats(f, chunk_elems=1) == summary_stats(f)
    assert summary_stats(np.arange(10, dtype=np.int64), chunk_elems=3) == {
        "min": 0, "max": 9, "mean": 4.5, "nan": 0, "inf": 0,
    }
    assert summary_stats(np.array([True, False, True])) == {"min": 0, "max": 1, "mean": 2 / 3, "nan": 0, "inf": 0}
    assert summary_stats(np.array([1.5, -2.0], BF16))["min"] == -2.0
    assert summary_stats(np.array([3 + 4j]))["max"] == 5.0
    assert summary_stats(np.array([np.nan])) == {"min": None, "max": None, "mean": None, "nan": 1, "inf": 0}
    assert summary_stats(np.array([b"x"])) == {} and summary_stats(np.array(["x"])) == {}
