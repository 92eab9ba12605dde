"""One experiment's measured outcome: verdict, output difference, first divergence, latencies.

Three ways to measure, by the experiment's kind:

* ``compare`` — :func:`tracer.comparison.pipeline.comparing` on the two captures (alignment, divergence,
  isolation of the origins). A capture observes everything, and observing stops Grappler from
  rewriting what it observes, so when either side's plain run differs from its instrumented
  run (the capture's observer effect) the outputs are also compared as the plain runs compute
  them (fetch-alone replays), and the verdict is the worse of the two. When only the plain runs
  differ, the difference is localised op by op with fetch-alone replays (:mod:`tracer.diagnosis.replays`).
* ``repeat_process`` — the same outputs fetched again in one process; a difference in a graph
  that changes its own variables is attributed to that state.
* ``observation`` — the base capture's plain run vs its instrumented run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console

from ..captures.reader import Capture
from ..comparison.pipeline import Comparison, comparing
from ..comparison.detection_groups import detection_verdicts, detections_summary, matched_figures
from ..comparison.detections import recognise
from ..comparison.divergence import Tolerance, classify
from ..comparison.list_runs import judged_apart, lists_of_values
from ..comparison.statuses import worse
from .experiments import FACTORS
from .plan import Planned, Run
from ..metrics import TensorMetrics, compare_arrays
from ..opgraph import OpGraph, tensor_op
from ..report.build import report_comparison
from ..training import training_graph
from .replays import replay_alone, state_changing_ops

__all__ = ["evaluate", "side_settings", "latency", "executed_ops_differ"]

REPLAYABLE_LAYOUTS = ("rows", "whole")  # tensors whose value a fetch-alone replay of the first batch reproduces
_AMP_CAST = re.compile(r"^(?P<src>.+)-(?P<slot>\d+)-CastTo(?P<to>Bf16|Fp16|Fp32)-\d+-AutoMixedPrecision$")


def evaluate(p: Planned, cap_a: Capture | None, cap_b: Capture | None, out: Path, tolerance: Tolerance,
             quiet: Console, command: str, *, quick: bool = False) -> dict[str, Any]:
    """Measure one planned experiment (``quick``: no plain-output replays once the captures
    already show a divergence)."""
    result = _skeleton(p, cap_a, cap_b)
    if p.kind == "skipped" or cap_a is None or cap_b is None:
        return result
    allow = _allows_unsafe_ops(p)
    if p.kind == "compare":
        _compare(result, p, cap_a, cap_b, out, tolerance, quiet, command, quick, allow)
    elif p.kind == "repeat_process":
        _repeat(result, p, cap_a, out, tolerance, quiet, allow)
    else:
        _observation(result, cap_a, out, tolerance, quiet, allow)
    _costs(result, p)
    return result


def _allows_unsafe_ops(p: Planned) -> bool:
    """Replays of this experiment's captures may run unsafe ops only if its own sides could:
    the flag comes from the sides diagnose planned, never from a capture's manifest."""
    runs = [r for r in (p.a, p.b) if r is not None]
    return bool(runs) and all(r.side.allow_unsafe_ops for r in runs)


def _skeleton(p: Planned, cap_a: Capture | None, cap_b: Capture | None) -> dict[str, Any]:
    def side(run: Run | None, cap: Capture | None) -> dict[str, Any] | None:
        if run is None:
            return None
        return {"describe": run.describe, "label": run.side.label(), "capture": str(cap.path) if cap else None}

    return {
        "name": p.name, "factor": p.factor, "title": FACTORS[p.factor].description if p.factor in FACTORS else "; ".join(p.notes),
        "a": side(p.a, cap_a), "b": side(p.b, cap_b),
        "verdict": None, "max_abs_output_diff": None, "outputs": {}, "first_divergence": None,
        "latency_ms": None, "latency_basis": "per example" if p.per_row else "per run", "cost_pct": None,
        "remedy": p.remedy, "skipped": p.skipped, "notes": list(p.notes), "attribution": None,
        "settings": {"a": side_settings(cap_a), "b": side_settings(cap_b)} if cap_a and cap_b else None,
        "report_dir": None,
        **({"noise_removed_of": p.noise_removed_of} if p.noise_removed_of else {}),
    }


def side_settings(cap: Capture) -> dict[str, Any]:
    """The value each factor had in a capture, as it really ran (each factor's ``setting`` reader)."""
    return {key: factor.setting(cap) for key, factor in FACTORS.items() if factor.setting is not None}


