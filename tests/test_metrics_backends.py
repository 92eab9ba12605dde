"""The compiled kernel against its numpy definition: the same bits for every metric.

``tracer.metrics`` runs float pairs through ``tracer.metrics.kernel`` (numba) when it can be
imported, else through ``tracer.metrics.block`` (numpy); ``TFTRACE_NO_NUMBA`` forces the latter.
Both must give the very same TensorMetrics, whatever the dtypes, the special values, the
chunking and the number of workers. Also: the histogram against the report's former
definition, and the compiled kernel's cache when the package cannot be written.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_metrics import BF16, FLOATS, RTOLS, float_pairs, needs_bf16

from tracer.metrics import block as metrics_block, scan as metrics_scan
from tracer.metrics import HISTOGRAM_DECADES, TensorMetrics, compare_arrays

REPO = Path(__file__).resolve().parents[1]
needs_numba = pytest.mark.skipif(metrics_scan._compiled is None, reason="numba is not installed")
SPECIAL = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, 1e-45, -1e-40, 1e-310, 3e38, -3e38, 65504.0])


def both(monkeypatch: pytest.MonkeyPatch, a: np.ndarray, b: np.ndarray, **kw: Any) -> TensorMetrics:
    """compare_arrays through both kernels; asserts the two results are the same, returns one."""
    monkeypatch.delenv(metrics_scan.NO_NUMBA_ENV, raising=False)
    compiled = compare_arrays(a, b, **kw)
    monkeypatch.setenv(metrics_scan.NO_NUMBA_ENV, "1")
    reference = compare_arrays(a, b, **kw)
    monkeypatch.delenv(metrics_scan.NO_NUMBA_ENV)
    # JSON writes NaN as "nan", so NaN values compare equal; repr keeps float64 bits and -0.0
    assert json.dumps(compiled.to_json()) == json.dumps(reference.to_json())
    assert repr(compiled) == repr(reference)
    return compiled


@needs_numba
def test_the_compiled_kernel_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(metrics_scan.NO_NUMBA_ENV, raising=False)
    assert metrics_scan.block_kernel() is metrics_scan._compiled
    monkeypatch.setenv(metrics_scan.NO_NUMBA_ENV, "1")
    assert metrics_scan.block_kernel() is metrics_block.scan_block


@needs_numba
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(float_pairs(), st.integers(1, 40), st.integers(0, 6), st.sampled_from([1, 2]))
def test_same_bits_on_every_dtype_and_special_value(
    monkeypatch: pytest.MonkeyPatch, pair: tuple[np.ndarray, np.ndarray], chunk: int, k: int, workers: int,
) -> None:
    a, b = pair
    both(monkeypatch, a, b, k_worst=k, chunk_elems=chunk, rtols=RTOLS, workers=workers)
    both(monkeypatch, a, b, k_worst=k)


@needs_numba
@pytest.mark.parametrize("dtype", [dt.name for dt in FLOATS])
@pytest.mark.parametrize("seed", range(3))
def test_same_bits_across_sub_blocks_with_special_runs(monkeypatch: pytest.MonkeyPatch, dtype: str, seed: int) -> None:
    """Long arrays: identical stretches, NaN/Inf runs in the middle of a block (handed to the
    numpy definition mid-kernel), sign flips, subnormals, a size that is no multiple of 16."""
    rng = np.random.default_rng(seed)
    n = 50_000 + seed * 7
    with np.errstate(over="ignore"):
        a = (rng.standard_normal(n) * 10.0 ** rng.integers(-6, 4, n)).astype(dtype)
        b = (a.astype(np.float64) * (1 + rng.standard_normal(n) * 1e-3)).astype(dtype)
        b[: n // 3] = a[: n // 3]  # a bitwise-identical stretch
        b[n // 2 : n // 2 + 40] = -b[n // 2 : n // 2 + 40]  # pairs across zero
        picks = rng.integers(0, n, 60)
        a[picks[:30]] = rng.choice(SPECIAL, 30).astype(dtype)
        b[picks[30:]] = rng.choice(SPECIAL, 30).astype(dtype)
        b[20_000:20_100] = np.nan  # a run of special values inside a sub-block
    for kw in ({}, {"rtols": RTOLS, "k_worst": 7}, {"chunk_elems": 3_000, "rtols": (1e-5,)}, {"workers": 1}):
        m = both(monkeypatch, a, b, **kw)
    assert m.nan_mismatch > 0 and not m.identical


@needs_numba
@needs_bf16
def test_same_bits_for_mixed_dtypes_and_exact_kinds(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(7)
    a = rng.standard_normal(10_000).astype(np.float32)
    a[::97] = 0.0
    pairs = [
        (a, a.astype(np.float64) * (1 + 1e-9)),
        (a, a.astype(BF16)),
        (a.astype(np.float16), a),
        (np.arange(5_000, dtype=np.int32), np.arange(5_000).astype(np.float32) + 0.25),
        (np.arange(5_000, dtype=np.int64), np.arange(5_000, dtype=np.int64) * 2),
        (np.arange(5_000, dtype=np.int32), np.arange(5_000, dtype=np.int32)[::-1].copy()),  # exact max |a-b|
    ]
    for x, y in pairs:
        both(monkeypatch, x, y, rtols=(1e-5, 0.5), k_worst=4)
        both(monkeypatch, x, y, chunk_elems=777)
    ints = both(monkeypatch, pairs[-1][0], pairs[-1][1], chunk_elems=777, workers=2)
    assert (ints.kind, ints.max_abs, ints.mismatch_count) == ("exact", 4999.0, 5_000)


@needs_numba
def test_identical_and_empty_inputs(monkeypatch: pytest.MonkeyPatch) -> None:
    x = np.linspace(-5, 5, 70_001, dtype=np.float32)
    m = both(monkeypatch, x, x.copy(), rtols=(1e-5,))
    assert m.identical and m.histogram == (x.size,) + (0,) * 15
    e = both(monkeypatch, np.zeros((0, 4), np.float32), np.zeros((0, 4), np.float32))
    assert e.histogram == () and e.diff_histogram() is None


# --------------------------------------------------------------------------- the histogram


def former_histogram(a: np.ndarray, b: np.ndarray) -> dict[str, Any]:
    """What tracer/report/build.py computed on whole tensors, on |a-b| in the compared precision."""
    pipe = np.float32 if a.dtype == b.dtype and a.dtype.itemsize <= 4 else np.float64
    with np.errstate(all="ignore"):  # NaN casts and inf - inf are part of the inputs
        diff = np.abs(a.astype(pipe) - b.astype(pipe)).astype(np.float64)
        finite = diff[_finite_pairs(a, b)]
    lo, hi = HISTOGRAM_DECADES
    logs = np.log10(finite[finite > 0])
    counts, edges = np.histogram(np.clip(logs, lo, hi - 1e-9), bins=hi - lo, range=(lo, hi))
    return {"log10_edges": [int(e) for e in edges], "counts": counts.tolist(), "zero": int(np.sum(finite == 0))}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_histogram_matches_log10_binning_at_every_decade_edge(monkeypatch: pytest.MonkeyPatch, dtype: str) -> None:
    """Sizes just below, at and above each power of ten, and far outside the range."""
    sizes = []
    for e in range(-14, 6):
        p = np.array(10.0**e, dtype)
        sizes += [np.nextafter(p, np.array(0, dtype)), p, np.nextafter(p, np.array(np.inf, dtype))]
    sizes = np.array(sizes, dtype)
    a = np.zeros(sizes.size, dtype)
    a = np.concatenate([a, np.ones(50, dtype)])
    b = np.concatenate([sizes, np.ones(50, dtype)])
    m = both(monkeypatch, a, b) if metrics_scan._compiled is not None else compare_arrays(a, b)
    assert m.diff_histogram() == former_histogram(a, b)
    assert sum(m.histogram) == a.size


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(float_pairs(), st.integers(1, 9))
def test_histogram_matches_the_former_report_histogram(pair: tuple[np.ndarray, np.ndarray], chunk: int) -> None:
    a, b = pair
    m = compare_arrays(a, b, chunk_elems=chunk)
    if a.size == 0:
        assert m.diff_histogram() is None
        return
    assert m.diff_histogram() == former_histogram(a, b)
    assert sum(m.histogram) == int(np.count_nonzero(_finite_pairs(a, b)))


def _finite_pairs(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        return np.isfinite(a.astype(np.float64)) & np.isfinite(b.astype(np.float64))


def test_differences_whose_squares_overflow_float64(monkeypatch: pytest.MonkeyPatch) -> None:
    """|a-b| of 1e200: its square is beyond float64, so the sum of squares is inf. SQNR was a math
    domain error there (log10 of 0); it is -inf, as rel L2 is inf."""
    a, b = np.array([1.0, 2.0, 3.0]), np.array([1e200, 2.0, 3.0])
    m = both(monkeypatch, a, b)
    assert m.sqnr_db == -math.inf and m.rel_l2 == math.inf and m.max_abs == 1e200 - 1.0
    assert both(monkeypatch, a, a).sqnr_db == math.inf


def test_histogram_survives_json() -> None:
    a = np.array([1.0, 2.0, 3.0, np.nan], np.float32)
    m = compare_arrays(a, a + np.float32(1e-3))
    back = TensorMetrics.from_json(json.loads(json.dumps(m.to_json())))
    assert back.histogram == m.histogram and back.diff_histogram() == m.diff_histogram()
    older = {k: v for k, v in m.to_json().items() if k != "histogram"}  # written before it existed
    assert TensorMetrics.from_json(older).diff_histogram() is None


# --------------------------------------------------------------------------- compiling


@needs_numba
def test_a_layout_change_on_one_side_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cached machine code keeps constants: a layout out of step must not reach it."""
    from tracer.metrics import kernel as metrics_kernel  # noqa: PLC0415

    monkeypatch.setattr(metrics_block, "LANES", metrics_block.LANES * 2)
    with pytest.raises(RuntimeError, match="LANES"):
        metrics_kernel._check_layout()


