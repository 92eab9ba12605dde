"""From a loaded artifact to its inference op graph (statically, or in the capture child).

Imports the graph into a ``tf.Graph``, resolves the signature (dtypes and shapes filled in, or a
list of candidates when there is none) and prunes to the inference subgraph. A graph with no
signature of its own (a TF1 training checkpoint) borrows the other side's: its tensors are found
here by name, and where the names differ by the structural matching diff-graph uses.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dataclasses import replace

from .._tf import tf
from ..optypes import SOURCE_OPS
from .candidates import candidates
from .records import USER_SIGNATURE, Artifact, Signature, TensorSpec
from ..errors import TftraceError
from ..diff.match import match_graphs
from ..opgraph import OpGraph, tensor_op, tensor_slot
from ..optypes import VARIABLE_OPS

__all__ = ["import_graph", "resolve_signature", "build_opgraph", "value_source", "borrow_signature"]


def import_graph(artifact: Artifact) -> Any:
    """Import the artifact's graph into a fresh ``tf.Graph`` (no session, no weights)."""
    t = tf()
    graph = t.Graph()
    with graph.as_default():
        try:
            if artifact.meta_graph is not None:
                t.compat.v1.train.import_meta_graph(artifact.meta_graph, clear_devices=False)
            else:
                t.graph_util.import_graph_def(artifact.graph_def, name="")
        except (ValueError, TypeError, t.errors.OpError) as exc:
            raise TftraceError(
                f"TensorFlow cannot import the graph of {artifact.location}: {str(exc).splitlines()[0][:300]}",
                "check that the model loads in this TensorFlow version",
            ) from exc
    return graph


def resolve_signature(artifact: Artifact, graph: Any) -> Signature:
    """The signature to trace, with dtypes/shapes filled in; an error listing candidates if none."""
    sig = artifact.signature
    by_name = {op.name: op for op in graph.get_operations()}
    if sig is None:
        placeholders, sinks = candidates(by_name)
        other = artifact.ref.signature_from
        raise TftraceError(
            f"{artifact.location} has no signature to say what to trace"
            + (f", and neither has {other.path} to borrow one from" if other is not None else "")
            + f" (candidate inputs: {', '.join(placeholders[:10]) or 'none'}; "
            f"candidate outputs, best first: {', '.join(sinks[:10]) or 'none'})",
            "name them with --outputs NAME[,NAME...] and --input-names NAME[,NAME...]" + _for_the_first(by_name, sinks),
        )

    contradicted: dict[str, tuple[TensorSpec, tuple[int | None, ...]]] = {}  # "input 'x'" -> declared, graph's

    def filled(specs: dict[str, TensorSpec], role: str) -> dict[str, TensorSpec]:
        out = {}
        for key, spec in specs.items():
            op_name, _, slot = spec.name.rpartition(":")
            op = by_name.get(op_name)
            if op is None or int(slot or 0) >= len(op.outputs):
                raise TftraceError(
                    f"signature {role} {key!r} names tensor {spec.name!r}, which is not in the graph of {artifact.location}",
                    "check --outputs/--input-names (op names, optionally with :slot)",
                )
            tensor = op.outputs[int(slot or 0)]
            in_graph = None if tensor.shape.rank is None else tuple(tensor.shape.as_list())
            shape = spec.shape if spec.shape is not None else in_graph
            if spec.shape is not None and in_graph is not None:  # a session checks a feed against the graph's
                if _compatible(spec.shape, in_graph):  # the sizes either knows: [?, ?] declared, [?, 3] in the graph
                    shape = tuple(d if d is not None else g for d, g in zip(spec.shape, in_graph))
                else:
                    shape = in_graph
                    contradicted[f"{role} {key!r}"] = (spec, in_graph)
            out[key] = TensorSpec(spec.name, tensor.dtype.base_dtype.name, shape)
        return out

    outputs = filled(sig.outputs, "output")
    inputs = sig.inputs
    if sig.from_user and not inputs:  # --outputs alone: what must be fed are the placeholders they need
        needed = _placeholders_needed(by_name, [tensor_op(t.name) for t in outputs.values()])
        inputs = {name: TensorSpec(f"{name}:0", "unknown", None) for name in needed}
    inputs = filled(inputs, "input")
    if contradicted:
        note = _contradiction_note(sig.key, dict(sorted(contradicted.items())))
        if note not in artifact.notes:  # each stage that builds the op graph resolves the signature again
            artifact.notes.append(note)
    return Signature(sig.key, inputs, outputs, sig.method_name, sig.from_user, sig.borrowed_from)


