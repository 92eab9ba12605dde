"""Refusing to run graphs that reach outside the computation.

Models come from other teams. A graph can write files (``WriteFile``, ``SaveV2``), read any
file (``ReadFile``, ``RestoreV2``, text-file tables), print to a file, or call back into Python
(``PyFunc``), and a session runs whatever the fetched outputs, a SavedModel's init op and its
saver's restore op depend on; loading a TF2 SavedModel even runs its resource initialisers
(:func:`unsafe_at_load_v2`). Before a capture runs anything, the ops reachable from what will
run are checked against this list; found ones are named and the run refused unless
``--allow-unsafe-ops``. The static ``diff-graph`` never runs a TF1 graph.

Reading is allowed in one case: when the file name is a tensor the *loader* feeds with a path
inside the artifact (the saver's filename tensor, which gets the SavedModel's own
``variables/`` prefix; an asset tensor, which gets a file in ``assets/``; the arguments the TF2
loader passes to an initialiser). That is how every variable restore and every vocabulary
table works, and the graph cannot redirect it.

Works on GraphDef protos by attribute access only: no TensorFlow import.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["UNSAFE_OPS", "FILE_NAME_INPUT", "find_unsafe_ops", "unsafe_at_load_v2", "describe_unsafe"]

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


# Ops that only *read* a file, and which input names it: safe when that input is a trusted tensor.
FILE_NAME_INPUT: dict[str, int] = {
    "ReadFile": 0,
    "Restore": 0,
    "RestoreV2": 0,
    "RestoreSlice": 0,
    "InitializeTableFromTextFile": 1,
    "InitializeTableFromTextFileV2": 1,
}


def _op_name(tensor: str) -> str:
    return tensor.lstrip("^").split(":")[0]


def _tensor_name(tensor: str) -> str:
    """``x`` and ``x:0`` name the same tensor; control inputs (``^x``) name none."""
    return tensor if ":" in tensor else f"{tensor}:0"


def find_unsafe_ops(
    graph_def: Any, roots: Iterable[str], allowed_inputs: Iterable[str] = (), trusted_files: Iterable[str] = ()
) -> list[tuple[str, str, str]]:
    """``(node name, op type, why)`` for every unsafe op that running ``roots`` would execute.

    ``roots``: op or tensor names that will be fetched or run; ``allowed_inputs``: fed tensors,
    whose producers do not run; ``trusted_files``: fed tensors that hold a path inside the
    artifact (see the module docstring), which file-*reading* ops may read. Ops inside
    functions called from reachable nodes count too. ``PrintV2`` is unsafe only when it prints
    to a file.
    """
    nodes = {n.name: n for n in graph_def.node}
    functions = {f.signature.name: f for f in graph_def.library.function}
    fed = {_op_name(t) for t in allowed_inputs}
    trusted = frozenset(_tensor_name(t) for t in trusted_files)
    found: list[tuple[str, str, str]] = []
    seen: set[str] = set()
    stack = [_op_name(r) for r in roots]
    while stack:
        name = stack.pop()
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        node = nodes[name]
        found.extend(_check(node, name, trusted))
        for fn_name in _called_functions(node):
            found.extend(_scan_function(functions, fn_name, name, set()))
        if name in fed:
            continue
        stack.extend(_op_name(i) for i in node.input)
    return sorted(set(found))


def _check(node: Any, label: str, trusted: frozenset[str]) -> list[tuple[str, str, str]]:
    if node.op in FILE_NAME_INPUT and trusted:
        index = FILE_NAME_INPUT[node.op]
        if index < len(node.input) and not node.input[index].startswith("^") and _tensor_name(node.input[index]) in trusted:
            return []  # reads the file the loader names: the artifact's own variables or assets
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


def _scan_function(
    functions: dict[str, Any], fn_name: str, caller: str, visiting: set[str], trust_args: bool = False
) -> list[tuple[str, str, str]]:
    """Unsafe ops in a library function and everything it calls.

    ``trust_args``: the function is one the TF2 loader calls itself, passing the artifact's own
    files (asset paths, the checkpoint prefix) as arguments, so reading a file named by an
    argument is allowed there; functions it calls get no such trust (their arguments can be
    any constant the caller chose).
    """
    if fn_name in visiting or fn_name not in functions:
        return []
    visiting.add(fn_name)
    function = functions[fn_name]
    args = frozenset(_tensor_name(a.name) for a in function.signature.input_arg) if trust_args else frozenset()
    found = []
    for node in function.node_def:
        found.extend(_check(node, f"{caller}/{fn_name}/{node.name}", args))
        for inner in _called_functions(node):
            found.extend(_scan_function(functions, inner, caller, visiting))
    return found


def unsafe_at_load_v2(meta_graph: Any) -> list[tuple[str, str, str]]:
    """Unsafe ops that ``tf.saved_model.load`` itself would run for a TF2 SavedModel.

    Loading is not static: the loader creates and initialises every restored resource (the
    ``_create_resource``/``_initialize`` functions of the object graph; ``_destroy_resource``
    runs at exit) and calls custom saveables' restore functions. A model can put any op there,
    so these functions are checked *before* loading. The save functions every TF2 SavedModel
    carries (``SaveV2``, ``MergeV2Checkpoints``) are not run by loading and are not reported.
    """
    nodes = list(meta_graph.object_graph_def.nodes)
    functions = {f.signature.name: f for f in meta_graph.graph_def.library.function}
    called: set[tuple[str, str]] = set()
    for node in nodes:
        for child in node.children:
            if child.local_name in ("_create_resource", "_initialize", "_destroy_resource") and child.node_id < len(nodes):
                called.update((child.local_name, fn) for fn in _concrete_functions(nodes[child.node_id]))
        for key, saveable in node.saveable_objects.items():
            if saveable.restore_function < len(nodes):
                called.update((f"restore {key}", fn) for fn in _concrete_functions(nodes[saveable.restore_function]))
    found: list[tuple[str, str, str]] = []
    for role, fn_name in sorted(called):
        found.extend(_scan_function(functions, fn_name, role, set(), trust_args=True))
    return sorted(set(found))


def _concrete_functions(node: Any) -> list[str]:
    kind = node.WhichOneof("kind")
    if kind == "function":
        return list(node.function.concrete_functions)
    if kind == "bare_concrete_function":
        return [node.bare_concrete_function.concrete_function_name]
    return []


def describe_unsafe(found: list[tuple[str, str, str]], limit: int = 8) -> str:
    shown = "; ".join(f"{name!r} ({op}: {why})" for name, op, why in found[:limit])
    more = f"; and {len(found) - limit} more" if len(found) > limit else ""
    return shown + more