def latency(cap: Capture) -> dict[str, Any]:
    timings = cap.timings
    lat = dict(timings.plain_latency_ms)
    lat["per_row_median"] = lat["median"] / timings.rows_per_run
    return lat


def _costs(result: dict[str, Any], p: Planned) -> None:
    lat = result["latency_ms"]
    if not lat:
        return
    key = "per_row_median" if p.per_row else "median"
    a, b = lat["a"][key], lat["b"][key]
    result["cost_pct"] = round((b - a) / a * 100.0, 2) if a > 0 else None


def _verdict(metrics: dict[str, TensorMetrics], tolerance: Tolerance) -> str:
    if all(m.identical for m in metrics.values()):
        return "identical"
    return "within_tolerance" if all(m.within(tolerance.atol, tolerance.rtol) for m in metrics.values()) else "diverged"


def plain_verdict(metrics: dict[str, TensorMetrics], tolerance: Tolerance, detections: list[dict[str, Any]]) -> str:
    """The plain outputs' verdict: a detector's outputs as the compare judged its detections on the
    plain runs (``detections``: report.json's groups, matched by class and IoU), the others array
    by array. Read row by row, NMS listing two near-tied detections in the other order is a box off
    by its size and a class off by one: the experiment read as diverged and diagnose went looking,
    op by op, for a difference the matched detections do not have."""
    as_detections = {k: v for k, v in detection_verdicts(detections).items() if k in metrics}
    arrays = {k: m for k, m in metrics.items() if k not in as_detections}
    verdicts = [*as_detections.values(), *([_verdict(arrays, tolerance)] if arrays or not as_detections else [])]
    return worse(*verdicts)


def _max_abs(metrics: dict[str, TensorMetrics], as_detections: dict[str, float] | None = None) -> float | None:
    """The largest output difference (None where NaN or Inf stand in different places); ``as_detections``:
    a detector's outputs' figures between matched detections, which replace their row-by-row ones."""
    found = as_detections or {}
    values = [found[k] if k in found else None if (m.nan_mismatch or m.inf_mismatch) else m.max_abs
              for k, m in metrics.items()]
    return None if any(v is None for v in values) else max(values, default=0.0)


def _captured_figures(comparison: Comparison, report: dict[str, Any]) -> dict[str, float]:
    """The same for the captured (instrumented) outputs: each output tensor of a detector measured between
    the detections the instrumented runs matched (the compare's detection lists, :meth:`DetectionList.size`)."""
    found = {}
    for key, out in (report.get("outputs") or {}).items():
        tensor = out.get("a_tensor") if isinstance(out, dict) else None
        listed, m = comparison.detection_lists.get(str(tensor)), comparison.metrics.get(str(tensor))
        if listed is not None and listed.spec is not None and m is not None:
            found[key] = listed.size(m)
    return found


# ---- compare ---------------------------------------------------------------------------------


