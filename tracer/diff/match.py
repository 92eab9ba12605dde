"""Pair the ops of two op graphs: by name first, then by structure for what was renamed.

Two exports of one model often name their nodes differently (another TF version, a TF2
``tf.function`` inlined under ``StatefulPartitionedCall/...``, another export script). Names are
tried first because they are cheap and usually right — except TF's auto-generated ones: TF makes
a name unique by appending ``_N`` (``Reshape``, ``Reshape_1``, ``Reshape_2``), so an export that
builds one extra op, or the same ops in another order, shifts the numbers and ``Reshape_2`` of
one graph is ``Reshape_1`` of the other. A name that differs from a node of the other graph (or
of its own) only by such suffixes is therefore no evidence: those ops are paired by structure,
and by name only when structure leaves both free. The signature then anchors the two graphs
at their inputs and outputs (paired by signature key), and pairs spread from every matched op:

* backwards — the producers of input ``i`` of two matched ops are paired when their op types
  agree (or both are weight sources: variable, constant, identity of one); Identity plumbing
  (which TF2 inlining adds around every function call) is looked through;
* forwards — the consumers of a matched tensor are paired when exactly one unmatched consumer
  on each side reads it at the same input index with the same op type.

The spread repeats until nothing changes. It never overrides a pair, so a wrong guess cannot
cascade over a name match.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable

from ..opgraph import OpGraph, tensor_op, tensor_slot
from ..optypes import PASS_THROUGH, WEIGHT_SOURCES

__all__ = ["match_graphs", "canonical_tensor", "canonical_inputs", "name_stem"]


def canonical_tensor(g: OpGraph, tensor: str) -> str:
    """Follow a tensor up through Identity plumbing to the tensor that really computes it."""
    seen = 0
    while seen < 10_000:
        op = tensor_op(tensor)
        if op not in g or g.op_type(op) not in PASS_THROUGH or not g.data_inputs(op):
            return tensor
        tensor = g.data_inputs(op)[0]
        seen += 1
    return tensor


def canonical_inputs(g: OpGraph, op: str) -> list[str]:
    return [canonical_tensor(g, t) for t in g.data_inputs(op)]


def match_graphs(a: OpGraph, b: OpGraph) -> dict[str, tuple[str, str]]:
    """Return ``{a_op: (b_op, reason)}``; reason is ``name``, ``signature`` or ``structure``."""
    pairs: dict[str, tuple[str, str]] = {}
    taken_b: set[str] = set()

    def pair(x: str, y: str, reason: str) -> bool:
        if x in pairs or y in taken_b:
            return False
        pairs[x] = (y, reason)
        taken_b.add(y)
        return True

    numbered = _renumberable(a, b)
    for name in a.topo_order():
        if name in b and name not in numbered:
            pair(name, name, "name")
    for role in ("inputs", "outputs"):
        sig_a, sig_b = getattr(a, role), getattr(b, role)
        common = set(sig_a) & set(sig_b)
        anchors = [(key, key) for key in sorted(common)]
        rest_a, rest_b = sorted(set(sig_a) - common), sorted(set(sig_b) - common)
        if len(rest_a) == 1 and len(rest_b) == 1:  # one input (output) each, keyed differently
            anchors.append((rest_a[0], rest_b[0]))
        for key_a, key_b in anchors:
            x, y = tensor_op(sig_a[key_a]), tensor_op(sig_b[key_b])
            if x in a and y in b:  # an input the outputs do not need is not in the graph
                pair(x, y, "signature")
    _spread(a, b, pairs, taken_b, pair)
    # The reads of a matched variable are its reads on the other side, whatever they are named: a
    # Keras layer's auto-numbered 'bn/Cast_3/ReadVariableOp' reads beta in one export and gamma in
    # another (the casts are built in another order under mixed precision), so this comes before
    # the guess by equal numbered names.
    _pair_plumbing(a, b, pairs, pair)
    # Auto-numbered names structure left unpaired: equal names of one op type are the best guess.
    guessed = [pair(name, name, "name") for name in a.topo_order()
               if name in numbered and name in b and a.op_type(name) == b.op_type(name)]
    if any(guessed):
        _spread(a, b, pairs, taken_b, pair)
        _pair_plumbing(a, b, pairs, pair)
    return pairs


_SUFFIX = re.compile(r"_\d+$")


def name_stem(name: str) -> str:
    """The name without TF's uniquifying ``_N`` suffixes, in every scope (``Reshape_3/shape`` ->
    ``Reshape/shape``), because TF numbers scopes the same way as ops."""
    return "/".join(_SUFFIX.sub("", part) for part in name.split("/"))


def _renumberable(a: OpGraph, b: OpGraph) -> set[str]:
    """Names whose stem is shared by more than one op in either graph: what such a name denotes
    depends on the order ops were built in, so an equal name is no evidence of the same op."""
    stems: dict[str, set[str]] = defaultdict(set)
    for g in (a, b):
        for name in g.topo_order():
            stems[name_stem(name)].add(name)
    return {name for members in stems.values() if len(members) > 1 for name in members}


def _pair_plumbing(a: OpGraph, b: OpGraph, pairs: dict[str, tuple[str, str]], pair: Callable[[str, str, str], bool]) -> None:
    """Pair leftover Identity plumbing around matched ops so the name mapping is complete: what
    structure (the op types of consumers) cannot pair, because plumbing has no op type of its own.

    First from the reader's side: the pass-throughs that two matched ops read at the same input
    index are paired upwards in step (``w/read`` <-> ``.../ReadVariableOp``), because those are
    the tensors that hold the same values (an inliner's extra Identity above a ReadVariableOp
    carries a resource handle, not the weight). Then from the producer's side, for what is left.
    """
    for x, (y, _) in list(pairs.items()):
        ins_x, ins_y = a.data_inputs(x), b.data_inputs(y)
        if len(ins_x) != len(ins_y):
            continue
        for tx, ty in zip(ins_x, ins_y):
            px, py = tensor_op(tx), tensor_op(ty)
            while px in a and py in b and a.op_type(px) in PASS_THROUGH and b.op_type(py) in PASS_THROUGH:
                if not pair(px, py, "structure") or not a.data_inputs(px) or not b.data_inputs(py):
                    break
                px, py = tensor_op(a.data_inputs(px)[0]), tensor_op(b.data_inputs(py)[0])
    changed = True
    while changed:
        changed = False
        taken = {v for v, _ in pairs.values()}
        for x, (y, _) in list(pairs.items()):
            free_x = [n for n in a.g.successors(x) if a.op_type(n) in PASS_THROUGH and n not in pairs]
            free_y = [n for n in b.g.successors(y) if b.op_type(n) in PASS_THROUGH and n not in taken]
            if len(free_x) == 1 and len(free_y) == 1 and pair(free_x[0], free_y[0], "structure"):
                taken.add(free_y[0])
                changed = True


def _compatible(a: OpGraph, b: OpGraph, x: str, y: str) -> bool:
    op_x, op_y = a.op_type(x), b.op_type(y)
    return op_x == op_y or (op_x in WEIGHT_SOURCES and op_y in WEIGHT_SOURCES)


def _spread(
    a: OpGraph, b: OpGraph, pairs: dict[str, tuple[str, str]], taken_b: set[str], pair: Callable[[str, str, str], bool]
) -> None:
    consumers_a = _consumers(a)
    consumers_b = _consumers(b)
    changed = True
    while changed:
        changed = False
        for x, (y, _) in list(pairs.items()):
            # backwards: producer of input i <-> producer of input i
            ins_x, ins_y = canonical_inputs(a, x), canonical_inputs(b, y)
            if len(ins_x) == len(ins_y) and (a.op_type(x) == b.op_type(y) or {a.op_type(x), b.op_type(y)} <= PASS_THROUGH):
                for tx, ty in zip(ins_x, ins_y):
                    px, py = tensor_op(tx), tensor_op(ty)
                    if px in a and py in b and tensor_slot(tx) == tensor_slot(ty) and _compatible(a, b, px, py):
                        changed |= pair(px, py, "structure")
            # forwards: the unique unmatched reader of the same slot at the same input index
            for (slot, index, op_type), readers_x in consumers_a[x].items():
                readers_y = consumers_b[y].get((slot, index, op_type), [])
                free_x = [r for r in readers_x if r not in pairs]
                free_y = [r for r in readers_y if r not in taken_b]
                if len(free_x) == 1 and len(free_y) == 1:
                    changed |= pair(free_x[0], free_y[0], "structure")


def _consumers(g: OpGraph) -> dict[str, dict[tuple[int, int, str], list[str]]]:
    """op -> {(output slot, consumer input index, consumer op type): [consumer ops]}, looking
    through Identity plumbing (which is itself never a consumer here)."""
    table: dict[str, dict[tuple[int, int, str], list[str]]] = defaultdict(lambda: defaultdict(list))
    for dst in g.topo_order():
        if g.op_type(dst) in PASS_THROUGH:
            continue
        for index, tensor in enumerate(canonical_inputs(g, dst)):
            src = tensor_op(tensor)
            if src in g:
                table[src][(tensor_slot(tensor), index, g.op_type(dst))].append(dst)
    return table
