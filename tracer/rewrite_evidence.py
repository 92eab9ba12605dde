"""What B's rewrites explain, in words: where no origin sits in them, an optimize_for_inference fusion
of a resize, the rewritten op an origin's replay ran with it (:mod:`tracer.causes` says them)."""

from __future__ import annotations

from typing import Any

from .cause_shares import beyond_noise, outputs_noise, rewrite_causes
from .optypes import RESIZE_FUSED_CONV_FILTER
from .text import count

__all__ = ["fused_resize", "replayed_rewrite", "unlocated_rewrites"]


def fused_resize(report: dict[str, Any]) -> str:
    """optimize_for_inference's fuse_resize_and_conv folds a ResizeBilinear into the next conv as
    FusedResizeAndPadConv2D, which has no ``half_pixel_centers``: a resize that used it computes
    other values there (by up to whole pixels), whatever the batch-norm folding beside it did."""
    for rewrite in report.get("rewrites") or []:
        detail = rewrite.get("detail") if isinstance(rewrite, dict) else None
        if rewrite.get("kind") != "fused" or not isinstance(detail, dict) or \
                detail.get("fused_op") not in RESIZE_FUSED_CONV_FILTER:
            continue
        resize = next((n for n in rewrite.get("a_nodes") or [] if "Resize" in str(
            ((report.get("nodes") or {}).get(n) or {}).get("op", ""))), None)
        attrs = ((report.get("nodes") or {}).get(resize) or {}).get("attrs_a") or {}
        lost = (" A's resize used half_pixel_centers, which the fused op cannot: it resizes differently."
                if attrs.get("half_pixel_centers") is True else "")
        return (f" The export also fused `{(rewrite.get('a_nodes') or ['?'])[0]}` into the convolution after it "
                f"({detail['fused_op']}, optimize_for_inference's fuse_resize_and_conv; `toco_compatible=True` "
                f"leaves it out).{lost}")
    return ""


def replayed_rewrite(report: dict[str, Any], origin: dict[str, Any]) -> str:
    """For an origin whose rewrite is that of an op its replay ran with it (the loop a gather
    stands for), not its own: which op, so the sentence does not seem to blame the gather."""
    if ((report.get("nodes") or {}).get(origin.get("node")) or {}).get("rewrite"):
        return ""  # in a rewrite itself (a folded batch norm's group)
    rewritten = (origin.get("isolation") or {}).get("rewritten") or []
    first = rewritten[0] if rewritten and isinstance(rewritten[0], dict) else {}
    if not first.get("op") or first.get("op") == origin.get("node"):
        return ""
    return f", whose replay ran the rewritten `{first['op']}` ({first.get('kind')}) with it"


def unlocated_rewrites(report: dict[str, Any]) -> dict[str, str]:
    """The causes B's rewrites point at (cast_inserted: mixed precision; a fold: the export) where
    the plain outputs differ beyond tolerance, and beyond their run-to-run noise where it was
    measured, yet no origin inside sits in a rewrite. On the H200 a detector whose heads an export
    computes in float16 differed at its outputs by 2.85e-05 in every pair of runs, which repeated
    themselves bit for bit, while the run-to-run noise inside (its convs' autotuning) covered every
    op: the causes said only autotuning and the observer effect, and not the rewrites, the one
    thing that told the two graphs apart."""
    outputs = [o for o in (report.get("outputs") or {}).values() if isinstance(o, dict)]
    if not any(o.get("within_tolerance") is False for o in outputs) or (outputs_noise(report)
                                                                       and not beyond_noise(report)):
        return {}
    beyond = " and beyond their run-to-run noise in every pair of runs" if beyond_noise(report) else ""
    found: dict[str, str] = {}
    for cause, rewrites in rewrite_causes(report).items():
        kinds = sorted({str(r.get("kind")) for r in rewrites})
        first = next((str(r["a_nodes"][0]) for r in rewrites if r.get("a_nodes")), "")
        found[cause] = (f"B's graph differs from A's by {count(len(rewrites), 'rewrite')} ({', '.join(kinds)}"
                        f"{f', e.g. `{first}`' if first else ''}), and the plain outputs differ beyond tolerance{beyond}; "
                        "no origin found inside the model sits in them, so which of their ops makes the difference "
                        "is not measured op by op.")
    return found