@needs_numba
def test_no_writable_cache_directory_still_compiles(monkeypatch: pytest.MonkeyPatch) -> None:
    import numba  # noqa: PLC0415

    from tracer.jit import compiled  # noqa: PLC0415 - the metrics kernel and format 2's unshuffle use it

    real = numba.njit

    def no_locator(*args: Any, **kw: Any) -> Any:
        if kw.get("cache"):
            raise RuntimeError("cannot cache function 'f': no locator available for file 'x.py'")
        return real(*args, **kw)

    monkeypatch.setattr(numba, "njit", no_locator)
    kernel = compiled(lambda v: v + 1)
    assert kernel(1) == 2 and not kernel._cache.cache_path


CHILD = """
import json, sys
import numpy as np
import tracer.metrics.scan as s
from tracer.metrics import compare_arrays
a = np.linspace(-3, 3, 5000, dtype=np.float32)
m = compare_arrays(a, a * np.float32(1.001) + np.float32(1e-6), rtols=(1e-5,))
print(json.dumps({"compiled": s._compiled is not None, "metrics": m.to_json()}))
"""


def _readonly_package(tmp_path: Path) -> Path:
    """A copy of tracer/ where nothing can go into ``__pycache__`` (a file of that name)."""
    root = tmp_path / "site"
    shutil.copytree(REPO / "tracer", root / "tracer", ignore=shutil.ignore_patterns("__pycache__", "templates"))  # (a checkout may link tracer/templates)
    shutil.copytree(REPO / "templates", root / "tracer" / "templates")
    for package in [root / "tracer", *(p for p in (root / "tracer").iterdir() if p.is_dir())]:
        (package / "__pycache__").write_text("not a directory")
    return root