def _compatible(declared: tuple[int | None, ...], in_graph: tuple[int | None, ...]) -> bool:
    """Could one tensor have both shapes (same rank, no two known sizes that differ)?"""
    return len(declared) == len(in_graph) and all(a is None or b is None or a == b for a, b in zip(declared, in_graph))


def shape_text(shape: tuple[int | None, ...] | None) -> str:
    """``[?, 1]``; a scalar and an unknown rank in words."""
    if shape is None:
        return "of unknown rank"
    return "a scalar" if not shape else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _contradiction_note(key: str, contradicted: dict[str, tuple[TensorSpec, tuple[int | None, ...]]]) -> str:
    """Why signature tensors are fed and read with other shapes than the SignatureDef declares.

    TensorFlow Serving's own ``saved_model_half_plus_three`` (TF 1.0) declares ``x`` and ``y``
    scalars while ``x:0`` is ``[?, 1]``: TF 1.0's builder wrote TensorInfos without a shape, which
    read as scalars. A session feeds the tensor, never the TensorInfo, so the graph decides."""
    declared = " and ".join(f"{what} ({spec.name}) as {shape_text(spec.shape)}"
                            for what, (spec, _) in contradicted.items())
    in_graph = " and ".join(f"{spec.name} is {shape_text(shape)}" for spec, shape in contradicted.values())
    scalar = any(spec.shape == () for spec, _ in contradicted.values())
    return (f"signature {key!r} declares {declared}, but in the graph {in_graph}: fed and read with the graph's "
            "shapes, as a session does"
            + (" (a TensorInfo written without a shape, as TF 1.0's SavedModel builder wrote them, reads as a scalar)"
               if scalar else ""))


def _for_the_first(by_name: dict[str, Any], sinks: list[str]) -> str:
    """The options that trace the best candidate output, to type as they stand: it and every
    placeholder it cannot run without (one with a default, a ``placeholder_with_default``, need
    not be fed)."""
    if not sinks:
        return ""
    needed = _ancestors(by_name, [sinks[0]])
    fed = [name for name, op in by_name.items() if op.type == "Placeholder" and name in needed]
    fed += sorted({t.name for name in needed for t in by_name[name].inputs  # a queue's or iterator's outputs read
                   if t.op.type in SOURCE_OPS})
    return f", e.g. --outputs {sinks[0]}" + (f" --input-names {','.join(fed)}" if fed else "")


def _ancestors(by_name: dict[str, Any], roots: list[str]) -> set[str]:
    """The ops the given ops depend on (themselves included), through data and control edges.
    Walks the ``tf.Graph`` itself: no networkx graph of the whole .meta exists (or is worth building) here."""
    seen: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in seen or name not in by_name:
            continue
        seen.add(name)
        op = by_name[name]
        stack.extend(t.op.name for t in op.inputs)
        stack.extend(c.name for c in op.control_inputs)
    return seen


def _placeholders_needed(by_name: dict[str, Any], roots: list[str]) -> list[str]:
    """The Placeholder ops the given ops depend on (a Placeholder has no value unless fed)."""
    return sorted(n for n in _ancestors(by_name, roots) if by_name[n].type == "Placeholder")


# --------------------------------------------------------------------------------------------
# borrowing the other side's signature


