"""Small inline SVG plots drawn from the report alone: error growth along the graph, |a−b| histogram.

Hand-written SVG rather than a plotting library: the page must stay one self-contained file
with no fonts or scripts fetched, the plots are simple, and a 5,000-op growth plot has to stay
a few kilobytes (each op is one ``M x y h0`` step of a round-capped path, not an element).
Every string from the model is escaped before it enters the markup.
"""

from __future__ import annotations

import math
from html import escape
from typing import Any

from .dot import STYLES, OpIndex
from ..comparison.statuses import STATUS_LABELS
from .numbers import fmt, num

__all__ = ["error_growth_svg", "histogram_svg", "PLOT_STATUS_COLOURS"]

PLOT_STATUS_COLOURS = {
    "origin": STYLES["origin"].fill,
    "propagated": "#e6550d",
    "within_tolerance": STYLES["within_tolerance"].border,
    "rewritten": STYLES["rewritten"].border,
    "identical": STYLES["identical"].border,
}
DRAW_ORDER = ("identical", "within_tolerance", "rewritten", "propagated", "origin")


def _error(node: dict[str, Any]) -> float | None:
    """The op's relative error: max_rel, else rel_l2 (older reports), else nothing to plot."""
    value = num(node.get("max_rel"))
    return value if value is not None else num(node.get("rel_l2"))


def error_growth_svg(report: dict[str, Any], index: OpIndex, order: list[int] | None = None, width: int = 1080,
                     height: int = 250) -> str:
    """Each op's relative error along ``order`` (the order the examples meet the ops, the ops
    table's ``#``; the report's own order by default) on a log scale, with the origins marked,
    export-rewritten stretches shaded and the rtol line, so the start and growth of the difference
    read at a glance. Exact zeros sit on a ``0`` lane under the axis, NaN/∞ on a lane above it."""
    n = len(index.names)
    order = list(range(n)) if order is None else order
    at = {i: k for k, i in enumerate(order)}
    errors = [_error(node) for node in index.nodes]
    positive = [e for e in errors if e is not None and math.isfinite(e) and e > 0]
    rtol = num((report.get("tolerance") or {}).get("rtol"))
    lo = math.floor(math.log10(min(positive))) if positive else -8
    hi = math.ceil(math.log10(max(positive))) if positive else 0
    if rtol and rtol > 0:
        lo, hi = min(lo, math.floor(math.log10(rtol))), max(hi, math.ceil(math.log10(rtol)))
    lo, hi = max(lo, -20), min(max(hi, lo + 1), 20)
    left, right, top, bottom = 64, 16, 22, 34
    pw, ph = width - left - right, height - top - bottom
    lane, gap = 12.0, 12.0  # the zero lane and the non-finite lane, apart from the log axis
    y_axis_top, y_axis_bottom = top + lane + gap, top + ph - lane - gap

    def x_of(i: int) -> float:  # an op's position in the report -> x of its step in the order
        return left + (pw * at[i] / (n - 1) if n > 1 else pw / 2)

    def y_of(e: float) -> float:
        if math.isnan(e) or math.isinf(e):
            return top + lane / 2
        if e <= 0:
            return top + ph - lane / 2
        frac = (math.log10(e) - lo) / (hi - lo)
        return y_axis_bottom - frac * (y_axis_bottom - y_axis_top)

    parts = [f'<svg id="growth-plot" class="plot" viewBox="0 0 {width} {height}" role="img" '
             f'aria-label="relative error per op in the order the examples meet them" data-left="{left}" data-width="{pw}" '
             f'data-count="{n}">']
    parts.append(_rewritten_bands(index, order, x_of, top, ph, max(pw / max(n, 1), 2.0)))
    step = 1 if hi - lo <= 10 else 2
    for decade in range(lo, hi + 1, step):
        y = y_of(10.0 ** decade)
        parts.append(f'<line class="grid" x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="tick" x="{left - 6}" y="{y + 3.5:.1f}" text-anchor="end">1e{decade}</text>')
    parts.append(f'<text class="tick" x="{left - 6}" y="{top + ph - lane / 2 + 3.5:.1f}" text-anchor="end">0</text>')
    if any(e is not None and not math.isfinite(e) for e in errors):
        parts.append(f'<text class="tick" x="{left - 6}" y="{top + lane / 2 + 3.5:.1f}" text-anchor="end">NaN/∞</text>')
    if rtol and rtol > 0:
        y = y_of(rtol)
        parts.append(f'<line class="rtol" x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}"/>'
                     f'<text class="tick rtol-label" x="{left + pw - 4}" y="{y - 4:.1f}" text-anchor="end">'
                     f'rtol {escape(fmt(rtol))}</text>')
    parts.append(_running_max([errors[i] for i in order], lambda k: x_of(order[k]), y_of))
    for status in DRAW_ORDER:
        dots = "".join(f"M{x_of(i):.1f} {y_of(e):.1f}h0" for i, e in enumerate(errors)
                       if e is not None and index.status(i) == status)
        if dots:
            parts.append(f'<path class="dots" stroke="{PLOT_STATUS_COLOURS[status]}" d="{dots}">'
                         f'<title>{escape(STATUS_LABELS[status])}</title></path>')
    other = "".join(f"M{x_of(i):.1f} {y_of(e):.1f}h0" for i, e in enumerate(errors)
                    if e is not None and index.status(i) not in PLOT_STATUS_COLOURS)
    if other:
        parts.append(f'<path class="dots" stroke="#8c959f" d="{other}"/>')
    parts.append(_origin_marks(report, index, errors, x_of, y_of, top, ph))
    parts.append(f'<line class="axis" x1="{left}" x2="{left + pw}" y1="{top + ph}" y2="{top + ph}"/>'
                 f'<text class="tick" x="{left}" y="{height - 8}">op 0</text>'
                 f'<text class="tick" x="{left + pw}" y="{height - 8}" text-anchor="end">op {n - 1}</text>'
                 f'<text class="axis-label" x="{left + pw / 2:.0f}" y="{height - 8}" text-anchor="middle">'
                 f'ops in the order the examples meet them → (max relative error per op)</text>')
    parts.append(f'<line class="cursor" x1="-10" x2="-10" y1="{top}" y2="{top + ph}"/></svg>')
    return "".join(parts)


