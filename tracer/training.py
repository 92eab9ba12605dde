"""A training graph, recognised from the graph itself (cause ``training_graph``).

Users commonly hand tftrace the checkpoint ``tf.compat.v1.train.Saver`` wrote during training:
its ``.meta`` is the TRAINING graph. Its batch norms run with ``is_training=True``: they
normalise with the statistics of the examples in the run, so each example's output depends on
which examples share its run (batch 1 against batch N differs, whatever the kernels), and an
inference export (``is_training=False``, the moving averages) computes something else. With
tf-slim's ``updates_collections=None`` (or UPDATE_OPS wired as control inputs of the outputs)
the same runs also update the moving averages, so the values read there are what the runs
before left, not the checkpoint's weights.

None of that is a kernel's choice, an export's folding or other weights: :func:`training_graph`
finds the batch norms in training mode from the report's node attributes, and
:mod:`tracer.causes` says it instead of those. Isolation asks :func:`normalises_by_batch` of each
origin's op on both sides: replayed on identical rows, such an op still differs where the sides do
not normalise over the same batch, and the judge says that (``batch_statistics``), not that its
kernel differs.

A batch norm written by hand is not fused: ``tf.nn.moments(x, axes=[0, 1, 2])`` +
``tf.nn.batch_normalization`` (tf-slim's ``batch_norm(fused=False)``, Keras' unfused path) takes
the batch's statistics with ``Mean`` ops over the batch axis. Such a reduction, of an activation
computed from the fed inputs, couples the rows of a run just as the fused op in training mode does,
and so does everything computed from its value: :func:`normalises_by_batch` is true of both
(the reduction axes read from the ``Const`` that holds them), and an origin is batch-coupled where
it, or an op its value is computed from that was not compared (so isolation recomputes it with
the origin), normalises by batch. A reduction over other axes (a global average pool over
``[1, 2]``), of integers or booleans, inside a while-loop frame (a ``map_fn`` body holds one
example), or a read of the moving averages (the inference graph) is not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from .opgraph import WHILE_FRAME_REASON, OpGraph, reachable, tensor_op
from .optypes import PLACEHOLDER_OPS
from .text import listed

__all__ = ["normalises_by_batch", "batch_coupled", "coupled_in_graph", "coupled_in_report", "output_carriers",
           "Carriers", "reaches_an_output", "training_batch_norm", "training_graph", "unshared_norms", "unused_statistics"]

BATCH_NORM_PREFIX = "FusedBatchNorm"  # FusedBatchNorm, V2, V3: tf.compat.v1.nn.fused_batch_norm, slim, Keras
# reductions whose second input holds the axes they reduce (tf.nn.moments' Mean, a batch sum, a batch max); the
# reduced tensor must hold floating values: a statistic of activations, not an assert's All over a shape's values
REDUCTION_OPS = frozenset({"Mean", "Sum", "Max", "Min", "Prod", "EuclideanNorm"})
FLOATING = ("float", "bfloat", "half", "double")
NAMED = 2  # the batch norms a sentence names before "and N more"
# an op whose value was not compared (it varies with the batch, has no counterpart, was not fetched):
# isolation recomputes it with the origin below it, so its batch coupling is the origin's
UNCOMPARED = frozenset({"not_compared", "unmatched", "not_captured"})
BEYOND = frozenset({"origin", "propagated"})  # a report node's statuses beyond tolerance


def normalises_by_batch(op_type: object, attrs: Mapping[str, Any] | None, axes: object = None,
                        rank: int | None = None) -> bool:
    """Whether an op of ``op_type`` with ``attrs`` (an op graph node's, JSON values) normalises
    each row with the statistics of the whole batch it runs in: a batch norm in training mode, or a
    reduction (``Mean``, ``Sum``, ...) whose ``axes`` (its reduction indices' values) include the
    batch axis 0 (or ``-rank``, for an input of ``rank``), as ``tf.nn.moments`` over ``[0, 1, 2]``.
    Its output then depends on which rows share its run, not on the row alone. Whether the reduced
    input is an activation (computed from the fed inputs) is the callers' to ask (:func:`batch_coupled`,
    :func:`coupled_in_report`): a reduction of a weight couples no rows."""
    if str(op_type or "").startswith(BATCH_NORM_PREFIX):
        return (attrs or {}).get("is_training") is True
    if str(op_type or "") not in REDUCTION_OPS:
        return False
    values = axes if isinstance(axes, list) else [axes]
    ints = [a for a in values if isinstance(a, int) and not isinstance(a, bool)]
    return any(a == 0 or (rank is not None and rank > 0 and a == -rank) for a in ints)


def _axes(value: object) -> object:
    """The values of a constant as an op graph records them (``attrs["value"]["values"]``), or None."""
    return value.get("values") if isinstance(value, dict) else None


def batch_coupled(graph: OpGraph, name: str) -> bool:
    """Whether op ``name`` of ``graph`` normalises by batch (:func:`normalises_by_batch`), a reduction
    only where it reduces an input computed from the fed inputs."""
    memo = graph.memo("batch_coupled")
    if name not in memo:
        op, node = graph.op_type(name), graph.node(name)
        axes = rank = None
        inputs = node.get("inputs") or []
        if op in REDUCTION_OPS and len(inputs) >= 2 and tensor_op(inputs[0]) in graph and tensor_op(inputs[1]) in graph:
            reached = graph.memo("on_feed")
            if "ops" not in reached:  # once per graph: what is computed from the fed inputs, outside while frames
                reached["ops"] = reachable(graph.g, graph.fed_ops())
                reached["frames"] = graph.while_frame_ops()  # a map_fn's body: one example, axis 0 is no batch
            info = graph.output_info(inputs[0])
            shape = info.get("shape")
            rank = len(shape) if isinstance(shape, list) else None
            if (tensor_op(inputs[0]) in reached["ops"] and name not in reached["frames"]
                    and str(info.get("dtype")).startswith(FLOATING)):
                axes = _axes((graph.node(tensor_op(inputs[1]))["attrs"] or {}).get("value"))
        memo[name] = normalises_by_batch(op, node.get("attrs"), axes, rank)
    return bool(memo[name])


def replay_coupled(graph: OpGraph, ops: Iterable[str]) -> list[str]:
    """The ops among ``ops`` (those a replay runs) that normalise by batch, in the graph's order."""
    ran = set(ops)
    return [op for op in graph.topo_order() if op in ran and batch_coupled(graph, op)]


def training_batch_norm(node: dict[str, Any], side: str) -> bool:
    """Whether report node ``node`` is, on ``side`` ("a" or "b"), a batch norm in training mode."""
    op = node.get("op") if side == "a" else node.get("b_op")
    return normalises_by_batch(op, node.get(f"attrs_{side}"))


def _on_feed(nodes: Mapping[str, Any], name: str) -> bool:
    """Whether report node ``name`` is computed from the fed inputs: its inputs lead up to a
    placeholder, or to an op the report does not hold (pruned above a fed tensor), not only to
    weights and constants."""
    seen, stack = set(), [name]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        node = nodes.get(current)
        if not isinstance(node, dict) or str(node.get("op")) in PLACEHOLDER_OPS:
            return True
        stack.extend(node.get("inputs") or [])  # a source without inputs (a weight, a constant) is no feed
    return False


def _reduces_batch(report: dict[str, Any], name: str, side: str) -> bool:
    """Whether report node ``name`` is, on ``side``, an op that normalises by batch (:func:`batch_coupled`
    from the report: the reduction axes from its input constant's recorded values, on that side; the
    reduced tensor's dtype and rank where the report records them, which it does not for an op
    without a counterpart)."""
    nodes = report.get("nodes") or {}
    node = nodes.get(name) or {}
    op = node.get("op") if side == "a" else node.get("b_op")
    axes = rank = None
    inputs = node.get("inputs") or []
    data = (nodes.get(inputs[0]) or {}) if inputs else {}
    if (op in REDUCTION_OPS and len(inputs) >= 2 and str(data.get("dtype") or "float").startswith(FLOATING)
            and WHILE_FRAME_REASON not in str(node.get("reason")) and _on_feed(nodes, inputs[0])):
        shape = data.get("shape")
        rank = len(shape) if isinstance(shape, list) else None
        axes = _axes(((nodes.get(inputs[1]) or {}).get(f"attrs_{side}") or {}).get("value"))
    return normalises_by_batch(op, node.get(f"attrs_{side}"), axes, rank)


def _coupling(name: str, inputs: Callable[[str], Iterable[str]], uncompared: Callable[[str], bool],
              normalises: Callable[[str], bool]) -> Iterator[str]:
    """The ops that make op ``name`` depend on its batch, as a walk up from it meets them: ``name``
    itself where it ``normalises`` by batch, and the ops above it that do, reached through ops whose
    values were not compared (``uncompared``): isolation feeds a replay the nearest compared tensors
    and recomputes those with the op, so their coupling is its own.

    The one definition of that notion, asked of two representations (as :func:`normalises_by_batch`
    is of one op): an op graph with the divergence's statuses (:func:`coupled_in_graph`, which op
    isolation replays) and a report (:func:`coupled_in_report`, the cause). Each says what an op's
    ``inputs`` are; the walk looks at each (``normalises``) and goes on above the op it starts from
    and above those not compared. A generator, so a caller that needs one can stop at the first."""
    seen, stack = set(), [name]
    while stack:
        current = stack.pop()
        if current in seen:
            continue
        seen.add(current)
        if normalises(current):
            yield current
        if current == name or uncompared(current):
            stack.extend(inputs(current))


def coupled_in_graph(graph: OpGraph, name: str, status: Callable[[str], object] | None = None) -> bool:
    """Whether op ``name``'s replay depends on its batch (:func:`_coupling` on ``graph``): it normalises
    by batch itself (:func:`batch_coupled`), or an op above it whose value was not compared does
    (tf.nn.moments' Mean, whose value is the batch's, so its replay is recomputed with the op).
    ``status(op)`` is the op's status in the comparison; without it (B's graph, which has none)
    only the op itself counts. Only the inputs not compared are looked at: a compared one is fed to
    the replay, not recomputed."""
    def uncompared(op: str) -> bool:
        return status is not None and status(op) in UNCOMPARED

    def inputs(op: str) -> list[str]:
        return [above for above in map(tensor_op, graph.data_inputs(op)) if above in graph and uncompared(above)]

    if name not in graph:
        return False
    return any(_coupling(name, inputs, uncompared, lambda op: batch_coupled(graph, op)))


def coupled_in_report(report: dict[str, Any], name: str, side: str) -> list[str]:
    """The ops that make report node ``name`` (an origin) depend on its batch on ``side`` (:func:`_coupling`
    on the report: A's statuses, ``side``'s ops): itself where it normalises by batch, and those above
    it, through ops whose values were not compared, that do (what isolation recomputes with it). As in
    :func:`coupled_in_graph`, only inputs not compared are looked at: a compared one is fed to the
    replay, so a batch statistic compared equal is no cause. Empty: its value is its rows' alone."""
    nodes = report.get("nodes") or {}
    if not isinstance(nodes.get(name), dict):
        return []

    def uncompared(op: str) -> bool:
        return nodes[op].get("status") in UNCOMPARED

    def inputs(op: str) -> list[str]:
        return [above for above in nodes[op].get("inputs") or [] if isinstance(nodes.get(above), dict)
                and uncompared(above)]

    found = _coupling(name, inputs, uncompared, lambda op: _reduces_batch(report, op, side))
    return sorted(found, key=lambda n: (nodes[n].get("topo_index", 0), n))


def _in_training(report: dict[str, Any], side: str) -> list[str]:
    """The side's batch norms in training mode, by A's node names, in the report's order."""
    nodes = report.get("nodes") or {}
    return [name for name, node in nodes.items() if isinstance(node, dict) and training_batch_norm(node, side)]


def _named(names: list[str]) -> str:
    return listed(names, NAMED, "`")


def _updates(report: dict[str, Any], side: str) -> str:
    """", and they update their moving averages on every run (`…AssignSubVariableOp`, …)" where the
    side's runs wrote variables (the capture's ``observer_effect.stateful_ops``)."""
    ops = ((report.get("observer_effect") or {}).get(side) or {}).get("stateful_ops") or []
    if not ops:
        return ""
    return (f", and its runs write its variables ({_named([str(o) for o in ops])}), as moving-average updates do, "
            "so a variable read there holds what the runs before left, not the checkpoint's value")


def unshared_norms(report: dict[str, Any]) -> list[str]:
    """The report's ops that replayed alone on identical rows still differed because they normalise
    by a batch the sides do not share (isolation's ``batch_statistics``), origins or not: on a GPU
    the first conv before a training batch norm differs already, and the batch norm is then no
    origin, though the difference is born there (:mod:`tracer.comparison.replay_choice`)."""
    nodes = report.get("nodes") or {}
    return [name for name, node in nodes.items() if isinstance(node, dict)
            and ((node.get("isolation") or {}).get("verdict")) == "batch_statistics"]


def reaches_an_output(report: dict[str, Any], name: str, carriers: Carriers | None = None) -> bool:
    """Whether the difference born at report node ``name`` can be what makes an output differ beyond
    tolerance: an output that does is reached from it along A's data edges through ops beyond
    tolerance, or through ops not compared (they cannot say it stopped there). An op within
    tolerance or identical stops the walk: the difference healed there. A batch norm's statistics
    taken over the batch and then not used (``is_training`` fed False picks the moving averages in a
    ``tf.cond``) differ beyond tolerance and heal at the cond's Merge; no output depends on them.
    True where no output was compared, or one's comparison says neither: then nothing here can tell.
    ``carriers``: :func:`output_carriers` of the report, when the caller asks of many ops."""
    found = output_carriers(report) if carriers is None else carriers
    if found is None:
        return True
    ops, after = found
    return name in ops or any(below in ops for below in after.get(name, ()))


Carriers = tuple[set[str], dict[str, list[str]]]  # the ops that carry a difference to an output; A's data edges


def output_carriers(report: dict[str, Any]) -> Carriers | None:
    """The ops whose difference reaches an output that differs beyond tolerance, walked up from those
    outputs through ops beyond tolerance or not compared (one walk for the whole report), and A's
    data edges down from each op. None where no output was compared or one's comparison says
    neither within nor beyond tolerance: then any op may be the cause."""
    outputs = [o for o in (report.get("outputs") or {}).values() if isinstance(o, dict)]
    if not outputs or any(o.get("within_tolerance") is None for o in outputs):
        return None
    nodes = report.get("nodes") or {}
    after, before = _edges(report)
    carriers = {tensor_op(str(o.get("a_tensor") or "")) for o in outputs if not o["within_tolerance"]}
    todo = list(carriers)
    while todo:
        for above in before.get(todo.pop(), ()):
            status = nodes[above].get("status") if isinstance(nodes.get(above), dict) else None
            if above not in carriers and (status in BEYOND or status in UNCOMPARED):
                carriers.add(above)
                todo.append(above)
    return carriers, after


def _edges(report: dict[str, Any]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """A's data edges of the report, down (op -> the ops that read it) and up (op -> its inputs)."""
    after: dict[str, list[str]] = {}
    before: dict[str, list[str]] = {}
    for edge in report.get("edges") or []:
        if isinstance(edge, (list, tuple)) and len(edge) == 2:
            after.setdefault(str(edge[0]), []).append(str(edge[1]))
            before.setdefault(str(edge[1]), []).append(str(edge[0]))
    return after, before


def _stops(report: dict[str, Any], name: str, after: dict[str, list[str]]) -> set[str]:
    """The ops where a difference born at ``name`` stops: walking down A's data edges (``after``)
    through ops beyond tolerance or not compared, the first ones within tolerance or identical."""
    nodes = report.get("nodes") or {}
    seen, stopped, todo = {name}, set(), [name]
    while todo:
        for below in after.get(todo.pop(), []):
            if below in seen:
                continue
            seen.add(below)
            status = nodes[below].get("status") if isinstance(nodes.get(below), dict) else None
            if status in BEYOND or status in UNCOMPARED:
                todo.append(below)
            else:
                stopped.add(below)
    return stopped


def _heals_in_a_cond(report: dict[str, Any], name: str, after: dict[str, list[str]] | None = None) -> bool:
    """Whether the difference born at ``name`` stops at a cond's ``Merge``: the branch that ran did
    not use it (the other branch's value passed through). ``after``: A's data edges down, where the
    caller has them (:func:`output_carriers`)."""
    nodes = report.get("nodes") or {}
    stops = _stops(report, name, _edges(report)[0] if after is None else after)
    return any(isinstance(nodes.get(op), dict) and nodes[op].get("op") == "Merge" for op in stops)


def training_graph(report: dict[str, Any], carriers: Carriers | None = None) -> tuple[str, set[str]] | None:
    """``(evidence, the ops)`` when a side's graph is a training graph and a difference starts at an
    origin (or an op whose replay showed it born there: :func:`unshared_norms`) that normalises by
    batch there (:func:`coupled_in_report`: a batch norm in training mode, or computed from a
    reduction over the batch axis, tf.nn.moments') whose batch the sides do not share:
    they run other batch sizes, or the other side takes no batch statistics there (its moving averages).
    Two training graphs over the same batches normalise alike: a difference there is the kernels'
    (oneDNN on one side), as isolation says (``own_error``, not ``batch_statistics``). Nor is one whose
    difference heals before every output that differs (:func:`reaches_an_output`). None otherwise.
    ``carriers``: :func:`output_carriers` of the report, where the caller has it."""
    sides, nodes = report.get("sides") or {}, report.get("nodes") or {}
    origins = [o.get("node") for o in report.get("origins") or [] if isinstance(o, dict)] + unshared_norms(report)
    carriers = output_carriers(report) if carriers is None else carriers
    for side in ("a", "b"):
        other = "b" if side == "a" else "a"
        batches = [(sides.get(k) or {}).get("batch_size") for k in (side, other)]
        norms = _in_training(report, side)
        coupled = {o: coupled_in_report(report, o, side) for o in origins if isinstance(o, str)}
        unshared = [o for o, ops in coupled.items()
                    if ops and (batches[0] != batches[1] or not coupled_in_report(report, o, other))
                    and reaches_an_output(report, o, carriers)]  # statistics taken and then not used explain no output
        if not unshared:
            continue
        fused = set(norms)
        reductions = sorted({op for o in unshared for op in coupled[o] if op not in fused},
                            key=lambda n: ((nodes.get(n) or {}).get("topo_index", 0), n))
        against = ("the sides run different batch sizes, so the outputs differ"
                   if batches[0] != batches[1] else "it differs")
        inference = [n for n in norms if not training_batch_norm(nodes.get(n) or {}, other)]
        if inference:
            against += f" from {other.upper()}'s inference graph (is_training=False there: the moving averages)"
        elif reductions and any(not coupled_in_report(report, o, other) for o in unshared):
            against += f" from {other.upper()}'s graph, which takes no statistics over the batch there"
        alone = inference or any(not coupled_in_report(report, o, other) for o in unshared)
        if norms:
            whose = f"{side.upper()}'s graph is a training graph: its" if alone else \
                "both sides' graphs are training graphs: their"
            what = (f"batch norms ({_named(norms)}) run with is_training=True and normalise with each run's batch "
                    "statistics")
            if reductions:
                what += f", and {_reduce_words(report, reductions, side)}"
            mode = "the batch norms' mode, not their kernel"
        else:
            whose = (f"{side.upper()}'s graph takes statistics over the batch, as a batch norm in training mode does:"
                     " its" if alone else "both sides' graphs take statistics over the batch, as a batch norm in "
                     "training mode does: their")
            what = _reduce_words(report, reductions, side)
            mode = "the batch statistics, not a kernel"
        evidence = (f"{whose} {what}, so each example's output depends on which examples share its run"
                    f"{_updates(report, side)}; {against}: {mode}, an export's folding or other weights.")
        return evidence, fused | set(unshared) | set(reductions)
    return None


def unused_statistics(report: dict[str, Any], carriers: Carriers | None = None) -> str | None:
    """The words for origins that differ only because they take statistics over a batch the sides
    do not share, where that difference heals before every output that differs
    (:func:`reaches_an_output`): why they differ, and that they explain no output. None where
    there are none. ``carriers``: :func:`output_carriers` of the report, where the caller has it."""
    sides, nodes = report.get("sides") or {}, report.get("nodes") or {}
    batches = [(sides.get(k) or {}).get("batch_size") for k in ("a", "b")]
    origins = [o.get("node") for o in report.get("origins") or [] if isinstance(o, dict)] + unshared_norms(report)
    carriers = output_carriers(report) if carriers is None else carriers
    unused = [o for o in dict.fromkeys(origins) if isinstance(o, str) and isinstance(nodes.get(o), dict)
              and (nodes[o].get("isolation") or {}).get("verdict") == "batch_statistics"
              and not reaches_an_output(report, o, carriers)]
    if not unused or carriers is None:  # None: every op reaches an output, so none is unused
        return None
    after = carriers[1]
    reductions = sorted({op for o in unused for op in coupled_in_report(report, o, "a")},
                        key=lambda n: ((nodes.get(n) or {}).get("topo_index", 0), n))
    taken = f" ({_reduce_words(report, reductions, 'a')})" if reductions else ""
    run = f"the sides run batch {batches[0]} vs {batches[1]}" if batches[0] != batches[1] else \
        "the sides do not normalise over the same batch"
    said = (f"{_named(unused)} {'differs' if len(unused) == 1 else 'differ'} beyond tolerance because "
            f"{'it is' if len(unused) == 1 else 'they are'} computed from statistics over the batch{taken} and {run}; "
            "that difference heals before it reaches an output that differs")
    if all(_heals_in_a_cond(report, o, after) for o in unused):
        return (f"{said}: it stops at a `tf.cond` whose branch that ran does not use those statistics (as a batch "
                "norm fed is_training=False takes its moving averages). It is no cause of what the outputs differ "
                "by, and needs no remedy.")
    return (f"{said}: the ops after it bring it back within tolerance (as a saturating softmax or an argmax can), "
            "so it is no cause of a difference beyond tolerance at the outputs.")


def _reduce_words(report: dict[str, Any], reductions: list[str], side: str) -> str:
    """"`bn1/moments/mean` and `bn1/moments/variance` (Mean) reduce over the batch axis (axis 0)"."""
    nodes = report.get("nodes") or {}
    ops = sorted({str((nodes.get(n) or {}).get("op" if side == "a" else "b_op")) for n in reductions})
    verb = "reduces" if len(reductions) == 1 else "reduce"
    return f"{_named(reductions)} ({', '.join(ops)}) {verb} over the batch axis (axis 0)"
