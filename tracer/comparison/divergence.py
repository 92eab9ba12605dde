"""Stage 7 — walk A's graph in topological order and say where the numbers start to differ.

Every op gets one status:

* ``identical`` — bitwise equal outputs (or equal values in another dtype: a tensor a mixed-precision
  export casts exactly);
* ``within_tolerance`` — not bitwise equal, but within ``atol + rtol·|a|`` everywhere;
* ``origin`` — beyond tolerance although every input is within tolerance: the difference
  starts here;
* ``propagated`` — beyond tolerance and an input already was;
* ``rewritten`` — part of an export rewrite, judged through the rewrite's output instead;
* ``unmatched`` / ``not_captured`` / ``not_compared`` — with the reason.

"Every input" looks *through* ops that were not compared (rewritten, unmatched, uncaptured) to
the nearest compared tensors above them: a folded batch norm is judged against the activation
that fed its conv, a cast region against the tensor that fed its first cast.

Two kinds of origin are reported: *bitwise* (differs at all while its inputs are bitwise equal —
``first_divergence``) and *tolerance* (``first_divergence_beyond_tolerance``). "First" is in the
order the examples flow through the graph (:meth:`OpGraph.flow_order`): an op that depends on the fed
inputs at its topological position, and what does not (a weight, a read of it, arithmetic on
weights alone such as a batch norm's ``gamma * rsqrt(variance)``) just before the first op on the
inputs' path that uses it. Weights have no inputs, so a plain topological order puts them
anywhere before their readers, and "the first of 13 changed variables" would be an accident of
names; the one whose values meet the examples first is where the outputs start to differ.

A tensor that holds a detector's lists of detections (the stack after NMS, the outputs' Identities:
:mod:`tracer.comparison.detection_lists`) is judged between matched detections, by the rule that judges
the detections the outputs hold: row k of A against row k of B pairs two detections that NMS may have
listed in another order, so a difference read index by index is no measure of it. Its metrics are then
those of its matched rows, and its index-by-index metrics are kept beside them (``index_metrics``).

Amplification is an op's relative L2 error over the largest relative error among its inputs. Measured run-to-run
noise of a side (``--repeat``) raises the bar: a difference no larger than the noise is never an
origin, and when such differences are all there is the verdict is ``within_noise``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .align import ROLE_REWRITTEN, ROLE_UNMATCHED, Alignment
from ..metrics import TensorMetrics
from ..opgraph import NOT_FETCHABLE_DTYPES, OpGraph, tensor_op
from .statuses import DRAWN_AT_LOAD, STATUSES

if TYPE_CHECKING:
    from .detection_lists import DetectionList

__all__ = ["Tolerance", "NodeResult", "Divergence", "classify", "STATUSES"]


@dataclass(frozen=True)
class Tolerance:
    """Defaults: ``rtol=1e-5`` is ~80 float32 ulps, beyond the reassociation noise of sums of a
    few thousand terms; ``atol=1e-6`` keeps values near zero (post-ReLU, softmax tails) from
    turning rounding into "relative" errors. The users' reported 1e-3 shifts are far above both."""

    atol: float = 1e-6
    rtol: float = 1e-5
    overrides: tuple[tuple[str, float, float], ...] = ()  # (op or tensor name, atol, rtol)

    def for_tensor(self, tensor: str) -> tuple[float, float]:
        for name, atol, rtol in self.overrides:
            if name in (tensor, tensor_op(tensor)):
                return atol, rtol
        return self.atol, self.rtol

    def to_json(self) -> dict[str, Any]:
        return {"atol": self.atol, "rtol": self.rtol, "overrides": {n: [a, r] for n, a, r in self.overrides}}


@dataclass
class NodeResult:
    name: str
    status: str
    tensor: str | None = None  # the judged A tensor (worst relevant output)
    metrics: TensorMetrics | None = None
    bitwise_origin: bool = False
    amplification: float | None = None
    frontier: list[str] = field(default_factory=list)  # A ops whose tensors are this op's effective inputs
    reason: str = ""
    within_noise: bool = False  # differs, but no more than the sides' own run-to-run noise
    # the judged tensor holds a detector's lists of detections: what they measured between matched
    # detections (then ``metrics`` are its matched rows', and ``index_metrics`` row k of A against row k of B)
    detection_list: DetectionList | None = None
    index_metrics: TensorMetrics | None = None
    matched_within: bool | None = None  # its matched detections within tolerance