def borrow_signature(artifact: Artifact, lent: tuple[Signature, OpGraph] | None) -> None:
    """Give a graph without a signature (a TF1 training checkpoint) the other side's.

    Each of the lender's signature tensors is found in this graph by its name when an op of that
    name and type is here, otherwise by matching the two graphs' structure (the matching
    diff-graph uses: anchored at the placeholders, spread over op types and inputs). With
    ``--outputs``/``--input-names`` the user's tensors stay what is traced; they only take the
    lender's keys where they are the tensors found, so the two sides pair without ``--map``.
    Sets ``artifact.signature``, records the result in ``artifact.ref.borrowed`` (replays then
    need not load the lender) and says in one note which signature was borrowed. ``lent`` is the
    lender's signature and op graph (the loader reads them: :func:`tracer.artifacts.loader.load`);
    a lender without a signature (None) lends nothing: the caller's "no signature" error lists
    this graph's candidates.
    """
    ref = artifact.ref
    if ref.borrowed is not None:  # resolved when this side was captured: the names are this graph's
        artifact.signature = ref.borrowed
        artifact.notes.append(_borrow_note(ref.borrowed, "as recorded"))
        return
    assert ref.signature_from is not None
    if lent is None:
        return
    lender_sig, lender_graph = lent
    if lender_sig.from_user and lender_sig.key == USER_SIGNATURE and (ref.outputs or ref.input_names):
        return  # both sides' tensors were named by hand: the lender has no signature, no keys to give
    graph = import_graph(artifact)
    by_name = {op.name: op for op in graph.get_operations()}
    found: dict[str, str] = {}  # lender tensor -> this graph's tensor
    how = set()
    for spec in [*lender_sig.inputs.values(), *lender_sig.outputs.values()]:
        op = by_name.get(tensor_op(spec.name))
        kind = lender_graph.op_type(tensor_op(spec.name)) if tensor_op(spec.name) in lender_graph else None
        if op is not None and tensor_slot(spec.name) < len(op.outputs) and kind in (None, op.type):
            found[spec.name] = spec.name
            how.add("by name")
    missing = [s.name for s in [*lender_sig.inputs.values(), *lender_sig.outputs.values()] if s.name not in found]
    if missing:
        partner = _structural_partners(by_name, graph, lender_graph)
        for name in missing:
            mine = partner.get(tensor_op(name))
            if mine is not None and tensor_slot(name) < len(by_name[mine].outputs):
                found[name] = f"{mine}:{tensor_slot(name)}"
                how.add("by structure")
    named = bool(ref.outputs or ref.input_names)
    lost_in = [f"input {k!r} ({v.name})" for k, v in lender_sig.inputs.items() if v.name not in found]
    lost_out = [f"output {k!r} ({v.name})" for k, v in lender_sig.outputs.items() if v.name not in found]
    if (lost_out and not ref.outputs) or (lost_in and not named):
        raise TftraceError(
            f"{artifact.location} has no signature, and the signature {lender_sig.key!r} of {ref.signature_from.path} "
            f"cannot be borrowed: no tensor here matches its {', '.join(lost_in + lost_out)} by name or by structure",
            "name this side's tensors with --outputs/--input-names (per side: --a-outputs, --b-outputs)",
        )
    key_of = {found[v.name]: k for k, v in [*lender_sig.inputs.items(), *lender_sig.outputs.items()] if v.name in found}

    def user(names: tuple[str, ...]) -> dict[str, TensorSpec]:  # the user's tensors, under the lender's keys
        tensors = [n if ":" in n else f"{n}:0" for n in names]
        return {key_of.get(t, t.split(":")[0]): TensorSpec(t, "unknown", None) for t in tensors}

    lent_in = {k: TensorSpec(found[v.name], "unknown", None) for k, v in lender_sig.inputs.items() if v.name in found}
    lent_out = {k: TensorSpec(found[v.name], "unknown", None) for k, v in lender_sig.outputs.items() if v.name in found}
    inputs = user(ref.input_names) if ref.input_names else ({} if lost_in else lent_in)
    outputs = user(ref.outputs) if ref.outputs else lent_out
    sig = Signature(lender_sig.key, inputs, outputs, lender_sig.method_name, named, ref.signature_from.path)
    artifact.signature = sig
    artifact.ref = replace(ref, signature_from=None, borrowed=sig)
    artifact.notes.append(_borrow_note(sig, " and ".join(sorted(how)) or "as named"))


def _borrow_note(sig: Signature, how: str) -> str:
    if sig.key == USER_SIGNATURE:
        return (f"no signature of its own: traced with the tensors named by --outputs/--input-names for "
                f"{sig.borrowed_from}, found here {how}")
    pairs = "; ".join(f"{role} {', '.join(f'{k}={v.name}' for k, v in specs.items())}"
                      for role, specs in (("inputs", sig.inputs), ("outputs", sig.outputs)))
    return f"no signature of its own: borrowed signature {sig.key!r} of {sig.borrowed_from} ({pairs}; found {how})"


def _structural_partners(by_name: dict[str, Any], graph: Any, lender: OpGraph) -> dict[str, str]:
    """Lender op -> this graph's op, by diff-graph's matching of a candidate inference subgraph
    of this graph (placeholders to the last ops computed from them) against the lender's.

    The matching is anchored by signature keys; this graph has none, so each plausible anchor
    is tried — every placeholder and each of the best candidate outputs under the lender's key,
    where the lender has one input and one output (else all candidates at once) — and the
    pairing that explains the most ops wins."""
    placeholders, sinks = candidates(by_name)
    sinks = [s for s in sinks if by_name[s].outputs]
    if not sinks or not placeholders:
        return {}
    if len(lender.inputs) == 1 and len(lender.outputs) == 1:
        (key_in, key_out), = [(next(iter(lender.inputs)), next(iter(lender.outputs)))]
        attempts = [({key_in: f"{p}:0"}, {key_out: f"{s}:0"}) for s in sinks[:MAX_ANCHORS]
                    for p in placeholders if p in _ancestors(by_name, [s])]
    else:
        attempts = [({p: f"{p}:0" for p in placeholders}, {s: f"{s}:0" for s in sinks})]
    best: dict[str, str] = {}
    for inputs, outputs in attempts:
        mine = OpGraph.from_tf_graph(graph, inputs, outputs)
        pairs = {theirs: own for own, (theirs, _) in match_graphs(mine, lender).items()}
        if len(pairs) > len(best):
            best = pairs
    return best


