"""The compiled twin of :func:`tracer.metrics.block.scan_block`: one read of each block.

A block is walked in sub-blocks of ``SUB`` elements (16 KiB of float32 pairs: they stay in the
L1 cache). The first loop reads the bits (differences, NaN/Inf, ULPs); bitwise-identical
sub-blocks then only add the norm of A. The other loops re-read it from the cache: the four
sums into their lanes (float64), which on differing sub-blocks also prefetch the next one (so that memory works
while the core computes instead of after); and, in the pipe dtype (16 floats per instruction
for float32 on AVX-512), the least and largest |a-b| > 0, the decade histogram (only the edges
between those two are compared: every size reaches the edges below the least, none those above
the largest) and cheap bounds saying whether an element could raise max |a-b|, the max
relative error, the tolerance excess or enter the top k. Only the rare chunks where one could
are then walked element by element in float64 (``_exact``, a called function), which is where
those exact values come from. Runs of sub-blocks with NaN or Inf go to the numpy definition
itself (rare, and their accounting needs every element anyway).

Rules that keep the results equal to the numpy definition: no fast-math (no reordering, no
fused multiply-add), every sum in its lane in position order, every maximum exact, and bounds
that can only let through too many elements, never too few.

Written for the vectoriser: loops of independent iterations, a handful of accumulators per loop
(more spill registers), maxima as selects rather than ``max()`` (of floats >= +0: on their bits, as integers, which
vectorise without fast-math), counters truncated to int32 at each step (numba computes integers
in int64, halving the elements per instruction).

Compiled lazily per dtype combination actually used, with ``cache=True``: numba keeps the
machine code in ``__pycache__`` next to this file, or in the user's cache directory when the
package is read-only; when neither can be written it compiles in every process instead.

Why one module of ~560 lines: numba's cache checks only the source file of the cached function
(``_scan``), so every helper it inlines lives here too. Split off into a module of their own,
an edit to a helper would leave the stale machine code in use.
"""

from __future__ import annotations

import functools

import numba
import numpy as np
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic, overload

from ..jit import compiled
from . import block as metrics_block
from .block import BlockState

__all__ = ["scan_block", "SUB"]

# The layout of BlockState, restated: numba's cache only notices edits to this file, so a
# constant imported from metrics_block would keep its old value in cached machine code (and
# write out of bounds). _check_layout() makes a change on one side only an import error.
LANES = 16
DIFFER, MISMATCH, NAN_MIS, INF_MIS, NFIN, NAN_A, NAN_B, INF_A, INF_B, WLEN = range(10)
W_CLS, W_KEY, W_POS, W_A, W_B = range(5)

SUB = 2048  # elements per sub-block; a multiple of LANES
CHUNK = 64  # elements the detail pass re-checks at once
N_EDGES = 14  # decade edges (block.histogram_edges)
AHEAD = SUB  # how far ahead the sums pass asks for the data (prefetch): the next sub-block
# bounds[...] of the pipe passes, in the pipe dtype
B_ZERO, B_BAR, B_REL, B_RTOL, B_EXCESS, B_BIG, B_TINY, B_DMIN = range(8)
_SLACK = 2.0**-20  # relative margin of the bounds (float32 rounding stays below 2**-22)


def _check_layout() -> None:
    names = ("LANES", "DIFFER", "MISMATCH", "NAN_MIS", "INF_MIS", "NFIN", "NAN_A", "NAN_B", "INF_A", "INF_B",
             "WLEN", "W_CLS", "W_KEY", "W_POS", "W_A", "W_B", "N_INTS")
    here = {**globals(), "N_INTS": WLEN + 1}
    stale = [n for n in names if here[n] != getattr(metrics_block, n)]
    if stale:
        raise RuntimeError(f"tracer.metrics.kernel disagrees with tracer.metrics.block on {stale}: update both")


_check_layout()


_inline = numba.njit(inline="always")  # helpers: compiled as part of _scan, not on their own


# --------------------------------------------------------------------------- the bits


def _bits(ia, ib, mag, expo, low):  # noqa: ANN001, ANN202 - typed by the overload below
    """The first read of a sub-block (see ``_bits_pass32``), in the width the bits need.

    Compiled code calls the overload below, which makes this choice once per type at compile
    time; this body makes the same choice when the function is called from Python.
    """
    if ia.dtype.itemsize == 8:
        return _bits_pass64(ia, ib, mag, expo, low)
    return _bits_pass32(ia, ib, mag, expo, low)