def _run_child(site: Path, home: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NUMBA_", "XDG_", "TFTRACE_"))}
    env.update(PYTHONPATH=str(site), HOME=str(home))
    proc = subprocess.run([sys.executable, "-c", CHILD], env=env, cwd=site, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@needs_numba
@pytest.mark.slow
def test_read_only_package_caches_in_the_user_directory_or_not_at_all(tmp_path: Path) -> None:
    """Compiles from scratch twice (a few seconds each): cache in ~/.cache/numba, then none."""
    site = _readonly_package(tmp_path)
    expected = compare_arrays(
        np.linspace(-3, 3, 5000, dtype=np.float32),
        np.linspace(-3, 3, 5000, dtype=np.float32) * np.float32(1.001) + np.float32(1e-6), rtols=(1e-5,),
    ).to_json()
    home = tmp_path / "home"
    home.mkdir()
    out = _run_child(site, home)
    assert out["compiled"] and out["metrics"] == json.loads(json.dumps(expected))
    assert list((home / ".cache" / "numba").rglob("kernel._scan*.nbc")), "no user-wide cache written"
    closed = tmp_path / "closed"
    closed.mkdir()
    (closed / ".cache").write_text("not a directory")  # no user-wide cache either
    out = _run_child(site, closed)
    assert out["compiled"] and out["metrics"] == json.loads(json.dumps(expected))
    assert not math.isnan(out["metrics"]["cosine"])


@needs_numba
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_the_first_read_called_from_python_counts_like_numpy(dtype: str) -> None:
    """``metrics_kernel._bits`` is an overload inside compiled code; called from Python it must
    choose the same pass and count the same things (differing bits, NaN/Inf pairs, sign flips,
    ULP distance of the same-sign pairs)."""
    from tracer.metrics import kernel as metrics_kernel

    rng = np.random.default_rng(7)
    a = rng.standard_normal(4096).astype(dtype)
    b = a.copy()
    b[::7] = np.nextafter(b[::7], np.inf)  # one ULP up: same sign
    b[3] = -a[3]  # opposite signs
    b[10], a[20] = np.nan, np.inf
    pair = metrics_scan._pair_setup(a.dtype, b.dtype)
    ia, ib = a.view(pair.bits), b.view(pair.bits)
    mag, expo, low = pair.masks
    differ, special, cross, _across, same = metrics_kernel._bits(ia, ib, mag, expo, low)
    finite = np.isfinite(a) & np.isfinite(b)
    assert differ == np.count_nonzero(ia != ib)
    assert special == np.count_nonzero(~finite) == 2
    assert cross == np.count_nonzero(finite & (np.signbit(a) != np.signbit(b))) == 1
    assert same == 1  # the largest same-sign distance: one ULP
