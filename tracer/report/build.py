"""``report.json``: the machine contract of a comparison (docs/contracts.md), built from a Comparison.

Field names are a contract: add freely, never rename. JSON has no infinities, so non-finite
floats are written as the strings ``"inf"``, ``"-inf"`` and ``"nan"`` (:mod:`tracer.jsonvalues`). Files are written to a
temporary name and renamed, so a report directory never holds a half-written report.json.
"""

from __future__ import annotations

import datetime as _dt
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._version import __version__
from ..captures.inputs import run_batch_size
from ..causes import explain_comparison
from ..comparison.pairing import b_keys_as_a
from ..comparison.statuses import BORN_HERE
from ..jsonvalues import jsonable
from ..opgraph import tensor_op
from ..safewrite import write_file
from .headline import build_headline

if TYPE_CHECKING:
    from ..comparison.pipeline import Comparison
    from ..comparison.divergence import NodeResult

__all__ = ["build_report", "report_comparison", "write_reports", "merge_isolation", "SCHEMA_VERSION", "rel_to_peak"]

# What a capture records of the machine but a report leaves out: a report is made to be pasted
# into a public issue, and a machine's name says nothing about the numbers.
LOCAL_ONLY = ("hostname",)

SCHEMA_VERSION = 1


def float_only(m: Any, field: str) -> float | None:
    """A norm-based figure (rel L2) only where it was measured: exact kinds (integers, bools)
    count mismatches and magnitudes, and their norms are 0.0 by definition, not a measurement."""
    return getattr(m, field) if m is not None and m.kind == "float" else None


def rel_to_peak(view: Any, tensor: str | None, m: Any) -> float | None:
    """``max |a-b| / max |a|``: the difference relative to the tensor's largest magnitude (from
    A's capture stats), a relative figure that near-zero elements cannot inflate like max rel."""
    if m is None or tensor is None or not view.capture.has(tensor):
        return None
    stats = view.capture.record(tensor).get("stats") or {}
    lo, hi = stats.get("min"), stats.get("max")
    if not isinstance(lo, (int, float)) or not isinstance(hi, (int, float)) or not math.isfinite(m.max_abs):
        return None
    peak = max(abs(float(lo)), abs(float(hi)))
    return m.max_abs / peak if peak > 0 else (0.0 if m.max_abs == 0 else math.inf)


def _side(view: Any, kept: bool = True, digest: str | None = None) -> dict[str, Any]:
    manifest = view.capture.manifest
    spec = manifest.get("spec", {})
    knobs = {k: v for k, v in (spec.get("knobs") or {}).items() if v not in (None, "default", False, {}, [])}
    knobs.pop("session_config_text", None)
    batch = run_batch_size(manifest)  # the batch that ran (--batch-size 10 over 8 examples ran 8)
    # a signature without a batch axis ran each example alone, paired row by row with the other side
    per_example = bool(manifest.get("examples", {}).get("per_example"))
    no_inputs = not manifest.get("examples", {}).get("count") and not manifest.get("graph", {}).get("inputs")
    asked = spec.get("batch_size")  # a batch this side asked for and its signature could not run
    unmet = f"; --batch-size {asked} cannot apply" if per_example and isinstance(asked, int) and asked > 1 else ""
    batching = (f"one example per run (the signature has no batch axis{unmet})" if per_example
                else "no inputs (one run)" if no_inputs else f"batch {batch}")
    label = ", ".join([spec.get("device", "cpu"), batching] + [f"{k}={v}" for k, v in knobs.items()])
    return {
        "label": label,
        "one_example_per_run": per_example,
        "artifact": {"path": spec.get("artifact", {}).get("path"), **manifest.get("artifact", {})},
        "device": spec.get("device", "cpu"),
        "batch_size": batch,
        "knobs": knobs,
        "capture_dir": str(view.capture.path),
        "capture_kept": kept,  # false: captured for this report only, deleted after it (--keep-captures keeps it)
        "environment": {k: v for k, v in (manifest.get("environment") or {}).items() if k not in LOCAL_ONLY},
        "timings": manifest.get("timings", {}),
        "examples": {**manifest.get("examples", {}), "digest": digest},
        "notes": manifest.get("notes", []),
        "signature": {k: (manifest.get("signature") or {}).get(k) for k in ("key", "from_user", "borrowed_from")},
    }