@overload(_bits)
def _bits_impl(ia, ib, mag, expo, low):  # noqa: ANN001, ANN202 - numba types; annotations would break the match
    if ia.dtype.bitwidth == 64:
        return lambda ia, ib, mag, expo, low: _bits_pass64(ia, ib, mag, expo, low)
    return lambda ia, ib, mag, expo, low: _bits_pass32(ia, ib, mag, expo, low)


@_inline
def _same_pass(ia, ib, mag, expo):  # noqa: ANN001, ANN202
    """The first read of a sub-block where the last one was identical: (bits that differ, pairs
    with NaN/Inf on a side). Most of a trace is identical; its ULPs are not needed."""
    differ = special = np.int32(0)
    for i in range(ia.size):
        ta, tb = ia[i], ib[i]
        differ = np.int32(differ + (ta != tb))
        special = np.int32(special + (((ta & mag) >= expo) | ((tb & mag) >= expo)))
    return differ, special


@_inline
def _bits_pass32(ia, ib, mag, expo, low):  # noqa: ANN001, ANN202 - kernels take arrays and scalars
    """The first read of a sub-block of 16- or 32-bit floats, which waits for memory anyway:
    (bits that differ, pairs with NaN/Inf on a side, finite pairs of opposite signs, their max
    ULP distance plus ``low``, the max ULP distance of the finite same-sign pairs).

    On the monotonic line (-0.0 one step below +0.0) a same-sign pair is ``|ma - mb|`` steps
    apart and a pair across zero ``ma + mb + 1`` (ma, mb: the bits without the sign), which
    fits an int32 once ``low`` = -2**31 is added. Every integer result is truncated to int32,
    and the sentinel is ``low + 1``: a maximum starting at the very lowest int32 is not
    vectorised.
    """
    i32 = np.int32
    differ = special = cross = same = i32(0)
    none = i32(low + 1)
    across = none
    for i in range(ia.size):
        ta, tb = ia[i], ib[i]
        ma, mb = i32(ta & mag), i32(tb & mag)
        bad = (ma >= expo) | (mb >= expo)
        differ = i32(differ + (ta != tb))
        special = i32(special + bad)
        opp = i32(ta ^ tb) < i32(0)
        keep = opp & (not bad)
        cross = i32(cross + keep)
        gap = i32(ma - mb)
        gap = gap if gap >= i32(0) else i32(-gap)
        gap = i32(0) if bad | opp else gap
        same = gap if gap > same else same
        gap = i32(ma + mb + 1 + low)
        gap = gap if keep else none
        across = gap if gap > across else across
    return differ, special, cross, across, same


@_inline
def _bits_pass64(ia, ib, mag, expo, low):  # noqa: ANN001, ANN202
    """``_bits_pass32`` for float64 bits: the same quantities in int64 (``low`` = -2**63)."""
    differ = special = cross = np.int32(0)
    same = np.int64(0)
    across = none = low + 1
    for i in range(ia.size):
        ta, tb = ia[i], ib[i]
        ma, mb = ta & mag, tb & mag
        bad = (ma >= expo) | (mb >= expo)
        differ = np.int32(differ + (ta != tb))
        special = np.int32(special + bad)
        opp = (ta ^ tb) < 0
        keep = opp & (not bad)
        cross = np.int32(cross + keep)
        gap = abs(ma - mb)
        gap = np.int64(0) if bad | opp else gap
        same = gap if gap > same else same
        gap = (ma + low) + mb + 1  # in this order nothing overflows
        gap = gap if keep else none
        across = gap if gap > across else across
    return differ, special, cross, across, same


# --------------------------------------------------------------------------- the sums


@intrinsic
def _as_int(typingctx, x):  # noqa: ANN001, ANN202, ARG001 - numba typing
    """The bits of a float as the signed integer of its width (a bit cast, no conversion)."""
    ity = {32: types.int32, 64: types.int64}[x.bitwidth]

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202, ARG001
        return builder.bitcast(args[0], context.get_value_type(ity))

    return ity(x), codegen



