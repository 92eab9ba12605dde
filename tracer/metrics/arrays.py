"""How far apart two captured tensors are: one read of each element, bounded memory.

Every pair of captured tensors goes through :func:`compare_arrays`, and a tensor can be hundreds
of MB (a memory-mapped ``.npy``). So the flattened arrays are walked in blocks of
``chunk_elems``: peak extra memory is a few block-sized buffers per worker thread (only for
inputs that must be converted), never the tensor. Float pairs go through a block kernel that
computes every metric in one read of the block: compiled with numba
(:mod:`tracer.metrics.kernel`), or, when numba cannot be imported, its numpy definition
(:mod:`tracer.metrics.block`), which gives the same bits, only slower. How it stays exact:

- sums (the norms behind ``rel_l2``, ``cosine``, ``sqnr_db``, ``mean_abs``) are accumulated in
  float64, each block in 16 lanes in position order, and the lanes of all blocks are added
  exactly (``math.fsum``): the total does not depend on which worker took which block;
- maxima (``max_abs``, ``max_rel``, the excess at each recorded rtol, ``ulp_max``) and the top
  ``k_worst`` are exact: cheap bounds in the tensor's own precision (8 float32 per instruction)
  say which few elements could change them, and only those are evaluated in float64;
- most pairs in a trace are identical, and a bitwise-identical stretch costs one integer pass
  plus the norm of A.

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
- Exact kinds (integers, bool, strings, complex, anything else): ``identical``,
  ``mismatch_count`` and ``worst`` are measured (integers ranked by ``|a-b|``, the rest by
  position). Integer pairs also say how far apart they are: ``max_abs`` is the exact largest
  ``|a-b|`` (no overflow: int64, or Python ints for 64-bit inputs; rounded once to a float)
  and ``max_rel`` the largest ``|a-b| / max(|a|, |b|)``, so "700 mismatches" never shows next
  to "max abs 0". Otherwise ``max_abs`` and ``max_rel`` are 0.0; for every exact kind
  ``mean_abs`` and ``rel_l2`` are 0.0, ``cosine`` 1.0, ``sqnr_db`` +inf and ``ulp_max`` -1
  (not applicable). Within a tolerance still means ``mismatch_count == 0``: an index or a
  count is right or wrong.
- ``histogram``: over the pairs where both sides are finite, the count of ``|a-b| = 0``, then
  one count per decade of ``|a-b|`` from 1e-12 to 1e3 (clipped at both ends), ``|a-b|`` as the
  compared precision has it (float32 for float16/bfloat16/float32 pairs, like the ranking of
  ``worst``); the report's per-node ``diff_histogram`` (:meth:`TensorMetrics.diff_histogram`).
- JSON has no literal for non-finite floats: :meth:`TensorMetrics.to_json` writes them as the
  strings ``"inf"``, ``"-inf"``, ``"nan"`` and :meth:`TensorMetrics.from_json` reads them back.
"""

from __future__ import annotations

import functools
import math
import mmap
import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import numpy as np

from .result import TensorMetrics, within_tolerance
from .scan import _block, _count, _cross, _ExactScan, _flat, _FloatScan, _is_float, _pair_is_float, _Scan

__all__ = [
    "TensorMetrics",
    "compare_arrays",
    "within_tolerance",
    "summary_stats",
    "DEFAULT_CHUNK_ELEMS",
    "trim_memory",
]

# 256 Ki elements (1 MiB of float32) per block: the kernel walks a block in L1-sized pieces, so
# the block only sets how often Python is entered (a few us per block) and how finely the two
# workers share a tensor.
DEFAULT_CHUNK_ELEMS = 1 << 18
MIN_BLOCK = 1 << 15  # smaller tensors are one block
HELPER_MIN = 1 << 18  # by default, smaller tensors are compared by the calling thread alone


# --------------------------------------------------------------------------- driver


