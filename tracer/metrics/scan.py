"""The scans behind :func:`tracer.metrics.compare_arrays`: one per worker thread.

A scan is fed the flattened arrays block by block, keeps its worker's totals, merges with the
other workers' scans, and builds the :class:`TensorMetrics`. Float pairs go through a block
kernel: the compiled one (:mod:`tracer.metrics.kernel`, numba) when numba can be imported, else
its numpy definition (:mod:`tracer.metrics.block`); both give the same bits.
"""

from __future__ import annotations

import functools
import math
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from . import block as metrics_block
from .block import LANES, W_A, W_B, W_CLS, W_KEY, W_POS, WLEN, BlockState, histogram_edges
from .result import TensorMetrics, Totals, Worst, exact_result, float_result

# dtype -> (its bits as a signed int, mask of everything but the sign, mask of the exponent)
_BITS = {
    "float16": (np.int16, 0x7FFF, 0x7C00),
    "bfloat16": (np.int16, 0x7FFF, 0x7F80),
    "float32": (np.int32, 0x7FFFFFFF, 0x7F800000),
    "float64": (np.int64, 0x7FFFFFFFFFFFFFFF, 0x7FF0000000000000),
}
NO_NUMBA_ENV = "TFTRACE_NO_NUMBA"  # set (non-empty): use the numpy kernel even if numba is there

_Entry = tuple[int, float, int, Any, Any]  # (class, -size, flat position, a, b)


class ScanBlock(Protocol):
    def __call__(
        self, x: np.ndarray, y: np.ndarray, ia: np.ndarray, ib: np.ndarray, off: int, masks: np.ndarray,
        ulps: bool, rtols: np.ndarray, st: BlockState, lanes: np.ndarray, edges: np.ndarray,
    ) -> None: ...


try:  # numba (and LLVM) are imported with this module: a few hundred ms, ~100 MB, once
    from .kernel import scan_block as _compiled
except ImportError:  # numba not installed, or built for another numpy: the numpy definition
    _compiled = None


def block_kernel() -> ScanBlock:
    """The compiled block kernel, or the numpy one when numba is missing or ``TFTRACE_NO_NUMBA`` is set."""
    if _compiled is None or os.environ.get(NO_NUMBA_ENV):
        return metrics_block.scan_block
    return _compiled


def _cross(a: np.ndarray, b: np.ndarray, block: int) -> tuple[float, float]:
    """``(b.b, a.b)`` over the positions where both are finite, in float64: a second pass."""
    fa, fb = _flat(a), _flat(b)
    bb = ab = 0.0
    for s in range(0, a.size, block):
        x, y = (_block(v, f, s, s + block).astype(np.float64) for v, f in ((a, fa), (b, fb)))
        keep = np.isfinite(x) & np.isfinite(y)
        x, y = (x, y) if keep.all() else (x[keep], y[keep])
        bb, ab = bb + float(np.dot(y, y)), ab + float(np.dot(x, y))
    return bb, ab


def _flat(arr: np.ndarray) -> np.ndarray | None:
    return arr.reshape(-1) if arr.flags.c_contiguous else None


def _block(arr: np.ndarray, flat: np.ndarray | None, i: int, j: int) -> np.ndarray:
    """Elements ``[i, j)`` in C order: a view when possible, else a copy of just that range."""
    return flat[i:j] if flat is not None else np.ascontiguousarray(arr.flat[i:j])


def _is_float(dt: np.dtype) -> bool:
    return dt.kind == "f" or dt.name.startswith(("float", "bfloat"))  # ml_dtypes: kind "V"


