"""Refusing to run graphs that reach outside the computation: an allow-list.

Models come from other teams. A graph can write files (``WriteFile``, ``SaveV2``), read any
file (``ReadFile``, ``RestoreV2``, text-file tables, datasets, readers), send debug dumps to a
URL, print to a file, or call back into Python (``PyFunc``), and a session runs whatever the
fetched outputs, a SavedModel's init op and its saver's restore op depend on; loading a TF2
SavedModel even runs its resource initialisers (:func:`unsafe_at_load_v2`). Before a capture
runs anything, every op reachable from what will run must be *known to compute from its inputs
alone*: an op TensorFlow registers as stateless and that names no file or URL
(:mod:`tracer.safe_ops`, derived from the op registry by :mod:`tracer.artifacts.safe_ops_gen`), or a
stateful op allowed here with its reason (:data:`STATEFUL_ALLOWED`: variables, random numbers,
tables, TensorArrays, loop frames, asserts). Everything else is named and the run refused unless
``--allow-unsafe-ops``; a deny-list leaks every op nobody thought of. The static ``diff-graph``
never runs a TF1 graph.

Reading is allowed in one case: when the file name is a tensor the *loader* feeds with a path
inside the artifact (the saver's filename tensor, which gets the SavedModel's own
``variables/`` prefix; an asset tensor, which gets a file in ``assets/`` -- checked to stay
there, :func:`unconfined_assets`; the arguments the TF2 loader passes to an initialiser). That
is how every variable restore and every vocabulary table works, and the graph cannot redirect it.

The scan follows tensors, not ops: it starts from the tensors actually fetched (and the ops
actually run as targets) and stops only at the tensors actually fed, because feeding ``x:0``
does not stop op ``x`` from running for ``x:1``. Functions are followed the way TensorFlow
instantiates them (:class:`_Library`): called through a ``func`` attribute (also one nested in
another call's attributes), as a node's op type (a Defun call), or as the gradient the library's
gradient table names; and each is judged with its caller's attribute bindings applied, so a
``PrintV2`` whose ``output_stream`` is a placeholder bound to ``file://...`` is seen printing to
that file, and an effect whose destination nobody binds is refused (issue 24). A function that no
call edge reaches from the graph is scanned too, with no bindings (:meth:`_Library.unreachable`):
what tftrace takes for unreachable may be reached in a way it does not know of.

Works on GraphDef protos by attribute access only: no TensorFlow import.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from typing import Any

from .safe_ops import STATELESS_OPS

__all__ = ["UNSAFE_OPS", "STATEFUL_ALLOWED", "FILE_NAME_INPUT", "UNCALLED", "find_unsafe_ops", "unsafe_at_load_v2",
           "unconfined_assets", "refuse_ambiguous_tags", "describe_unsafe", "op_allowed"]

NOT_KNOWN = "not known to compute from its inputs alone"

# Why an op is refused, where we know more than NOT_KNOWN (for the message only: what is
# refused is everything not allowed).
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
    "CreateSummaryDbWriter": "writes a summary database",
    "WriteSummary": "writes event files",
    "WriteScalarSummary": "writes event files",
    "WriteRawProtoSummary": "writes event files",
    "DebugIdentity": "writes debug dumps to its debug_urls",
    "DebugIdentityV2": "writes debug dumps",
    "DebugIdentityV3": "writes debug dumps to its debug_urls",
    "DebugNanCount": "writes debug dumps to its debug_urls",
    "DebugNumericSummary": "writes debug dumps to its debug_urls",
    "TFRecordDataset": "reads files",
    "TFRecordDatasetV2": "reads files",
    "TextLineDataset": "reads files",
    "FixedLengthRecordDataset": "reads files",
    "FixedLengthRecordDatasetV2": "reads files",
    "DatasetToTFRecord": "writes a file",
    "CacheDataset": "writes and reads a cache file",
    "CacheDatasetV2": "writes and reads a cache file",
    "WholeFileReader": "reads files",
    "WholeFileReaderV2": "reads files",
    "DecodeProtoV2": "reads proto descriptors from a file",
    "EncodeProto": "reads proto descriptors from a file",
}

# Stateful ops (or registry-stateless ones excluded by name) allowed anyway, and why.
_VARIABLES = "a variable of the model: holds its weights, restored from its own checkpoint"
_RANDOM = "draws random numbers: no effect outside the computation"
_TABLES = "a lookup table of the model: filled by its init op from constants or its own assets"
_ARRAYS = "a TensorArray or stack: per-run scratch memory of a loop"
_CONTROL = "control flow: runs its function bodies, which are checked too"
_CUDNN_RNN = ("cuDNN's fused RNN (a Keras LSTM/GRU's GPU path, and its gradient): computes from its inputs, its "
              "dropout's random state aside")
STATEFUL_ALLOWED: dict[str, str] = {
    **dict.fromkeys((
        "Variable", "VariableV2", "VarHandleOp", "ReadVariableOp", "AssignVariableOp", "AssignAddVariableOp",
        "AssignSubVariableOp", "Assign", "AssignAdd", "AssignSub", "VarIsInitializedOp", "IsVariableInitialized",
        "ResourceGather", "ResourceGatherNd", "DestroyResourceOp", "_ReadVariablesOp", "_VarHandlesOp",
    ), _VARIABLES),
    **dict.fromkeys((
        "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "ParameterizedTruncatedNormal",
        "RandomShuffle", "Multinomial", "RandomGamma", "RandomPoisson", "RandomPoissonV2", "RandomCrop",
        "StatefulUniform", "StatefulUniformInt", "StatefulUniformFullInt", "StatefulStandardNormal",
        "StatefulStandardNormalV2", "StatefulTruncatedNormal", "StatefulRandomBinomial", "RngReadAndSkip", "RngSkip",
        "NonDeterministicInts",
    ), _RANDOM),
    **dict.fromkeys((
        "HashTable", "HashTableV2", "MutableHashTable", "MutableHashTableV2", "MutableHashTableOfTensors",
        "MutableHashTableOfTensorsV2", "MutableDenseHashTable", "MutableDenseHashTableV2", "AnonymousHashTable",
        "AnonymousMutableHashTable", "AnonymousMutableHashTableOfTensors", "AnonymousMutableDenseHashTable",
        "LookupTableFind", "LookupTableFindV2", "LookupTableSize", "LookupTableSizeV2", "LookupTableImport",
        "LookupTableImportV2", "LookupTableInsert", "LookupTableInsertV2", "LookupTableExport", "LookupTableExportV2",
        "LookupTableRemoveV2", "InitializeTable", "InitializeTableV2",
    ), _TABLES),
    **dict.fromkeys((
        "TensorArrayV3", "TensorArrayReadV3", "TensorArrayWriteV3", "TensorArrayGatherV3", "TensorArrayScatterV3",
        "TensorArraySizeV3", "TensorArrayCloseV3", "TensorArrayConcatV3", "TensorArraySplitV3", "TensorArrayGradV3",
        "TensorArrayGradWithShape", "StackV2", "StackPushV2", "StackPopV2", "StackCloseV2",
    ), _ARRAYS),
    **dict.fromkeys(("StatefulPartitionedCall", "If", "While", "Case"), _CONTROL),
    # stateful in the registry for their dropout's random state; no attribute names a file or URL
    **dict.fromkeys(("CudnnRNN", "CudnnRNNV2", "CudnnRNNV3", "CudnnRNNBackprop", "CudnnRNNBackpropV2",
                     "CudnnRNNBackpropV3"), _CUDNN_RNN),
    "Assert": "fails the run when its condition is false: no effect outside",
    **dict.fromkeys(("CheckNumerics", "CheckNumericsV2"),
                    "fails the run when a value is NaN or infinite (tf.debugging.check_numerics): no effect outside"),
    "Print": "logs its inputs to stderr",
    "PrintV2": "prints to stderr/stdout/the log (to a file:// stream it is refused)",
    "Timestamp": "reads the clock",
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

_DESCRIPTOR_OPS = ("DecodeProtoV2", "EncodeProto")  # fine with the compiled-in descriptors (local://)
# tfdbg v1 ops: they write only to their ``debug_urls`` (file://, grpc://); with none they compute
_DEBUG_URL_OPS = ("DebugIdentity", "DebugNanCount", "DebugNumericSummary")


def _op_name(tensor: str) -> str:
    return tensor.lstrip("^").split(":")[0]


def _tensor_name(tensor: str) -> str:
    """``x`` and ``x:0`` name the same tensor; control inputs (``^x``) name none."""
    return tensor if ":" in tensor else f"{tensor}:0"


def find_unsafe_ops(
    graph_def: Any, roots: Iterable[str], allowed_inputs: Iterable[str] = (), trusted_files: Iterable[str] = ()
) -> list[tuple[str, str, str]]:
    """``(node name, op type, why)`` for every op not allowed that running ``roots`` would execute.

    ``roots``: tensors that will be fetched (``y:0``) or ops run as targets (``init_all``: a
    name without ``:`` is taken as an op that runs); ``allowed_inputs``: fed tensors, which stop
    the scan for that tensor only (the op still runs when another of its outputs, or a control
    edge, is needed); ``trusted_files``: fed tensors that hold a path inside the artifact (see
    the module docstring), which file-*reading* ops may read. Ops inside functions called from
    running nodes count too, with the attributes their callers bind (:class:`_Library`).
    """
    nodes = {n.name: n for n in graph_def.node}
    library = _Library(graph_def.library)
    fed = {_tensor_name(t) for t in allowed_inputs if not t.startswith("^")}
    trusted = frozenset(_tensor_name(t) for t in trusted_files)
    found: list[tuple[str, str, str]] = []
    ran: set[str] = set()
    needed: set[str] = set()
    ops = [r for r in roots if ":" not in r]
    tensors = [r for r in roots if ":" in r]
    while ops or tensors:
        if tensors:
            tensor = _tensor_name(tensors.pop().lstrip("^"))
            if tensor in needed or tensor in fed:
                continue
            needed.add(tensor)
            ops.append(_op_name(tensor))
            continue
        name = _op_name(ops.pop())
        if name in ran:
            continue
        ran.add(name)
        if name not in nodes:
            continue  # the graph's own check (artifacts) names inputs that do not exist
        node = nodes[name]
        found.extend(library.node(node, name, {}, trusted, set()))
        for i in node.input:
            (ops if i.startswith("^") else tensors).append(i)
    found.extend(library.unreachable(graph_def.node))
    return sorted(set(found))


def op_allowed(op: str) -> bool:
    """Whether an op type computes from its inputs alone (attributes aside: see :func:`_check`)."""
    return op in STATELESS_OPS or op in STATEFUL_ALLOWED


# Attributes an op's effect depends on: a placeholder no caller binds leaves the effect unknown.
_EFFECT_ATTRS = {"PrintV2": "output_stream", **dict.fromkeys(_DEBUG_URL_OPS, "debug_urls"),
                 **dict.fromkeys(_DESCRIPTOR_OPS, "descriptor_source")}
# Where PrintV2 may print (TensorFlow accepts these and ``file://PATH``, which appends to PATH).
_PRINT_STREAMS = ("stderr", "stdout", "log(info)", "log(warning)", "log(error)")
_UNBOUND = object()  # an attribute placeholder no caller binds
UNCALLED = "(no caller)"  # how a function no call edge reaches is named as the caller in a finding
_MAX_INSTANCES = 20000  # function instantiations one scan follows (a library built to blow up is refused)

Attrs = dict[str, Any]  # attribute name -> AttrValue with the callers' bindings applied, or _UNBOUND


def _check(node: Any, attrs: Attrs, label: str, trusted: frozenset[str], functions: dict[str, Any]
           ) -> list[tuple[str, str, str]]:
    """Whether one node may run, judged by its op type and its *resolved* attributes ``attrs``
    (a placeholder replaced by what the calling node binds, as TensorFlow instantiates it)."""
    op = node.op
    if op in functions:
        return []  # a call of a library function: its body is scanned (_Library.node)
    if op in FILE_NAME_INPUT and trusted:
        index = FILE_NAME_INPUT[op]
        if index < len(node.input) and not node.input[index].startswith("^") and _tensor_name(node.input[index]) in trusted:
            return []  # reads the file the loader names: the artifact's own variables or assets
    effect_attr = _EFFECT_ATTRS.get(op)
    if effect_attr and attrs.get(effect_attr) is _UNBOUND:
        return [(label, op, f"its {effect_attr} is an attribute placeholder no caller binds, so where it "
                            "writes or reads is not known")]
    if op == "PrintV2":
        stream = attrs["output_stream"].s.decode("utf-8", "replace") if "output_stream" in attrs else "stderr"
        if stream not in _PRINT_STREAMS:
            return [(label, op, f"prints to {stream}")]
        return []
    if op in _DEBUG_URL_OPS:
        urls = list(attrs["debug_urls"].list.s) if "debug_urls" in attrs else []
        if not urls:
            return []  # no dump destination: it only summarises its input (NaN counts, min/max)
        return [(label, op, UNSAFE_OPS[op])]
    if op in _DESCRIPTOR_OPS:
        source = attrs["descriptor_source"].s.decode("utf-8", "replace") if "descriptor_source" in attrs else ""
        if source in ("", "local://"):
            return []  # the descriptors compiled into TensorFlow: no file
        return [(label, op, f"reads proto descriptors from {source!r}")]
    if op_allowed(op):
        return []
    return [(label, op, UNSAFE_OPS.get(op, NOT_KNOWN))]


class _Library:
    """A graph's function library, scanned the way TensorFlow instantiates it.

    A function runs when a node names it in a ``func`` attribute (also inside a list, and inside
    the attributes of another call's ``NameAttrList``: a function handed to a function), as its
    op type (a Defun call, whose own attributes bind the function's), or as the gradient the
    library's gradient table maps a called function to (``SymbolicGradient``). Each function is
    scanned *with its caller's attribute bindings applied* (its signature's defaults beneath):
    an attribute placeholder such as a ``PrintV2``'s ``output_stream`` is judged by the value it
    will have, and one nobody binds is refused where the op's effect depends on it.

    Functions no call edge reaches are scanned as well (:meth:`unreachable`), with no bindings.
    """

    def __init__(self, library: Any) -> None:
        self.functions = {f.signature.name: f for f in library.function}
        self.gradients = {g.function_name: g.gradient_func for g in library.gradient}
        self.instances = 0

    def unreachable(self, nodes: Iterable[Any], entries: Iterable[str] = ()) -> list[tuple[str, str, str]]:
        """Unsafe ops in every function that no call edge reaches from ``nodes`` (the graph's own,
        running or not) or from the ``entries`` the caller scans itself (a TF2 loader's functions).

        Such a function should never run, but "no call edge" is only as good as tftrace's idea of
        what a call is; so each is scanned as TensorFlow would instantiate it with no caller: its
        signature's defaults, every other attribute placeholder unbound (an effect that depends on
        one is refused). Those no other unreachable function calls are scanned first, so a function
        called only from another one is judged with that caller's bindings. Functions reached from a
        node that does not run (the saver's ``SaveV2`` function of every TF2 SavedModel) are not
        scanned here: what runs is the scan of :func:`find_unsafe_ops`. The price: a TF2 model that
        exports a method of its own writing or reading a file (kept for Python, never run by a
        signature or at load) is refused for it; ``--allow-unsafe-ops`` is the way to trust it.
        """
        reached: set[str] = set()
        todo = [name for node in nodes for name in _names_called(node, self.functions)] + list(entries)
        while todo:
            name = todo.pop()
            if name in reached or name not in self.functions:
                continue
            reached.add(name)
            todo.extend(called for node in self.functions[name].node_def for called in _names_called(node, self.functions))
            if name in self.gradients:
                todo.append(self.gradients[name])
        left = [name for name in self.functions if name not in reached]
        inner = {called for name in left for node in self.functions[name].node_def
                 for called in _names_called(node, self.functions)} | {self.gradients[n] for n in left if n in self.gradients}
        seen: set[Any] = set()
        found: list[tuple[str, str, str]] = []
        for name in sorted(left, key=lambda n: (n in inner, n)):  # the outermost first
            if not any(key[0] == name for key in seen):
                found.extend(self.function(name, {}, UNCALLED, seen))
        return found

    def node(self, node: Any, label: str, bindings: Attrs, trusted: frozenset[str], seen: set[Any]
             ) -> list[tuple[str, str, str]]:
        """The node's own verdict and those of every function it runs, under ``bindings``."""
        attrs = {key: _resolve(value, bindings) for key, value in node.attr.items()}
        found = _check(node, attrs, label, trusted, self.functions)
        for fn_name, fn_bindings, why in self._calls(node, attrs, bindings):
            if fn_name is None:
                found.append((label, node.op, why))
                continue
            found.extend(self.function(fn_name, fn_bindings, label, seen))
        return found

    def function(self, fn_name: str, bindings: Attrs, caller: str, seen: set[Any], trust_args: bool = False
                 ) -> list[tuple[str, str, str]]:
        """Unsafe ops in one instantiation of a library function (and its gradient).

        ``trust_args``: the function is one the TF2 loader calls itself, passing the artifact's own
        files (asset paths, the checkpoint prefix) as arguments, so reading a file named by an
        argument is allowed there; functions it calls get no such trust (their arguments can be
        any constant the caller chose).
        """
        key = (fn_name, _bindings_key(bindings))
        if key in seen or fn_name not in self.functions:
            return []
        seen.add(key)
        self.instances += 1
        if self.instances > _MAX_INSTANCES:
            return [(f"{caller}/{fn_name}", fn_name, f"its function library instantiates more than {_MAX_INSTANCES:,} "
                                                     "functions, more than tftrace checks")]
        function = self.functions[fn_name]
        scope = _with_defaults(function, bindings)
        args = frozenset(_tensor_name(a.name) for a in function.signature.input_arg) if trust_args else frozenset()
        found = []
        for node in function.node_def:
            found.extend(self.node(node, f"{caller}/{fn_name}/{node.name}", scope, args, seen))
        if fn_name in self.gradients:  # SymbolicGradient of this function runs that one instead
            found.extend(self.function(self.gradients[fn_name], bindings, caller, seen))
        return found

    def _calls(self, node: Any, attrs: Attrs, bindings: Attrs) -> list[tuple[str | None, Attrs, str]]:
        """``(function, its bindings, "")`` for every function the node runs; ``(None, {}, why)``
        for a function attribute that is a placeholder nobody binds (what would run is unknown)."""
        calls: list[tuple[str | None, Attrs, str]] = []
        if node.op in self.functions:
            calls.append((node.op, attrs, ""))  # a Defun call: the node's own attributes bind the function's
        for key, value in attrs.items():
            if value is _UNBOUND:
                if node.attr[key].placeholder in _func_attrs(bindings):
                    calls.append((None, {}, f"its {key} is a function placeholder no caller binds"))
                continue
            kind = value.WhichOneof("value")
            if kind == "func":
                calls.append((value.func.name, _bind(value.func.attr, bindings), ""))
            elif kind == "list":
                calls.extend((f.name, _bind(f.attr, bindings), "") for f in value.list.func)
        return calls


def _names_called(node: Any, functions: dict[str, Any]) -> list[str]:
    """Every library function a node names: as its op type, in a ``func`` or ``list(func)``
    attribute, and in the attributes such a ``NameAttrList`` passes on (a function handed to one)."""
    names = [node.op] if node.op in functions else []
    pending = list(node.attr.values())
    while pending:
        value = pending.pop()
        kind = value.WhichOneof("value")
        listed = [value.func] if kind == "func" else list(value.list.func) if kind == "list" else []
        for func in listed:
            names.append(func.name)
            pending.extend(func.attr.values())
    return [name for name in names if name in functions]


def _resolve(value: Any, bindings: Attrs) -> Any:
    """An attribute with the caller's placeholder bound (already resolved in the caller's scope)."""
    if value.WhichOneof("value") == "placeholder":
        return bindings.get(value.placeholder, _UNBOUND)
    return value


def _bind(attrs: Any, bindings: Attrs) -> Attrs:
    """The attributes a ``NameAttrList`` passes to its function, placeholders resolved here."""
    return {key: _resolve(value, bindings) for key, value in attrs.items()}


def _with_defaults(function: Any, bindings: Attrs) -> Attrs:
    """A function's scope: the caller's bindings over the signature's defaults; a declared
    attribute with neither is unbound. The ``__func_attrs`` key lists the function-typed ones."""
    scope: Attrs = {}
    func_attrs = []
    for attr in function.signature.attr:
        if attr.type in ("func", "list(func)"):
            func_attrs.append(attr.name)
        if attr.name in bindings:
            scope[attr.name] = bindings[attr.name]
        elif attr.HasField("default_value"):
            scope[attr.name] = attr.default_value
        else:
            scope[attr.name] = _UNBOUND
    for key, value in bindings.items():
        scope.setdefault(key, value)
    scope["__func_attrs"] = tuple(func_attrs)
    return scope


def _func_attrs(bindings: Attrs) -> tuple[str, ...]:
    return bindings.get("__func_attrs", ())


def _bindings_key(bindings: Attrs) -> tuple[Any, ...]:
    out = []
    for key in sorted(bindings):
        value = bindings[key]
        if key == "__func_attrs":
            continue
        out.append((key, None if value is _UNBOUND else value.SerializeToString(deterministic=True)))
    return tuple(out)


def unsafe_at_load_v2(meta_graph: Any) -> list[tuple[str, str, str]]:
    """Unsafe ops that ``tf.saved_model.load`` itself would run for a TF2 SavedModel.

    Loading is not static: the loader creates and initialises every restored resource (the
    ``_create_resource``/``_initialize`` functions of the object graph; ``_destroy_resource``
    runs at exit) and calls custom saveables' restore functions. A model can put any op there,
    so these functions are checked *before* loading. The save functions every TF2 SavedModel
    carries (``SaveV2``, ``MergeV2Checkpoints``) are not run by loading and are not reported (the
    graph's saver nodes call them); every function that nothing calls is scanned with no bindings.
    """
    nodes = list(meta_graph.object_graph_def.nodes)
    library = _Library(meta_graph.graph_def.library)
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
        found.extend(library.function(fn_name, {}, role, set(), trust_args=True))
    # and every function neither the graph nor those reach (a layer's own functions, kept for Python)
    found.extend(library.unreachable(meta_graph.graph_def.node, entries=[fn for _, fn in called]))
    return sorted(set(found))


def _concrete_functions(node: Any) -> list[str]:
    kind = node.WhichOneof("kind")
    if kind == "function":
        return list(node.function.concrete_functions)
    if kind == "bare_concrete_function":
        return [node.bare_concrete_function.concrete_function_name]
    return []


def unconfined_assets(directory: str, assets: Iterable[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """``(tensor, "asset", why)`` for every asset the loader would feed with a path outside the
    model's ``assets/`` directory.

    ``assets``: ``(tensor name, AssetFileDef.filename)`` pairs. TensorFlow's loaders join the
    file name to ``<model>/assets`` (``os.path.join``), so an absolute name replaces the
    directory and ``../`` climbs out of it; a symlink in ``assets/`` points anywhere. Such a
    tensor is not the model's own file, and the ops reading it would read someone else's.
    """
    root = posixpath.join(directory, "assets")
    local = "://" not in directory
    real_root = os.path.realpath(root) if local else root
    found = []
    for tensor, filename in assets:
        if posixpath.isabs(filename) or "\\" in filename or ".." in filename.split("/") or "://" in filename:
            found.append((tensor, "asset", f"the loader would feed it {filename!r}, outside the model's assets/"))
            continue
        if local:
            real = os.path.realpath(posixpath.join(root, filename))
            if os.path.commonpath([real, real_root]) != real_root:
                found.append((tensor, "asset", f"assets/{filename} leads to {real}, outside the model's assets/"))
    return sorted(set(found))


def refuse_ambiguous_tags(directory: str, tag_sets: list[str], wanted: str) -> None:
    """Refuse a SavedModel with two meta graphs for the wanted tag set.

    TensorFlow's loader (``loader_impl.get_meta_graph_def_from_tags``) loads the *first* meta
    graph whose tags match, so a check of any other one would check a graph that never runs.
    Which one a reader means is ambiguous, so neither is picked.
    """
    if tag_sets.count(wanted) > 1:
        from ..errors import TftraceError  # noqa: PLC0415 - keeps this module's imports minimal

        raise TftraceError(
            f"refusing to load {directory}: it holds {tag_sets.count(wanted)} meta graphs tagged {wanted!r}; "
            "TensorFlow loads the first, and which one was meant is ambiguous",
            "re-export the model with one meta graph per tag set",
        )


def describe_unsafe(found: list[tuple[str, str, str]], limit: int = 8) -> str:
    shown = "; ".join(f"{name!r} ({op}: {why})" for name, op, why in found[:limit])
    more = f"; and {len(found) - limit} more" if len(found) > limit else ""
    return shown + more