def _rewritten_bands(index: OpIndex, order: list[int], x_of: Any, top: float, ph: float, min_w: float) -> str:
    """Shade each run of consecutive ops (in ``order``) that an export rewrite touched."""
    out, start = [], None
    flags = [bool(index.nodes[i].get("rewrite")) or index.status(i) == "rewritten" for i in order]
    for k, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = k
        elif not flag and start is not None:
            x0, x1 = x_of(order[start]), x_of(order[k - 1])
            w = max(x1 - x0, min_w)
            out.append(f'<rect class="rewritten-band" x="{x0 - (w - (x1 - x0)) / 2:.1f}" y="{top}" '
                       f'width="{w:.1f}" height="{ph}"><title>rewritten at export</title></rect>')
            start = None
    return "".join(out)


def _running_max(errors: list[float | None], x_of: Any, y_of: Any) -> str:
    """The largest error seen so far, as a step line: how the difference grows through the net."""
    best, points = None, []
    for i, e in enumerate(errors):
        if e is None or math.isnan(e):
            continue
        if best is None or e > best:
            if best is not None:
                points.append(f"L{x_of(i):.1f} {y_of(best):.1f}")
            best = e
            points.append(f"{'M' if len(points) == 0 else 'L'}{x_of(i):.1f} {y_of(e):.1f}")
    if not points:
        return ""
    points.append(f"L{x_of(len(errors) - 1):.1f} {y_of(best):.1f}")
    return f'<path class="envelope" d="{"".join(points)}"><title>largest error so far</title></path>'


def _origin_marks(report: dict[str, Any], index: OpIndex, errors: list[float | None], x_of: Any, y_of: Any,
                  top: float, ph: float) -> str:
    out = []
    for origin in (report.get("origins") or [])[:50]:
        name = origin.get("node") if isinstance(origin, dict) else None
        if name not in index.position:
            continue
        i = index.position[name]
        e = errors[i] if errors[i] is not None else num(origin.get("max_rel"))
        y = y_of(e) if e is not None else top + ph / 2
        rank = escape(str(origin.get("rank", "")))
        out.append(f'<g class="origin-mark" data-idx="{i}"><title>{escape(name)} ({escape(str(origin.get("op")))})'
                   f'</title><line x1="{x_of(i):.1f}" x2="{x_of(i):.1f}" y1="{top}" y2="{top + ph}"/>'
                   f'<circle cx="{x_of(i):.1f}" cy="{y:.1f}" r="5.5"/>'
                   f'<text x="{x_of(i) + 8:.1f}" y="{max(y - 7, top + 10):.1f}">#{rank}</text></g>')
    return "".join(out)


def histogram_svg(histogram: dict[str, Any] | None, width: int = 300, height: int = 96) -> str:
    """|a−b| per decade as bars, exact zeros as a separate first bar; empty when there is none."""
    if not isinstance(histogram, dict):
        return ""
    counts = [int(num(c) or 0) for c in histogram.get("counts") or []]
    edges = histogram.get("log10_edges") or []
    zero = int(num(histogram.get("zero")) or 0)
    if not counts or len(edges) != len(counts) + 1:
        return ""
    bars = [("0", zero), *((f"1e{int(num(edges[k]) or 0)}", c) for k, c in enumerate(counts))]
    peak = max(c for _, c in bars) or 1
    left, bottom, top = 6, 18, 6
    bw = (width - 2 * left) / len(bars)
    out = [f'<svg class="hist" viewBox="0 0 {width} {height}" role="img" aria-label="histogram of |a−b|">']
    for k, (label, count) in enumerate(bars):
        h = (height - top - bottom) * (count / peak) if count else 0
        x = left + k * bw
        cls = "bar zero" if k == 0 else "bar"
        out.append(f'<rect class="{cls}" x="{x + 1:.1f}" y="{height - bottom - h:.1f}" width="{bw - 2:.1f}" '
                   f'height="{h:.1f}"><title>{escape(label)}: {count}</title></rect>')
        if k == 0 or (k > 1 and int(num(edges[k - 1]) or 0) % 3 == 0):
            out.append(f'<text class="tick" x="{x + bw / 2:.1f}" y="{height - 5}" text-anchor="middle">'
                       f'{escape(label)}</text>')
    out.append("</svg>")
    return "".join(out)
