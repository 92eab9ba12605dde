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

Then the spread crosses precision casts: Casts between floating dtypes, which a
``mixed_float16``/``mixed_bfloat16`` policy or a converter's FP16 mode inserts on one side only
(inputs and weights cast to half, results cast back). Backwards, where input ``i`` of one op
comes through such casts and that of its partner does not, the producers above the casts are
paired by the same rules; forwards, an op reading a matched tensor through such casts counts as
its reader. The casts themselves stay unpaired, for the ``cast_inserted`` detector to claim.
Without this, a mixed-precision twin whose names differ (Keras auto-names a second model built in
the same script, so its scopes are ``functional_1_1/…`` where the first's are ``functional_1/…``)
leaves every narrowed op unmatched. The crossing is tried only when the plain spread stops, and
the plain spread resumes from what it pairs, because an edge without a cast is the stronger
evidence.

The spread repeats until nothing changes. It never overrides a pair, so a wrong guess cannot
cascade over a name match.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from ..opgraph import OpGraph, tensor_op, tensor_slot
from ..optypes import PASS_THROUGH, WEIGHT_SOURCES

__all__ = ["SpreadStats", "match_graphs", "canonical_tensor", "canonical_inputs", "name_stem", "is_precision_cast", "uncast_tensor"]

# The dtypes a precision cast converts between: a cast to or from an integer or bool changes the
# values themselves, so matching never looks through it.
FLOAT_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})

# op -> {(output slot, consumer input index, consumer op type): [consumer ops]}
Consumers = dict[str, dict[tuple[int, int, str], list[str]]]


def _once_per_graph(g: OpGraph, question: Callable[[OpGraph, str], Any], name: str) -> Any:
    """``question(g, name)``, answered once per graph and name (:meth:`OpGraph.memo`): the spread asks
    the same ones hundreds of thousands of times on a 50,000-op graph."""
    known = g.memo(question.__name__)
    found = known.get(name)
    if found is None:
        found = known[name] = question(g, name)
    return found


def canonical_tensor(g: OpGraph, tensor: str) -> str:
    """Follow a tensor up through Identity plumbing to the tensor that really computes it."""
    return _once_per_graph(g, _up_through_plumbing, tensor)


def _up_through_plumbing(g: OpGraph, tensor: str) -> str:
    seen = 0
    while seen < 10_000:
        op = tensor_op(tensor)
        if op not in g or g.op_type(op) not in PASS_THROUGH or not g.data_inputs(op):
            return tensor
        tensor = g.data_inputs(op)[0]
        seen += 1
    return tensor


def canonical_inputs(g: OpGraph, op: str) -> list[str]:
    return list(_once_per_graph(g, _canonical_inputs, op))


def _canonical_inputs(g: OpGraph, op: str) -> list[str]:
    return [canonical_tensor(g, t) for t in g.data_inputs(op)]


def is_precision_cast(g: OpGraph, op: str) -> bool:
    """A Cast from one floating dtype to another: the same values at another precision, as mixed
    precision inserts around the ops it narrows (and never a cast that truncates to an integer)."""
    if op not in g or g.op_type(op) != "Cast":
        return False
    attrs = g.node(op)["attrs"]
    return attrs.get("SrcT") in FLOAT_DTYPES and attrs.get("DstT") in FLOAT_DTYPES


def uncast_tensor(g: OpGraph, tensor: str) -> str:
    """Follow a tensor up through precision casts and Identity plumbing to the tensor it is a copy
    of (``functional_1_1/Cast:0`` -> ``image:0``): what the other side of a mixed-precision pair
    reads uncast."""
    return _once_per_graph(g, _up_through_casts, tensor)


def _up_through_casts(g: OpGraph, tensor: str) -> str:
    tensor = canonical_tensor(g, tensor)
    seen = 0
    while seen < 10_000 and is_precision_cast(g, tensor_op(tensor)) and g.data_inputs(tensor_op(tensor)):
        tensor = canonical_tensor(g, g.data_inputs(tensor_op(tensor))[0])
        seen += 1
    return tensor


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


_SUFFIXES = re.compile(r"_\d+(?=/|$)")  # a scope's or the op's own ``_N``, wherever the name has one


def name_stem(name: str) -> str:
    """The name without TF's uniquifying ``_N`` suffixes, in every scope (``Reshape_3/shape`` ->
    ``Reshape/shape``), because TF numbers scopes the same way as ops."""
    return _SUFFIXES.sub("", name)


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
    """Spread pairs along edges until nothing changes: along plain edges first, then across
    precision casts, then along plain edges again from what that found (see the module's rules).
    Graphs without a precision cast skip the crossing, which could find nothing there.

    Only pairs whose neighbourhood changed are looked at again (a worklist): a pair's producers
    are paired or refused once and for all, and its readers can only pair once a rival reader
    was paired elsewhere, so a pair is revisited when it is new or when one of its readers (on
    either side, plainly or through a cast) was just paired. Sweeping every pair until a sweep
    found nothing cost sweeps x pairs: 60 sweeps over 51,000 pairs on the Model Garden's
    RetinaNet, three minutes. ``SpreadStats`` counts the visits, for the test that keeps it linear.
    """
    plain = (_consumers(a), _consumers(b))
    casts = any(is_precision_cast(g, op) for g in (a, b) for op in g.topo_order())
    across = (_consumers(a, uncast=True), _consumers(b, uncast=True)) if casts else None
    producers = (_producers(a, casts), _producers(b, casts))
    dirty_plain: dict[str, None] = dict.fromkeys(pairs)
    dirty_across: dict[str, None] = dict.fromkeys(pairs) if across is not None else {}
    from_b = {y: x for x, (y, _) in pairs.items()}

    def note(x: str, y: str, reason: str) -> bool:
        if not pair(x, y, reason):
            return False
        from_b[y] = x
        touched = [x, *producers[0].get(x, ())]
        touched += [from_b[p] for p in producers[1].get(y, ()) if p in from_b]
        for op in touched:
            if op in pairs:
                dirty_plain[op] = None
                if across is not None:
                    dirty_across[op] = None
        return True

    while True:
        while dirty_plain:
            batch = list(dirty_plain)
            dirty_plain.clear()
            _spread_step(a, b, pairs, taken_b, note, plain, batch, uncast=False)
        if across is None or not dirty_across:
            return
        batch = list(dirty_across)
        dirty_across.clear()
        _spread_step(a, b, pairs, taken_b, note, across, batch, uncast=True)