def _origin(result: NodeResult, comparison: Comparison, rank: int | None = None) -> dict[str, Any]:
    m = result.metrics
    node = comparison.alignment.nodes.get(result.name)
    iso = comparison.isolation.get(result.name)
    out = {
        "node": result.name,
        "op": comparison.view_a.graph.op_type(result.name),
        "tensor": result.tensor,
        "b_node": node.b_node if node else None,
        "max_abs": m.max_abs if m else None,
        "max_rel": m.max_rel if m else None,
        "rel_l2": float_only(m, "rel_l2"),
        "mismatch_count": m.mismatch_count if m else None,  # for an integer index: how many moved
        "dtype": m.dtype_a if m else None,
        "rel_to_peak": rel_to_peak(comparison.view_a, result.tensor, m),
        "level": "tolerance" if result.status == "origin" else "bitwise",
        "status": result.status,
        "rewrite": (node.rewrite if node else None) or _rewrite_replayed_with(iso),
        "isolation": iso.to_json() if iso else None,
    }
    out.update(_detection_list_fields(result, comparison))
    if rank is not None:
        out["rank"] = rank
    return out


def _detection_list_fields(result: NodeResult, comparison: Comparison) -> dict[str, Any]:
    """For an op whose tensor holds a detector's lists of detections: ``detection_list`` (how it was
    measured: between matched detections, the entry's metrics then being its matched rows') and
    ``index_by_index`` (row k of A against row k of B, whether or not they are the same detection:
    kept, named as such, never the entry's metric). Nothing for any other op."""
    listed = result.detection_list
    if listed is None:
        return {}
    out: dict[str, Any] = {"detection_list": {**listed.to_json(), "matched_within_tolerance": result.matched_within}}
    m = result.index_metrics
    if m is not None:
        out["index_by_index"] = {
            "identical": m.identical, "max_abs": m.max_abs, "max_rel": m.max_rel, "rel_l2": float_only(m, "rel_l2"),
            "rel_to_peak": rel_to_peak(comparison.view_a, result.tensor, m), "mismatch_count": m.mismatch_count,
            "within_tolerance": m.within(*comparison.tolerance.for_tensor(result.tensor or "")),
        }
    return out


def _rewrite_replayed_with(iso: Any) -> str | None:
    """An origin's own error that its replay owes to a rewritten op it recomputed (a constant inside
    the loop a gather stands for): that op's rewrite kind, which the causes then explain."""
    if iso is None or iso.verdict != "own_error" or not iso.rewritten:
        return None
    return str(iso.rewritten[0]["kind"])