def compare_arrays(
    a: np.ndarray,
    b: np.ndarray,
    *,
    k_worst: int = 5,
    chunk_elems: int = DEFAULT_CHUNK_ELEMS,
    rtols: Sequence[float] = (),
    workers: int | None = None,
    release: bool = False,
) -> TensorMetrics:
    """Compare A (the reference) with B element by element; see the module docstring.

    Shapes must be equal (callers align rows first). Each value in ``rtols`` records the exact
    answer to ``within(atol, rtol)`` for every ``atol``, for a few extra passes per block.
    ``workers`` threads (default: up to 2, by the CPUs available, for tensors of ``HELPER_MIN``
    elements or more; 1 below) take the next block whenever they are free (a helper that starts
    late on a busy machine only gets fewer, and one that has not started when the last block is
    taken is dropped), each with its own buffers and totals; the result does not depend on their
    number or timing.
    ``a`` or ``b`` may be a :class:`Stream` (a packed capture's tensor, ``Capture.stream``): its
    pieces are then decoded one at a time into the same blocks (one scanning thread), never
    the whole tensor at once; the result is the same.
    ``release``: the caller reads these inputs once (``tftrace compare``), so the pages of a
    read-only memory-mapped input are given back block by block once scanned: the process holds
    a few blocks of it, not the tensor (the page cache keeps the file; a later read maps it again).
    """
    if _is_stream(a) or _is_stream(b):
        return _compare_streams(a, b, k_worst=k_worst, chunk_elems=chunk_elems, rtols=rtols)
    a, b = np.asarray(a), np.asarray(b)  # a memmap stays mapped; only its subclass is dropped
    if a.shape != b.shape:
        raise ValueError(f"cannot compare different shapes: A {a.shape} vs B {b.shape}")
    if chunk_elems < 1 or k_worst < 0:
        raise ValueError(f"need chunk_elems >= 1 and k_worst >= 0, got {chunk_elems}, {k_worst}")
    block = _block_size(a.size, chunk_elems)
    starts = range(0, a.size, block)
    if workers is None:  # a helper's start (tens of us, ms on a busy machine) is not worth a small tensor
        workers = _cores() if a.size >= HELPER_MIN else 1
    workers = max(1, min(workers, len(starts)))
    floats, rtols = _pair_is_float(a.dtype, b.dtype), tuple(dict.fromkeys(rtols))

    def scan() -> _Scan:
        if floats:
            return _FloatScan(a.dtype, b.dtype, k_worst, rtols, block, lambda: _cross(a, b, block))
        return _ExactScan(a.dtype, b.dtype, k_worst)

    scans: list[_Scan] = []  # one per worker that started (in any order)
    fa, fb = _flat(a), _flat(b)
    take = _Blocks(starts)
    mapped = [m for m in (_Mapped.of(a), _Mapped.of(b)) if m is not None] if release else []

    def run() -> None:  # a worker takes the next block whenever it is free: increasing order
        mine = scan()
        scans.append(mine)
        with np.errstate(all="ignore"):  # overflow and 0/0 are expected, and handled explicitly
            for s in take:
                mine.feed(s, _block(a, fa, s, s + block), _block(b, fb, s, s + block))
                for m in mapped:
                    m.release(s, s + block)

    helpers = [_pool().submit(run) for _ in range(1, workers)]
    run()  # the calling thread is a worker too: it does not wait for a helper to start
    for done in helpers:  # a helper not started by now would find no block left: it is dropped
        if not done.cancel():
            done.result()  # re-raises a worker's exception here
    for other in scans[1:]:
        scans[0].merge(other)
    with np.errstate(all="ignore"):
        return scans[0].result(a.shape, a.dtype == b.dtype)


# --------------------------------------------------------------------------- streams


class Stream(Protocol):
    """A tensor read piece by piece (a packed capture's chunks: ``Capture.stream``)."""

    shape: tuple[int, ...]
    dtype: np.dtype
    size: int

    def pieces(self) -> Iterator[np.ndarray]:
        """The values in C order, as consecutive 1-D arrays."""


def _is_stream(x: Any) -> bool:
    return hasattr(x, "pieces")


def _compare_streams(a: Any, b: Any, *, k_worst: int, chunk_elems: int, rtols: Sequence[float]) -> TensorMetrics:
    """:func:`compare_arrays` of two inputs of which one or both are :class:`Stream` s: the same
    blocks fed to one scan in order, so the very same result. The pieces are made on one
    decoding thread, a side's next piece asked for as soon as its last one is used up, while
    this thread scans (zstd and numpy let go of the GIL). Holds per side about one piece, the
    piece being made (with its inputs' same rows), and a block straddling two pieces.

    Measured on two ResNet-50 batch-8 captures (tensors up to 26 MB, chunks of 3.2 MB): whole
    decoded tensors held 160 MB above the import baseline; this holds 92-98 MB, the numba
    kernel's compilation (~35 MB) included."""
    mine, block = stream_scan(a, b, k_worst=k_worst, chunk_elems=chunk_elems, rtols=rtols)
    da, db, size = np.dtype(a.dtype), np.dtype(b.dtype), math.prod(tuple(a.shape))
    with np.errstate(all="ignore"):
        for s, ra, rb in _blocks(a, b, da, db, size, block):
            mine.feed(s, ra, rb)
        result = mine.result(tuple(a.shape), da == db)
    if size * (da.itemsize + db.itemsize) >= TRIM_BYTES:
        trim_memory()
    return result