@intrinsic
def _prefetch(typingctx, arr, i):  # noqa: ANN001, ANN202, ARG001 - numba typing
    """A hint that ``arr[i]`` will be read soon (``llvm.prefetch``: read, into all cache
    levels). Nothing is read now and no bounds are checked: an address past the array's end
    is harmless (a prefetch never faults)."""

    def codegen(context, builder, sig, args):  # noqa: ANN001, ANN202
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]])
        if getattr(ptr.type, "is_opaque", False):  # llvmlite >= 0.44 with opaque pointers (LLVM 15+)
            name = "llvm.prefetch.p0"
        else:  # typed pointers (numba 0.60's LLVM 14): the intrinsic takes an i8*
            ptr, name = builder.bitcast(ptr, ir.IntType(8).as_pointer()), "llvm.prefetch.p0i8"
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ptr.type, i32, i32, i32]), name)
        builder.call(fn, [ptr, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return types.void(arr, i), codegen



@_inline
def _sums_pass(x, y, lanes):  # noqa: ANN001, ANN202
    """The four sums (a.a, d.d, d.a, |d| with d = a - b, in float64) into their lanes: whole
    rows, then a short last row at a block's end.

    Four rows at a time, each lane held in registers meanwhile: the same additions in the same
    order, a quarter of the loads and stores, which bound this loop.
    """
    n = x.size
    quad = n - n % (4 * LANES)
    for r in range(0, quad, 4 * LANES):
        for q in range(0, 4 * LANES, 64 // x.itemsize):  # the next sub-block, a cache line of each side
            _prefetch(x, r + q + AHEAD)
            _prefetch(y, r + q + AHEAD)
        for j in range(LANES):
            p0, p1, p2, p3 = lanes[0, j], lanes[1, j], lanes[2, j], lanes[3, j]
            for q in range(4):
                a, b = np.float64(x[r + q * LANES + j]), np.float64(y[r + q * LANES + j])
                d = a - b
                p0 += a * a
                p1 += d * d
                p2 += d * a
                p3 += abs(d)
            lanes[0, j], lanes[1, j], lanes[2, j], lanes[3, j] = p0, p1, p2, p3
    for i in range(quad, n):  # the last rows, in position order
        a, b = np.float64(x[i]), np.float64(y[i])
        d, j = a - b, (i - quad) % LANES
        lanes[0, j] += a * a
        lanes[1, j] += d * d
        lanes[2, j] += d * a
        lanes[3, j] += abs(d)


@_inline
def _sums_same(x, lanes):  # noqa: ANN001, ANN202
    """``_sums_pass`` of a bitwise-identical sub-block: d = 0, so only a.a changes a lane
    (adding +-0.0 changes none: a lane is never -0.0)."""
    n = x.size
    quad = n - n % (4 * LANES)
    for r in range(0, quad, 4 * LANES):
        for j in range(LANES):
            p0 = lanes[0, j]
            for q in range(4):
                a = np.float64(x[r + q * LANES + j])
                p0 += a * a
            lanes[0, j] = p0
    for i in range(quad, n):
        a = np.float64(x[i])
        lanes[0, (i - quad) % LANES] += a * a


# --------------------------------------------------------------------------- sizes and bounds


@numba.njit(inline="always")
def _seen(a, b, s, bar, rel, rtol, excess, big, tiny, dmin):  # noqa: ANN001, ANN202, PLR0913
    """Whether the exact pass must see this pair (s = |a-b| in the pipe dtype): s > 0 and
    either s >= the bar (it may raise max |a-b| or enter the top k), s >= rel * max(|a|,|b|)
    (the max relative error), s >= excess + rtol*|a| (the excess at the first rtol) or that
    excess bound below ``tiny``; bounds rounded down.

    One compare against the least of the thresholds (minima and maxima as selects, which are
    exact), not one per condition. ``s >= bar`` lets through the ties of ``s > bar`` too (a
    superset is all a bound must be); a bar of -1 (the top k has room) is covered by the
    caller, which then sends every chunk to the exact pass; ``dmin`` (the least positive
    value) makes the floor ``s > 0``.
    """
    aa, bb = abs(a), abs(b)
    m = aa if aa > bb else bb
    t = rel * m
    t = t if t < big else big  # an overflowing bound: only s = max or inf reaches it
    w = excess + rtol * aa
    w = w if w >= tiny else dmin  # below tiny the bound's rounding is no longer relative
    lim = t if t < w else w
    lim = lim if lim < bar else bar
    lim = lim if lim > dmin else dmin
    return s >= lim


@_inline
def _low_pass(x, y, edges, j, bounds):  # noqa: ANN001, ANN202
    """In the pipe dtype, with s = |a-b|: (count of s = 0, pairs the exact pass must see, and
    the counts of s reaching decade edges ``j`` to ``j + 3``)."""
    zero, bar, rel, rtol, excess = bounds[B_ZERO], bounds[B_BAR], bounds[B_REL], bounds[B_RTOL], bounds[B_EXCESS]
    big, tiny, dmin = bounds[B_BIG], bounds[B_TINY], bounds[B_DMIN]
    e0, e1, e2, e3 = edges[j], edges[j + 1], edges[j + 2], edges[j + 3]
    n0 = n1 = n2 = n3 = nz = seen = np.int32(0)
    for i in range(x.size):
        a, b = x[i], y[i]
        s = abs(a - b)
        nz = np.int32(nz + (s == zero))
        seen = np.int32(seen + _seen(a, b, s, bar, rel, rtol, excess, big, tiny, dmin))
        n0 = np.int32(n0 + (s >= e0))
        n1 = np.int32(n1 + (s >= e1))
        n2 = np.int32(n2 + (s >= e2))
        n3 = np.int32(n3 + (s >= e3))
    return nz, seen, (n0, n1, n2, n3)


@_inline
def _range_pass(x, y, zero, ibig):  # noqa: ANN001, ANN202
    """The bits of the largest s = |a-b| and of the least s > 0 (or of the largest float), as
    integers: for s >= +0 the order of the bits is the order of the values."""
    top = _as_int(zero)
    bot = ibig
    for i in range(x.size):
        u = _as_int(abs(x[i] - y[i]))
        top = u if u > top else top
        v = u if u > top - top else ibig
        bot = v if v < bot else bot
    return top, bot


@_inline
def _window_pass(x, y, edges, j):  # noqa: ANN001, ANN202
    """Counts of s = |a-b| reaching edges ``j`` to ``j + 3`` (NaN past the last: counts 0)."""
    e0, e1, e2, e3 = edges[j], edges[j + 1], edges[j + 2], edges[j + 3]
    n0 = n1 = n2 = n3 = np.int32(0)
    for i in range(x.size):
        s = abs(x[i] - y[i])
        n0 = np.int32(n0 + (s >= e0))
        n1 = np.int32(n1 + (s >= e1))
        n2 = np.int32(n2 + (s >= e2))
        n3 = np.int32(n3 + (s >= e3))
    return n0, n1, n2, n3


@_inline
def _excess_pass(x, y, r):  # noqa: ANN001, ANN202
    """Max of ``|a-b| - r*|a|`` in float64 (0 when none is positive): rtols after the first."""
    excess = 0.0
    for i in range(x.size):
        a, b = np.float64(x[i]), np.float64(y[i])
        e = abs(a - b) - r * abs(a)
        excess = e if e > excess else excess
    return excess


# --------------------------------------------------------------------------- element by element


@_inline
def _offer(worst, ints, k, key, pos, a, b):  # noqa: ANN001, ANN202
    """Insert a finite pair into the top k unless it ranks below the k-th (class 1: after the
    NaN/Inf mismatches; ties go to the earlier position, which is already there)."""
    n = ints[WLEN]
    if n == k:
        if not (worst[k - 1, W_CLS] == 1 and key > worst[k - 1, W_KEY]):
            return
        n = k - 1
    p = n
    while p > 0 and worst[p - 1, W_CLS] == 1 and key > worst[p - 1, W_KEY]:
        for c in range(5):  # (a slice assignment compiles seconds of generic code)
            worst[p, c] = worst[p - 1, c]
        p -= 1
    worst[p, W_CLS], worst[p, W_KEY], worst[p, W_POS], worst[p, W_A], worst[p, W_B] = 1.0, key, pos, a, b
    ints[WLEN] = n + 1


@numba.njit(inline="always")
def _bar(worst, ints, k):  # noqa: ANN001, ANN202
    """Sizes above this may enter the top k (-1: it has room; inf: only NaN/Inf mismatches)."""
    if k == 0:
        return np.inf
    if ints[WLEN] < k:
        return -1.0
    return np.inf if worst[k - 1, W_CLS] == 0 else worst[k - 1, W_KEY]


@_inline
def _exact(x, y, ia, ib, lo, hi, pos0, k, r0, ints, fmax, worst):  # noqa: ANN001, ANN202, PLR0913
    """Elements ``[lo, hi)`` (no NaN/Inf) in float64: max |a-b|, the max relative error, the
    excess at ``r0``, and offers to the top k by |a-b| in the pipe dtype."""
    top, rel, excess = fmax[0], fmax[1], fmax[2] if fmax.size > 2 else 0.0
    bar = _bar(worst, ints, k)
    for i in range(lo, hi):
        a, b = np.float64(x[i]), np.float64(y[i])
        d = abs(a - b)
        top = d if d > top else top
        e = d - r0 * abs(a)
        excess = e if e > excess else excess
        if d > 0.0:
            m = max(abs(a), abs(b))
            if d >= rel * m and d / m > rel:
                rel = d / m
        size = np.float64(abs(x[i] - y[i]))
        if ia[i] != ib[i] and (size > bar or bar < 0.0):
            _offer(worst, ints, k, size, pos0 + i, a, b)
            bar = _bar(worst, ints, k)
    fmax[0], fmax[1] = top, rel
    if fmax.size > 2:
        fmax[2] = excess


@_inline
def _chunk_seen(x, y, lo, hi, bounds):  # noqa: ANN001, ANN202
    """Whether a pair of ``[lo, hi)`` passes ``_seen``."""
    bar, rel, rtol, excess = bounds[B_BAR], bounds[B_REL], bounds[B_RTOL], bounds[B_EXCESS]
    big, tiny, dmin = bounds[B_BIG], bounds[B_TINY], bounds[B_DMIN]
    n = np.int32(0)
    for i in range(lo, hi):
        a, b = x[i], y[i]
        n = np.int32(n + _seen(a, b, abs(a - b), bar, rel, rtol, excess, big, tiny, dmin))
    return n > 0


# --------------------------------------------------------------------------- the block


@numba.njit(inline="always")
def _set_bounds(bounds, fmax, worst, ints, k, r0, has_rtol, cross):  # noqa: ANN001, ANN202
    """The pipe passes' bounds from the running maxima, each rounded down by the margin. A
    relative error above 1 needs a pair of opposite signs (same-sign pairs have at most 1), so
    with none in the sub-block that bound is closed; so is the excess bound without an rtol."""
    down = 1.0 - _SLACK
    bounds[B_BAR] = min(_bar(worst, ints, k), fmax[0] * down)
    bounds[B_REL] = fmax[1] * down if fmax[1] < 1.0 or cross > 0 else bounds[B_BIG]
    bounds[B_RTOL] = r0 * down
    bounds[B_EXCESS] = fmax[2] * down if has_rtol else bounds[B_BIG]


@numba.njit(inline="always")
def _bins(hist, n, zeros, reach):  # noqa: ANN001, ANN202
    """Decade counts from the counts of sizes reaching each edge."""
    hist[0] += zeros
    prev = n - zeros
    for e in range(N_EDGES):
        hist[1 + e] += prev - reach[e]
        prev = reach[e]
    hist[1 + N_EDGES] += prev


@_inline
def _differing(x, y, ia, ib, pos0, differ, cross, k, rtols, ints, fmax, hist, worst, lanes, edges, bounds, reach):  # noqa: ANN001, ANN202, PLR0913
    """A sub-block without NaN/Inf whose bits differ somewhere: sums, histogram, bounds, and
    the exact values where the bounds let elements through."""
    r0 = rtols[0] if rtols.size else 0.0
    _sums_pass(x, y, lanes)
    _set_bounds(bounds, fmax, worst, ints, k, r0, rtols.size > 0, cross)
    # the decades: only the edges between the least and the largest s > 0 need counting; s
    # reaches every edge below the least (all but the zeros do) and none above the largest
    top, bot = _range_pass(x, y, bounds[B_ZERO], _as_int(bounds[B_BIG]))
    lo = hi = 0
    for e in range(N_EDGES):
        lo += _as_int(edges[e]) <= bot
        hi += _as_int(edges[e]) <= top
    lo = min(lo, hi)
    zeros, seen, w = _low_pass(x, y, edges, lo, bounds)
    for e in range(N_EDGES):
        reach[e] = x.size - zeros if e < lo else 0
    for q in range(4):
        if lo + q < N_EDGES:
            reach[lo + q] = w[q]
    for j in range(lo + 4, hi, 4):
        w = _window_pass(x, y, edges, j)
        for q in range(4):
            if j + q < N_EDGES:
                reach[j + q] = w[q]
    _bins(hist, x.size, zeros, reach)
    for q in range(1, rtols.size):
        fmax[2 + q] = max(fmax[2 + q], _excess_pass(x, y, rtols[q]))
    whole = differ and k and ints[WLEN] < k  # the top k still has room: any mismatch enters
    if whole or seen:
        _rare(x, y, ia, ib, pos0, whole, k, r0, ints, fmax, worst, bounds)


@numba.njit(nogil=True)
def _rare(x, y, ia, ib, pos0, whole, k, r0, ints, fmax, worst, bounds):  # noqa: ANN001, ANN202, PLR0913
    """The exact pass over the chunks the bounds let through (every chunk while the top k has
    room). Called, not inlined: it runs for few sub-blocks, and kept out of ``_scan``'s loop
    nest it leaves the registers and code layout to the passes that run for every one."""
    step = x.size if whole else CHUNK  # (one call site: each one is compiled in again)
    for lo in range(0, x.size, step):
        hi = min(lo + step, x.size)
        if whole or _chunk_seen(x, y, lo, hi, bounds):
            _exact(x, y, ia, ib, lo, hi, pos0, k, r0, ints, fmax, worst)


@compiled
def _scan(x, y, ia, ib, off, start, masks, ulps, rtols, k, ints, fmax, ulp, hist, worst, lanes, edges, bounds):  # noqa: ANN001, ANN202, PLR0913
    """Sub-blocks from ``start`` on, until one holds a NaN or Inf: returns the run of those,
    ``(first, end)``, left to the numpy definition (``(n, n)`` when there is none)."""
    mag, expo, low = masks[0], masks[1], masks[2]
    reach = np.zeros(N_EDGES, np.int64)  # per sub-block: how many sizes reach each decade edge
    n = x.size
    quiet = True  # the last sub-block was identical: the next one likely is too
    for s in range(start, n, SUB):
        e = min(s + SUB, n)
        xs, ys, sa, sb = x[s:e], y[s:e], ia[s:e], ib[s:e]
        if quiet:
            differ, special = _same_pass(sa, sb, mag, expo)
            quiet = differ == 0 and special == 0
        if not quiet:  # (in L1 by now if the cheap pass ran first)
            differ, special, cross, across, same = _bits(sa, sb, mag, expo, low)
        if special:
            while e < n and _bits(ia[e:min(e + SUB, n)], ib[e:min(e + SUB, n)], mag, expo, low)[1]:
                e = min(e + SUB, n)
            return s, e
        ints[NFIN] += e - s
        if differ == 0:
            _sums_same(xs, lanes)
            hist[0] += e - s
            quiet = True
            continue
        ints[DIFFER] += differ
        ints[MISMATCH] += differ
        if ulps:
            ulp[0] = max(ulp[0], np.uint64(same))
            if cross:  # the distance is across - low; the wrapping uint64 subtraction is exact
                ulp[0] = max(ulp[0], np.uint64(np.int64(across)) - np.uint64(np.int64(low)))
        _differing(xs, ys, sa, sb, off + s, differ, cross, k, rtols, ints, fmax, hist, worst, lanes, edges, bounds, reach)
    return n, n


def scan_block(
    x: np.ndarray, y: np.ndarray, ia: np.ndarray, ib: np.ndarray, off: int, masks: np.ndarray,
    ulps: bool, rtols: np.ndarray, st: BlockState, lanes: np.ndarray, edges: np.ndarray,
) -> None:
    """Fold one block into ``st``; same arguments and result as the numpy ``scan_block``."""
    bounds = _bounds(x.dtype).copy()
    padded = np.concatenate((edges, np.full(4, np.nan, edges.dtype)))  # a window of 4 may start at the end
    x, y, ia, ib = (_readonly(v) for v in (x, y, ia, ib))
    start, n = 0, x.size
    while start < n:
        first, end = _scan(x, y, ia, ib, off, start, masks, ulps, rtols, st.k, st.ints, st.fmax, st.ulp,
                           st.hist, st.worst, lanes, padded, bounds)
        if first < end:  # sub-blocks with NaN/Inf: their start is a multiple of LANES in the block
            metrics_block.scan_block(x[first:end], y[first:end], ia[first:end], ib[first:end], off + first,
                                     masks, ulps, rtols, st, lanes, edges)
        start = end


@functools.cache
def _bounds(pipe: np.dtype) -> np.ndarray:
    """The bounds of a fresh block: its constants set (the largest float, a tiny one below
    which a bound's rounding is no longer relative, and the least positive one)."""
    info = np.finfo(pipe)
    return np.array([0, 0, 0, 0, 0, info.max, 2.0 ** (info.minexp + 26), info.smallest_subnormal], pipe)


def _readonly(v: np.ndarray) -> np.ndarray:
    """A read-only view: memory-mapped and in-memory inputs then share one compiled version."""
    if not v.flags.writeable:
        return v
    view = v.view()
    view.flags.writeable = False
    return view