def _compare(result: dict[str, Any], p: Planned, cap_a: Capture, cap_b: Capture, out: Path, tolerance: Tolerance,
             quiet: Console, command: str, quick: bool, allow: bool) -> None:
    with comparing(str(cap_a.path), str(cap_b.path), out, tolerance=tolerance, force=True, console=quiet,
                   command=command, allow_unsafe_ops=allow,
                   own_captures=not (cap_a.received or cap_b.received)) as comparison:
        report_comparison(comparison)
    report = comparison.report
    result["_report"] = report
    result["report_dir"] = str(out)
    result["latency_ms"] = {"a": latency(cap_a), "b": latency(cap_b)}
    # as captured (instrumented): the plain outputs are compared below; a detector's between matched detections
    captured = _captured_figures(comparison, report)
    outputs = {k: captured.get(k, (o.get("instrumented") or o)["max_abs"]) for k, o in report["outputs"].items()}
    result["outputs"] = outputs
    result["verdict"] = report.get("verdict_ops", report["verdict"])
    # an output no figure can be given for (a shape's count across batch sizes) is named, not the max's None
    unmeasured = {k: o["not_compared"] for k, o in report["outputs"].items() if o.get("not_compared")}
    if unmeasured:
        result["notes"].append("not compared: " + "; ".join(f"{k} ({why})" for k, why in sorted(unmeasured.items())))
    compared = [v for k, v in outputs.items() if k not in unmeasured]
    result["max_abs_output_diff"] = _max_of(compared) if compared else None
    result["first_divergence"] = _first(report)
    _training_graph(result, report)
    result["rewrite_count"] = len(report.get("rewrites") or [])
    result["discrete_changes"] = discrete_changes(report)
    result["detections"] = detections_summary(report.get("detections"))
    result["executed_ops_differ"] = executed_ops_differ(cap_a, cap_b)
    if all(c.observer.outputs_identical for c in (cap_a, cap_b)):
        return  # plain == instrumented on both sides: the captured outputs are the plain outputs
    if quick and result["verdict"] == "diverged":
        result["notes"].append("--quick: the outputs are compared as captured (instrumented); a side's plain run "
                               "differs from its instrumented run, so the plain outputs may differ by another amount")
        return
    plain, how = _plain_outputs(cap_a, cap_b, out / "plain", quiet, tolerance, allow)
    plain_judged = plain_verdict(plain, tolerance, report.get("detections") or [])
    matched = {k: v for k, v in matched_figures(report.get("detections")).items() if k in plain}
    plain_max_abs = {k: matched.get(k, m.max_abs) for k, m in plain.items()}
    result["plain_outputs"] = {"verdict": plain_judged, "max_abs": plain_max_abs}
    result["notes"].append("a side's plain run differs from its instrumented run, so the outputs were also compared "
                           f"as the plain runs compute them ({how}); the verdict is the worse one")
    result["instrumented_max_abs_output_diff"] = result["max_abs_output_diff"]
    result["instrumented_outputs"] = outputs  # per output, the worse of the two below, as the verdict is
    result["outputs"] = {k: v if plain.get(k) is None else _max_of([v, plain_max_abs[k]]) for k, v in outputs.items()}
    plain_max = _max_abs(plain, matched)
    result["max_abs_output_diff"] = None if plain_max is None or result["max_abs_output_diff"] is None \
        else max(plain_max, result["max_abs_output_diff"])
    if result["verdict"] != "diverged" and plain_judged == "diverged":
        result["first_divergence"], result["converted_ops"] = _unobserved(comparison, cap_a, cap_b, out / "walk",
                                                                          quiet, tolerance, allow)
    result["verdict"] = worse(result["verdict"], plain_judged)


def _training_graph(result: dict[str, Any], report: dict[str, Any]) -> None:
    """A difference that starts at a batch norm in training mode (:mod:`tracer.training`) is the
    graph's by design, as a stateful graph's is: attributed to it, never to the factor's kernels,
    export or costs (a fixed batch shape does not remove it)."""
    found = training_graph(report)
    if found is not None:
        result["attribution"] = "training_graph"
        result["training_graph"] = found[0]
        result["state_ops"] = sorted(found[1])


def executed_ops_differ(cap_a: Capture, cap_b: Capture) -> list[str]:
    """The op types the two plain runs executed a different number of times (kernels one side
    ran and the other did not, a fusion, a fold): the executed kernels' evidence of a rewrite
    that the static graph diff may not see. Empty when both ran the same kernels."""
    ran = [c.observer.executed_ops["plain"] for c in (cap_a, cap_b)]
    return sorted(op for op in set(ran[0]) | set(ran[1]) if ran[0].get(op) != ran[1].get(op))


def discrete_changes(report: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Integer and boolean outputs that differ (classes, counts, indices): how many values changed.

    A class that flips from 3 to 4 is not "off by 1": no tolerance covers it, so such outputs are
    reported as changed detections, never folded into a tolerance.

    A detector's outputs compared as detections (report.json's ``detections``) are counted there, as
    detections that appeared, disappeared or changed class, not row by row here; the class and count
    outputs of a group that could not be compared so are discrete whatever their dtype (the Object
    Detection API writes both as float32).
    """
    groups = detections_summary(report.get("detections"))
    as_detections = {k for g in groups if g["compared"] for k in g["keys"].values()}
    discrete = {k for g in groups if not g["compared"] for k in g["discrete"]}
    changes = {}
    for key, out in (report.get("outputs") or {}).items():
        if not isinstance(out, dict) or out.get("identical") is not False or key in as_detections:
            continue
        node = (report.get("nodes") or {}).get(str(out.get("a_tensor") or "").rsplit(":", 1)[0]) or {}
        dtype = str(node.get("dtype") or "") if node.get("tensor") == out.get("a_tensor") else ""
        if dtype.startswith(("int", "uint", "bool")) or key in discrete:
            changes[key] = {"changed": int(out.get("mismatch_count") or 0), "dtype": dtype or "float32"}
    return changes


def _max_of(values: Any) -> float | None:
    numbers = []
    for v in values:
        if v is None or isinstance(v, str):
            return None
        numbers.append(float(v))
    return max(numbers, default=0.0)


def _first(report: dict[str, Any]) -> dict[str, Any] | None:
    """The report's first divergence (the first bitwise origin, as in report.json), with the
    first origin beyond tolerance beside it when that is another op."""
    first = report.get("first_divergence") or report.get("first_divergence_beyond_tolerance")
    if not first:
        return None
    out = _origin_summary(first)
    beyond = report.get("first_divergence_beyond_tolerance")
    if beyond and beyond["node"] != first["node"]:
        out["beyond_tolerance"] = _origin_summary(beyond)
    return out


def _first_record(node: str, op: str, max_abs: Any, max_rel: Any, level: Any, observed: str, *, rewrite: Any = None,
                  isolation: str | None = None, isolation_detail: str | None = None) -> dict[str, Any]:
    """An experiment's ``first_divergence``: one shape, however the difference was observed."""
    return {"node": node, "op": op, "max_abs": max_abs, "max_rel": max_rel, "level": level, "rewrite": rewrite,
            "isolation": isolation, "isolation_detail": isolation_detail, "observed": observed}


