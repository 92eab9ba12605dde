"""A TF2 signature's function and its variables, read from the SavedModel's own files.

``tf.saved_model.load`` recreates every function in the library and every object of the
object graph before a signature can be called: on the Model Garden's RetinaNet it recreated
1,829 functions, of which the serving signature reaches 544 (8 s to load those, 20 s for all).
Tracing needs one function and the variables it captures. So, where every value the signature
captures is a plain variable, this module loads only the functions the signature reaches
(``load_function_def_library`` on that part of the library) and reads each variable's value
from the checkpoint, found the way a restore finds it: by walking the object graph and the
checkpoint's object graph together from their roots, child name by child name.

Anything else the signature captures (a lookup table, a captured constant, a distributed
variable) makes :func:`signature_function` answer None, and the caller loads the whole
SavedModel as TensorFlow does.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._tf import tf

__all__ = ["CapturedVariable", "signature_function", "composite_arguments", "COMPOSITE_SPECS", "COMPOSITE_WAYS"]

VALUE_ATTRIBUTE = "VARIABLE_VALUE"  # the checkpoint attribute that holds a variable's value
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"  # the checkpoint entry holding its object graph


@dataclass(frozen=True)
class CapturedVariable:
    """A variable the signature's function reads: its own name (``block2/conv/kernel``), dtype
    and value. The same record whichever way the SavedModel was loaded."""

    name: str
    dtype: Any  # tf.DType
    value: np.ndarray


def signature_function(directory: str, meta: Any, key: str) -> tuple[Any, dict[str, CapturedVariable]] | None:
    """The concrete function of signature ``key``, loaded alone, and its captured variables by the
    name of the placeholder the function reads each through; None where this cannot be done from
    the files alone (see the module's docstring) and the whole SavedModel must be loaded."""
    objects = meta.object_graph_def
    name = _signature_function_name(objects, key)
    if name is None or name not in objects.concrete_functions:
        return None
    bound = list(objects.concrete_functions[name].bound_inputs)
    if not all(_is_plain_variable(objects.nodes[i]) for i in bound):
        return None
    values = _checkpoint_values(directory, objects, bound)
    if values is None:
        return None
    try:
        function = _load_alone(meta.graph_def.library, objects, name)
    except Exception:  # noqa: BLE001 - a TensorFlow (another release) whose internals differ: the whole load serves
        return None
    placeholders = function.inputs[len(function.inputs) - len(bound):] if bound else []
    variables = {}
    for placeholder, node_id in zip(placeholders, bound):
        saved = objects.nodes[node_id].variable
        variables[placeholder.op.name] = CapturedVariable(
            saved.name.split(":")[0], tf().as_dtype(saved.dtype), values[node_id])
    return function, variables


def _load_alone(library: Any, objects: Any, name: str) -> Any:
    """Function ``name`` as a ConcreteFunction, with only the part of ``library`` it reaches.
    ``load_function_def_library`` is TensorFlow's internal step of ``tf.saved_model.load`` that
    recreates functions (without their captures, which the caller binds)."""
    from tensorflow.python.saved_model import function_deserialization  # noqa: PLC0415

    return function_deserialization.load_function_def_library(_reached_library(library, name), objects)[name]


# the TypeSpecProto classes of a composite tensor the serving signature flattens into several inputs
COMPOSITE_SPECS = {"RAGGED_TENSOR_SPEC": "RaggedTensor", "SPARSE_TENSOR_SPEC": "SparseTensor"}
# what a composite tensor's flat inputs hold, and how a signature builds one from dense tensors instead
COMPOSITE_WAYS = {
    "RaggedTensor": ("its values and row splits, of different lengths",
                     "padded values and their lengths, building it inside with tf.RaggedTensor.from_tensor(values, lengths=lengths)"),
    "SparseTensor": ("its indices, values and dense shape",
                     "the dense tensor, building it inside with tf.sparse.from_dense(dense)"),
}


def composite_arguments(meta: Any, key: str) -> list[tuple[str, str]]:
    """``(function, kind)`` for each function signature ``key`` calls that takes a RaggedTensor or a
    SparseTensor: the signature flattens such an argument into several inputs (values and row
    splits, of different lengths), none of them holding one row per example. Read from the object
    graph's record of each function's input signature and the library's calls, without loading."""
    objects = meta.object_graph_def
    wrapper = _signature_function_name(objects, key)
    if wrapper is None:
        return []
    library = {f.signature.name: f for f in meta.graph_def.library.function}
    found, seen, stack = [], set(), [wrapper]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        saved = objects.concrete_functions.get(name)
        kinds = _composite_specs(saved.canonicalized_input_signature) if saved is not None else set()
        found += [(_python_name(name), kind) for kind in sorted(kinds)]
        for node in library[name].node_def if name in library else ():
            for value in node.attr.values():
                stack += [value.func.name] if value.HasField("func") else [f.name for f in value.list.func]
    return found


def _composite_specs(value: Any) -> set[str]:
    """The composite tensors (:data:`COMPOSITE_SPECS`) a StructuredValue describes, at any depth."""
    kind = value.WhichOneof("kind")
    if kind == "type_spec_value":
        spec = value.type_spec_value
        own = COMPOSITE_SPECS.get(type(spec).TypeSpecClass.Name(spec.type_spec_class))
        return ({own} if own else set()) | _composite_specs(spec.type_state)
    if kind in ("list_value", "tuple_value"):
        return set().union(*(_composite_specs(v) for v in getattr(value, kind).values))
    if kind == "dict_value":
        return set().union(*(_composite_specs(v) for v in value.dict_value.fields.values()))
    if kind == "named_tuple_value":
        return set().union(*(_composite_specs(pair.value) for pair in value.named_tuple_value.values))
    return set()


def _python_name(function: str) -> str:
    """``serve`` for ``__inference_serve_100``: the tf.function's name as its author wrote it."""
    stem = function.removeprefix("__inference_")
    head, _, number = stem.rpartition("_")
    return head if number.isdigit() and head else stem


def _signature_function_name(objects: Any, key: str) -> str | None:
    """The concrete function that ``loaded.signatures[key]`` is: the root's ``signatures`` child,
    then its child named ``key``."""
    root = objects.nodes[0]
    signatures = next((c.node_id for c in root.children if c.local_name == "signatures"), None)
    if signatures is None:
        return None
    node = next((c.node_id for c in objects.nodes[signatures].children if c.local_name == key), None)
    if node is None or objects.nodes[node].WhichOneof("kind") != "bare_concrete_function":
        return None
    return objects.nodes[node].bare_concrete_function.concrete_function_name


def _is_plain_variable(node: Any) -> bool:
    return (node.WhichOneof("kind") == "variable"
            and not len(node.variable.experimental_distributed_variable_components))


def _checkpoint_values(directory: str, objects: Any, wanted: list[int]) -> dict[int, np.ndarray] | None:
    """The checkpoint's value of each wanted object (by its id in ``objects``); None if one has none."""
    prefix = posixpath.join(directory, "variables", "variables")
    try:
        reader = tf().train.load_checkpoint(prefix)
        saved_graph = _trackable_graph(reader.get_tensor(OBJECT_GRAPH_KEY))
    except Exception:  # noqa: BLE001 - no readable checkpoint: the full load says what is wrong
        return None
    ids = _matching_ids(objects, saved_graph)
    values = {}
    for node_id in wanted:
        checkpoint_id = ids.get(node_id)
        if checkpoint_id is None:
            return None
        keys = [a.checkpoint_key for a in saved_graph.nodes[checkpoint_id].attributes if a.name == VALUE_ATTRIBUTE]
        if len(keys) != 1 or not reader.has_tensor(keys[0]):
            return None
        values[node_id] = np.asarray(reader.get_tensor(keys[0]))
    return values


def _trackable_graph(data: bytes) -> Any:
    from tensorflow.core.protobuf import trackable_object_graph_pb2  # noqa: PLC0415

    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(data)
    return graph


def _matching_ids(objects: Any, saved_graph: Any) -> dict[int, int]:
    """Object graph id -> checkpoint object graph id, walking both from their roots by child name,
    as a restore matches them (their ids need not agree)."""
    matched = {0: 0}
    stack = [0]
    while stack:
        node_id = stack.pop()
        children = {c.local_name: c.node_id for c in saved_graph.nodes[matched[node_id]].children}
        for child in objects.nodes[node_id].children:
            partner = children.get(child.local_name)
            if partner is not None and child.node_id not in matched:
                matched[child.node_id] = partner
                stack.append(child.node_id)
    return matched


def _reached_library(library: Any, root: str) -> Any:
    """The part of ``library`` that function ``root`` reaches: called by op name or by a function
    attribute (a While's body), and the gradient functions registered for the ops it has, as
    ``load_function_def_library`` counts a function's dependencies."""
    from tensorflow.core.framework import function_pb2  # noqa: PLC0415

    by_name = {f.signature.name: f for f in library.function}
    gradient_of = {g.registered_op_type: g.gradient_func for g in library.registered_gradients}
    reached: set[str] = set()
    stack = [root]
    while stack:
        name = stack.pop()
        if name in reached or name not in by_name:
            continue
        reached.add(name)
        for node in by_name[name].node_def:
            stack.extend(_called(node, by_name, gradient_of))
    pruned = function_pb2.FunctionDefLibrary()
    pruned.function.extend(f for f in library.function if f.signature.name in reached)
    pruned.gradient.extend(g for g in library.gradient if g.function_name in reached and g.gradient_func in reached)
    pruned.registered_gradients.extend(g for g in library.registered_gradients if g.gradient_func in reached)
    return pruned


def _called(node: Any, by_name: dict[str, Any], gradient_of: dict[str, str]) -> list[str]:
    called = [node.op] if node.op in by_name else []
    gradient = node.attr["_gradient_op_type"].s.decode() if "_gradient_op_type" in node.attr else ""
    if gradient in gradient_of:
        called.append(gradient_of[gradient])
    for value in node.attr.values():
        if value.HasField("func"):
            called.append(value.func.name)
        called.extend(f.name for f in value.list.func)
    return called
