"""Stage 3 — classify every difference between two op graphs as a rewrite.

The ops are paired by :mod:`tracer.diff.match`; this module explains what is left. Export
patterns are recognised first, because one pattern touches many nodes and should be reported
once, with its members named: ``batchnorm_folded`` (a batch norm gone, its conv's weights
rescaled), ``cast_inserted`` (an op switched to a narrower dtype with Casts around it), ``fused``
(a chain replaced by one fused op), ``variable_frozen`` (a variable became a constant of the
same value, exact). What no pattern explains is reported per node: ``op_changed``,
``attr_changed``, ``const_changed``, ``rewired``, ``node_added``, ``node_removed``.

Each kind has one record in :mod:`tracer.diff.kinds` (which pass here detects it, how
alignment pairs it, its cause, its display order); the passes run in that module's order.

Weights are compared by value: constants through the digest stored in the op graph, variables
through a :data:`ValueSource` (a checkpoint reader statically, the captured tensors in a
comparison, where a variable the runs write is its value as loaded, before the first run), so a
folded or quantised weight is never mistaken for an unchanged one, nor the runs' own updates of a
variable for a changed weight.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import TftraceError
from .kinds import PASSES, REWRITE_KINDS
from .records import GraphDiff, Rewrite
from .match import canonical_tensor, match_graphs
from ..opgraph import OpGraph, tensor_op, tensor_slot, weight_reads
from ..optypes import (BATCH_NORM_OPS, CHAIN_BOUNDARY_OPS, LINEAR_OPS, PASS_THROUGH, RESIZE_FUSED_CONV_FILTER, VARIABLE_OPS,
                       WEIGHT_OPS, is_fused_op)

__all__ = ["diff_graphs", "ValueSource", "REWRITE_KINDS"]

# A weight's value by op name. A source may also offer ``kept_digest(op)`` (a capture's digest kept
# instead of the value), ``content_digest(op)`` (the sha256 of the value) and ``moving_average(op)``
# (``{"key", "digest"}`` of the average its checkpoint holds for a variable): looked up, not required.
ValueSource = Callable[[str], "np.ndarray | None"]

SMALL_WEIGHT = 4  # a weight of at most this many numbers has both its values in a const_changed's detail
TYPE_ATTRS = {"T", "dtype", "SrcT", "DstT", "Tidx", "U"}
# a loop frame's name is the loop's (``while`` or ``while_2``, as the export numbered its loops): which ops
# run in one frame is told by the edges
IGNORED_ATTRS = {"value", "shared_name", "container", "_class", "frame_name"}


def diff_graphs(
    a: OpGraph,
    b: OpGraph,
    values_a: ValueSource | None = None,
    values_b: ValueSource | None = None,
    *,
    b_inlined_by_loader: bool = False,
    a_inlined_by_loader: bool = False,
) -> GraphDiff:
    """Match two op graphs and explain every difference.

    ``*_inlined_by_loader``: tftrace itself inlined that side's TF2 signature function, which
    adds Identity/NoOp plumbing around the call: not a rewrite of the export.
    """
    ctx = _Context(a, b, values_a or _none, values_b or _none, a_inlined_by_loader or b_inlined_by_loader)
    rewrites = [r for detector in PASSES for r in getattr(ctx, detector)()]  # the registry's passes (kinds.py)
    # in the order the examples meet them (a weight where it is first used, not where its name sorts)
    order, last = a.flow_order(), (1 << 30, 0, 0)
    rewrites.sort(key=lambda r: (min((order.get(n, last) for n in r.a_nodes), default=last), r.kind))
    only_a = [n for n in a.topo_order() if n not in ctx.pairs]
    only_b = [n for n in b.topo_order() if n not in ctx.inverse]
    return GraphDiff(ctx.pairs, only_a, only_b, rewrites)


def _none(_: str) -> None:
    return None


class _Context:
    """The matching plus the bookkeeping of which nodes a reported rewrite already explains."""

    def __init__(self, a: OpGraph, b: OpGraph, va: ValueSource, vb: ValueSource, inlined_by_loader: bool) -> None:
        self.a, self.b, self.va, self.vb = a, b, va, vb
        self.inlined_by_loader = inlined_by_loader
        self.pairs = match_graphs(a, b)
        self.inverse = {y: x for x, (y, _) in self.pairs.items()}
        self.done_a: set[str] = set()
        self.done_b: set[str] = set()
        self.cast_nodes: set[str] = set()  # B casts of recognised cast regions
        self.fed_a, self.fed_b = a.fed_ops(), b.fed_ops()

    # ---- helpers ---------------------------------------------------------------------------

    def partner(self, x: str) -> str | None:
        return self.pairs[x][0] if x in self.pairs else None

    def source_chain(self, g: OpGraph, tensor: str, through: set[str] | None = None) -> list[str]:
        """The op producing ``tensor`` and the pass-through ops above it (``w/read`` -> ``w``);
        ``through`` adds ops to look through (the casts of a recognised cast region)."""
        chain = []
        op = tensor_op(tensor)
        while op in g:
            chain.append(op)
            passes = g.op_type(op) in PASS_THROUGH or op in (through or ())
            if not passes or not g.data_inputs(op):
                break
            op = tensor_op(g.data_inputs(op)[0])
        return chain

    def digest(self, g: OpGraph, op: str, values: ValueSource, kept: bool = True) -> str | None:
        """A value's digest: a Const's from the graph, a variable's from its value source (or the
        sha256 a capture kept instead of the value, with ``kept``; one scheme is never compared
        with the other: then both are read). None where the value cannot be had."""
        node = g.node(op)
        if node["op"] == "Const":
            value = node["attrs"].get("value") or {}
            return value.get("sha1")
        found = getattr(values, "kept_digest", None)
        if kept and found is not None and found(op) is not None:
            return found(op)
        try:
            array = values(op)
        except TftraceError:  # kept by digest and not readable here: the pair's metrics say so
            return None
        return None if array is None else hashlib.sha1(np.ascontiguousarray(array).tobytes()).hexdigest()

    def moving_average(self, x: str, y: str) -> dict[str, Any] | None:
        """Where one side's checkpoint also holds a moving average of the changed variable
        (``w/ExponentialMovingAverage``): which side, its key, and whether the other side's value
        is that average bit for bit (None: not known). An export that restored the averages holds
        them; only the digests say so, never the names alone."""
        for side, (own, other, mine, theirs) in (("a", (self.va, self.vb, x, y)), ("b", (self.vb, self.va, y, x))):
            found = getattr(own, "moving_average", None)
            average = found(mine) if found is not None else None
            if average is None:
                continue
            digest = getattr(other, "content_digest", None)
            try:
                held = digest(theirs) if digest is not None else None
            except TftraceError:  # a value kept by digest that cannot be read back here
                held = None
            return {"checkpoint": side, "key": average["key"],
                    "matches": None if held is None else held == average["digest"]}
        return None

    def max_change(self, x: str, y: str) -> float | None:
        try:
            va, vb = self.va(x), self.vb(y)
        except TftraceError:  # a value kept by digest that cannot be read back here
            return None
        if va is None or vb is None or np.shape(va) != np.shape(vb) or np.asarray(va).dtype.kind not in "fiu":
            return None
        return float(np.max(np.abs(np.asarray(va, np.float64) - np.asarray(vb, np.float64)), initial=0.0))

    def what_changed(self, x: str, y: str) -> dict[str, Any]:
        """What a reader of the table needs beside the size of a weight's change: its dtype on each
        side where they differ (a mixed-precision export re-types a constant float32 -> float16),
        and both values where the weight is a few numbers (an NMS threshold 0.05 -> 0.0499878)."""
        try:
            va, vb = self.va(x), self.vb(y)
        except TftraceError:
            return {}
        if va is None or vb is None:
            return {}
        a, b = np.asarray(va), np.asarray(vb)
        found: dict[str, Any] = {}
        if a.dtype != b.dtype:
            found["dtype"] = {"a": a.dtype.name, "b": b.dtype.name}
        if a.size <= SMALL_WEIGHT and b.size <= SMALL_WEIGHT and a.dtype.kind in "fiub" and b.dtype.kind in "fiub":
            found["values"] = {"a": a.tolist(), "b": b.tolist()}
        return found

    # ---- export patterns -------------------------------------------------------------------

    def batchnorm_folds(self) -> list[Rewrite]:
        out = []
        for bn in self.a.topo_order():
            if self.a.op_type(bn) not in BATCH_NORM_OPS:
                continue
            partner = self.partner(bn)
            if partner is not None and self.b.op_type(partner) in BATCH_NORM_OPS:
                continue  # still a batch norm in B: not folded
            inputs = self.a.data_inputs(bn)
            conv = tensor_op(inputs[0])
            conv_b = self.partner(conv)
            if self.a.op_type(conv) not in LINEAR_OPS or conv_b is None:
                continue
            a_nodes = [bn, conv] + self.source_chain(self.a, _filter_input(self.a, conv))
            for param in inputs[1:]:
                a_nodes += [n for n in self.source_chain(self.a, param) if n not in self.pairs or n == bn]
            b_nodes = [conv_b] + self.source_chain(self.b, _filter_input(self.b, conv_b))
            if partner is not None:
                b_nodes.append(partner)
                for tensor in self.b.data_inputs(partner)[1:]:
                    b_nodes += [n for n in self.source_chain(self.b, tensor) if n not in self.inverse]
            weights_a = self.source_chain(self.a, _filter_input(self.a, conv))[-1]
            weights_b = self.source_chain(self.b, _filter_input(self.b, conv_b))[-1]
            detail = {
                "batch_norm": bn,
                "conv": conv,
                "epsilon": self.a.node(bn)["attrs"].get("epsilon"),
                "replaced_by": self.b.op_type(partner) if partner else None,
                "weights_max_abs_change": self.max_change(weights_a, weights_b),
            }
            if self.b.op_type(conv_b) != self.a.op_type(conv):  # optimize_for_inference fused more into the conv
                detail["conv_became"] = self.b.op_type(conv_b)
            out.append(Rewrite("batchnorm_folded", _unique(a_nodes), _unique(b_nodes), detail))
            self.done_a.update(a_nodes)
            self.done_b.update(b_nodes)
        return out

    def cast_regions(self) -> list[Rewrite]:
        regions: dict[str, list[str]] = {}
        for cast in self.b.topo_order():
            if self.b.op_type(cast) != "Cast" or cast in self.inverse:
                continue
            neighbours = [tensor_op(t) for t in self.b.data_inputs(cast)] + list(self.b.g.successors(cast))
            core = next((n for n in neighbours if n in self.inverse and _type_attrs_differ(self.a, self.b, self.inverse[n], n)), None)
            if core is not None:
                regions.setdefault(core, []).append(cast)
        out = []
        for core, casts in regions.items():
            x = self.inverse[core]
            detail = {
                "op": x,
                "dtype_a": self.a.node(x)["attrs"].get("T"),
                "dtype_b": self.b.node(core)["attrs"].get("T"),
                "casts": casts,
            }
            out.append(Rewrite("cast_inserted", [x], casts + [core], detail))
            self.done_a.add(x)
            self.done_b.update(casts + [core])
            self.cast_nodes.update(casts)
        return out

    def fusions(self) -> list[Rewrite]:
        out = []
        for y in self.b.topo_order():
            op = self.b.op_type(y)
            if not is_fused_op(op):
                continue
            x = self.inverse.get(y)
            if x is None:
                continue
            chain = self._fused_chain(x)
            detail = {"fused_op": op, "fused_ops": self.b.node(y)["attrs"].get("fused_ops"), "chain": chain}
            out.append(Rewrite("fused", chain, [y], detail))
            self.done_a.update(chain)
            self.done_b.add(y)
        return out

    def _fused_chain(self, x: str) -> list[str]:
        """The A ops one fused B op replaced, in order. Grappler's remapper names the fused op
        after the *last* op of the chain (so readers keep their inputs), other tools after the
        first: walk from the matched op up the main data input and down its single reader, over
        ops left unmatched (weights and plumbing stay outside the chain)."""
        chain = [x]
        while self.a.data_inputs(chain[0]):
            producer = tensor_op(self.a.data_inputs(chain[0])[0])
            if producer not in self.a or producer in self.pairs or self.a.op_type(producer) in CHAIN_BOUNDARY_OPS:
                break
            if [n for n in self.a.g.successors(producer) if not self.a.g.edges[producer, n]["control"]] != [chain[0]]:
                break
            chain.insert(0, producer)
        while True:
            readers = [n for n in self.a.g.successors(chain[-1]) if not self.a.g.edges[chain[-1], n]["control"]]
            if len(readers) != 1 or readers[0] in self.pairs:
                break
            chain.append(readers[0])
        return chain

    # ---- what no pattern explains ----------------------------------------------------------

    def per_pair(self) -> list[Rewrite]:
        out: list[Rewrite] = []
        for x in self.a.topo_order():
            if x not in self.pairs or x in self.done_a:
                continue
            y = self.partner(x)
            assert y is not None
            if y in self.done_b:
                continue
            out += self._value_rewrites(x, y)
            na, nb = self.a.node(x), self.b.node(y)
            if x in self.fed_a and y in self.fed_b:
                out += _fed_changes(x, y, na, nb)  # fed: only what may be fed matters, not how it was made
                continue
            if na["op"] != nb["op"]:
                if not ({na["op"], nb["op"]} <= WEIGHT_OPS or {na["op"], nb["op"]} <= PASS_THROUGH):  # variable vs constant: values decide
                    out.append(Rewrite("op_changed", [x], [y], {"a_op": na["op"], "b_op": nb["op"]}))
                continue
            plumbing = {na["op"], nb["op"]} <= PASS_THROUGH  # pass-throughs: only where they lead matters
            changed = {} if plumbing else _attr_changes(na, nb)
            if changed:
                out.append(Rewrite("attr_changed", [x], [y], {"attrs": changed}))
            rewired = self._rewired_inputs(x, y)
            if rewired:
                out.append(Rewrite("rewired", [x], [y], {"inputs": rewired}))
        return out

    def _value_rewrites(self, x: str, y: str) -> list[Rewrite]:
        op_a, op_b = self.a.op_type(x), self.b.op_type(y)
        if op_a not in WEIGHT_OPS or op_b not in WEIGHT_OPS:
            return []
        da, db = self.digest(self.a, x, self.va), self.digest(self.b, y, self.vb)
        if da is not None and db is not None and da.startswith("sha256:") != db.startswith("sha256:"):
            da, db = self.digest(self.a, x, self.va, kept=False), self.digest(self.b, y, self.vb, kept=False)
        if da is not None and db is not None and da != db:
            # the weight's reads hold its value wherever it is used: the change is theirs too (a
            # resource variable is never captured itself, so its ReadVariableOp is where it shows)
            a_nodes, b_nodes = [x, *weight_reads(self.a, x)], [y, *weight_reads(self.b, y)]
            detail: dict[str, Any] = {"max_abs_change": self.max_change(x, y), **self.what_changed(x, y)}
            average = self.moving_average(x, y)
            if average is not None:
                detail["moving_average"] = average
            return [Rewrite("const_changed", a_nodes, b_nodes, detail)]
        if op_a in VARIABLE_OPS and op_b == "Const":
            a_nodes = [x] + [n for n in self.a.g.successors(x) if self.a.op_type(n) in PASS_THROUGH and n not in self.pairs]
            self.done_a.update(a_nodes)
            exact = da is not None and da == db
            return [Rewrite("variable_frozen", a_nodes, [y], {"exact": exact, "verified_by_value": da is not None})]
        return []

    def _rewired_inputs(self, x: str, y: str) -> list[dict[str, Any]]:
        ins_a, ins_b = self.a.data_inputs(x), self.b.data_inputs(y)
        changes = []
        for index in range(max(len(ins_a), len(ins_b))):
            ta = ins_a[index] if index < len(ins_a) else None
            tb = ins_b[index] if index < len(ins_b) else None
            if ta is not None and tb is not None:
                if tensor_op(ta) not in self.a and tensor_op(tb) not in self.b:
                    continue  # both pruned away: this op is fed, its inputs never run
                if self._same_source(ta, tb):
                    continue
            changes.append({"index": index, "a": ta, "b": tb})
        return changes

    def _same_source(self, ta: str, tb: str) -> bool:
        """Do two input tensors come from paired ops (looking through pass-throughs and casts)?"""
        ca, cb = canonical_tensor(self.a, ta), canonical_tensor(self.b, tb)
        if self.partner(tensor_op(ca)) == tensor_op(cb) and tensor_slot(ca) == tensor_slot(cb):
            return True
        src_a = self.source_chain(self.a, ta)
        src_b = self.source_chain(self.b, tb, through=self.cast_nodes)
        for na in src_a:
            partner = self.partner(na)
            if partner is not None:
                return partner in src_b and (na != src_a[0] or tensor_slot(ta) == tensor_slot(tb))
        return False

    def unmatched(self) -> list[Rewrite]:
        out = []
        for x in self.a.topo_order():
            if x not in self.pairs and x not in self.done_a and not self._loader_plumbing(self.a, x):
                out.append(Rewrite("node_removed", [x], [], {"op": self.a.op_type(x)}))
        for y in self.b.topo_order():
            if y not in self.inverse and y not in self.done_b and not self._loader_plumbing(self.b, y):
                out.append(Rewrite("node_added", [], [y], {"op": self.b.op_type(y)}))
        return out

    def _loader_plumbing(self, g: OpGraph, op: str) -> bool:
        """Nodes that tftrace's own inlining of a TF2 function added (not the export): Identities and
        NoOps; and the control anchors TensorFlow's inliner adds wherever it inlines a call or lowers
        an ``If``/``While`` (:mod:`tracer.artifacts.lowering`): NoOps named ``Func/<call>/..._control_node/_N``,
        numbered in the order it met them, so an export that names its loop otherwise numbers them otherwise."""
        if g.op_type(op) == "NoOp" and op.startswith("Func/") and "_control_node/" in op:
            return True
        return self.inlined_by_loader and g.op_type(op) in PASS_THROUGH | {"NoOp"}


def _fed_changes(x: str, y: str, na: dict[str, Any], nb: dict[str, Any]) -> list[Rewrite]:
    """A signature input on both sides (a Placeholder in one export, an Identity in another):
    its value is fed, so only the dtypes and shapes it accepts can differ in a way that matters."""
    ta = [(o["dtype"], o["shape"]) for o in na["outputs"]]
    tb = [(o["dtype"], o["shape"]) for o in nb["outputs"]]
    if ta == tb:
        return []
    changed = {"outputs": {"a": [list(t) for t in ta], "b": [list(t) for t in tb]}}
    return [Rewrite("attr_changed", [x], [y], {"attrs": changed})]


def _type_attrs_differ(a: OpGraph, b: OpGraph, x: str, y: str) -> bool:
    ta, tb = a.node(x)["attrs"], b.node(y)["attrs"]
    return any(ta.get(k) != tb.get(k) for k in TYPE_ATTRS if k in ta or k in tb)


def _filter_input(graph: Any, conv: str) -> str:
    """A convolution's filter: input 1, but after the resize's size and the paddings in
    optimize_for_inference's fused convolutions."""
    inputs = graph.data_inputs(conv)
    return inputs[min(RESIZE_FUSED_CONV_FILTER.get(graph.op_type(conv), 1), len(inputs) - 1)]