class SpreadStats:
    """How many pairs the spread looked at, summed over every match in this process: the test
    of a several-thousand-op graph asserts it grows with the op count, not with its square."""

    visits = 0


def _producers(g: OpGraph, casts: bool) -> dict[str, set[str]]:
    """op -> the ops it reads, plainly and (where ``casts``) through precision casts: the ops
    whose readers change when ``op`` is paired. Built once per graph (:meth:`OpGraph.memo`)."""
    known = g.memo("producers")
    if casts not in known:
        known[casts] = _producer_table(g, casts)
    return known[casts]


def _producer_table(g: OpGraph, casts: bool) -> dict[str, set[str]]:
    table: dict[str, set[str]] = {}
    for dst in g.topo_order():
        found = set()
        for tensor in g.data_inputs(dst):
            found.add(tensor_op(canonical_tensor(g, tensor)))
            if casts:
                found.add(tensor_op(uncast_tensor(g, tensor)))
        table[dst] = found
    return table


def _spread_step(
    a: OpGraph,
    b: OpGraph,
    pairs: dict[str, tuple[str, str]],
    taken_b: set[str],
    pair: Callable[[str, str, str], bool],
    consumers: tuple[Consumers, Consumers],
    batch: list[str],
    *,
    uncast: bool,
) -> bool:
    """One pass over the matched ops in ``batch``, pairing their producers and readers; True if
    it paired any. With ``uncast``, producers are paired only across a precision cast on one side
    (the plain pass pairs the rest), and readers are looked up in tables that see through such casts."""
    consumers_a, consumers_b = consumers
    changed = False
    SpreadStats.visits += len(batch)
    for x in batch:
        y = pairs[x][0]
        # backwards: producer of input i <-> producer of input i
        ins_x, ins_y = canonical_inputs(a, x), canonical_inputs(b, y)
        if len(ins_x) == len(ins_y) and (a.op_type(x) == b.op_type(y) or {a.op_type(x), b.op_type(y)} <= PASS_THROUGH):
            for tx, ty in zip(ins_x, ins_y):
                if uncast:
                    tx, ty = _across_one_sided_cast(a, b, tx, ty)
                px, py = tensor_op(tx), tensor_op(ty)
                if px in a and py in b and tensor_slot(tx) == tensor_slot(ty) and _compatible(a, b, px, py):
                    changed |= pair(px, py, "structure")
        # forwards: the unique unmatched reader of the same slot at the same input index
        for (slot, index, op_type), readers_x in consumers_a.get(x, {}).items():
            readers_y = consumers_b.get(y, {}).get((slot, index, op_type), [])
            free_x = [r for r in readers_x if r not in pairs]
            free_y = [r for r in readers_y if r not in taken_b]
            if len(free_x) == 1 and len(free_y) == 1:
                changed |= pair(free_x[0], free_y[0], "structure")
    return changed


def _across_one_sided_cast(a: OpGraph, b: OpGraph, tx: str, ty: str) -> tuple[str, str]:
    """The two tensors with a precision cast that only one of them comes through looked through;
    both unchanged where both or neither do (casts on both sides pair with each other plainly)."""
    cast_x, cast_y = is_precision_cast(a, tensor_op(tx)), is_precision_cast(b, tensor_op(ty))
    if cast_x == cast_y:
        return tx, ty
    return (uncast_tensor(a, tx), ty) if cast_x else (tx, uncast_tensor(b, ty))


def _consumers(g: OpGraph, *, uncast: bool = False) -> Consumers:
    """op -> {(output slot, consumer input index, consumer op type): [consumer ops]}, looking
    through Identity plumbing (which is itself never a consumer here) and, with ``uncast``, through
    precision casts too (then no consumer either). Built once per graph (:meth:`OpGraph.memo`)."""
    known = g.memo("consumers")
    if uncast not in known:
        known[uncast] = _consumer_table(g, uncast)
    return known[uncast]


def _consumer_table(g: OpGraph, uncast: bool) -> Consumers:
    resolve = uncast_tensor if uncast else canonical_tensor
    table: Consumers = defaultdict(lambda: defaultdict(list))
    for dst in g.topo_order():
        if g.op_type(dst) in PASS_THROUGH or (uncast and is_precision_cast(g, dst)):
            continue
        for index, tensor in enumerate(g.data_inputs(dst)):
            tensor = resolve(g, tensor)
            src = tensor_op(tensor)
            if src in g:
                table[src][(tensor_slot(tensor), index, g.op_type(dst))].append(dst)
    return table
