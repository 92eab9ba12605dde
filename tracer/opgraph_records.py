"""A ``tf.Graph``'s ops read into the op graph's node records (:mod:`tracer.opgraph`): which
ops the inference subgraph keeps (:func:`ancestors`), and each op as plain JSON
(:func:`node_data`): its outputs' dtypes and shapes, whether a session can fetch them, and its
attributes with constants reduced to a digest. Only the capture child and the static loaders
call it, with TensorFlow loaded; nothing here is needed to read a record back."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable
from typing import Any

from .function_digests import FunctionDigests
from .jsonvalues import jsonable

__all__ = ["NOT_FETCHABLE_DTYPES", "ancestors", "node_data", "attr_to_json"]

NOT_FETCHABLE_DTYPES = {"resource": "a resource handle holds no values", "variant": "a variant tensor has no array form"}
SMALL_CONST_ELEMENTS = 16


def ancestors(by_name: dict[str, Any], roots: Iterable[str], fed: set[str]) -> set[str]:
    """Ops needed to compute ``roots`` when the ``fed`` tensors are supplied by the caller.
    Hand-written, not ``nx.ancestors``: it walks the ``tf.Graph`` itself (a .meta with every
    training and saving op) before any networkx graph exists, and stops at fed *tensors*."""
    keep: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        op = by_name[name]
        for tensor in op.inputs:
            if tensor.name in fed:
                keep.add(tensor.op.name)  # the fed op stays as the graph's entry, its inputs do not
                continue
            stack.append(tensor.op.name)
        for control in op.control_inputs:
            stack.append(control.name)
    # A fed op's own inputs are not needed unless something else reaches them.
    return keep


def node_data(op: Any, digests: FunctionDigests) -> dict[str, Any]:
    outputs = []
    for tensor in op.outputs:
        dtype = tensor.dtype.base_dtype.name
        shape = None if tensor.shape.rank is None else list(tensor.shape.as_list())
        reason = ""
        if dtype in NOT_FETCHABLE_DTYPES:
            reason = NOT_FETCHABLE_DTYPES[dtype]
        outputs.append({"dtype": dtype, "shape": shape, "capturable": not reason, "reason": reason})
    node_def = op.node_def
    attrs = {key: attr_to_json(value) for key, value in sorted(node_def.attr.items()) if not key.startswith("_")}
    for key, value in attrs.items():  # a called function (a While's body): its content, not only its name
        for ref in value if isinstance(value, list) else [value]:
            if isinstance(ref, dict) and "func" in ref:
                digest = digests.of(ref["func"])
                if digest:
                    ref["digest"] = digest
    return {
        "op": op.type,
        "device": node_def.device,
        "scope": op.name.rsplit("/", 1)[0] if "/" in op.name else "",
        "attrs": attrs,
        "attr_defaults": _at_their_default(op, attrs),
        "inputs": [t.name for t in op.inputs],
        "control_inputs": [c.name for c in op.control_inputs],
        "outputs": outputs,
    }


def _at_their_default(op: Any, attrs: dict[str, Any]) -> list[str]:
    """The attributes of ``op`` that hold their op definition's default value. A newer TensorFlow
    adds attributes to existing ops (2.21's ``grad_a``/``grad_b`` on MatMul) and writes them at their
    default into every graph it loads; an older one has no such attribute. Such an attribute changes
    nothing, so the graph diff does not call it ``attr_changed`` (as ``strip_default_attrs`` would
    drop it at export)."""
    try:
        defs = op.op_def.attr
    except Exception:  # noqa: BLE001 - a function-call op whose definition is a library function
        return []
    return sorted(a.name for a in defs
                  if a.name in attrs and a.HasField("default_value") and op.node_def.attr[a.name] == a.default_value)


def attr_to_json(value: Any) -> Any:
    """An ``AttrValue`` as plain JSON. Tensors keep dtype, shape and a digest, not their bytes."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "s":
        try:
            return value.s.decode("utf-8")
        except UnicodeDecodeError:
            return {"bytes_b64": base64.b64encode(value.s).decode("ascii")}
    if kind == "f":
        return _float_json(value.f)
    if kind in ("i", "b"):
        return getattr(value, kind)
    if kind == "type":
        return _dtype_name(value.type)
    if kind == "shape":
        return _shape_json(value.shape)
    if kind == "tensor":
        return _tensor_json(value.tensor)
    if kind == "func":
        return {"func": value.func.name}
    if kind == "placeholder":
        return {"placeholder": value.placeholder}
    lst = value.list
    for field in ("s", "i", "f", "b", "type", "shape", "tensor", "func"):
        items = getattr(lst, field)
        if len(items):
            if field == "s":
                return [x.decode("utf-8", "replace") for x in items]
            if field == "type":
                return [_dtype_name(t) for t in items]
            if field == "shape":
                return [_shape_json(s) for s in items]
            if field == "f":
                return [_float_json(x) for x in items]
            if field == "tensor":
                return [_tensor_json(t) for t in items]
            if field == "func":
                return [{"func": f.name} for f in items]
            return list(items)
    return []


def _float_json(value: float) -> float | str:
    """A float attr: float32, so 0.001 rather than 0.0010000000474974513; ±inf and NaN (a
    ``DebugNumericSummary``'s bounds) as their strings."""
    return jsonable(float(f"{value:.7g}"))


def _dtype_name(enum: int) -> str:
    from tensorflow.python.framework import dtypes  # noqa: PLC0415 - only reached with TF loaded

    return dtypes.as_dtype(enum).name


def _shape_json(shape: Any) -> list[int | None] | None:
    if shape.unknown_rank:
        return None
    return [d.size if d.size >= 0 else None for d in shape.dim]


def _tensor_json(proto: Any) -> dict[str, Any]:
    """Digest a constant: two constants with equal digests hold byte-identical values."""
    from tensorflow.python.framework import tensor_util  # noqa: PLC0415

    array = tensor_util.MakeNdarray(proto)
    info: dict[str, Any] = {"dtype": _dtype_name(proto.dtype), "shape": list(array.shape)}
    if array.dtype == object:
        raw = b"\0".join(x if isinstance(x, bytes) else str(x).encode() for x in array.reshape(-1))
    else:
        raw = array.tobytes()
    info["sha1"] = hashlib.sha1(raw).hexdigest()
    if array.size <= SMALL_CONST_ELEMENTS and array.dtype != object:
        info["values"] = jsonable(array.reshape(-1).tolist()) if array.dtype.kind in "biuf" else None  # NMS's -inf
    return info
