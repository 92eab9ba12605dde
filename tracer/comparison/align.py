"""Stage 5 — pair A's tensors with B's, and say why each pair was made (or not).

Sources of pairs, in order of trust:

1. the op matching of the graph diff (same name, same signature key, same structure);
2. the rewrites the diff recognised: a folded batch norm's output stands for A's batch-norm
   output (its conv and weights are *rewritten* members: compared, never judged on their own,
   because a fold legitimately rescales them); a cast-wrapped op's cast-back stands for A's
   op; a fused op's output stands for the last op of A's chain;
3. value fingerprints, last: an unpaired A tensor and an unpaired B tensor with the same shape
   and dtype whose values are close.

Only *relevant* outputs are judged: those read by another op of the inference graph or returned
by the signature (a FusedBatchNorm's reserve-space outputs are left undefined in inference).
Rows need no work here: every capture stores all examples in example order, whatever its batch.
A side whose signature has no batch axis ran one example per run and stored each value as a
row; its tensors pair with a batched side's row by row when each row holds the same elements
(``[N]`` scalars per example against ``[N, 1]``): the metrics read B in A's shape.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..diff.kinds import is_exact, kind_of
from ..diff.records import GraphDiff
from ..errors import TftraceError
from ..captures.inputs import batched_alike, same_rows
from ..opgraph import OpGraph, relevant_slots, tensor_op
from ..optypes import WEIGHT_OPS

__all__ = ["TensorPair", "NodeAlignment", "Alignment", "align", "CaptureView"]

ROLE_COMPARED, ROLE_REWRITTEN, ROLE_UNMATCHED = "compared", "rewritten", "unmatched"


class CaptureView:
    """What alignment needs from a capture: its op graph, tensor layout and records."""

    def __init__(self, capture: Any) -> None:
        self.capture = capture
        self.graph = capture.op_graph
        self.layout: dict[str, str] = capture.tensor_layout

    @functools.cached_property
    def shape_derived(self) -> dict[str, str]:
        """Ops computed from the feed's shape, or offset by such a value (op -> "shape" | "offset";
        asked only when the batch sizes differ)."""
        return self.graph.batch_dependent_ops()

    def captured(self, tensor: str) -> bool:
        return self.capture.has(tensor)

    def uncaptured_reason(self, tensor: str) -> str:
        return self.capture.uncaptured.get(tensor, "not in the capture")

    def record(self, tensor: str) -> dict[str, Any]:
        return self.capture.record(tensor)


@dataclass(frozen=True)
class TensorPair:
    a: str
    b: str | None
    reason: str  # name | signature | structure | fold group | cast region | fused | value
    comparable: bool
    note: str = ""  # why it cannot be compared


@dataclass
class NodeAlignment:
    a_node: str
    b_node: str | None
    reason: str | None
    role: str  # compared | rewritten | unmatched
    tensors: list[TensorPair] = field(default_factory=list)
    note: str = ""
    rewrite: str | None = None


@dataclass
class Alignment:
    nodes: dict[str, NodeAlignment]  # A op -> alignment, in A's topological order
    unpaired_b: list[str]  # B ops nothing of A was paired with

    def b_to_a(self) -> dict[str, str]:
        """B tensor -> A tensor, for comparable pairs (isolation feeds through this)."""
        return {p.b: p.a for n in self.nodes.values() for p in n.tensors if p.b and p.comparable}


def align(a: CaptureView, b: CaptureView, diff: GraphDiff) -> Alignment:
    ga, gb = a.graph, b.graph
    nodes: dict[str, NodeAlignment] = {}
    rewritten_members, special = _rewrite_roles(ga, gb, diff)
    used_b: set[str] = set()
    for op in ga.topo_order():
        partner = diff.pairs.get(op)
        if op in rewritten_members:
            kind, note = rewritten_members[op]
            b_op = partner[0] if partner else None
            node = NodeAlignment(op, b_op, partner[1] if partner else None, ROLE_REWRITTEN, note=note, rewrite=kind)
            if b_op:
                node.tensors = _pair_slots(a, b, op, b_op, "fold member", judged=False)
                used_b.add(b_op)
            nodes[op] = node
            continue
        if op in special:
            b_op, reason, kind = special[op]
            node = NodeAlignment(op, tensor_op(b_op), reason, ROLE_COMPARED, rewrite=kind)
            node.tensors = [_pair(a, b, f"{op}:0", b_op, reason)]
            used_b.add(tensor_op(b_op))
            nodes[op] = node
            continue
        if partner is None:
            nodes[op] = NodeAlignment(op, None, None, ROLE_UNMATCHED, note="no counterpart in B")
            continue
        b_op, reason = partner
        used_b.add(b_op)
        node = NodeAlignment(op, b_op, reason, ROLE_COMPARED, rewrite=_rewrite_kind(diff, op))
        node.tensors = _pair_slots(a, b, op, b_op, reason)
        nodes[op] = node
    _pair_by_value(a, b, nodes, used_b)
    unpaired_b = [op for op in gb.topo_order() if op not in used_b]
    return Alignment(nodes, unpaired_b)


def _rewrite_kind(diff: GraphDiff, op: str) -> str | None:
    kinds = [r.kind for r in diff.rewrites_of(op) if not is_exact(r.kind)]
    return kinds[0] if kinds else None


def _rewrite_roles(ga: OpGraph, gb: OpGraph, diff: GraphDiff) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str, str]]]:
    """A ops judged only as part of a rewrite, and A ops paired to a B tensor the diff implies."""
    members: dict[str, tuple[str, str]] = {}
    special: dict[str, tuple[str, str, str]] = {}
    for rewrite in diff.rewrites:  # each kind's record says how its tensors pair (tracer.diff.kinds)
        kind = kind_of(rewrite.kind)
        if kind is None or kind.pairs is None:
            continue
        kind_members, stands_for = kind.pairs(rewrite, ga, gb, diff)
        members.update({op: (kind.name, note) for op, note in kind_members.items()})
        special.update({op: (tensor, reason, kind.name) for op, (tensor, reason) in stands_for.items()})
    return members, special


def _pair_slots(a: CaptureView, b: CaptureView, op: str, b_op: str, reason: str, judged: bool = True) -> list[TensorPair]:
    b_outputs = b.graph.node(b_op)["outputs"]
    pairs = []
    for slot in relevant_slots(a.graph, op):
        if slot >= len(b_outputs):
            pairs.append(TensorPair(f"{op}:{slot}", None, reason, False, f"B's {b_op} has no output {slot}"))
            continue
        pairs.append(_pair(a, b, f"{op}:{slot}", f"{b_op}:{slot}", reason))
    return pairs


def _pair(a: CaptureView, b: CaptureView, ta: str, tb: str, reason: str) -> TensorPair:
    if not a.captured(ta):
        return TensorPair(ta, tb, reason, False, f"A: {a.uncaptured_reason(ta)}")
    if not b.captured(tb):
        return TensorPair(ta, tb, reason, False, f"B: {b.uncaptured_reason(tb)}")
    la, lb = a.layout.get(ta, "rows"), b.layout.get(tb, "rows")
    alike = batched_alike(a.capture.manifest, b.capture.manifest)
    if "varies" in (la, lb) and not alike:
        # Kept from the first run only (a shape, or a sum over the batch): that value covers
        # the same examples on both sides only when they batch them alike.
        return TensorPair(ta, tb, reason, False,
                          "its value depends on which examples share a run (a shape, or a reduction over the batch), "
                          "and A and B batch them differently")
    ra, rb = a.record(ta), b.record(tb)
    if not alike:
        if la == lb == "whole" and ra["dtype"].startswith(("int", "uint")):
            return TensorPair(ta, tb, reason, False, "shape metadata: depends on the batch size")
        kind = a.shape_derived.get(tensor_op(ta))
        if kind == "shape":
            return TensorPair(ta, tb, reason, False,
                              "computed from a shape, not from values (e.g. a batch index): depends on the batch size")
        if kind == "offset":
            return TensorPair(ta, tb, reason, False,
                              "index arithmetic offset by the example's position in its run (e.g. idx + row*K, "
                              "row from a Range over the batch): depends on how examples are grouped into runs")
    if list(ra["shape"]) != list(rb["shape"]):
        if la == lb == "rows" and ra["shape"][:1] == rb["shape"][:1] and same_rows(ra["shape"][1:], rb["shape"][1:]):
            # A side without a batch axis stores each run's value as one row: [N, 1] pairs with
            # [N] (scalar per example), row i with row i, element for element.
            return TensorPair(ta, tb, reason, True, f"paired row by row: A {ra['shape']}, B {rb['shape']}")
        return TensorPair(ta, tb, reason, False, f"shapes differ: A {ra['shape']} vs B {rb['shape']}")
    return TensorPair(ta, tb, reason, True)


def _pair_by_value(a: CaptureView, b: CaptureView, nodes: dict[str, NodeAlignment], used_b: set[str]) -> None:
    """Last resort: pair leftover A ops with leftover B tensors of equal shape, dtype and close stats."""
    leftovers: dict[tuple, list[str]] = {}
    for op in b.graph.topo_order():
        if op in used_b:
            continue
        for slot in relevant_slots(b.graph, op):
            name = f"{op}:{slot}"
            if b.captured(name):
                rec = b.record(name)
                leftovers.setdefault((tuple(rec["shape"]), rec["dtype"]), []).append(name)
    if not leftovers:
        return
    for op, node in nodes.items():
        if node.role != ROLE_UNMATCHED or a.graph.op_type(op) in WEIGHT_OPS:
            continue
        name = f"{op}:0"
        if not a.captured(name):
            continue
        rec = a.record(name)
        candidates = leftovers.get((tuple(rec["shape"]), rec["dtype"]), [])
        if int(np.prod(rec["shape"] or [1])) < 4:
            continue  # too small to tell apart by value
        match = next((c for c in candidates if _close_values(a, b, name, c)), None)
        if match is not None:
            candidates.remove(match)
            node.b_node, node.reason, node.role = tensor_op(match), "value", ROLE_COMPARED
            node.tensors = [TensorPair(name, match, "value", True)]
            used_b.add(tensor_op(match))


def _close_values(a: CaptureView, b: CaptureView, ta: str, tb: str) -> bool:
    """Whether two captured tensors hold close values; False where one cannot be read back (a
    value kept by digest whose model is not here)."""
    try:
        return _close(a.capture.tensor(ta), b.capture.tensor(tb))
    except TftraceError:
        return False


def _close(x: np.ndarray, y: np.ndarray) -> bool:
    if x.dtype.kind != "f":
        return bool(np.array_equal(x, y))
    x64, y64 = np.asarray(x, np.float64), np.asarray(y, np.float64)
    scale = float(np.linalg.norm(x64))
    return scale > 0 and float(np.linalg.norm(x64 - y64)) <= 1e-3 * scale
