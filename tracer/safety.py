"""Refusing to run graphs that reach outside the computation.

Models come from other teams. A graph can write files (``WriteFile``, ``SaveV2``), read any
file (``ReadFile``, ``RestoreV2``, text-file tables), print to a file, or call back into Python
(``PyFunc``), and a session runs whatever the fetched outputs (or a SavedModel's init op)
depend on. Before a capture runs anything, the ops reachable from what will run are checked
against this list; found ones are named and the run refused unless ``--allow-unsafe-ops``.
The static ``diff-graph`` never runs a graph and is not affected.

Works on GraphDef protos by attribute access only: no TensorFlow import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["UNSAFE_OPS", "find_unsafe_ops", "describe_unsafe"]

UNSAFE_OPS: dict[str, str] = {
    "WriteFile": "writes a file",
    "ReadFile": "reads a file",
    "MatchingFiles": "lists files",
    "Save": "writes a checkpoint",
    "SaveV2": "writes a checkpoint",
    "SaveSlices": "writes a checkpoint",
    "MergeV2Checkpoints": "writes and deletes checkpoint files",
    "ShardedFilename": "builds checkpoint file names for writing",
    "Restore": "reads a checkpoint file",
    "RestoreV2": "reads a checkpoint file",
    "RestoreSlice": "reads a checkpoint file",
    "PyFunc": "calls arbitrary Python code",
    "PyFuncStateless": "calls arbitrary Python code",
    "EagerPyFunc": "calls arbitrary Python code",
    "ImmutableConst": "memory-maps a file",
    "InitializeTableFromTextFile": "reads a file",
    "InitializeTableFromTextFileV2": "reads a file",
    "CreateSummaryFileWriter": "writes event files",
    "WriteSummary": "writes event files",
    "WriteScalarSummary": "writes event files",
    "WriteRawProtoSummary": "writes event files",
    "DebugIdentityV2": "writes debug dumps",
    "TFRecordDataset": "reads files",
    "TFRecordDatasetV2": "reads files",
    "TextLineDataset": "reads files",
    "FixedLengthRecordDataset": "reads files",
}


def _op_name(tensor: str) -> str:
    return tensor.lstrip("^").split(":")[0]


def find_unsafe_ops(graph_def: Any, roots: Iterable[str], allowed_inputs: Iterable[str] = ()) -> list[tuple[str, str, str]]:
    """``(node name, op type, why)`` for every unsafe op that running ``roots`` would execute.

    ``roots``: op or tensor names that will be fetched or run; ``allowed_inputs``: fed tensors,
    whose producers do not run. Ops inside functions called from reachable nodes count too.
    ``PrintV2`` is unsafe only when it prints to a file.
    """
    nodes = {n.name: n for n in graph_def.node}
    functions = {f.signature.name: f for f in graph_def.library.function}
    fed = {_op_name(t) for t in allowed_inputs}
    found: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    stack = [_op_name(r) for r in roots]
    while stack:
        name = stack.pop()
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        node = nodes[name]
        found.extend(_check(node, name))
        for fn_name in _called_functions(node):
            found.extend(_scan_function(functions, fn_name, name, set()))
        if name in fed:
            continue
        stack.extend(_op_name(i) for i in node.input)
    return sorted(set(found))


def _check(node: Any, label: str) -> list[tuple[str, str, str]]:
    if node.op in UNSAFE_OPS:
        return [(label, node.op, UNSAFE_OPS[node.op])]
    if node.op == "PrintV2" and "output_stream" in node.attr:
        stream = node.attr["output_stream"].s.decode("utf-8", "replace")
        if stream.startswith("file://"):
            return [(label, node.op, f"prints to {stream}")]
    return []


def _called_functions(node: Any) -> list[str]:
    names = []
    for value in node.attr.values():
        if value.WhichOneof("value") == "func":
            names.append(value.func.name)
        elif value.WhichOneof("value") == "list":
            names.extend(f.name for f in value.list.func)
    return names


def _scan_function(functions: dict[str, Any], fn_name: str, caller: str, visiting: set[str]) -> list[tuple[str, str, str]]:
    if fn_name in visiting or fn_name not in functions:
        return []
    visiting.add(fn_name)
    found = []
    for node in functions[fn_name].node_def:
        found.extend(_check(node, f"{caller}/{fn_name}/{node.name}"))
        for inner in _called_functions(node):
            found.extend(_scan_function(functions, inner, caller, visiting))
    return found


def describe_unsafe(found: list[tuple[str, str, str]], limit: int = 8) -> str:
    shown = "; ".join(f"{name!r} ({op}: {why})" for name, op, why in found[:limit])
    more = f"; and {len(found) - limit} more" if len(found) > limit else ""
    return shown + more