def stream_scan(a: Any, b: Any, *, k_worst: int, chunk_elems: int, rtols: Sequence[float]) -> tuple[_Scan, int]:
    """The scan and the block size of a pair read as streams (``a`` and ``b``: :class:`Stream` s or
    arrays of equal shapes); the one setup, so a pair fed piece by piece from elsewhere
    (:mod:`tracer.metrics.in_step`) gets the very same result."""
    shape_a, shape_b = tuple(a.shape), tuple(b.shape)
    if shape_a != shape_b:
        raise ValueError(f"cannot compare different shapes: A {shape_a} vs B {shape_b}")
    if chunk_elems < 1 or k_worst < 0:
        raise ValueError(f"need chunk_elems >= 1 and k_worst >= 0, got {chunk_elems}, {k_worst}")
    da, db = np.dtype(a.dtype), np.dtype(b.dtype)
    size = math.prod(shape_a)
    block = _block_size(size, chunk_elems)
    rtols = tuple(dict.fromkeys(rtols))
    if _pair_is_float(da, db):
        return _FloatScan(da, db, k_worst, rtols, block, lambda: _cross_streams(a, b, da, db, size, block)), block
    return _ExactScan(da, db, k_worst), block


TRIM_BYTES = 1 << 20


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        import ctypes  # noqa: PLC0415

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def trim_memory() -> None:
    """Give the pages the decoding threads freed back to the system: glibc keeps each thread's
    freed memory in that thread's arena, where nothing else this process allocates reuses it."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


def _blocks(a: Any, b: Any, da: np.dtype, db: np.dtype, size: int, block: int) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """``(start, A's block, B's block)`` for the blocks ``[start, start + block)`` in order."""
    with _Ahead(a, da) as pa, _Ahead(b, db) as pb:
        for s in range(0, size, block):
            n = min(block, size - s)
            pa.ask(n)
            pb.ask(n)
            yield s, pa.take(n), pb.take(n)


def _cross_streams(a: Any, b: Any, da: np.dtype, db: np.dtype, size: int, block: int) -> tuple[float, float]:
    """:func:`tracer.metrics.scan._cross` (the cosine's second pass) over streams, reading them
    again piece by piece: the same blocks and the same arithmetic in the same order, so the
    same bits (keep the two alike)."""
    bb = ab = 0.0
    for _s, ra, rb in _blocks(a, b, da, db, size, block):
        x, y = ra.astype(np.float64), rb.astype(np.float64)
        keep = np.isfinite(x) & np.isfinite(y)
        x, y = (x, y) if keep.all() else (x[keep], y[keep])
        bb, ab = bb + float(np.dot(y, y)), ab + float(np.dot(x, y))
    return bb, ab


class _Ahead:
    """One side's values as blocks of any size. Its pieces are made on the decoding thread (one
    for both sides: one piece is made at a time, so memory holds a piece per side and the one
    being made; zstd and numpy let go of the GIL, so this thread scans meanwhile)."""

    def __init__(self, x: Any, dtype: np.dtype) -> None:
        self.dtype, self.piece, self.at = dtype, np.empty(0, dtype), 0
        self._out: np.ndarray | None = None  # the start of a block that straddles two pieces
        self._filled = 0
        self._made = (x.pieces if _is_stream(x) else functools.partial(_array_pieces, x))()
        self._coming: Future[np.ndarray | None] | None = None

    def ask(self, n: int) -> None:
        """Before :meth:`take` of ``n``: when the piece at hand lacks them, its rest is copied
        aside and it is let go, and the next piece is asked for (of both sides before either
        is taken, so the scan of the last block overlaps their making)."""
        self._out, self._filled = None, 0
        left = self.piece.size - self.at
        if left >= n:
            return
        if left:
            self._out = np.empty(n, self.dtype)
            self._out[:left], self._filled = self.piece[self.at :], left
        self.piece, self.at = np.empty(0, self.dtype), 0
        self._coming = _decoder().submit(next, self._made, None)

    def _next(self) -> None:
        coming = self._coming or _decoder().submit(next, self._made, None)
        self._coming = None
        piece = coming.result()
        if piece is None:
            raise ValueError("a stream ended before its shape's last element")
        self.piece, self.at = piece.reshape(-1), 0

    def take(self, n: int) -> np.ndarray:
        """The next ``n`` values (after :meth:`ask`): a view of one piece, or a block that straddles pieces."""
        out, filled = self._out, self._filled
        if out is None:
            if self.piece.size - self.at < n:  # only an empty piece at hand: the next one holds the block
                self._next()
            if self.piece.size - self.at >= n:
                self.at += n
                return self.piece[self.at - n : self.at]
            out, filled = np.empty(n, self.dtype), 0
        while filled < n:
            if self.at == self.piece.size:
                self.piece = np.empty(0, self.dtype)
                self._next()
            k = min(n - filled, self.piece.size - self.at)
            out[filled : filled + k] = self.piece[self.at : self.at + k]
            filled, self.at = filled + k, self.at + k
        self._out = None
        return out

    def __enter__(self) -> _Ahead:
        return self

    def __exit__(self, *exc: object) -> None:
        coming, self._coming, self.piece = self._coming, None, np.empty(0, self.dtype)
        if coming is not None:
            coming.cancel() or coming.exception()  # a piece asked for and not taken: let it finish
        close = getattr(self._made, "close", None)
        if close is not None:  # on the decoding thread: a generator is never run by two threads at once
            _decoder().submit(close).result()


def _array_pieces(x: np.ndarray) -> Iterator[np.ndarray]:
    arr = np.asarray(x)
    flat = _flat(arr)
    step = max(1, (4 << 20) // max(arr.itemsize, 1))
    for s in range(0, arr.size, step):
        yield _block(arr, flat, s, s + step)


_DECODER: list[ThreadPoolExecutor] = []  # one: two (one per side) measured 108-112 MB above the baseline


def _decoder() -> ThreadPoolExecutor:
    """The one thread that makes streams' pieces (made on first use, kept for the process)."""
    with _POOL_LOCK:
        if not _DECODER:
            _DECODER.append(ThreadPoolExecutor(1, thread_name_prefix="tftrace-decode"))
        return _DECODER[0]