def _node(result: NodeResult, comparison: Comparison, index: int) -> dict[str, Any]:
    ga, gb = comparison.view_a.graph, comparison.view_b.graph
    data = ga.node(result.name)
    node = comparison.alignment.nodes.get(result.name)
    b_node = node.b_node if node else None
    pair = next((p for p in node.tensors if p.a == result.tensor), None) if node else None
    m = result.metrics
    out: dict[str, Any] = {
        "status": result.status,
        "op": data["op"],
        "scope": data["scope"],
        "device": data["device"],
        "topo_index": index,
        "b_node": b_node,
        "b_op": gb.op_type(b_node) if b_node and b_node in gb else None,
        "alignment": node.reason if node else None,
        "tensor": result.tensor,
        "b_tensor": pair.b if pair else None,
        "inputs": [t for t in dict.fromkeys(i.rsplit(":", 1)[0] for i in data["inputs"])],
        "frontier": result.frontier,
        "reason": result.reason or (node.note if node else "") or None,
        "rewrite": node.rewrite if node else None,
        "isolation": comparison.isolation[result.name].to_json() if result.name in comparison.isolation else None,
        "attrs_a": data["attrs"],
        "attrs_b": gb.node(b_node)["attrs"] if b_node and b_node in gb else None,
        "amplification": result.amplification,
        "bitwise_origin": result.bitwise_origin,
    }
    if result.tensor:
        info = ga.output_info(result.tensor)
        out["shape"], out["dtype"] = info["shape"], info["dtype"]
        if comparison.view_a.capture.has(result.tensor):
            out["shape"] = comparison.view_a.capture.record(result.tensor)["shape"]
        if pair and pair.b and pair.b.rsplit(":", 1)[0] in gb:
            out["dtype_b"] = gb.output_info(pair.b)["dtype"]
    if m is not None:
        out.update({
            "max_abs": m.max_abs, "max_rel": m.max_rel, "mean_abs": m.mean_abs, "ulp_max": m.ulp_max,
            "cosine": m.cosine, "sqnr_db": m.sqnr_db, "rel_l2": float_only(m, "rel_l2"),
            "mismatch_count": m.mismatch_count,
            "rel_to_peak": rel_to_peak(comparison.view_a, result.tensor, m),
            "nan_mismatch": m.nan_mismatch, "inf_mismatch": m.inf_mismatch,
            "worst": [[list(i), a, b] for i, a, b in m.worst],
        })
        if not m.identical and pair and pair.b:
            # counted by the metrics scan, which already saw every |a-b|: no tensor is read again
            out["diff_histogram"] = m.diff_histogram()
    out.update(_detection_list_fields(result, comparison))
    return out


def _first_nonfinite(view: Any) -> dict[str, Any] | None:
    """Where NaN/Inf is *born*: the first op (topological order) whose output holds NaN or Inf
    although none of its captured data inputs does, from the capture's stats.

    A source op (a ``Const``, a placeholder: no data inputs) is never it: a ``-inf`` sentinel
    constant (padded NMS masks scores with one) is data, not a fault, and the ops that merely
    pass it on have a non-finite input. Context for the reader, not a divergence.
    """
    def nonfinite(name: str) -> tuple[int, int] | None:
        if not view.capture.has(name):
            return None
        stats = view.capture.record(name).get("stats") or {}
        return int(stats.get("nan") or 0), int(stats.get("inf") or 0)

    for op in view.graph.topo_order():
        inputs = view.graph.data_inputs(op)
        if not inputs or any((nonfinite(t) or (0, 0)) != (0, 0) for t in inputs):
            continue
        for slot in range(len(view.graph.node(op)["outputs"])):
            name = f"{op}:{slot}"
            nan, inf = nonfinite(name) or (0, 0)
            if nan or inf:
                return {"node": op, "op": view.graph.op_type(op), "tensor": name, "nan": nan, "inf": inf,
                        "from_finite_inputs": True}
    return None


def _why_not_compared(comparison: Comparison, key: str, ta: str, tb: str) -> str:
    """Why an output has no metrics: the reason its op was not compared, as the nodes say."""
    if not tb:
        return f"B has no output {key!r} (pair keys that differ with --map A_KEY=B_KEY)"
    result = comparison.divergence.nodes.get(tensor_op(ta))
    return (result.reason if result is not None and result.reason else "") or "not captured on both sides"


def _output_fields(m: Any, atol: float, rtol: float) -> dict[str, Any]:
    return {
        "dtype": m.dtype_a if m else None,
        "identical": m.identical if m else None,
        "within_tolerance": m.within(atol, rtol) if m else None,
        "max_abs": m.max_abs if m else None, "max_rel": m.max_rel if m else None,
        "rel_l2": float_only(m, "rel_l2"),
        "cosine": m.cosine if m else None,
        "nan_mismatch": m.nan_mismatch if m else None,
        "inf_mismatch": m.inf_mismatch if m else None,
        "mismatch_count": m.mismatch_count if m else None,
    }


