"""From a loaded artifact to its inference op graph (statically, or in the capture child).

Imports the graph into a ``tf.Graph``, resolves the signature (dtypes and shapes filled in, or a
list of candidates when there is none) and prunes to the inference subgraph.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import numpy as np

from ._tf import tf
from .artifacts import Artifact, Signature, TensorSpec
from .errors import TftraceError
from .graphmatch import VARIABLE_OPS
from .opgraph import OpGraph, tensor_op

__all__ = ["import_graph", "resolve_signature", "build_opgraph", "value_source"]


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
        placeholders, sinks = _candidates(by_name)
        raise TftraceError(
            f"{artifact.location} has no signature to say what to trace "
            f"(candidate inputs: {', '.join(placeholders[:10]) or 'none'}; "
            f"candidate outputs: {', '.join(sinks[:10]) or 'none'})",
            "name them with --outputs NAME[,NAME...] and --input-names NAME[,NAME...]",
        )

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
            out[key] = TensorSpec(
                spec.name,
                tensor.dtype.base_dtype.name,
                spec.shape if spec.shape is not None else (None if tensor.shape.rank is None else tuple(tensor.shape.as_list())),
            )
        return out

    outputs = filled(sig.outputs, "output")
    inputs = sig.inputs
    if sig.from_user and not inputs:  # --outputs alone: what must be fed are the placeholders they need
        needed = _placeholders_needed(by_name, [tensor_op(t.name) for t in outputs.values()])
        inputs = {name: TensorSpec(f"{name}:0", "unknown", None) for name in needed}
    return Signature(sig.key, filled(inputs, "input"), outputs, sig.method_name, sig.from_user)


# Ops a .meta holds for saving, restoring, initialising and training: never what to trace.
BOOKKEEPING_OPS = {
    "Assign", "AssignAdd", "AssignSub", "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
    "VarIsInitializedOp", "IsVariableInitialized", "SaveV2", "RestoreV2", "MergeV2Checkpoints", "ShardedFilename",
    "NoOp", "ScalarSummary", "HistogramSummary", "ImageSummary", "MergeSummary", "TensorSummaryV2", "Assert",
    "Print", "PrintV2",
}
BOOKKEEPING_SCOPE = re.compile(
    r"^(save|init|init_all_tables|gradients|report_uninitialized_variables|global_step)(_\d+)?(/|$)"
)


def _bookkeeping(op: Any) -> bool:
    """Is this op part of saving, restoring or initialising (so no candidate to trace)?"""
    name = op.name
    return (
        op.type in BOOKKEEPING_OPS
        or bool(BOOKKEEPING_SCOPE.match(name))
        or "/Initializer/" in f"{name}/"
        or name.endswith(("/Read/ReadVariableOp", "/IsInitialized/VarIsInitializedOp"))
    )


def _candidates(by_name: dict[str, Any]) -> tuple[list[str], list[str]]:
    """What a graph without a signature probably takes and returns: its placeholders and the
    ops nothing reads, leaving out save/restore/initialisation/training bookkeeping."""
    consumed = {t.op.name for op in by_name.values() for t in op.inputs}
    consumed |= {c.name for op in by_name.values() for c in op.control_inputs}
    useful = [op for op in by_name.values() if not _bookkeeping(op)]
    inputs = [op.name for op in useful if op.type in ("Placeholder", "PlaceholderWithDefault")]
    outputs = [op.name for op in useful if op.name not in consumed and op.outputs and op.type not in VARIABLE_OPS]
    return inputs, outputs


def _placeholders_needed(by_name: dict[str, Any], roots: list[str]) -> list[str]:
    """The Placeholder ops the given ops depend on (a Placeholder has no value unless fed)."""
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
    return sorted(n for n in seen if by_name[n].type == "Placeholder")


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


def value_source(artifact: Artifact) -> Callable[[str], np.ndarray | None]:
    """Weight values by node name: constants from the graph, variables from the checkpoint."""
    from tensorflow.python.framework import tensor_util  # noqa: PLC0415

    nodes = {n.name: n for n in artifact.graph_def.node}

    def value(name: str) -> np.ndarray | None:
        node = nodes.get(name)
        if node is None:
            return None
        if node.op == "Const":
            return tensor_util.MakeNdarray(node.attr["value"].tensor)
        if node.op in ("VariableV2", "Variable", "VarHandleOp"):
            shared = node.attr["shared_name"].s.decode("utf-8", "replace") if "shared_name" in node.attr else ""
            return artifact.variable_value(shared or name)
        return None

    return value