def _origin_summary(origin: dict[str, Any]) -> dict[str, Any]:
    iso = origin.get("isolation") or {}
    return _first_record(origin["node"], origin["op"], origin.get("max_abs"), origin.get("max_rel"),
                         origin.get("level"), "captures", rewrite=origin.get("rewrite"), isolation=iso.get("verdict"),
                         isolation_detail=iso.get("detail"))


def _plain_outputs(cap_a: Capture, cap_b: Capture, work: Path, quiet: Console,
                   tolerance: Tolerance, allow: bool) -> tuple[dict[str, TensorMetrics], str]:
    """Each signature output as the plain run computes it, compared key by key: as the capture
    stored its plain run's outputs (only they fetched, as in production), else (a capture made
    before captures kept them) fetched alone again in a replay, a TensorFlow child per side.
    Returns the metrics and how the plain values were had, in words."""
    values = []
    replayed = False
    for name, cap in (("a", cap_a), ("b", cap_b)):
        outputs = cap.outputs
        if cap.observer.outputs_identical:
            values.append({k: np.asarray(cap.tensor(t)) for k, t in outputs.items()})
            continue
        stored = {k: cap.plain_output(k) for k in outputs}
        if all(v is not None for v in stored.values()):
            values.append({k: np.asarray(v) for k, v in stored.items()})
            continue
        source = cap_a.outputs
        replay = replay_alone(cap, cap_a, {t: source[k] for k, t in outputs.items()}, work / name, console=quiet,
                              allow_unsafe_ops=allow)
        values.append({k: replay.values[0][t] for k, t in outputs.items()})
        replayed = True
    how = ("each output fetched alone in a replay" if replayed else
           "as each capture's plain run returned them, the signature outputs alone fetched")
    return ({k: compare_arrays(values[0][k], values[1][k], rtols=(tolerance.rtol,)) for k in values[0] if k in values[1]},
            how)