def observer_effect_entry(manifest: dict[str, Any], as_detections: dict[str, float], a_keys: dict[str, str]
                     ) -> dict[str, Any]:
    """A side's ``observer_effect``: its capture manifest's, with a detector's outputs measured between the
    detections its plain and instrumented runs matched (``as_detections``: own key -> that figure), as
    everything else measures them; the manifest's index-by-index figure kept beside, said as such. The
    capture child knows no groups of detections, and NMS listing near-tied detections in another order
    read there as outputs moved by the size of a box (0.242 on the H200 for a pair whose matched
    detections agreed), which the causes then held against the difference between the sides. ``a_keys``
    (B's side under --map: its own key -> A's): said as ``a_keys``, so that the shift of each output is
    held against that output's difference, which the report keys by A's keys."""
    manifest = {**manifest, "a_keys": dict(sorted(a_keys.items()))} if a_keys else manifest
    if not as_detections:
        return manifest
    index = dict(manifest.get("outputs_max_abs_diff") or {})
    return {**manifest, "outputs_max_abs_diff": {**index, **as_detections},
            "outputs_as_detections": sorted(as_detections),
            "outputs_index_by_index": {key: index.get(key) for key in sorted(as_detections)}}


def build_report(comparison: Comparison) -> dict[str, Any]:
    div = comparison.divergence
    view_a, view_b = comparison.view_a, comparison.view_b
    outputs = {}
    verdicts = comparison.output_verdicts()
    for key, (ta, tb, observed) in comparison.output_metrics().items():
        atol, rtol = comparison.tolerance.for_tensor(ta)
        plain = comparison.plain_outputs.get(key)
        m = plain or observed
        outputs[key] = {
            "a_tensor": ta, "b_tensor": tb,
            **_output_fields(m, atol, rtol),
            "rel_to_peak": rel_to_peak(view_a, ta, m),
            "not_compared": None if m else _why_not_compared(comparison, key, ta, tb),
            # --repeat: how far this output moved by itself across one side's runs (0.0: not at all)
            "noise_max_abs": (None if not comparison.noise else comparison.noise_per_output.get(key, 0.0) if plain
                              else comparison.noise_per_tensor.get(ta, 0.0)),
            # the fields above compare the plain runs' outputs (what production computes) where both
            # captures stored them; "instrumented" is the same comparison of the captured tensors
            "compared_as": "plain" if plain else ("instrumented" if m else None),
            "instrumented": _output_fields(observed, atol, rtol) if observed else None,
            # what the verdict judges: over every pair of runs, against each side's own spread
            "verdict": verdicts.get(key),
            "noise": comparison.noise_outputs[key].to_json() if key in comparison.noise_outputs else None,
        }
    report = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "tftrace", "version": __version__},
        "command": comparison.command,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "verdict": comparison.verdict,  # the outputs' (by default), or the worse of the two below
        "verdict_ops": div.verdict,  # op by op, over the captured (instrumented) tensors
        "verdict_outputs": comparison.outputs_verdict,  # the plain runs' outputs
        "verdict_decided_by": comparison.decided_by,  # "outputs" | "outputs_and_intermediates"
        # intermediates beyond tolerance: from where, and the op by which they heal (None: none are)
        "intermediates": div.intermediates(view_a.graph),
        "tolerance": comparison.tolerance.to_json(),
        "sides": {key: _side(view, comparison.kept_captures[key], comparison.examples_digests.get(key))
                  for key, view in (("a", view_a), ("b", view_b))},
        "first_divergence": _origin(div.first_bitwise, comparison) if div.first_bitwise else None,
        "first_divergence_beyond_tolerance": (
            _origin(div.first_beyond_tolerance, comparison) if div.first_beyond_tolerance else None
        ),
        "origins": [_origin(r, comparison, rank) for rank, r in enumerate(div.origins, 1)],
        "nodes": {name: _node(r, comparison, i) for i, (name, r) in enumerate(div.nodes.items())},
        "edges": [[u, v] for u, v, d in view_a.graph.g.edges(data=True) if not d.get("control")],
        "outputs": outputs,
        "rewrites": [r.to_json() for r in comparison.diff.rewrites],
        "graph_diff": {k: v for k, v in comparison.diff.to_json().items() if k != "rewrites"},
        "unpaired_b": comparison.alignment.unpaired_b,
        "observer_effect": {side: observer_effect_entry(view.capture.manifest.get("observer_effect", {}),
                                                   comparison.observer_detections.get(side) or {}, a_keys)
                            for side, view, a_keys in (("a", view_a, {}),
                                                       ("b", view_b, b_keys_as_a(comparison.signature_map)))},
        "first_nonfinite": {"a": _first_nonfinite(view_a), "b": _first_nonfinite(view_b)},
        "noise": comparison.noise,
        # a detector's outputs matched as detections (class and IoU per image): tracer/comparison/detections.py
        "detections": comparison.detections,
        # sides that can change from run to run but were run once (--repeat 1, a capture directory)
        "noise_not_measured": comparison.noise_not_measured,
        "diagnosis": None,
    }
    report["answers"] = explain_comparison(report)
    report["headline"] = build_headline(report)
    return jsonable(report)


