"""The result of comparing two tensors: one small frozen :class:`TensorMetrics` per pair.

Split from :mod:`tracer.metrics` (which computes it) so the scanning kernels and the result
type can each be read on their own. JSON has no non-finite floats: ``to_json`` writes them
as ``"inf"``, ``"-inf"``, ``"nan"``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from collections.abc import Callable
from typing import Any

__all__ = ["TensorMetrics", "within_tolerance", "Worst", "HISTOGRAM_DECADES"]

HISTOGRAM_DECADES = (-12, 3)  # the |a-b| histogram: one bin per decade from 1e-12 to 1e3, clipped

_FLOAT_FIELDS = ("max_abs", "max_rel", "mean_abs", "rel_l2", "cosine", "sqnr_db")
_SPECIAL = {"inf": math.inf, "-inf": -math.inf, "nan": math.nan}

Worst = tuple[tuple[int, ...], Any, Any]


@dataclass(frozen=True)
class TensorMetrics:
    """The distance between tensor A (the reference) and tensor B; see the module docstring."""

    kind: str  # "float" | "exact"
    dtype_a: str
    dtype_b: str
    shape: tuple[int, ...]
    size: int
    identical: bool
    mismatch_count: int
    max_abs: float
    max_rel: float
    mean_abs: float
    rel_l2: float
    ulp_max: int
    cosine: float
    sqnr_db: float
    nan_mismatch: int
    inf_mismatch: int
    nan_a: int
    nan_b: int
    inf_a: int
    inf_b: int
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

    def to_json(self) -> dict[str, Any]:
        """A JSON-safe dict; non-finite floats become ``"inf"``, ``"-inf"`` or ``"nan"``."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        for name in _FLOAT_FIELDS:
            out[name] = _enc(out[name])
        out["shape"] = list(self.shape)
        out["worst"] = [{"index": list(i), "a": _enc(a), "b": _enc(b)} for i, a, b in self.worst]
        out["excess_at_rtol"] = [[_enc(r), _enc(e)] for r, e in self.excess_at_rtol]
        out["histogram"] = list(self.histogram)
        return out

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TensorMetrics:
        """Inverse of :meth:`to_json` (worst values are decoded only for the float kind)."""
        kw = dict(d)
        for name in _FLOAT_FIELDS:
            kw[name] = _dec(kw[name])
        kw["shape"] = tuple(kw["shape"])
        conv: Callable[[Any], Any] = _dec if kw["kind"] == "float" else (lambda v: v)
        kw["worst"] = tuple((tuple(w["index"]), conv(w["a"]), conv(w["b"])) for w in kw["worst"])
        kw["excess_at_rtol"] = tuple((_dec(r), _dec(e)) for r, e in kw.get("excess_at_rtol", ()))
        kw["histogram"] = tuple(int(c) for c in kw.get("histogram", ()))
        return cls(**kw)


def within_tolerance(m: TensorMetrics, atol: float, rtol: float) -> bool:
    """Same as ``m.within(atol, rtol)``."""
    return m.within(atol, rtol)


def _enc(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _dec(v: Any) -> Any:
    return _SPECIAL[v] if isinstance(v, str) else float(v)