@dataclass
class Divergence:
    nodes: dict[str, NodeResult]  # in topological order
    origins: list[NodeResult]  # ranked: tolerance origins first, then by relative error
    first_bitwise: NodeResult | None
    first_beyond_tolerance: NodeResult | None

    @property
    def verdict(self) -> str:
        statuses = {n.status for n in self.nodes.values()}
        if statuses & {"origin", "propagated"}:
            return "diverged"
        if any(n.within_noise for n in self.nodes.values()):
            return "within_noise"  # beyond tolerance somewhere, but never beyond what a side does by itself
        if "within_tolerance" in statuses or self.first_bitwise is not None:
            return "within_tolerance"
        return "identical"

    def intermediates(self, graph: OpGraph) -> dict[str, Any] | None:
        """Where the intermediates differ beyond tolerance, and where that difference heals: the
        report's ``intermediates`` (None when no op is beyond tolerance).

        An op *heals* the difference when one of its inputs is beyond tolerance and its own result
        is within it (a softmax saturates, an argmax or NMS picks the same winners). ``heals_at``
        is the last such op in the order the examples flow, past which nothing differs beyond
        tolerance any more: what the outputs are judged on shows no trace of it.

        Ops whose tensor holds a detector's detection lists were judged between matched detections
        (:mod:`tracer.comparison.detection_lists`); ``max_abs`` leaves them out (their figures are
        another measure), and ``detection_lists`` says what they measured, with their index-by-index
        largest difference only as such."""
        beyond = [r for r in self.nodes.values() if r.status in ("origin", "propagated")]
        if not beyond:
            return None
        rank = graph.flow_order()
        healers = sorted((r for r in self.nodes.values() if r.status in ("identical", "within_tolerance")
                          and any(self.nodes[f].status in ("origin", "propagated") for f in r.frontier
                                  if f in self.nodes)), key=lambda r: rank[r.name])
        last_beyond = max(beyond, key=lambda r: rank[r.name])
        heals = healers[-1] if healers and rank[healers[-1].name] > rank[last_beyond.name] else None
        first = self.first_beyond_tolerance or min(beyond, key=lambda r: rank[r.name])
        values = [r for r in beyond if r.detection_list is None]
        worst = max(values, key=lambda r: (r.metrics.max_abs if r.metrics else 0.0), default=None)
        return {
            "from": first.name, "from_op": graph.op_type(first.name),
            "ops_beyond_tolerance": len(beyond),
            "max_abs": worst.metrics.max_abs if worst and worst.metrics else None,
            "max_abs_at": worst.name if worst else None,
            "heals_at": heals.name if heals else None, "heals_at_op": graph.op_type(heals.name) if heals else None,
            "heal_ops": [r.name for r in healers][:20], "heal_count": len(healers),
            "last_beyond_tolerance": last_beyond.name,
            "detection_lists": _detection_lists([r for r in beyond if r.detection_list is not None], graph),
        }


def _detection_lists(ops: list[NodeResult], graph: OpGraph) -> dict[str, Any] | None:
    """The ops beyond tolerance that hold detection lists: how they compare between matched
    detections, the detections that changed (which no tolerance excuses), and their index-by-index
    largest difference (``index_max_abs``), as such."""
    if not ops:
        return None
    rank = graph.flow_order()
    ops = sorted(ops, key=lambda r: rank[r.name])
    measured = [r for r in ops if r.index_metrics is not None and r.metrics is not None]
    by_index = max(ops, key=lambda r: _index_max_abs(r) or 0.0)
    matched = max(measured, key=lambda r: r.metrics.max_abs if r.metrics else 0.0, default=None)
    groups = {r.detection_list.group: r.detection_list.changes for r in ops if r.detection_list}
    return {
        "ops": [r.name for r in ops][:20], "count": len(ops),
        "index_max_abs": _index_max_abs(by_index), "index_max_abs_at": by_index.name,
        "matched_max_abs": matched.metrics.max_abs if matched and matched.metrics else None,
        "matched_max_abs_at": matched.name if matched else None,
        "matched_within_tolerance": all(r.matched_within for r in measured) if measured else None,
        "changes": sum(groups.values()),
        "not_matched": [{"op": r.name, "why": r.detection_list.why if r.detection_list else None}
                        for r in ops if r not in measured][:20],
    }


