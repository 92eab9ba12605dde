"""The result of comparing two tensors (one small frozen :class:`TensorMetrics` per pair), and
the one place a metric is declared.

Every scalar metric is a field of :class:`TensorMetrics` declared with :func:`metric`: its name
(the field, also its report.json key), its type (a ``float`` is written to JSON with
non-finite values as ``"inf"``, ``"-inf"``, ``"nan"``), a label for display, how a float scan
combines it from its :class:`Totals`, and its value for exact kinds (a constant, or
``MEASURED`` when the exact scan counts it). :data:`METRICS` is derived from those fields, and
everything else is derived from :data:`METRICS`: the float and exact results
(:func:`float_result`, :func:`exact_result`), :meth:`TensorMetrics.to_json` /
:meth:`TensorMetrics.from_json`, :meth:`TensorMetrics.describe`.

How to add a metric:

1. When it follows from what the scan already gathers (a :class:`Totals` field: the four exact
   sums, the counts, max |a-b|, max relative error, max ULPs), declare one field here, e.g.
   ``rms_diff: float = metric("rms diff", lambda t: math.sqrt(t.sdd / t.nfin) if t.nfin else 0.0, exact=0.0)``.
   Nothing else changes: it is computed, merged, written to and read from JSON.
2. When it needs another per-element quantity, the block kernel gathers it first, in its two
   twins that must give the same bits: the numpy definition (:func:`tracer.metrics.block.scan_block`,
   a new ``BlockState`` slot or lane row) and the compiled one (:mod:`tracer.metrics.kernel`,
   the same slot, restated there and checked at import); then one :class:`Totals` field that
   :mod:`tracer.metrics.scan` fills from that slot, then the declaration of step 1.
   ``tests/test_metrics_backends.py`` then checks that the twins agree.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "TensorMetrics", "Totals", "Metric", "METRICS", "MEASURED", "metric", "float_result", "exact_result",
    "within_tolerance", "Worst", "HISTOGRAM_DECADES",
]

HISTOGRAM_DECADES = (-12, 3)  # the |a-b| histogram: one bin per decade from 1e-12 to 1e3, clipped

_SPECIAL = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}

Worst = tuple[tuple[int, ...], Any, Any]
MEASURED: Any = type("Measured", (), {"__repr__": lambda self: "MEASURED"})()  # the exact scan gives it


@dataclass(frozen=True)
class Totals:
    """What a float scan gathered over every block and worker: what each metric combines.

    The sums are over the pairs where both sides are finite, in float64, each correctly
    rounded from its lanes (``d = a - b``); ``eps`` bounds their relative error per term;
    ``rescan()`` reads both tensors again for ``(b.b, a.b)`` in float64 (the cosine's fallback).
    """

    saa: float  # a.a
    sdd: float  # d.d
    sda: float  # d.a
    sabs: float  # sum of |d|
    nfin: int  # pairs where both sides are finite
    differ: int  # positions whose bits differ
    mismatch: int  # ... except NaN vs NaN
    nan_mismatch: int
    inf_mismatch: int
    nan_a: int
    nan_b: int
    inf_a: int
    inf_b: int
    max_abs: float
    max_rel: float
    ulp_max: int  # -1: not the same float dtype on both sides
    same_dtype: bool
    eps: float
    rescan: Callable[[], tuple[float, float]]


@dataclass(frozen=True)
class Metric:
    """One metric's declaration (see the module docstring); ``name`` and ``type`` are its field's."""

    label: str
    combine: Callable[[Totals], Any]
    exact: Any
    name: str = ""
    type: str = ""


def metric(label: str, combine: Callable[[Totals], Any], *, exact: Any) -> Any:
    """Declare a :class:`TensorMetrics` field as a metric: a dataclass field without a default."""
    return field(metadata={"metric": Metric(label, combine, exact)})


def _sqnr_db(t: Totals) -> float:
    """10·log10(|a|² / |a-b|²). A sum of squares of differences beyond float64's range (|a-b| above
    ~1e154) is inf, and the ratio then 0: the noise outweighs any finite signal, so -inf, as rel L2
    is inf there (it was a math domain error)."""
    if t.sdd == 0:
        return math.inf
    ratio = t.saa / t.sdd if t.saa > 0 else 0.0
    return 10 * math.log10(ratio) if ratio > 0 else -math.inf


def _cosine(t: Totals) -> float:
    """Cosine similarity from the three sums, or from an exact second pass when needed.

    With ``d = a - b``: ``|b|^2 = |a|^2 - 2 a.d + |d|^2`` and ``a.b = |a|^2 - a.d``; near
    ``a ~ b`` the form ``1 - cos = (|d|^2 - (|a|-|b|)^2) / (2|a||b|)`` keeps full precision.
    When neither form is good to 1e-6 (``|b|`` tiny next to ``|a|`` or ``|d|``: cancellation
    in the sums) a second pass sums ``b.b`` and ``a.b`` in float64.

    The error of a sum is ``eps`` times the sum of its terms' sizes: ``|a|^2``, ``|d|^2``,
    and at most ``|a||d|`` for ``a.d`` (Cauchy-Schwarz; ``|a.d|`` itself may have cancelled).
    Both estimates include the error of ``|b|``: ``|b|^2`` comes out of a cancellation of
    sums as large as ``(|a| + |d|)^2``, so it is only good to ``eps (|a| + |d|)^2 / |b|^2``
    relative (``rel_bb``). Leaving that out once let ``a = [520192, 0, 0, 65536]`` vs
    ``b = [1, 0, 0, 1e-7]`` (bfloat16) through with a cosine 3e-5 off (``|b|^2`` came out
    1.00006 instead of 1).
    """
    saa, sdd, sda, eps = t.saa, t.sdd, t.sda, t.eps
    if saa == 0:
        return 1.0 if sdd == 0 else 0.0  # b = -d exactly
    sbb = saa - 2 * sda + sdd
    na, nd = math.sqrt(saa), math.sqrt(sdd)
    if sbb > 100 * eps * (na + nd) ** 2:
        rel_bb = eps * (na + nd) ** 2 / sbb  # |b| is good to half of this
        nb = math.sqrt(sbb)
        a_minus_b = (2 * sda - sdd) / (na + nb)
        one_minus = (sdd - a_minus_b * a_minus_b) / (2 * na * nb)
        # a relative error r of |b| moves 1 - cos by r |1 - cos| and a_minus_b^2 by 2r of it
        near = eps * sdd * (5 + 2 * nd / (na + nb)) / (2 * na * nb)
        near += rel_bb * (abs(one_minus) + a_minus_b * a_minus_b / (na * nb))
        direct = eps * (saa + na * nd) / (na * nb) + rel_bb
        if near <= min(direct, 1e-6):
            return min(1.0, max(-1.0, 1 - one_minus))
        if direct <= 1e-6:
            return min(1.0, max(-1.0, (saa - sda) / (na * nb)))
    sbb, sab = t.rescan()
    return 0.0 if sbb == 0 else min(1.0, max(-1.0, sab / math.sqrt(saa * sbb)))


@dataclass(frozen=True)
class TensorMetrics:
    """The distance between tensor A (the reference) and tensor B; see :mod:`tracer.metrics.arrays`.

    The fields declared with :func:`metric` are the metrics (in this order in JSON and in
    :meth:`describe`); exact kinds: integers, bool, strings, complex and the rest.
    """

    kind: str  # "float" | "exact"
    dtype_a: str
    dtype_b: str
    shape: tuple[int, ...]
    size: int
    identical: bool = metric("identical", lambda t: t.differ == 0 and t.same_dtype, exact=MEASURED)
    mismatch_count: int = metric("mismatches", lambda t: t.mismatch, exact=MEASURED)
    max_abs: float = metric("max abs", lambda t: t.max_abs, exact=MEASURED)  # integers: exact |a-b|
    max_rel: float = metric("max rel", lambda t: t.max_rel, exact=MEASURED)
    mean_abs: float = metric("mean abs", lambda t: t.sabs / t.nfin if t.nfin else 0.0, exact=0.0)
    rel_l2: float = metric(
        "rel L2", lambda t: math.sqrt(t.sdd / t.saa) if t.saa > 0 else (0.0 if t.sdd == 0 else math.inf), exact=0.0)
    ulp_max: int = metric("max ULPs", lambda t: t.ulp_max, exact=-1)
    cosine: float = metric("cosine", _cosine, exact=1.0)
    sqnr_db: float = metric("SQNR dB", lambda t: _sqnr_db(t), exact=math.inf)
    nan_mismatch: int = metric("NaN differ", lambda t: t.nan_mismatch, exact=0)
    inf_mismatch: int = metric("Inf differ", lambda t: t.inf_mismatch, exact=0)
    nan_a: int = metric("NaN in A", lambda t: t.nan_a, exact=0)
    nan_b: int = metric("NaN in B", lambda t: t.nan_b, exact=0)
    inf_a: int = metric("Inf in A", lambda t: t.inf_a, exact=0)
    inf_b: int = metric("Inf in B", lambda t: t.inf_b, exact=0)
    worst: tuple[Worst, ...]
    # (rtol, max(0, max |a-b| - rtol*|a| over finite elements)) for each rtol asked of
    # compare_arrays: the one number that decides within(atol, rtol) exactly for every atol.
    excess_at_rtol: tuple[tuple[float, float], ...] = ()
    # float kind: (count of |a-b| = 0, then one count per decade of HISTOGRAM_DECADES) over the
    # pairs where both sides are finite, |a-b| as the compared precision has it; else ().
    histogram: tuple[int, ...] = ()

    def within(self, atol: float, rtol: float) -> bool:
        """Whether every finite element has ``|a-b| <= atol + rtol*|a|`` and no NaN/Inf differs.

        ``numpy.allclose(b, a, rtol, atol, equal_nan=True)`` with A as the reference, decided
        in float64; exact kinds: ``mismatch_count == 0``. A summary cannot hold every element,
        so this is exact when ``rtol`` was passed to :func:`compare_arrays` (``rtols=``), or
        when ``max_abs``, ``max_rel`` and the worst elements settle it (the usual case);
        otherwise it raises ValueError rather than guess.
        """
        if not (atol >= 0 and rtol >= 0):
            raise ValueError(f"atol and rtol must be >= 0, got {atol!r} and {rtol!r}")
        if self.kind != "float":
            return self.mismatch_count == 0
        if self.nan_mismatch or self.inf_mismatch:
            return False
        if self.max_abs <= atol:
            return True
        for r, excess in self.excess_at_rtol:
            if r == rtol:
                return excess <= atol
        diffs = [abs(a - b) for _, a, b in self.worst]  # all finite: no NaN/Inf mismatch here
        if rtol == 0 or any(abs(a - b) > atol + rtol * abs(a) for _, a, b in self.worst):
            return False
        if len(self.worst) == self.mismatch_count or min(diffs) * (1 + 2.0**-22) <= atol:
            return True  # every element above atol is among the listed worst, and they pass
        if self.max_rel < 1 and self.max_rel / (1 - self.max_rel) * (1 + 1e-12) <= rtol:
            return True  # |a-b| <= max_rel*max(|a|,|b|) implies |a-b| <= rtol*|a|
        raise ValueError(
            f"within(atol={atol!r}, rtol={rtol!r}) cannot be decided from this summary: more "
            f"than {len(self.worst)} elements exceed atol. Pass rtols=[{rtol!r}] to "
            "compare_arrays to record the exact answer"
        )

    def diff_histogram(self) -> dict[str, Any] | None:
        """The histogram as report.json has it: ``{"log10_edges", "counts", "zero"}``, or None."""
        if not self.histogram:
            return None
        lo, hi = HISTOGRAM_DECADES
        return {"log10_edges": list(range(lo, hi + 1)), "counts": list(self.histogram[1:]), "zero": self.histogram[0]}

    def describe(self) -> str:
        """The metrics on one line for a person: ``label value`` in declaration order."""
        return ", ".join(f"{m.label} {_show(getattr(self, m.name))}" for m in METRICS)

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict; non-finite floats become ``"inf"``, ``"-inf"`` or ``"nan"``."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for m in METRICS:
            out[m.name] = _enc(out[m.name]) if m.type == "float" else out[m.name]
        out["shape"] = list(self.shape)
        out["worst"] = [{"index": list(i), "a": _enc(a), "b": _enc(b)} for i, a, b in self.worst]
        out["excess_at_rtol"] = [[_enc(r), _enc(e)] for r, e in self.excess_at_rtol]
        out["histogram"] = list(self.histogram)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TensorMetrics:
        """Inverse of :meth:`to_json` (worst values are decoded only for the float kind)."""
        kw = dict(d)
        for m in METRICS:
            kw[m.name] = _dec(kw[m.name]) if m.type == "float" else kw[m.name]
        kw["shape"] = tuple(kw["shape"])
        conv: Callable[[Any], Any] = _dec if kw["kind"] == "float" else (lambda v: v)
        kw["worst"] = tuple((tuple(w["index"]), conv(w["a"]), conv(w["b"])) for w in kw["worst"])
        kw["excess_at_rtol"] = tuple((_dec(r), _dec(e)) for r, e in kw.get("excess_at_rtol", ()))
        kw["histogram"] = tuple(int(c) for c in kw.get("histogram", ()))
        return cls(**kw)


METRICS: tuple[Metric, ...] = tuple(
    Metric(f.metadata["metric"].label, f.metadata["metric"].combine, f.metadata["metric"].exact, f.name, str(f.type))
    for f in fields(TensorMetrics) if "metric" in f.metadata
)


def float_result(
    t: Totals, *, dtype_a: str, dtype_b: str, shape: tuple[int, ...], worst: tuple[Worst, ...],
    excess_at_rtol: tuple[tuple[float, float], ...], histogram: tuple[int, ...],
) -> TensorMetrics:
    """A float pair's metrics: each one combined from the scan's totals as it is declared."""
    values = {m.name: m.combine(t) for m in METRICS}
    return TensorMetrics(kind="float", dtype_a=dtype_a, dtype_b=dtype_b, shape=shape, size=math.prod(shape),
                         worst=worst, excess_at_rtol=excess_at_rtol, histogram=histogram, **values)


def exact_result(
    measured: dict[str, Any], *, dtype_a: str, dtype_b: str, shape: tuple[int, ...], worst: tuple[Worst, ...],
) -> TensorMetrics:
    """An exact kind's metrics: what the exact scan ``measured``, and the declared constants."""
    wanted = {m.name for m in METRICS if m.exact is MEASURED}
    if set(measured) != wanted:
        raise ValueError(f"the exact scan must measure {sorted(wanted)}, got {sorted(measured)}")
    values = {m.name: measured[m.name] if m.exact is MEASURED else m.exact for m in METRICS}
    return TensorMetrics(kind="exact", dtype_a=dtype_a, dtype_b=dtype_b, shape=shape, size=math.prod(shape),
                         worst=worst, **values)


def within_tolerance(m: TensorMetrics, atol: float, rtol: float) -> bool:
    """Same as ``m.within(atol, rtol)``."""
    return m.within(atol, rtol)


def _show(v: Any) -> str:
    return f"{v:.6g}" if isinstance(v, float) else str(v)


def _enc(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _dec(v: Any) -> Any:
    return _SPECIAL[v] if isinstance(v, str) else float(v)
