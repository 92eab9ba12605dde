"""TF2 SavedModels: inline the signature function so every op is a plain graph node.

A TF2 signature is one opaque ``StatefulPartitionedCall``; its ops are only visible once the
function is inlined. TensorFlow's own inliner also freezes the variables, which changes what
Grappler does at run time (see :func:`load_saved_model_v2`), so it is asked to freeze none: the
variables stay resource variables, named after the model's own variables.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np

from .._tf import tf
from .records import Artifact, ArtifactRef, Signature, TensorSpec, signature_keys
from .tf2_functions import CapturedVariable, composite_arguments, signature_function
from ..errors import TftraceError
from ..optypes import changes_state
from ..text import count, listed

__all__ = ["load_saved_model_v2", "gpu_alternatives", "gpu_alternatives_note"]

HANDLE_FORWARDING = ("Identity", "Enter", "Switch", "Merge")  # ops that pass a variable's handle on unchanged


def load_saved_model_v2(ref: ArtifactRef, directory: str, meta: Any, available: dict[str, list[str]]) -> Artifact:
    """Inline the signature function so its internal ops are plain graph nodes.

    TensorFlow's own inliner (``convert_variables_to_constants_v2``) also freezes the variables,
    and constants change what Grappler does at run time (a batch norm with constant parameters
    is folded into Mul/Add), which would make tftrace report a difference the real model never
    has. So the function is inlined with no variable frozen (:func:`_inline`), and each variable
    becomes a resource variable again (:func:`_thaw_variables`), read, passed into loops and
    written exactly as the model does, initialised from its value when a session opens.
    """
    if ref.signature not in meta.signature_def:
        if not signature_keys(meta):
            raise _no_signatures(directory, meta)
        raise TftraceError(
            f"{directory} has no signature {ref.signature!r}; it has {', '.join(signature_keys(meta))}",
            "choose one with --signature",
        )
    tags = [t.strip() for t in ref.tag.split(",") if t.strip()]
    try:
        alone = signature_function(directory, meta, ref.signature)
        if alone is None:  # it captures more than variables: TensorFlow's own load recreates it all
            loaded = tf().saved_model.load(directory, tags=tags)
            function = loaded.signatures[ref.signature]
            variables = _captured_variables(function)
        else:
            function, variables = alone
        inlined = _inline(function, set(variables))
    except TftraceError:
        raise
    except Exception as exc:  # TF raises many types while loading a foreign model
        raise TftraceError(
            f"TensorFlow could not load the TF2 SavedModel {directory}: {type(exc).__name__}: {str(exc)[:300]}",
            "check that it loads with tf.saved_model.load in this TensorFlow version",
        ) from exc
    graph_def, values = _thaw_variables(inlined.graph_def, variables)
    graph_def, values = _name_variables(graph_def, values, _variable_names(variables))
    tables = _thaw_tables(graph_def, function)
    sig_def = meta.signature_def[ref.signature]
    inputs: dict[str, TensorSpec] = {}
    placeholders = [t for t in inlined.inputs if t.dtype != tf().resource]
    arg_names = [spec.name for spec in _flat_input_specs(function)]
    for key in sorted(sig_def.inputs):
        match = next((t for t, n in zip(placeholders, arg_names) if n == key), None)
        if match is None:
            match = next((t for t in placeholders if t.op.name == key), None)
        if match is None:
            raise TftraceError(
                f"cannot find the placeholder of signature input {key!r} in the inlined function",
                "report this model to tftrace's maintainers; meanwhile export a TF1 SavedModel or frozen GraphDef",
            )
        inputs[key] = _spec_of(match)
    structured = function.structured_outputs
    keys = sorted(structured) if isinstance(structured, dict) else [f"output_{i}" for i in range(len(inlined.outputs))]
    if len(keys) != len(inlined.outputs):  # nest.flatten orders a dict by key, as zip assumes
        raise TftraceError(
            f"signature {ref.signature!r} of {directory} returns nested outputs tftrace cannot map",
            "export a signature that returns a flat dict of tensors",
        )
    # the shapes the signature declares: a variable read through a placeholder has none to infer from
    outputs = {key: _spec_of(t, declared.shape) for key, t, declared in zip(keys, inlined.outputs, function.outputs)}
    return Artifact(
        ref=ref,
        kind="saved_model_v2",
        location=directory,
        graph_def=graph_def,
        meta_graph=None,
        signature=Signature(ref.signature, inputs, outputs, sig_def.method_name),
        available_signatures=available,
        tf_version_written=meta.meta_info_def.tensorflow_version,
        inlined_by_loader=True,
        variable_values=values,
        table_values=tables,
        composite_arguments=composite_arguments(meta, ref.signature),
        gpu_alternatives=gpu_alternatives(meta.graph_def.library),
        notes=["TF2 signature function inlined for tracing (its variables kept as variables)",
               *_state_notes(_written_variables(graph_def, values))],
    )


def gpu_alternatives(library: Any) -> list[str]:
    """The ``api_implements`` names of the functions the library holds for a GPU
    (``api_preferred_device: GPU``): Keras 2 saves its LSTM and GRU with a generic implementation
    and a cuDNN one, and Grappler's implementation selector swaps the call to the one for the
    device the call runs on. Inlined, the signature keeps no call to swap, so it runs the generic
    implementation on every device."""
    names = set()
    for function in library.function:
        attrs = function.attr
        if "api_implements" in attrs and "api_preferred_device" in attrs and attrs["api_preferred_device"].s == b"GPU":
            names.add(attrs["api_implements"].s.decode("utf-8", "replace"))
    return sorted(names)


def gpu_alternatives_note(names: list[str]) -> str:
    """The capture note of a GPU side whose model holds GPU implementations (:func:`gpu_alternatives`)."""
    kinds = sorted({name.split("_")[0] for name in names})  # Keras names each trace <layer kind>_<uuid>
    return (f"the model holds GPU implementations ({listed(kinds, 3, '`')}, {count(len(names), 'api_implements name')}: "
            "Keras 2's cuDNN path of an LSTM or GRU), which TensorFlow swaps in at run time where the call runs on a "
            "GPU; tftrace runs the signature inlined, with no call left to swap, so these layers ran their generic "
            "implementation here, not the cuDNN one that TensorFlow Serving runs on a GPU")


def _inline(function: Any, variables: set[str]) -> Any:
    """Inline ``function`` as ``convert_variables_to_constants_v2`` does, freezing none of ``variables``.

    The public function takes no deny-list, and it cannot even finish on a graph that writes a
    variable (it freezes a Keras SeedGenerator's state, then an AssignVariableOp is fed an int64):
    so its three steps are called here with the deny-list its converter already supports. The
    captured constants that are not variables are still frozen, as they were constants.
    """
    from tensorflow.python.framework import convert_to_constants as convert  # noqa: PLC0415

    try:  # private steps (see the docstring): a TensorFlow without them is not the one tftrace is made for
        converter = convert._FunctionConverterDataInEager  # noqa: SLF001
        replace_variables = convert._replace_variables_by_constants  # noqa: SLF001
        construct = convert._construct_concrete_function  # noqa: SLF001
    except AttributeError as exc:
        raise TftraceError(
            f"TensorFlow {tf().__version__} lacks the steps of convert_variables_to_constants_v2 that tftrace "
            f"inlines a TF2 signature with ({exc})",
            "install the TensorFlow tftrace is made for: pip install 'tftrace[cpu]' (TensorFlow 2.21)",
        ) from exc
    del construct  # checked above with its siblings; replaced by _InlinedGraph (see there)
    data = converter(func=function, lower_control_flow=True, aggressive_inlining=False,
                     variable_names_denylist=variables)
    if not data.tensor_data:  # nothing to freeze: the replacement would copy the graph, node by node
        return _InlinedGraph(function, data.graph_def, set())
    graph_def, converted = replace_variables(converter_data=data)
    return _InlinedGraph(function, graph_def, converted)


class _InlinedGraph:
    """The inlined GraphDef with the signature's inputs and outputs, as ``_construct_concrete_function``
    gives them, without the ConcreteFunction it builds around them.

    That step wraps the GraphDef in a function and prunes it by copying every op, one Python
    ``create_op`` at a time (``lift_to_graph``): on the Model Garden's RetinaNet (51,000 ops) it
    took half of diff-graph's time, to hand back the graph it was given. Here the GraphDef is cut
    to what the outputs need (``extract_sub_graph``, the same ancestors the prune keeps, control
    inputs included). It is not imported: the converter keeps the function's tensor names, so the
    inputs and outputs are the function's own tensors, with the shapes it declares; an import
    would hand back the same GraphDef (tests/test_tf2_functions.py checks it) for 7 s on that model.
    """

    def __init__(self, function: Any, graph_def: Any, converted: set[int]) -> None:
        captures = function.graph.internal_captures
        frozen = {id(captures[i]) for i in converted}
        self.inputs = [t for t in function.inputs if id(t) not in frozen]
        self.outputs = list(function.outputs)
        roots = [t.name.split(":")[0] for t in (*self.inputs, *self.outputs)]
        self.graph_def = tf().compat.v1.graph_util.extract_sub_graph(graph_def, sorted(set(roots)))


def _no_signatures(directory: str, meta: Any) -> TftraceError:
    """The refusal of a TF2 SavedModel saved without signatures (``tf.saved_model.save(obj, dir)``
    of an object whose tf.functions take no ``input_signature``, or of several): nothing names its
    inputs and outputs, and a function of the saved object is no graph to trace until it is traced
    into a signature. Names the root object's functions, so the fix can be typed as it stands."""
    graph = meta.object_graph_def
    functions = [child.local_name for child in (graph.nodes[0].children if graph.nodes else [])
                 if graph.nodes[child.node_id].WhichOneof("kind") == "function"]
    example = functions[0] if functions else "FUNCTION"
    return TftraceError(
        f"{directory} was saved without signatures, so nothing names the inputs and outputs to trace"
        + (f" (its object's tf.functions: {listed(functions, 5)})" if functions else ""),
        "export it again with one: tf.saved_model.save(obj, DIR, signatures={'serving_default': "
        f"obj.{example}.get_concrete_function(tf.TensorSpec(SHAPE, DTYPE))}}), then compare that export",
    )


def _captured_variables(function: Any) -> dict[str, CapturedVariable]:
    """The loaded function's captured variables, by the placeholder the function reads each through."""
    by_handle = {id(v.handle): v for v in function.variables}
    return {internal.op.name: _captured(by_handle[id(external)]) for external, internal in function.graph.captures
            if id(external) in by_handle}


def _captured(variable: Any) -> CapturedVariable:
    return CapturedVariable(variable.name.split(":")[0], variable.dtype, np.asarray(variable.numpy()))


def _thaw_variables(graph_def: Any, variables: dict[str, CapturedVariable]) -> tuple[Any, dict[str, np.ndarray]]:
    """Make each variable's placeholder a resource variable holding the variable's value.

    The inlined graph reads a variable exactly as the model does (ReadVariableOp; the resource
    handle passed into a while loop, whose body reads it on every step; AssignVariableOp where
    the model writes it, as a random layer's seed state), but through a ``Placeholder`` of dtype
    resource that a session cannot run. It becomes a ``VarHandleOp`` and the variable's value is
    returned for the session to assign when it opens. (Freezing, then thawing back what is read
    through an op named ReadVariableOp, as tftrace once did, broke every recurrent layer: the
    frozen value also fed a loop's Enter, which then received a resource where it took a float.)
    """
    from tensorflow.python.framework import tensor_util  # noqa: PLC0415

    values: dict[str, np.ndarray] = {}
    for node in graph_def.node:
        if node.name not in variables or node.op != "Placeholder":
            continue
        variable = variables[node.name]
        value = variable.value
        values[node.name] = value
        node.op = "VarHandleOp"
        node.attr.clear()
        node.attr["dtype"].type = variable.dtype.as_datatype_enum
        node.attr["shape"].shape.CopyFrom(tensor_util.make_tensor_proto(value).tensor_shape)
        node.attr["shared_name"].s = node.name.encode("utf-8")
        node.attr["container"].s = b""
    return graph_def, values


def _written_variables(graph_def: Any, values: dict[str, np.ndarray]) -> list[str]:
    """The variables that an op of the inlined graph writes (a Keras random layer's seed state),
    in name order: the handle reaches a writer as it reaches a read, through Identities and Enters."""
    nodes = {n.name: n for n in graph_def.node}
    written = set()
    for node in graph_def.node:
        if not changes_state(node.op) or not node.input:
            continue
        source = nodes.get(node.input[0].split(":")[0])
        while source is not None and source.op in HANDLE_FORWARDING and source.input:
            source = nodes.get(source.input[0].split(":")[0])
        if source is not None and source.name in values:
            written.add(source.name)
    return sorted(written)


def _state_notes(written: list[str]) -> list[str]:
    """The artifact's note when its signature writes variables: why its outputs may change from
    run to run, as the served model's do, and why they stay variables."""
    if not written:
        return []
    names = listed(written, 3)
    return [f"the signature writes {len(written)} of its variables on every run ({names}): kept as variables, so "
            "each run reads what the runs before it left, as in the served model"]


def _thaw_tables(graph_def: Any, function: Any) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Give lookup tables back to the inlined graph, with their contents.

    The inliner freezes variables but leaves every other captured resource as a ``Placeholder``
    of dtype resource (``unknown``), which a session cannot run. A placeholder that feeds a table
    lookup becomes a ``HashTableV2`` and the loaded table's contents are exported, for the
    session to initialise it (``InitializeTableV2``) as it does the variables. Lookups of a
    static table behave the same on any table holding the same pairs.
    """
    from tensorflow.core.framework import types_pb2  # noqa: PLC0415

    captured = {internal.op.name: external for external, internal in function.graph.captures}
    dtypes = _lookup_dtypes(graph_def)
    tables: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for node in graph_def.node:
        if node.op != "Placeholder" or node.attr["dtype"].type != types_pb2.DT_RESOURCE:
            continue
        if node.name not in dtypes or node.name not in captured:
            continue  # some other resource: the session will say it must be fed
        key_dtype, value_dtype = dtypes[node.name]
        try:
            keys, values = tf().raw_ops.LookupTableExportV2(
                table_handle=captured[node.name], Tkeys=tf().as_dtype(key_dtype), Tvalues=tf().as_dtype(value_dtype))
        except Exception:  # noqa: BLE001 - a resource that is not an exportable table
            continue
        tables[node.name] = (keys.numpy(), values.numpy())
        node.op = "HashTableV2"
        node.attr.clear()
        node.attr["key_dtype"].type = key_dtype
        node.attr["value_dtype"].type = value_dtype
        node.attr["shared_name"].s = node.name.encode("utf-8")
        node.attr["container"].s = b""
        node.attr["use_node_name_sharing"].b = False
    return tables


def _lookup_dtypes(graph_def: Any) -> dict[str, tuple[int, int]]:
    """Resource placeholder -> (key dtype, value dtype) of a table lookup it feeds, through Identities."""
    nodes = {n.name: n for n in graph_def.node}

    def source(name: str) -> str:
        node = nodes.get(name)
        while node is not None and node.op == "Identity" and node.input:
            name = node.input[0].split(":")[0]
            node = nodes.get(name)
        return name

    found = {}
    for node in graph_def.node:
        if node.op == "LookupTableFindV2" and node.input:
            found[source(node.input[0].split(":")[0])] = (node.attr["Tin"].type, node.attr["Tout"].type)
    return found


def _variable_names(variables: dict[str, CapturedVariable]) -> dict[str, str]:
    """Inlining names a captured variable after the function's placeholder (``unknown_7``);
    map those back to the variable's own name (``block2/conv/weights``) so users recognise it."""
    return {placeholder: variable.name for placeholder, variable in variables.items()}


def _name_variables(
    graph_def: Any, values: dict[str, np.ndarray], names: dict[str, str]
) -> tuple[Any, dict[str, np.ndarray]]:
    """Rename the thawed variables (node, readers' inputs, colocation attrs); a name that is
    already taken, or given to two variables, is left as TensorFlow made it."""
    taken = {node.name for node in graph_def.node}
    wanted = Counter(new for old, new in names.items() if old in values)
    rename = {old: new for old, new in names.items() if old in values and new not in taken and wanted[new] == 1}
    if not rename:
        return graph_def, values

    def renamed_input(text: str) -> str:
        control = text.startswith("^")
        op, sep, slot = text.lstrip("^").partition(":")
        return ("^" if control else "") + rename.get(op, op) + sep + slot

    for node in graph_def.node:
        node.name = rename.get(node.name, node.name)
        node.input[:] = [renamed_input(i) for i in node.input]
        if node.op == "VarHandleOp":
            node.attr["shared_name"].s = node.name.encode("utf-8")
        if "_class" in node.attr:
            locs = [x.decode("utf-8") for x in node.attr["_class"].list.s]
            node.attr["_class"].list.s[:] = [
                ("loc:@" + rename.get(x[5:], x[5:]) if x.startswith("loc:@") else x).encode("utf-8") for x in locs
            ]
    return graph_def, {rename.get(k, k): v for k, v in values.items()}


def _flat_input_specs(function: Any) -> list[Any]:
    args, kwargs = function.structured_input_signature
    specs = list(tf().nest.flatten(args)) + [kwargs[k] for k in sorted(kwargs)]
    return specs


def _spec_of(tensor: Any, shape: Any = None) -> TensorSpec:
    shape = tensor.shape if shape is None else shape
    shape = None if shape.rank is None else tuple(shape.as_list())
    return TensorSpec(tensor.name, tensor.dtype.name, shape)
