"""What an isolation replay feeds and what it recomputes, on the op graphs alone.

The replay of an origin feeds the nearest tensors above it that have an A counterpart
(:func:`replay_plan`), and so recomputes whatever lies between: a rewritten region whole, a
rewrite group from its own data inputs (:func:`origin_feeds`), a while loop above the op
(:func:`loop_above`), the rewritten ops an export changed inside that loop
(:func:`rewritten_in_replay`). Whether the origin reads a variable, and which ops write it,
tells the judge a loaded or stateful value from a computed one. Pure functions of the graphs
(:mod:`tracer.comparison.isolate` runs the replays); never imports TensorFlow.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .align import ROLE_REWRITTEN, Alignment
from ..diff.kinds import KINDS
from ..opgraph import OpGraph, tensor_op, variable_of, variable_writes
from ..optypes import EXIT_OPS, PLACEHOLDER_OPS, loop_result

__all__ = ["replay_plan", "replayed_ops", "loop_above", "group_members", "origin_feeds", "rewritten_in_replay",
           "reads_variable", "variable_writes", "replayed_alone_alike"]

GROUP_REWRITES = tuple(k.name for k in KINDS.values() if k.group)  # an origin that stands for several A ops (and B ops)


def replay_plan(graph: OpGraph, tensor: str, to_a: dict[str, str]) -> dict[str, str]:
    """Tensors of ``graph`` to feed (-> the A tensor whose captured value feeds it) to recompute
    ``tensor`` alone: the nearest ancestors that have an A counterpart.

    Control edges are followed too, and they need more than a value: an op that something waits
    on must *run*, so its own inputs are needed even when its output is fed. An inlined TF2
    function is the common case: its body waits on a NoOp that waits on the Identity of each
    input, so the placeholder behind it must be fed though no data path reaches it. (Hand-written:
    it walks tensors and ops, stopping at fed tensors but not at ops that must run; networkx has no such walk.)

    A TensorArray's flow is never fed (:meth:`OpGraph.tensor_array_flows`): its producer is
    recomputed instead, so replaying a TensorArray reader (a ``tf.map_fn``'s gather after a TF1
    loop) reruns the loop that fills it from the loop's own fed inputs. Fed, the flow would
    skip the writes and the replay would read a freshly created, empty TensorArray. A TF2
    TensorList travels as a variant, which a capture never holds: it is recomputed anyway.
    """
    flows = graph.tensor_array_flows()
    _ops, fed = _replay_walk(graph, tensor, lambda name: name in to_a and name not in flows)
    return {name: to_a[name] for name in fed}


def replayed_ops(graph: OpGraph, tensor: str, feeds: dict[str, str]) -> set[str]:
    """The ops a replay of ``tensor`` fed ``feeds`` (its :func:`replay_plan`) runs, its own op included."""
    return _replay_walk(graph, tensor, lambda name: name in feeds)[0]


def _replay_walk(graph: OpGraph, tensor: str, feedable: Callable[[str], bool]) -> tuple[set[str], set[str]]:
    """The ops a replay of ``tensor`` runs, and the tensors it feeds: the walk of :func:`replay_plan`
    up data inputs to the nearest ``feedable`` tensors, and up control inputs to ops that must run."""
    fed: set[str] = set()
    ops: set[str] = set()
    seen: set[tuple[bool, str]] = set()
    stack: list[tuple[bool, str]] = [(True, tensor_op(tensor))]  # (must run, op) or (False, tensor)
    while stack:
        item = stack.pop()
        if item in seen:
            continue
        seen.add(item)
        must_run, name = item
        if not must_run:
            if feedable(name):
                fed.add(name)
            else:
                stack.append((True, tensor_op(name)))
            continue
        if name not in graph:
            continue
        ops.add(name)
        if graph.op_type(name) in PLACEHOLDER_OPS:
            stack.append((False, f"{name}:0"))
            continue
        node = graph.node(name)
        stack.extend((False, t) for t in node["inputs"])
        stack.extend((True, tensor_op(c)) for c in node["control_inputs"])
    return ops, fed


def loop_above(graph: OpGraph, tensor: str, feeds: dict[str, str]) -> str | None:
    """The Exit of a while loop that replaying ``tensor`` from ``feeds`` recomputes, or None (the
    first in name order when several end the loop).

    A session cannot fetch the ops inside a loop, so when nothing between an op and a loop above
    it could be compared (a Keras LSTM's stacked outputs, laid out time-major, are not compared
    across batch sizes), the op's replay runs the whole loop too: a difference in that replay may
    be the loop's, and the report must not call it the op's own kernel. An Exit origin is the
    loop itself and is not asked about.
    """
    op = tensor_op(tensor)
    if op not in graph or graph.op_type(op) in EXIT_OPS:
        return None
    exits: list[str] = []
    seen: set[str] = set()
    stack = [t for t in graph.data_inputs(op) if t not in feeds]
    while stack:
        source = tensor_op(stack.pop())
        if source in seen or source not in graph:
            continue
        seen.add(source)
        if graph.op_type(source) in EXIT_OPS:
            exits.append(source)  # the loop is replayed whole from here up: no need to walk inside it
            continue
        stack.extend(t for t in graph.data_inputs(source) if t not in feeds)
    return min(exits) if exits else None


def group_members(alignment: Alignment, graph_a: OpGraph, op: str) -> list[str]:
    """The A ops of the rewrite group that origin ``op`` stands for, upstream of it: the conv,
    weights and batch-norm parameters of a folded batch norm, the earlier ops of a fused chain.

    They are found by walking up A's data inputs through ops the alignment marked as rewritten
    members of the same kind; where the walk stops are the group's own data inputs (the conv's
    input). Empty for an origin that is not a group. (Hand-written, not ``nx.ancestors``: the
    order found is the report's ``a_members`` order, whose first names the group in texts.)
    """
    node = alignment.nodes.get(op)
    if node is None or node.rewrite not in GROUP_REWRITES:
        return []
    members: list[str] = []
    stack = [op]
    while stack:
        name = stack.pop()
        for tensor in graph_a.data_inputs(name) if name in graph_a else []:
            source = tensor_op(tensor)
            member = alignment.nodes.get(source)
            if (source not in members and member is not None and member.role == ROLE_REWRITTEN
                    and member.rewrite == node.rewrite):
                members.append(source)
                stack.append(source)
    return members


def origin_feeds(alignment: Alignment, graphs: dict[str, OpGraph], node: str, fetches: dict[str, str],
                 to_a: dict[str, dict[str, str]]) -> tuple[dict[str, dict[str, str]], dict[str, Any] | None]:
    """Each side's feeds (its tensor -> the A tensor whose captured value feeds it) to replay
    origin ``node`` (fetching ``fetches[side]``), and its rewrite group (None if not a group).

    ``to_a[side]`` lists the tensors of that side that may be fed. A group's members are never
    fed, on either side: both replay the whole group from its own data inputs.
    """
    members = group_members(alignment, graphs["a"], node)
    held = {t for m in members for p in alignment.nodes[m].tensors for t in (p.a, p.b) if t}
    feeds = {key: replay_plan(graphs[key], fetches[key],
                              {t: s for t, s in to_a[key].items() if t not in held and s not in held})
             for key in ("a", "b")}
    if not members:
        return feeds, None
    group = {"kind": alignment.nodes[node].rewrite, "a_members": members,
             "a_inputs": sorted(feeds["a"]), "b_inputs": sorted(feeds["b"])}
    return feeds, group


def rewritten_in_replay(alignment: Alignment, graph: OpGraph, result: Any, feeds: dict[str, str]
                        ) -> list[dict[str, str]]:
    """The ops of A an origin's replay recomputes with it (from ``feeds`` up to it, control
    inputs included) that an export rewrote, in topological order: ``[{"op", "kind"}]``.

    A loop's result is replayed with the whole loop, whose body is not captured op by op: a
    constant changed inside a ``tf.map_fn`` body (an NMS threshold) or a TF2 While whose body
    changed shows only at the gather after the loop, an origin with no rewrite of its own. Its own
    error is then that of these rewrites, and the report says so."""
    walked, _fed = _replay_walk(graph, result.tensor, lambda name: name in feeds)
    found = []
    for op in graph.topo_order():
        node = alignment.nodes.get(op)
        if op in walked and op != result.name and node is not None and node.rewrite:
            found.append({"op": op, "kind": node.rewrite})
    return found


def reads_variable(graph: OpGraph, op: str) -> bool:
    """Whether ``op`` is a variable or a read of one: its value comes from loading the model."""
    return variable_of(graph, op) is not None


def replayed_alone_alike(graph_a: OpGraph, graph_b: OpGraph, op_a: str, op_b: str,
                          plans: dict[str, dict[str, str]]) -> bool:
    """Both replays run exactly one op, of the same type and attributes, on fed inputs: then
    nothing but the kernel's own run-to-run behaviour can make them differ. A replay that
    recomputes more (a whole while loop, an unpaired constant) may carry a real difference."""
    a, b = graph_a.node(op_a), graph_b.node(op_b)
    if a["op"] != b["op"] or loop_result(a["op"]) or a["attrs"] != b["attrs"]:
        return False
    return set(graph_a.data_inputs(op_a)) <= set(plans["a"]) and set(graph_b.data_inputs(op_b)) <= set(plans["b"])