def _index_max_abs(r: NodeResult) -> float | None:
    """The op's largest difference read index by index: a measured list's kept figure, else its metric."""
    m = r.index_metrics if r.index_metrics is not None else r.metrics
    return m.max_abs if m is not None else None


def classify(
    graph: OpGraph,
    alignment: Alignment,
    metrics: dict[str, TensorMetrics],
    tolerance: Tolerance,
    noise: dict[str, float] | None = None,
    closest: dict[str, float] | None = None,
    drawn_at_load: frozenset[str] | set[str] = frozenset(),
    lists: Mapping[str, DetectionList] | None = None,
) -> Divergence:
    """``metrics``: A tensor -> metrics for every comparable pair; ``noise``: A tensor -> max abs
    run-to-run difference measured on either side (absent = no repeats were run); ``closest``: A
    tensor -> the smallest max |A - B| over every pair of repeated runs, where measured (a
    difference within the noise in some pair of runs is within the noise: see
    :mod:`tracer.comparison.noise`).

    ``drawn_at_load``: A ops whose value an isolation replay found drawn anew at every load of
    the model (a variable initialised from a random op, and its reads). They are within the noise
    by that measurement, whatever their magnitudes: A and B there are draws of one distribution,
    as two loads of one side are, and which pair of draws lands closest is chance (with two runs
    a side, the within-side pairs are the two farthest one time in fifteen).

    ``lists``: A tensor -> the detection list it holds, judged between matched detections rather
    than index by index (:mod:`tracer.comparison.detection_lists`); its ``noise`` and ``closest`` were
    measured between matched detections too, and its difference is held against them so
    (:meth:`~tracer.comparison.detection_lists.DetectionList.size`)."""
    noise = noise or {}
    results: dict[str, NodeResult] = {}
    for op in graph.topo_order():
        node = alignment.nodes.get(op)
        results[op] = _judge_outputs(op, node, metrics, tolerance, noise, closest or {}, op in drawn_at_load,
                                     lists or {})
    for op in graph.topo_order():
        result = results[op]
        if result.status not in ("identical", "within_tolerance", "beyond"):
            continue
        result.frontier = _frontier(graph, op, results)
        inputs = [results[f] for f in result.frontier]
        inputs_identical = all(r.status == "identical" for r in inputs)
        inputs_ok = all(r.status in ("identical", "within_tolerance") for r in inputs)
        if result.status != "identical" and inputs_identical and not result.within_noise:
            result.bitwise_origin = True
        if result.status == "beyond":
            result.status = "origin" if inputs_ok else "propagated"
        result.amplification = _amplification(result, inputs)
    rank = graph.flow_order()
    ordered = sorted(results.values(), key=lambda r: rank[r.name])
    bitwise = [r for r in ordered if r.bitwise_origin]
    beyond = [r for r in ordered if r.status == "origin"]
    origins = sorted(
        {id(r): r for r in beyond + bitwise}.values(),
        key=lambda r: (r.status != "origin", -_rel(r)),
    )
    return Divergence(results, origins, bitwise[0] if bitwise else None, beyond[0] if beyond else None)