def _unobserved(comparison: Comparison, cap_a: Capture, cap_b: Capture, work: Path, quiet: Console,
                tolerance: Tolerance, allow: bool) -> tuple[dict[str, Any] | None, list[str]]:
    """Observed, the sides agree; plain, they do not: fetch every tensor alone on both sides
    (first batch only) and walk the graph for the first one that differs, judging each as the
    compare does: a tensor holding a detector's lists of detections between the detections the
    replays' outputs matched (:func:`tracer.comparison.list_runs.lists_of_values`), so NMS listing
    two near-tied detections in another order is no box off by its size."""
    layout = cap_a.tensor_layout
    pairs = [(pair.a, pair.b) for node in comparison.alignment.nodes.values() for pair in node.tensors
             if pair.comparable and pair.b and cap_a.has(pair.a) and cap_b.has(pair.b)
             and layout.get(pair.a) in REPLAYABLE_LAYOUTS]
    metrics = dict(comparison.metrics)
    lists = dict(comparison.detection_lists)  # those not replayed keep what the captures measured
    if pairs:
        ra = replay_alone(cap_a, cap_a, {a: a for a, _ in pairs}, work / "a", first_run_only=True, console=quiet,
                          allow_unsafe_ops=allow)
        rb = replay_alone(cap_b, cap_a, {b: a for a, b in pairs}, work / "b", first_run_only=True, console=quiet,
                          allow_unsafe_ops=allow)
        replayed_a = {a: ra.values[0][a] for a, _ in pairs}
        replayed_b = {a: rb.values[0][b] for a, b in pairs}  # by A's names
        for a, _b in pairs:
            lists.pop(a, None)
            va, vb = replayed_a[a], replayed_b[a]
            if va.shape == vb.shape:
                metrics[a] = compare_arrays(va, vb, rtols=(tolerance.for_tensor(a)[1],))
        lists.update(lists_of_values(replayed_a, replayed_b, comparison.detection_lists,
                                     comparison.view_a.graph.outputs, lambda t: tolerance.for_tensor(t)[1]))
    divergence = classify(comparison.view_a.graph, comparison.alignment, metrics, tolerance, lists=lists)
    origin = divergence.first_bitwise or divergence.first_beyond_tolerance
    converted = _converted_ops(comparison.view_a.graph, cap_a, cap_b)
    if origin is None or origin.metrics is None:
        return None, converted
    first = _first_record(origin.name, comparison.view_a.graph.op_type(origin.name), origin.metrics.max_abs,
                          origin.metrics.max_rel, "tolerance" if origin.status == "origin" else "bitwise",
                          "fetch-alone replays",
                          isolation_detail="not isolated: an op observed alone is kept as it is, so its own rewrite "
                                           "cannot be replayed; the difference comes from the rewritten ops just above it")
    return first, converted


def _converted_ops(graph: OpGraph, *caps: Capture) -> list[str]:
    """Ops the mixed-precision rewrite ran in low precision in a plain run, in topological order.

    Read off the casts Grappler inserted (``<op>-<slot>-CastToBf16-0-AutoMixedPrecision``):
    the ops between a tensor cast down and a tensor cast back up. Empty without such casts.
    """
    down, up = set(), set()
    for cap in caps:
        for name, op in cap.observer.executed_nodes_plain.items():
            match = _AMP_CAST.match(name) if op == "Cast" else None
            if match and match["src"] in graph:
                (up if match["to"] == "Fp32" else down).add(match["src"])
    if not down:
        return []
    import networkx as nx  # noqa: PLC0415 - only for this walk

    below = set().union(*(nx.descendants(graph.g, op) for op in down))
    above = set(up).union(*(nx.ancestors(graph.g, op) for op in up)) if up else below
    region = below & above
    return [op for op in graph.topo_order() if op in region and graph.op_type(op) not in ("Const", "Identity")]


# ---- repeat in one process, observation ------------------------------------------------------


def _repeat(result: dict[str, Any], p: Planned, cap: Capture, out: Path, tolerance: Tolerance, quiet: Console,
            allow: bool) -> None:
    outputs = cap.outputs
    replay = replay_alone(cap, cap, {t: t for t in outputs.values()}, out / "replays", repeats=p.repeats, console=quiet,
                          allow_unsafe_ops=allow)
    metrics: dict[str, TensorMetrics] = {}
    for key, tensor in outputs.items():
        first = replay.values[0][tensor]
        worst = max((compare_arrays(first, r[tensor], rtols=(tolerance.rtol,)) for r in replay.values[1:]),
                    key=lambda m: (not m.identical, m.max_abs))
        metrics[key] = worst
    matched, judged = _as_detections(outputs, replay.values[0], replay.values[1:], tolerance)
    result["outputs"] = {k: matched.get(k, m.max_abs) for k, m in metrics.items()}
    result["verdict"] = _outputs_verdict(metrics, tolerance, judged)
    result["max_abs_output_diff"] = _max_abs(metrics, matched)
    lat = latency(cap)
    result["latency_ms"] = {"a": lat, "b": lat}
    result["notes"].append("one configuration: both latencies are the base capture's")
    stateful = state_changing_ops(cap.manifest["graph"])
    if result["verdict"] != "identical" and (stateful["state"] or stateful["random"]):
        result["attribution"] = "state" if stateful["state"] else "random"
        result["state_ops"] = stateful["state"] or stateful["random"]
    elif result["verdict"] != "identical":
        result["first_divergence"] = _first_moving(cap, out / "replays_all", quiet, allow)


