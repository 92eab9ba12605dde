"""How far apart two captured tensors are: pure numpy, bounded memory, fast.

Every pair of captured tensors goes through :func:`compare_arrays`, and a tensor can be hundreds
of MB (a memory-mapped ``.npy``). So the flattened arrays are walked in blocks of
``chunk_elems`` with block-sized scratch buffers: peak extra memory is a small multiple of one
block per worker thread, never of the tensor. Speed comes from few passes per block:

- a bitwise test first (an integer subtraction of the raw bits, which the ULPs reuse): most
  pairs in a trace are identical, and identical blocks skip all other arithmetic;
- arithmetic in the tensor's own precision (float32 stays float32: half the bytes per pass),
  float64 only where it matters: block sums (float32 dots short enough to be good to ~1e-7)
  are added exactly in float64, and the few elements that decide a maximum are re-evaluated in
  float64, so ``max_abs``/``max_rel`` are float64-exact;
- cheap bounds that settle most blocks with no extra pass (a raw-bit distance below a dtype
  constant rules out a sign change; same-sign pairs have a relative error of at most 1).

Conventions, decided once:

- ``identical``: same dtype and the same bits everywhere. ``-0.0`` vs ``0.0`` and two NaNs with
  different payloads are *not* identical.
- ``mismatch_count``: positions whose bits differ, except that NaN vs NaN (any payload) counts
  as equal. So ``-0.0`` vs ``0.0`` is one mismatch with ``|a-b| = 0``, and 1 ULP apart.
- ULPs: bit patterns are mapped to one monotonic integer line on which ``-0.0`` sits one step
  below ``+0.0``; the distance is the number of steps. Needs both sides in the same float dtype
  (float16, bfloat16, float32, float64); otherwise both sides are compared in float64 and
  ``ulp_max`` is -1.
- The finite-value metrics (``max_abs`` ... ``sqnr_db``, the size ranking of ``worst``) use the
  positions where both sides are finite; NaN/Inf are counted in ``nan_*``/``inf_*``, and
  NaN/Inf mismatches head ``worst`` (in position order).
- Exact kinds (integers, bool, strings, complex, anything else): only ``identical``,
  ``mismatch_count`` and ``worst`` are measured (integers ranked by ``|a-b|``, the rest by
  position); ``max_abs``, ``max_rel``, ``mean_abs``, ``rel_l2`` are 0.0, ``cosine`` 1.0,
  ``sqnr_db`` +inf and ``ulp_max`` -1 (not applicable): read ``mismatch_count`` instead.
- JSON has no literal for non-finite floats: :meth:`TensorMetrics.to_json` writes them as the
  strings ``"inf"``, ``"-inf"``, ``"nan"`` and :meth:`TensorMetrics.from_json` reads them back.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from .metrics_result import TensorMetrics, within_tolerance
from .metrics_scan import _block, _count, _cross, _ExactScan, _flat, _FloatScan, _is_float, _pair_is_float, _Scan

__all__ = [
    "TensorMetrics",
    "compare_arrays",
    "within_tolerance",
    "summary_stats",
    "DEFAULT_CHUNK_ELEMS",
]

# 256 Ki elements (1 MiB of float32) per block: measured fastest on a 2-core, 1 MiB-L2 machine
# (4 Mi blocks push the ~11 passes per block out of cache and run 2.5x slower; 64 Ki blocks pay
# Python's per-call overhead), and short enough for accurate float32 dots.
DEFAULT_CHUNK_ELEMS = 1 << 18


# --------------------------------------------------------------------------- driver


def compare_arrays(
    a: np.ndarray,
    b: np.ndarray,
    *,
    k_worst: int = 5,
    chunk_elems: int = DEFAULT_CHUNK_ELEMS,
    rtols: Sequence[float] = (),
    workers: int | None = None,
) -> TensorMetrics:
    """Compare A (the reference) with B element by element; see the module docstring.

    Shapes must be equal (callers align rows first). Each value in ``rtols`` records the exact
    answer to ``within(atol, rtol)`` for every ``atol``, for a few extra passes per block.
    ``workers`` threads (default: up to 2, by the CPUs available) each take every other block
    with their own buffers; the result does not depend on their number or timing.
    """
    a, b = np.asarray(a), np.asarray(b)  # a memmap stays mapped; only its subclass is dropped
    if a.shape != b.shape:
        raise ValueError(f"cannot compare different shapes: A {a.shape} vs B {b.shape}")
    if chunk_elems < 1 or k_worst < 0:
        raise ValueError(f"need chunk_elems >= 1 and k_worst >= 0, got {chunk_elems}, {k_worst}")
    block = min(chunk_elems, max(a.size, 1))
    starts = range(0, a.size, block)
    workers = max(1, min(_cores() if workers is None else workers, len(starts)))
    floats, rtols = _pair_is_float(a.dtype, b.dtype), tuple(dict.fromkeys(rtols))

    def scan() -> _Scan:
        if floats:
            return _FloatScan(a.dtype, b.dtype, k_worst, rtols, block, lambda: _cross(a, b, block))
        return _ExactScan(a.dtype, b.dtype, k_worst)

    scans = [scan() for _ in range(workers)]
    fa, fb = _flat(a), _flat(b)

    def run(j: int) -> None:  # worker j takes every workers-th block, in increasing order
        with np.errstate(all="ignore"):  # overflow and 0/0 are expected, and handled explicitly
            for s in starts[j::workers]:
                scans[j].feed(s, _block(a, fa, s, s + block), _block(b, fb, s, s + block))

    helpers = [_pool().submit(run, j) for j in range(1, workers)]
    run(0)  # the calling thread is worker 0
    for done in helpers:
        done.result()  # re-raises a worker's exception here
    for other in scans[1:]:
        scans[0].merge(other)
    with np.errstate(all="ignore"):
        return scans[0].result(a.shape, a.dtype == b.dtype)


def _cores() -> int:
    """Worker threads: numpy and BLAS release the GIL, so a second core takes half the blocks."""
    try:
        return min(2, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return min(2, os.cpu_count() or 1)


_POOL: list[ThreadPoolExecutor] = []  # made on first use, not at import; kept for the process
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if not _POOL:
            _POOL.append(ThreadPoolExecutor(3, thread_name_prefix="tftrace-metrics"))
        return _POOL[0]


# --------------------------------------------------------------------------- summaries


def summary_stats(a: np.ndarray, chunk_elems: int = DEFAULT_CHUNK_ELEMS) -> dict[str, Any]:
    """``{"min", "max", "mean", "nan", "inf"}`` over the finite values, read in chunks.

    Integers and bool work too (min/max as ints); complex values are summarised by magnitude;
    strings and other non-numbers give ``{}``. min/max/mean are None when nothing is finite.
    """
    a = np.asarray(a)
    dt = a.dtype
    floaty = _is_float(dt) or dt.kind == "c"
    if not (floaty or dt.kind in "biu"):
        return {}
    flat = _flat(a)
    lo: Any = None
    hi: Any = None
    total, count, nan, inf = 0.0, 0, 0, 0
    for s in range(0, a.size, chunk_elems):
        c = _block(a, flat, s, s + chunk_elems)
        if floaty:
            c = c if dt.kind in "fc" else c.astype(np.float32 if dt.itemsize <= 2 else np.float64)
            bad_nan, bad_inf = _count(np.isnan(c)), _count(np.isinf(c))
            nan, inf = nan + bad_nan, inf + bad_inf
            c = np.abs(c) if dt.kind == "c" else c  # |z| may overflow: filtered just below
            c = c[np.isfinite(c)] if bad_nan or bad_inf or dt.kind == "c" else c
        elif dt.kind == "b":
            c = c.view(np.uint8)
        if c.size:
            conv: Callable[[Any], Any] = float if floaty else int
            cmin, cmax = conv(c.min()), conv(c.max())
            lo, hi = (cmin, cmax) if lo is None else (min(lo, cmin), max(hi, cmax))
            total += float(np.add.reduce(c, dtype=np.float64))
            count += int(c.size)
    mean = total / count if count else None
    mean = mean if mean is None or math.isfinite(mean) else None
    return {"min": lo, "max": hi, "mean": mean, "nan": nan, "inf": inf}