def report_comparison(comparison: Comparison) -> Comparison:
    """Write a comparison down: its report.json dict (kept as ``comparison.report``) and the
    files of :func:`write_reports` in its ``out_dir`` (their notices kept as ``comparison.notices``).

    Called inside :func:`tracer.comparison.pipeline.comparing`, while the directory is still locked.
    """
    assert comparison.out_dir is not None
    comparison.report = build_report(comparison)
    comparison.notices = list(write_reports(comparison.report, comparison.out_dir).get("notices", []))
    return comparison


def write_reports(report: dict[str, Any], out_dir: Path) -> dict[str, Any]:
    """report.html/.md/divergence.svg, then report.json; returns the paths and any notices
    (e.g. Graphviz missing: the HTML is still written, without the graph)."""
    from .render import render_report  # noqa: PLC0415

    out_dir.mkdir(parents=True, exist_ok=True)
    if out_dir.is_symlink():
        from ..safewrite import refuse_link_dir  # noqa: PLC0415
        refuse_link_dir(out_dir, "the report directory")
    written: dict[str, Any] = dict(render_report(report, out_dir))
    written["json"] = out_dir / "report.json"
    # report.json last: its presence marks a complete report directory.
    write_file(written["json"], json.dumps(report, indent=1, allow_nan=False))
    return written


def merge_isolation(report: dict[str, Any], results: dict[str, Any]) -> dict[str, Any]:
    """Fold isolation results (``tftrace isolate`` on another machine) into a report dict."""
    for name, result in results.items():
        doc = jsonable(result.to_json())
        if name in report["nodes"]:
            report["nodes"][name]["isolation"] = doc
        for origin in report["origins"]:
            if origin["node"] == name:
                origin["isolation"] = doc
        for key in ("first_divergence", "first_divergence_beyond_tolerance"):
            if report.get(key) and report[key]["node"] == name:
                report[key]["isolation"] = doc
    report["origins"].sort(key=lambda o: ((o.get("isolation") or {}).get("verdict") not in BORN_HERE, o.get("rank", 0)))
    for rank, origin in enumerate(report["origins"], 1):
        origin["rank"] = rank
    report["answers"] = explain_comparison(report) if (report.get("answers") or {}).get("source") != "diagnosis" \
        else report["answers"]
    return report