def _as_detections(outputs: dict[str, str], first: dict[str, Any], others: list[dict[str, Any]],
                   tolerance: Tolerance) -> tuple[dict[str, float], dict[str, str]]:
    """A detector's outputs (recognised by their keys) in run ``first`` against each of ``others`` (tensor
    -> value), between the detections each pair matched (:func:`judged_apart`, one match per pair):
    key -> how far apart, the largest over the pairs, and key -> the worst verdict over them. Row by
    row, NMS listing near-tied detections in another order made a same-process repeat or the observer
    effect read diverged while every matched detection agreed. Both empty for a model with no
    recognised detections."""
    specs = recognise(list(outputs))
    sizes: dict[str, float] = {}
    verdicts: dict[str, str] = {}
    for other in others if specs else []:
        found = judged_apart(specs, {k: first.get(t) for k, t in outputs.items()},
                             {k: other.get(t) for k, t in outputs.items()}, tolerance.atol, tolerance.rtol)
        for key, (size, verdict) in found.items():
            sizes[key] = max(sizes.get(key, 0.0), size)
            verdicts[key] = worse(verdicts.get(key, "identical"), verdict)
    return sizes, verdicts


def _outputs_verdict(metrics: dict[str, TensorMetrics], tolerance: Tolerance, as_detections: dict[str, str]) -> str:
    """The outputs' verdict: a detector's outputs by ``as_detections`` (:func:`_as_detections`), the
    others as ``metrics`` (the worst pair's, row by row) say."""
    arrays = {k: m for k, m in metrics.items() if k not in as_detections}
    return worse(*as_detections.values(), *([_verdict(arrays, tolerance)] if arrays or not as_detections else []))


def _first_moving(cap: Capture, work: Path, quiet: Console, allow: bool) -> dict[str, Any] | None:
    """The first tensor (topological order) that differs between two same-process replays."""
    graph = cap.op_graph
    layout = cap.tensor_layout
    names = [n for n in cap.tensor_names if layout.get(n) in REPLAYABLE_LAYOUTS]
    order = {op: i for i, op in enumerate(graph.topo_order())}
    names.sort(key=lambda n: order.get(tensor_op(n), len(order)))
    if not names:
        return None
    replay = replay_alone(cap, cap, {n: n for n in names}, work, repeats=2, first_run_only=True, console=quiet,
                          allow_unsafe_ops=allow)
    for name in names:
        m = compare_arrays(replay.values[0][name], replay.values[1][name])
        if not m.identical:
            return _first_record(tensor_op(name), graph.op_type(tensor_op(name)), m.max_abs, m.max_rel, "bitwise",
                                 "same-process replays")
    return None


def _observation(result: dict[str, Any], cap: Capture, out: Path, tolerance: Tolerance, quiet: Console,
                 allow: bool) -> None:
    observer = cap.observer
    outputs = cap.outputs
    if observer.outputs_identical:
        result["verdict"], result["max_abs_output_diff"] = "identical", 0.0
        result["outputs"] = {k: 0.0 for k in outputs}
    else:
        replay = replay_alone(cap, cap, {t: t for t in outputs.values()}, out / "plain", console=quiet,
                              allow_unsafe_ops=allow)
        captured = {t: np.asarray(cap.tensor(t)) for t in outputs.values()}
        metrics = {k: compare_arrays(replay.values[0][t], captured[t], rtols=(tolerance.rtol,))
                   for k, t in outputs.items()}
        matched, judged = _as_detections(outputs, replay.values[0], [captured], tolerance)  # as report.json's
        result["outputs"] = {k: matched.get(k, m.max_abs) for k, m in metrics.items()}  # observer_effect
        result["verdict"] = _outputs_verdict(metrics, tolerance, judged)
        result["max_abs_output_diff"] = _max_abs(metrics, matched)
    if observer.only_in_plain or observer.only_in_instrumented:
        plain_only = ", ".join(observer.only_in_plain) or "none"
        instrumented_only = ", ".join(observer.only_in_instrumented) or "none"
        result["notes"].append(f"executed op types only in the plain run: {plain_only}; "
                               f"only in the instrumented run: {instrumented_only}")
    plain = latency(cap)
    runs = len(cap.runs)
    per_run = (cap.timings.instrumented_s or 0.0) * 1000.0 / max(1, runs)
    result["latency_ms"] = {"a": plain, "b": {"median": round(per_run, 4), "runs": runs,
                                              "batch_rows": plain.get("batch_rows"), "per_row_median": per_run / max(
                                                  1, int(plain.get("batch_rows") or 1)),
                                              "note": "one instrumented run per batch, fetching every tensor and "
                                                      "writing it to disk; not warmed up"}}