def _block_size(n: int, chunk_elems: int) -> int:
    """``chunk_elems``, or less for a tensor of a few blocks: an eighth of it (a multiple of
    ``MIN_BLOCK``), so two workers share it evenly. Depends on nothing else (not on the workers):
    the sums are per block, and the result must not change with the number of workers."""
    share = -(-n // 8 // MIN_BLOCK) * MIN_BLOCK
    return max(1, min(chunk_elems, max(share, MIN_BLOCK), n))


class _Blocks:
    """The block starts, handed out one at a time to whichever worker asks (thread-safe)."""

    def __init__(self, starts: range) -> None:
        self._starts, self._lock = iter(starts), threading.Lock()

    def __iter__(self) -> _Blocks:
        return self

    def __next__(self) -> int:
        with self._lock:
            return next(self._starts)


class _Mapped:
    """A C-contiguous array over a read-only file mapping (``np.memmap`` mode "r"), whose pages
    can be dropped from this process (``MADV_DONTNEED``: nothing is lost, a read refaults)."""

    def __init__(self, arr: np.ndarray, root: np.memmap) -> None:
        self.mm = root.base
        self.start = root.ctypes.data - root.offset % mmap.ALLOCATIONGRANULARITY  # the mapping's
        self.data, self.itemsize = arr.ctypes.data, arr.itemsize

    @classmethod
    def of(cls, arr: np.ndarray) -> _Mapped | None:
        root = arr
        while root is not None and not (isinstance(root, np.memmap) and isinstance(root.base, mmap.mmap)):
            root = root.base if isinstance(root.base, np.ndarray) else None
        if root is None or root.mode != "r" or not arr.flags.c_contiguous or not hasattr(mmap, "MADV_DONTNEED"):
            return None
        return cls(arr, root)

    def release(self, i: int, j: int) -> None:
        """Drop the whole pages holding elements ``[i, j)``."""
        page = mmap.PAGESIZE
        lo = (self.data + i * self.itemsize - self.start) // page * page
        hi = min(-(-(self.data + j * self.itemsize - self.start) // page) * page, len(self.mm))
        if hi > lo:
            self.mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)


@functools.cache
def _cores() -> int:
    """Worker threads: the kernel releases the GIL, so a second core takes half the blocks."""
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