MAX_ANCHORS = 5  # candidate outputs tried as anchors (best first)


def build_opgraph(artifact: Artifact, graph: Any | None = None) -> tuple[OpGraph, Signature]:
    """The inference subgraph of an artifact, statically."""
    graph = graph if graph is not None else import_graph(artifact)
    signature = resolve_signature(artifact, graph)
    opgraph = OpGraph.from_tf_graph(
        graph,
        {k: v.name for k, v in signature.inputs.items()},
        {k: v.name for k, v in signature.outputs.items()},
    )
    return opgraph, signature


# The checkpoint key under which ``tf.train.ExponentialMovingAverage`` (its default name) keeps the
# average of a variable: ``<variable's key>/ExponentialMovingAverage``. An exporter that serves the
# averages (the Object Detection API's ``use_moving_averages``) restores these keys into the variables.
MOVING_AVERAGE_SUFFIX = "/ExponentialMovingAverage"


def checkpoint_key(graph: OpGraph, variable: str) -> str:
    """The checkpoint key a variable op restores from: its ``shared_name`` (a resource variable's),
    else its node name (what ``tf.compat.v1.train.Saver`` writes)."""
    shared = graph.node(variable)["attrs"].get("shared_name")
    return shared if isinstance(shared, str) and shared else variable


def moving_averages(artifact: Artifact, graph: OpGraph, digest_of: Callable[[np.ndarray], str]
                    ) -> dict[str, dict[str, str]]:
    """Variable op of the inference graph -> ``{"key", "digest"}`` of the moving average the
    artifact's checkpoint also holds for it (``<key>/ExponentialMovingAverage``; ``digest_of`` is
    the captures' :func:`tracer.captures._packed.content_digest`, passed in by the caller, as a
    capture format is no business of the artifacts): what tells a comparison that the other side
    holds the averages, without reading them again. Empty when the checkpoint holds none."""
    try:
        keys = artifact.checkpoint_keys()
    except TftraceError:  # evidence only: an unreadable index is the restore's to report, with its context
        return {}
    found: dict[str, dict[str, str]] = {}
    for op in graph.topo_order():
        key = checkpoint_key(graph, op) + MOVING_AVERAGE_SUFFIX if graph.op_type(op) in VARIABLE_OPS else None
        if key in keys:
            value = artifact.variable_value(key)
            if value is not None:
                found[op] = {"key": key, "digest": digest_of(value)}
    return found


class ArtifactValues:
    """Weight values by node name (a :data:`tracer.diff.rewrites.ValueSource`): constants from the
    graph, variables from the checkpoint; with the checkpoint's moving averages of the variables."""

    def __init__(self, artifact: Artifact, graph: OpGraph | None = None,
                 digest_of: Callable[[np.ndarray], str] | None = None) -> None:
        self.artifact, self.graph, self.digest_of = artifact, graph, digest_of
        self.nodes = {n.name: n for n in artifact.graph_def.node}
        self._averages: dict[str, dict[str, str]] | None = None

    def __call__(self, name: str) -> np.ndarray | None:
        from tensorflow.python.framework import tensor_util  # noqa: PLC0415

        node = self.nodes.get(name)
        if node is None:
            return None
        if node.op == "Const":
            return tensor_util.MakeNdarray(node.attr["value"].tensor)
        if node.op in VARIABLE_OPS:
            shared = node.attr["shared_name"].s.decode("utf-8", "replace") if "shared_name" in node.attr else ""
            return self.artifact.variable_value(shared or name)
        return None

    def content_digest(self, name: str) -> str | None:
        """The digest of a weight's value, in the scheme of :func:`moving_averages`."""
        value = self(name) if self.digest_of is not None else None
        return None if value is None or self.digest_of is None else self.digest_of(value)

    def moving_average(self, name: str) -> dict[str, str] | None:
        """``{"key", "digest"}`` of the checkpoint's moving average of variable ``name``, or None."""
        if self.graph is None or self.digest_of is None:
            return None
        if self._averages is None:  # read once, only when a variable's value differs
            self._averages = moving_averages(self.artifact, self.graph, self.digest_of)
        return self._averages.get(name)


def value_source(artifact: Artifact, graph: OpGraph | None = None,
                 digest_of: Callable[[np.ndarray], str] | None = None) -> ArtifactValues:
    """Weight values by node name: constants from the graph, variables from the checkpoint (and,
    given the artifact's inference ``graph`` and a ``digest_of``, the checkpoint's moving averages
    of its variables)."""
    return ArtifactValues(artifact, graph, digest_of)