def _judge_outputs(
    op: str, node: Any, metrics: dict[str, TensorMetrics], tolerance: Tolerance, noise: dict[str, float],
    closest: dict[str, float], drawn_at_load: bool = False, lists: Mapping[str, DetectionList] | None = None,
) -> NodeResult:
    if node is None or node.role == ROLE_UNMATCHED:
        return NodeResult(op, "unmatched", reason=node.note if node else "no counterpart in B")
    if node.role == ROLE_REWRITTEN:
        first = next((p for p in node.tensors if p.a in metrics), None)
        return NodeResult(op, "rewritten", first.a if first else None, metrics.get(first.a) if first else None,
                          reason=node.note)
    judged = [p for p in node.tensors if p.comparable and p.a in metrics]
    if not judged:
        notes = [p.note for p in node.tensors if p.note]
        status = "not_captured" if any(n.startswith(("A:", "B:")) for n in notes) or not node.tensors else "not_compared"
        return NodeResult(op, status, node.tensors[0].a if node.tensors else None, reason="; ".join(notes))
    worst: NodeResult | None = None
    for pair in judged:
        m = metrics[pair.a]  # index by index
        atol, rtol = tolerance.for_tensor(pair.a)
        listed = (lists or {}).get(pair.a)
        as_list = listed.verdict(m, atol, rtol) if listed is not None else None  # None: judged index by index
        own_noise = noise.get(pair.a, 0.0)
        # measured as its noise was: a detection list between matched detections (DetectionList.size)
        size = listed.size(m) if listed is not None else m.max_abs
        near = min(size, closest.get(pair.a, size))
        noisy = (not m.identical and (drawn_at_load or (own_noise > 0 and near <= own_noise))
                 and not (m.nan_mismatch or m.inf_mismatch))
        retyped = _same_values_retyped(m)
        within = as_list == "within_tolerance" if as_list is not None else m.within(atol, rtol)
        if m.identical or retyped:
            status = "identical"
        elif noisy or within:
            status = "within_tolerance"
        else:
            status = "beyond"
        reason = (DRAWN_AT_LOAD if noisy and drawn_at_load
                  else "within the run-to-run noise of the sides" if noisy
                  else f"the same values, as {m.dtype_a} in A and {m.dtype_b} in B" if retyped else "")
        if listed is not None and listed.matched is not None:  # its metrics are its matched rows'
            candidate = NodeResult(op, status, pair.a, listed.matched, within_noise=noisy, reason=reason,
                                   detection_list=listed, index_metrics=m,
                                   matched_within=listed.matched.within(atol, rtol))
        else:
            candidate = NodeResult(op, status, pair.a, m, within_noise=noisy, reason=reason, detection_list=listed)
        if worst is None or _severity(candidate) > _severity(worst):
            worst = candidate
    assert worst is not None
    return worst


def _same_values_retyped(m: TensorMetrics) -> bool:
    """Equal values in another dtype (a float32 bias that a mixed-precision export casts to float16
    exactly): the numbers have not started to differ, so the op is no origin; the cast is the
    diff's (``cast_inserted``)."""
    return (not m.identical and m.dtype_a != m.dtype_b and m.max_abs == 0
            and not (m.nan_mismatch or m.inf_mismatch))


def _severity(r: NodeResult) -> tuple[int, float]:
    rank = {"identical": 0, "within_tolerance": 1, "beyond": 2}[r.status]
    return rank, _rel(r)


def _rel(r: NodeResult) -> float:
    if r.metrics is None:
        return 0.0
    value = r.metrics.rel_l2
    return value if value == value else float("inf")  # NaN sorts as worst


def _frontier(graph: OpGraph, op: str, results: dict[str, NodeResult]) -> list[str]:
    """The nearest judged ops above ``op``, looking through ops that were not judged. (A walk
    that stops at the first judged op on each path: networkx has no such boundary search.)

    It also looks through the producer of an input that holds no data of its own, even when
    that producer was judged by another output: a TensorArray's flow (a loop's Exit passes on
    only a dummy scalar, identical on both sides, while the values the loop wrote sit behind
    the TensorArray's handle) and a handle itself (a TF2 loop's TensorList, a variant). A
    gather after a ``tf.map_fn`` is thus judged against the loop's own inputs: it propagates
    a difference that reached the loop, and is an origin only when the loop's inputs agree.
    """
    flows = graph.tensor_array_flows()
    out: set[str] = set()
    seen: set[tuple[str, bool]] = set()
    stack = graph.data_inputs(op)
    while stack:
        tensor = stack.pop()
        src = tensor_op(tensor)
        if src not in results:
            continue
        through = (tensor in flows or _holds_no_values(graph, tensor)
                   or results[src].status not in ("identical", "within_tolerance", "beyond", "origin", "propagated"))
        if (src, through) in seen:
            continue
        seen.add((src, through))
        if through:
            stack.extend(graph.data_inputs(src))
        else:
            out.add(src)
    return sorted(out)


def _holds_no_values(graph: OpGraph, tensor: str) -> bool:
    """A resource or variant tensor: a handle, whose data is judged where it was written."""
    try:
        return graph.output_info(tensor)["dtype"] in NOT_FETCHABLE_DTYPES
    except (IndexError, KeyError):
        return False


def _amplification(result: NodeResult, inputs: list[NodeResult]) -> float | None:
    if result.metrics is None or result.status == "identical":
        return None
    worst_in = max((_rel(r) for r in inputs), default=0.0)
    if worst_in <= 0.0:
        return None  # nothing upstream to amplify: this op is where the difference starts
    return _rel(result) / worst_in