def _attr_changes(na: dict[str, Any], nb: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The attributes whose values differ; one that only one side has, at its op's default value
    there (an attribute a newer TensorFlow added to the op), is no change (opgraph's ``attr_defaults``)."""
    keys = (set(na["attrs"]) | set(nb["attrs"])) - IGNORED_ATTRS
    only_default = ({k for k in na.get("attr_defaults") or () if k not in nb["attrs"]}
                    | {k for k in nb.get("attr_defaults") or () if k not in na["attrs"]})
    return {
        k: {"a": na["attrs"].get(k), "b": nb["attrs"].get(k)}
        for k in sorted(keys - only_default)
        if not _same_attr(na["attrs"].get(k), nb["attrs"].get(k))
    }


def _same_attr(a: Any, b: Any) -> bool:
    """Whether two attribute values mean the same: a called function by its digest where both
    sides know it (a loop body renamed by the export is the same body; one changed under the same
    name is not), by its name where one does not (a capture made before digests were recorded)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same_attr(x, y) for x, y in zip(a, b))
    if isinstance(a, dict) and isinstance(b, dict) and "func" in a and "func" in b:
        if a.get("digest") and b.get("digest"):
            return a["digest"] == b["digest"]
        return a["func"] == b["func"]
    return a == b


def _unique(names: list[str]) -> list[str]:
    return list(dict.fromkeys(names))