def _topk(vals: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest values, largest first, ties to the lower index."""
    if vals.size > 4 * k:
        kth = np.partition(vals, vals.size - k)[vals.size - k]
        keep = np.flatnonzero(vals >= kth)
        return keep[np.lexsort((keep, -vals[keep]))[:k]]
    return np.lexsort((np.arange(vals.size), -vals))[:k]


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    """``np.unravel_index`` (C order) in Python ints: a few worst entries per call, no array."""
    out = []
    for dim in reversed(shape):
        flat, i = divmod(flat, dim)
        out.append(i)
    return tuple(reversed(out))


def _count(mask: np.ndarray) -> int:
    return int(np.count_nonzero(mask))


def _dtname(dt: np.dtype) -> str:
    return dt.str.lstrip("<>|=") if dt.kind in "SUV" and not _is_float(dt) else dt.name


class _Scan(ABC):
    """One worker's running totals over the blocks it is given, in increasing position.

    ``worst`` holds :data:`_Entry` tuples: class 0 (NaN/Inf mismatches) ranks first, then by
    size, then position.
    """

    k: int
    worst: list[_Entry]

    @abstractmethod
    def feed(self, off: int, ra: np.ndarray, rb: np.ndarray) -> None:
        """Take elements ``[off, off + ra.size)`` of both sides."""

    @abstractmethod
    def merge(self, other: Any) -> None:
        """Add another worker's totals (a scan of the same kind) to these."""

    @abstractmethod
    def result(self, shape: tuple[int, ...], same_dtype: bool) -> TensorMetrics:
        """The metrics over everything fed."""

    def _add_worst(self, entries: list[_Entry]) -> None:
        if entries:
            self.worst = sorted(self.worst + entries, key=lambda e: e[:3])[: self.k]

    def _worst_out(self, shape: tuple[int, ...]) -> tuple[Worst, ...]:
        return tuple((_index(p, shape), a, b) for _, _, p, a, b in self.worst)


# --------------------------------------------------------------------------- floats


class _FloatScan(_Scan):
    """Floats: float32 arithmetic pipe for float16/bfloat16/float32 pairs, float64 otherwise.

    Each block goes through :func:`block_kernel` into a :class:`BlockState`; values that are not
    in the pipe dtype are converted into block-sized buffers first (the only copies made).
    """

    def __init__(
        self, da: np.dtype, db: np.dtype, k: int, rtols: tuple[float, ...], n: int,
        rescan: Callable[[], tuple[float, float]],
    ) -> None:
        self.da, self.db, self.k, self.rescan = da, db, k, rescan
        self.pair = _pair_setup(da, db)
        pipe = self.pair.pipe
        convert = da != pipe or db != pipe
        self.xa, self.xb = (np.empty(n if convert else 0, pipe) for _ in range(2))
        self.rtol_keys, self.rtols = rtols, np.array(rtols, np.float64)
        self.st = BlockState(k, len(rtols))
        self.kernel = block_kernel()
        # each lane sums at most n / LANES terms per block: float64 error well below this
        self.eps = 2.0**-53 * (n / LANES + 4)
        self.worst = []

    def feed(self, off: int, ra: np.ndarray, rb: np.ndarray) -> None:
        n = ra.size
        x = ra if ra.dtype == self.pair.pipe else _convert(ra, self.xa[:n])
        y = rb if rb.dtype == self.pair.pipe else _convert(rb, self.xb[:n])
        p = self.pair
        ia, ib = (ra, rb) if p.ulps else (x, y)  # mixed dtypes: the bits of the float64 copies
        lanes = np.zeros((4, LANES))
        self.kernel(x, y, ia.view(p.bits), ib.view(p.bits), off, p.masks, p.ulps, self.rtols, self.st, lanes, p.edges)
        self.st.lanes.append(lanes)

    def merge(self, o: _FloatScan) -> None:
        a, b = self.st, o.st
        wlen = a.ints[WLEN]
        a.ints += b.ints
        a.ints[WLEN] = wlen
        np.maximum(a.fmax, b.fmax, out=a.fmax)
        np.maximum(a.ulp, b.ulp, out=a.ulp)
        a.hist += b.hist
        a.lanes += b.lanes
        self._set_worst(sorted(self._entries() + o._entries(), key=lambda e: e[:3])[: self.k])

    def _entries(self) -> list[_Entry]:
        rows = self.st.worst[: int(self.st.ints[WLEN])]
        return [(int(r[W_CLS]), -float(r[W_KEY]), int(r[W_POS]), float(r[W_A]), float(r[W_B])) for r in rows]

    def _set_worst(self, entries: list[_Entry]) -> None:
        for row, (cls, neg, pos, a, b) in enumerate(entries):
            self.st.worst[row] = (cls, -neg, pos, a, b)
        self.st.ints[WLEN] = len(entries)

    def result(self, shape: tuple[int, ...], same_dtype: bool) -> TensorMetrics:
        st = self.st
        lanes = st.lanes[0] if len(st.lanes) == 1 else np.concatenate(st.lanes or [np.zeros((4, 1))], axis=1)
        saa, sdd, sda, sabs = (_exact_sum(row) for row in lanes.tolist())
        n, fmax = st.ints.tolist(), st.fmax.tolist()
        self.worst = self._entries()
        mb = metrics_block
        totals = Totals(
            saa=saa, sdd=sdd, sda=sda, sabs=sabs, nfin=n[mb.NFIN], differ=n[mb.DIFFER], mismatch=n[mb.MISMATCH],
            nan_mismatch=n[mb.NAN_MIS], inf_mismatch=n[mb.INF_MIS], nan_a=n[mb.NAN_A], nan_b=n[mb.NAN_B],
            inf_a=n[mb.INF_A], inf_b=n[mb.INF_B], max_abs=fmax[0], max_rel=fmax[1],
            ulp_max=int(st.ulp[0]) if self.pair.ulps else -1, same_dtype=same_dtype, eps=self.eps, rescan=self.rescan,
        )
        return float_result(
            totals, dtype_a=self.pair.name_a, dtype_b=self.pair.name_b, shape=tuple(shape),
            worst=self._worst_out(shape), excess_at_rtol=tuple(zip(self.rtol_keys, fmax[2:], strict=True)),
            histogram=tuple(st.hist.tolist()) if math.prod(shape) else (),
        )


@dataclass(frozen=True)
class _Pair:
    """What a pair of float dtypes needs, worked out once per pair of dtypes."""

    ulps: bool  # same float dtype: ULPs are defined (else both are compared as float64 copies)
    pipe: np.dtype  # float32 for float16/bfloat16/float32 pairs, else float64
    bits: np.dtype  # the signed integer of the bits that decide equality and ULPs
    masks: np.ndarray  # (mask of all but the sign, exponent mask, lowest narrow int): the kernel's
    edges: np.ndarray  # the decade edges in the pipe dtype
    name_a: str
    name_b: str


@functools.lru_cache(maxsize=64)
def _pair_is_float(da: np.dtype, db: np.dtype) -> bool:
    numeric = all(_is_float(dt) or dt.kind in "biu" for dt in (da, db))
    return numeric and (_is_float(da) or _is_float(db))


@functools.lru_cache(maxsize=64)
def _pair_setup(da: np.dtype, db: np.dtype) -> _Pair:
    own = _BITS.get(da.name) if da == db else None
    pipe = np.dtype(np.float32 if own is not None and da.itemsize <= 4 else np.float64)
    bits, mag, expo = own or _BITS["float64"]
    wide = np.dtype(bits).itemsize == 8
    lowest = -(1 << 63) if wide else -(1 << 31)  # see metrics_kernel._ulp_pass32
    masks = np.array([mag, expo, lowest], np.int64 if wide else np.int32)
    masks.flags.writeable = False
    return _Pair(own is not None, pipe, np.dtype(bits), masks, histogram_edges(pipe.name), _dtname(da), _dtname(db))


def _exact_sum(parts: list[float]) -> float:
    """The correctly rounded sum, so the total does not depend on the order blocks finished."""
    try:
        return math.fsum(parts)
    except (OverflowError, ValueError):  # float64 overflow: inf, or inf - inf; plain sum says which
        return sum(parts)


def _convert(r: np.ndarray, out: np.ndarray) -> np.ndarray:
    np.copyto(out, r, casting="unsafe")  # exact for every narrower float; ml_dtypes casts too
    return out


# --------------------------------------------------------------------------- exact kinds


class _ExactScan(_Scan):
    """Integers, bool, strings and the rest: which elements differ, and a few of them."""

    def __init__(self, da: np.dtype, db: np.dtype, k: int) -> None:
        self.da, self.db, self.k = da, db, k
        self.by_size = da.kind in "iu" and db.kind in "iu"
        self.bitwise = da == db and da.kind != "O"
        self.identical, self.mismatch = True, 0
        self.max_abs, self.max_rel = 0, 0.0  # integer pairs: exact max |a-b| (a Python int)
        self.worst = []

    def feed(self, off: int, ra: np.ndarray, rb: np.ndarray) -> None:
        neq = _bits_differ(ra, rb) if self.bitwise else _not_equal(ra, rb)
        count = _count(neq)
        if count == 0:
            return
        self.identical, self.mismatch = False, self.mismatch + count
        pos = np.flatnonzero(neq)
        if self.by_size:
            self._magnitude(ra[pos], rb[pos])
        if not self.k or (len(self.worst) >= self.k and not self.by_size):
            return  # ranked by position: later blocks cannot displace a full list
        if self.by_size:
            size = np.abs(ra[pos].astype(np.float64) - rb[pos].astype(np.float64))
            pick = [(-float(size[i]), int(pos[i])) for i in _topk(size, self.k)]
        else:
            pick = [(0.0, int(p)) for p in pos[: self.k]]
        self._add_worst([(1, s, off + p, _py(ra[p]), _py(rb[p])) for s, p in pick])

    def _magnitude(self, xa: np.ndarray, xb: np.ndarray) -> None:
        """Max |a-b| and max |a-b| / max(|a|, |b|) over these mismatching integers, exactly:
        in int64 where every difference fits (both sides 32 bits or less), else as Python ints
        (two 64-bit integers can be 2**64 apart). The ratio is rounded once, to float64."""
        if max(xa.dtype.itemsize, xb.dtype.itemsize) <= 4:
            xa, xb = xa.astype(np.int64), xb.astype(np.int64)
        else:
            xa, xb = xa.astype(object), xb.astype(object)
        diff = np.abs(xa - xb)
        scale = np.maximum(np.abs(xa), np.abs(xb))  # > 0: the two differ
        self.max_abs = max(self.max_abs, int(diff.max()))
        self.max_rel = max(self.max_rel, float(np.max(diff / scale)))  # int / int: one rounding either way

    def merge(self, o: _ExactScan) -> None:
        self.identical, self.mismatch = self.identical and o.identical, self.mismatch + o.mismatch
        self.max_abs, self.max_rel = max(self.max_abs, o.max_abs), max(self.max_rel, o.max_rel)
        self._add_worst(o.worst)

    def result(self, shape: tuple[int, ...], same_dtype: bool) -> TensorMetrics:
        measured = {"identical": self.identical and same_dtype, "mismatch_count": self.mismatch,
                    "max_abs": float(self.max_abs), "max_rel": self.max_rel}
        return exact_result(measured, dtype_a=_dtname(self.da), dtype_b=_dtname(self.db), shape=tuple(shape),
                            worst=self._worst_out(shape))


def _bits_differ(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    size = ra.dtype.itemsize
    if size in (1, 2, 4, 8):
        return np.not_equal(ra.view(f"u{size}"), rb.view(f"u{size}"))
    if size == 0:
        return np.zeros(ra.size, np.bool_)
    rows_a, rows_b = (v.view(np.uint8).reshape(-1, size) for v in (ra, rb))
    return np.any(rows_a != rows_b, axis=1)


def _not_equal(ra: np.ndarray, rb: np.ndarray) -> np.ndarray:
    """Value comparison across dtypes; text against anything else compares as Python objects."""
    try:
        return np.asarray(np.not_equal(ra, rb), dtype=np.bool_)
    except TypeError:  # numpy has no loop, e.g. str vs bytes or str vs int
        return np.asarray(np.not_equal(ra.astype(object), rb.astype(object)), dtype=np.bool_)


def _py(v: Any) -> Any:
    """A JSON-friendly Python value: bytes are decoded (backslash-escaped where not UTF-8)."""
    v = v.item() if isinstance(v, np.generic) else v
    if isinstance(v, bytes):
        return v.decode("utf-8", "backslashreplace")
    return v if isinstance(v, bool | int | float | str) else repr(v)
