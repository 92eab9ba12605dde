"""Stage 1 — find out what the user pointed at and load its graph, signature and weights.

Kinds: a TF1 checkpoint (directory with a ``checkpoint`` file, a prefix path, or a ``.meta``
file), a TF1 SavedModel, a TF2 SavedModel (its signature function is inlined and its variables
frozen so that every op is visible), a frozen GraphDef (``.pb``/``.pbtxt``), and a TF Serving
version directory (``model/00000123/saved_model.pb``: the newest version is taken). Capture
directories are recognised here too, so callers can say "that is a capture, open it with
:class:`tracer.capture.Capture`".

Every path goes through ``tf.io.gfile`` so ``gs://`` and ``ram://`` work like local paths.
This module imports TensorFlow (lazily, through :mod:`tracer._tf`); compare and render never
call it.
"""

from __future__ import annotations

import posixpath
import re
from collections import Counter
from dataclasses import dataclass, field
from collections.abc import Callable
from typing import Any

import numpy as np

from ._tf import tf
from .errors import TftraceError
from .graphmatch import VARIABLE_OPS
from .opgraph import OpGraph, tensor_op

__all__ = [
    "ArtifactRef",
    "Artifact",
    "Signature",
    "TensorSpec",
    "detect",
    "load",
]

CAPTURE_MANIFEST = "manifest.json"


@dataclass(frozen=True)
class TensorSpec:
    """One signature input or output: the graph tensor it names, its dtype and static shape."""

    name: str  # "images:0"
    dtype: str  # "float32", "string", ...
    shape: tuple[int | None, ...] | None  # None = unknown rank

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "dtype": self.dtype, "shape": None if self.shape is None else list(self.shape)}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> TensorSpec:
        shape = d.get("shape")
        return cls(d["name"], d["dtype"], None if shape is None else tuple(shape))


@dataclass(frozen=True)
class Signature:
    """The inputs and outputs to trace, keyed the way the SignatureDef keys them."""

    key: str
    inputs: dict[str, TensorSpec]
    outputs: dict[str, TensorSpec]
    method_name: str = ""
    from_user: bool = False  # built from --outputs/--input-names rather than a SignatureDef

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "method_name": self.method_name,
            "from_user": self.from_user,
            "inputs": {k: v.to_json() for k, v in self.inputs.items()},
            "outputs": {k: v.to_json() for k, v in self.outputs.items()},
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Signature:
        return cls(
            key=d["key"],
            method_name=d.get("method_name", ""),
            from_user=bool(d.get("from_user", False)),
            inputs={k: TensorSpec.from_json(v) for k, v in d["inputs"].items()},
            outputs={k: TensorSpec.from_json(v) for k, v in d["outputs"].items()},
        )


@dataclass(frozen=True)
class ArtifactRef:
    """What the user typed: enough to load the same artifact again in a child process."""

    path: str
    tag: str = "serve"  # comma-separated tag set of a SavedModel
    signature: str = "serving_default"
    outputs: tuple[str, ...] = ()  # --outputs, for graphs without a signature
    input_names: tuple[str, ...] = ()  # --input-names

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "tag": self.tag,
            "signature": self.signature,
            "outputs": list(self.outputs),
            "input_names": list(self.input_names),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ArtifactRef:
        return cls(
            path=d["path"],
            tag=d.get("tag", "serve"),
            signature=d.get("signature", "serving_default"),
            outputs=tuple(d.get("outputs", ())),
            input_names=tuple(d.get("input_names", ())),
        )


WeightReader = Callable[[str], "np.ndarray | None"]


@dataclass
class Artifact:
    """A loaded artifact: the graph to run, what to feed and fetch, and where weights come from.

    ``graph_def`` is the graph as it will be imported for running (for a TF2 SavedModel: the
    inlined, frozen signature function). ``meta_graph`` is set for checkpoints and TF1
    SavedModels, whose collections (saver, variables) are needed to restore weights.
    """

    ref: ArtifactRef
    kind: str  # "checkpoint" | "saved_model_v1" | "saved_model_v2" | "graphdef"
    location: str  # the resolved path that was loaded (prefix, version dir, file)
    graph_def: Any  # tf GraphDef
    meta_graph: Any | None
    signature: Signature | None
    available_signatures: dict[str, list[str]] = field(default_factory=dict)  # tag set -> keys
    checkpoint_prefix: str | None = None
    tf_version_written: str = ""
    inlined_by_loader: bool = False  # TF2: tftrace inlined the signature function (adds Identity plumbing)
    variable_values: dict[str, np.ndarray] = field(default_factory=dict)  # TF2: values of the inlined variables
    notes: list[str] = field(default_factory=list)
    _reader: Any = None

    def variable_value(self, name: str) -> np.ndarray | None:
        """Value of a variable (by node name or checkpoint key), or None if unknown."""
        if name in self.variable_values:
            return self.variable_values[name]
        if self.checkpoint_prefix is None:
            return None
        if self._reader is None:
            try:  # not tf.train.load_checkpoint: on ram:// it takes the prefix for a directory
                self._reader = tf().compat.v1.train.NewCheckpointReader(self.checkpoint_prefix)
            except Exception as exc:  # TF raises DataLossError, NotFoundError, ... for damaged files
                raise TftraceError(
                    f"cannot read the weights of {self.checkpoint_prefix}: {str(exc).splitlines()[0][:300]}",
                    "re-copy the checkpoint's .index and .data-* files",
                ) from exc
        for key in (name, name.split(":")[0]):
            if self._reader.has_tensor(key):
                return np.asarray(self._reader.get_tensor(key))
        return None

    def describe(self) -> str:
        sig = f", signature {self.signature.key!r}" if self.signature else ""
        return f"{self.kind} at {self.location}{sig}"


# --------------------------------------------------------------------------------------------
# detection


def _gfile() -> Any:
    return tf().io.gfile


def _listdir(path: str) -> list[str]:
    return sorted(entry.rstrip("/") for entry in _gfile().listdir(path))


def detect(path: str) -> tuple[str, str]:
    """Return ``(kind, location)`` for a path, or raise a TftraceError that says what was found.

    kind is one of ``capture``, ``incomplete_capture``, ``checkpoint``, ``saved_model``,
    ``graphdef``. For checkpoints, location is the checkpoint prefix.
    """
    gfile = _gfile()
    if not gfile.exists(path):
        if gfile.exists(path + ".index") or gfile.exists(path + ".meta"):
            return "checkpoint", path  # a checkpoint prefix names files, not itself a file
        raise TftraceError(f"{path} does not exist", "check the path (and the scheme, for gs:// or ram://)")
    if not gfile.isdir(path):
        return _detect_file(path)
    entries = _listdir(path)
    if CAPTURE_MANIFEST in entries:
        return "capture", path
    if "tensors" in entries and "saved_model.pb" not in entries:
        return "incomplete_capture", path
    if "saved_model.pb" in entries or "saved_model.pbtxt" in entries:
        return "saved_model", path
    versions = [e for e in entries if e.isdigit() and _is_saved_model_dir(posixpath.join(path, e))]
    if versions:  # TF Serving layout: base_path/<version>/saved_model.pb
        return "saved_model", posixpath.join(path, max(versions, key=int))
    if "checkpoint" in entries:
        return "checkpoint", _prefix_from_checkpoint_file(path)
    metas = sorted((e for e in entries if e.endswith(".meta")), key=_step_order)
    if len(metas) == 1:
        return "checkpoint", posixpath.join(path, metas[0][: -len(".meta")])
    if len(metas) > 1:
        listed = ", ".join(metas[:10]) + (f" and {len(metas) - 10} more" if len(metas) > 10 else "")
        newest = posixpath.join(path, metas[-1][: -len(".meta")])
        raise TftraceError(
            f"{path} holds several checkpoints ({listed}) and no `checkpoint` file says which is current",
            f"pass one checkpoint prefix (or its .meta file) instead of the directory, e.g. {newest}",
        )
    shown = ", ".join(entries[:12]) + (" …" if len(entries) > 12 else "") if entries else "nothing"
    raise TftraceError(
        f"{path} is neither a checkpoint nor a SavedModel nor a capture (it contains {shown})",
        "point at a directory with saved_model.pb, a TF1 checkpoint directory (with a `checkpoint` "
        "file or one .meta), a checkpoint prefix, or a frozen .pb/.pbtxt GraphDef",
    )


def _step_order(file_name: str) -> tuple[str, int]:
    """Sort ``model.ckpt-200`` before ``model.ckpt-1000`` (training steps, not characters)."""
    match = re.search(r"^(.*?)(\d+)\.meta$", file_name)
    return (match.group(1), int(match.group(2))) if match else (file_name, -1)


def _is_saved_model_dir(path: str) -> bool:
    gfile = _gfile()
    return gfile.isdir(path) and (
        gfile.exists(posixpath.join(path, "saved_model.pb")) or gfile.exists(posixpath.join(path, "saved_model.pbtxt"))
    )


def _detect_file(path: str) -> tuple[str, str]:
    gfile = _gfile()
    base = posixpath.basename(path)
    if base in ("saved_model.pb", "saved_model.pbtxt"):
        return "saved_model", posixpath.dirname(path)
    if base == CAPTURE_MANIFEST:
        return "capture", posixpath.dirname(path)
    if path.endswith(".meta"):
        return "checkpoint", path[: -len(".meta")]
    if path.endswith(".index") or ".data-" in base:
        return "checkpoint", path.split(".data-")[0].removesuffix(".index")
    if path.endswith((".pb", ".pbtxt", ".graphdef")):
        return "graphdef", path
    if gfile.exists(path + ".index") or gfile.exists(path + ".meta"):
        return "checkpoint", path
    raise TftraceError(
        f"{path} is a file tftrace does not recognise",
        "give a SavedModel directory, a checkpoint directory or prefix, or a GraphDef ending in .pb or .pbtxt",
    )


def _prefix_from_checkpoint_file(directory: str) -> str:
    """Read the ``checkpoint`` state file; re-root absolute paths written on another machine."""
    text = _gfile().GFile(posixpath.join(directory, "checkpoint"), "r").read()
    prefix = None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "model_checkpoint_path":
            prefix = value.strip().strip('"')
    if not prefix:
        raise TftraceError(
            f"{directory}/checkpoint has no model_checkpoint_path line",
            "pass the checkpoint prefix directly, e.g. DIR/model.ckpt-1000",
        )
    if not posixpath.isabs(prefix) and "://" not in prefix:
        return posixpath.join(directory, prefix)
    if _gfile().exists(prefix + ".index") or _gfile().exists(prefix + ".meta"):
        return prefix
    # Trained elsewhere: the absolute path belongs to another machine. Use the same file name here.
    return posixpath.join(directory, posixpath.basename(prefix))


# --------------------------------------------------------------------------------------------
# loading


def load(ref: ArtifactRef | str) -> Artifact:
    """Detect and load an artifact statically (no session, no weights restored into a graph)."""
    if isinstance(ref, str):
        ref = ArtifactRef(ref)
    kind, location = detect(ref.path)
    if kind == "capture":
        raise TftraceError(
            f"{ref.path} is a capture directory, not a model",
            "open it with tracer.capture.Capture.open, or pass the model it was captured from",
        )
    if kind == "incomplete_capture":
        raise TftraceError(
            f"incomplete capture at {ref.path}: manifest.json is missing",
            "the capture was interrupted or is still running; re-run the capture with --force",
        )
    loader = {"checkpoint": _load_checkpoint, "saved_model": _load_saved_model, "graphdef": _load_graphdef}[kind]
    artifact = loader(ref, location)
    _check_ops_known(artifact.graph_def)
    _note_device_pins(artifact)
    return artifact


def _read_bytes(path: str) -> bytes:
    try:
        return _gfile().GFile(path, "rb").read()
    except Exception as exc:  # gfile raises several error types for unreadable files
        raise TftraceError(f"cannot read {path}: {exc}", "check that the file exists and is readable") from exc


def _parse(proto: Any, data: bytes, path: str, what: str, text: bool = False) -> Any:
    from google.protobuf import text_format  # noqa: PLC0415 - comes with TF

    try:
        if text:
            text_format.Parse(data.decode("utf-8"), proto)
        else:
            proto.ParseFromString(data)
    except Exception as exc:  # protobuf's DecodeError and text_format.ParseError
        raise TftraceError(
            f"{path} is not a valid {what} ({type(exc).__name__}: {str(exc)[:200]}); the file is truncated or corrupt",
            "re-export or re-copy it",
        ) from exc
    return proto


def _load_checkpoint(ref: ArtifactRef, prefix: str) -> Artifact:
    from tensorflow.core.protobuf import meta_graph_pb2  # noqa: PLC0415

    gfile = _gfile()
    meta_path = prefix + ".meta"
    if not gfile.exists(meta_path):
        raise TftraceError(
            f"checkpoint {prefix} has no graph: {meta_path} is missing",
            "tftrace needs the .meta file written by tf.compat.v1.train.Saver (write_meta_graph=True); "
            "or give the SavedModel or frozen GraphDef exported from it",
        )
    index_ok = gfile.exists(prefix + ".index")
    data_ok = bool(gfile.glob(prefix + ".data-*"))
    if not (index_ok and data_ok):
        missing = [s for s, ok in ((".index", index_ok), (".data-*", data_ok)) if not ok]
        raise TftraceError(
            f"checkpoint {prefix}: the .meta is there but {' and '.join(prefix + m for m in missing)} "
            f"{'are' if len(missing) > 1 else 'is'} missing, so the weights cannot be read",
            "copy the complete checkpoint (.meta, .index and every .data-* shard)",
        )
    meta = _parse(meta_graph_pb2.MetaGraphDef(), _read_bytes(meta_path), meta_path, "MetaGraphDef")
    signature = _pick_signature(ref, {"(checkpoint .meta)": meta}, meta, required=False)
    return Artifact(
        ref=ref,
        kind="checkpoint",
        location=prefix,
        graph_def=meta.graph_def,
        meta_graph=meta,
        signature=signature or _user_signature(ref),
        available_signatures={"(checkpoint .meta)": _signature_keys(meta)},
        checkpoint_prefix=prefix,
        tf_version_written=meta.meta_info_def.tensorflow_version,
    )


def _load_saved_model(ref: ArtifactRef, directory: str) -> Artifact:
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415

    pb = posixpath.join(directory, "saved_model.pb")
    text = not _gfile().exists(pb)
    if text:
        pb = posixpath.join(directory, "saved_model.pbtxt")
    saved = _parse(saved_model_pb2.SavedModel(), _read_bytes(pb), pb, "SavedModel", text=text)
    by_tags = {",".join(sorted(mg.meta_info_def.tags)): mg for mg in saved.meta_graphs}
    wanted = ",".join(sorted(t.strip() for t in ref.tag.split(",") if t.strip()))
    if wanted not in by_tags:
        raise TftraceError(
            f"{directory} has no tag set {ref.tag!r}; it has {', '.join(repr(t) for t in by_tags) or 'none'}",
            "choose one with --tag",
        )
    meta = by_tags[wanted]
    available = {tags: _signature_keys(mg) for tags, mg in by_tags.items()}
    is_v2 = len(meta.object_graph_def.nodes) > 0 and len(meta.graph_def.library.function) > 0
    variables_prefix = posixpath.join(directory, "variables", "variables")
    has_variables = _gfile().exists(variables_prefix + ".index")
    if is_v2:
        return _load_saved_model_v2(ref, directory, meta, available)
    signature = _pick_signature(ref, by_tags, meta, required=not (ref.outputs or ref.input_names))
    return Artifact(
        ref=ref,
        kind="saved_model_v1",
        location=directory,
        graph_def=meta.graph_def,
        meta_graph=meta,
        signature=signature or _user_signature(ref),
        available_signatures=available,
        checkpoint_prefix=variables_prefix if has_variables else None,
        tf_version_written=meta.meta_info_def.tensorflow_version,
    )


def _load_saved_model_v2(ref: ArtifactRef, directory: str, meta: Any, available: dict[str, list[str]]) -> Artifact:
    """Inline the signature function so its internal ops are plain graph nodes.

    TensorFlow's own inliner (``convert_variables_to_constants_v2``) also freezes the variables,
    and constants change what Grappler does at run time (a batch norm with constant parameters
    is folded into Mul/Add), which would make tftrace report a difference the real model never
    has. So the variables are thawed again (:func:`_thaw_variables`): every weight stays a
    resource variable read by ReadVariableOp, initialised from its value when a session opens.
    """
    from tensorflow.python.framework.convert_to_constants import (  # noqa: PLC0415
        convert_variables_to_constants_v2,
    )

    if ref.signature not in meta.signature_def:
        raise TftraceError(
            f"{directory} has no signature {ref.signature!r}; it has {', '.join(_signature_keys(meta)) or 'none'}",
            "choose one with --signature",
        )
    tags = [t.strip() for t in ref.tag.split(",") if t.strip()]
    try:
        loaded = tf().saved_model.load(directory, tags=tags)
        function = loaded.signatures[ref.signature]
        frozen = convert_variables_to_constants_v2(function)
    except Exception as exc:  # TF raises many types while loading a foreign model
        raise TftraceError(
            f"TensorFlow could not load the TF2 SavedModel {directory}: {type(exc).__name__}: {str(exc)[:300]}",
            "check that it loads with tf.saved_model.load in this TensorFlow version",
        ) from exc
    graph_def, values = _thaw_variables(frozen.graph.as_graph_def())
    graph_def, values = _name_variables(graph_def, values, _variable_names(function))
    sig_def = meta.signature_def[ref.signature]
    inputs: dict[str, TensorSpec] = {}
    placeholders = [t for t in frozen.inputs if t.dtype != tf().resource]
    arg_names = [spec.name for spec in _flat_input_specs(function)]
    for key in sorted(sig_def.inputs):
        match = next((t for t, n in zip(placeholders, arg_names) if n == key), None)
        if match is None:
            match = next((t for t in placeholders if t.op.name == key), None)
        if match is None:
            raise TftraceError(
                f"cannot find the placeholder of signature input {key!r} in the frozen function",
                "report this model to tftrace's maintainers; meanwhile export a TF1 SavedModel or frozen GraphDef",
            )
        inputs[key] = _spec_of(match)
    structured = function.structured_outputs
    keys = sorted(structured) if isinstance(structured, dict) else [f"output_{i}" for i in range(len(frozen.outputs))]
    if len(keys) != len(frozen.outputs):  # nest.flatten orders a dict by key, as zip assumes
        raise TftraceError(
            f"signature {ref.signature!r} of {directory} returns nested outputs tftrace cannot map",
            "export a signature that returns a flat dict of tensors",
        )
    outputs = {key: _spec_of(t) for key, t in zip(keys, frozen.outputs)}
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
        notes=["TF2 signature function inlined for tracing (its variables kept as variables)"],
    )


def _thaw_variables(graph_def: Any) -> tuple[Any, dict[str, np.ndarray]]:
    """Turn the constants an inliner made of variables back into resource variables.

    A frozen variable shows as ``Const -> Identity* -> Identity named '.../ReadVariableOp'``;
    it becomes ``VarHandleOp -> Identity* -> ReadVariableOp`` and its value is returned for the
    session to assign. Constants that were constants stay constants.
    """
    from tensorflow.core.framework import types_pb2  # noqa: PLC0415
    from tensorflow.python.framework import tensor_util  # noqa: PLC0415

    nodes = {n.name: n for n in graph_def.node}
    values: dict[str, np.ndarray] = {}
    for node in graph_def.node:
        if node.op != "Identity" or not re.search(r"ReadVariableOp(_\d+)?$", node.name) or not node.input:
            continue
        chain, src = [], nodes.get(node.input[0].split(":")[0])
        while src is not None and src.op == "Identity" and src.input:
            chain.append(src)
            src = nodes.get(src.input[0].split(":")[0])
        if src is None or src.op not in ("Const", "VarHandleOp"):
            continue
        dtype = src.attr["dtype"].type
        if src.op == "Const":
            value = tensor_util.MakeNdarray(src.attr["value"].tensor)
            values[src.name] = value
            src.op = "VarHandleOp"
            del src.attr["value"]
            src.attr["shape"].shape.CopyFrom(tensor_util.make_tensor_proto(value).tensor_shape)
            src.attr["shared_name"].s = src.name.encode("utf-8")
            src.attr["container"].s = b""
        for identity in chain:
            identity.attr["T"].type = types_pb2.DT_RESOURCE
        node.op = "ReadVariableOp"
        del node.attr["T"]
        node.attr["dtype"].type = dtype
    return graph_def, values


def _variable_names(function: Any) -> dict[str, str]:
    """Inlining names a captured variable after the function's placeholder (``unknown_7``);
    map those back to the variable's own name (``block2/conv/weights``) so users recognise it."""
    by_handle = {id(v.handle): v.name.split(":")[0] for v in function.variables}
    names = {}
    for external, internal in function.graph.captures:
        if id(external) in by_handle:
            names[internal.op.name] = by_handle[id(external)]
    return names


def _name_variables(graph_def: Any, values: dict[str, np.ndarray], names: dict[str, str]) -> tuple[Any, dict[str, np.ndarray]]:
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


def _spec_of(tensor: Any) -> TensorSpec:
    shape = None if tensor.shape.rank is None else tuple(tensor.shape.as_list())
    return TensorSpec(tensor.name, tensor.dtype.name, shape)


def _load_graphdef(ref: ArtifactRef, path: str) -> Artifact:
    from tensorflow.core.framework import graph_pb2  # noqa: PLC0415

    text = path.endswith(".pbtxt")
    graph_def = _parse(graph_pb2.GraphDef(), _read_bytes(path), path, "GraphDef", text=text)
    return Artifact(
        ref=ref,
        kind="graphdef",
        location=path,
        graph_def=graph_def,
        meta_graph=None,
        signature=_user_signature(ref),
    )


def _pick_signature(ref: ArtifactRef, by_tags: dict[str, Any], meta: Any, required: bool) -> Signature | None:
    if ref.outputs or ref.input_names:
        return None  # the user said what to trace
    if ref.signature not in meta.signature_def:
        if not required and not meta.signature_def:
            return None
        listing = "; ".join(f"tags {tags!r}: {', '.join(_signature_keys(mg)) or 'none'}" for tags, mg in by_tags.items())
        raise TftraceError(
            f"no signature {ref.signature!r} (available — {listing})",
            "choose one with --signature, or name tensors with --outputs/--input-names",
        )
    sig_def = meta.signature_def[ref.signature]

    def spec(info: Any) -> TensorSpec:
        dtype = tf().dtypes.as_dtype(info.dtype).base_dtype.name if info.dtype else "unknown"
        shape = None if info.tensor_shape.unknown_rank else tuple(
            (d.size if d.size >= 0 else None) for d in info.tensor_shape.dim
        )
        if not info.name:
            raise TftraceError(
                f"signature {ref.signature!r} uses a composite (sparse/ragged) tensor, which tftrace cannot feed",
                "choose a signature with dense tensors via --signature",
            )
        return TensorSpec(info.name, dtype, shape)

    return Signature(
        key=ref.signature,
        inputs={k: spec(v) for k, v in sorted(sig_def.inputs.items())},
        outputs={k: spec(v) for k, v in sorted(sig_def.outputs.items())},
        method_name=sig_def.method_name,
    )


def _signature_keys(meta: Any) -> list[str]:
    """The signatures a user can choose; TF2's ``__saved_model_init_op`` only initialises tables."""
    return sorted(k for k in meta.signature_def if k != "__saved_model_init_op")


def _tensor_name(name: str) -> str:
    return name if ":" in name else name + ":0"


def _user_signature(ref: ArtifactRef) -> Signature | None:
    """A signature from --outputs/--input-names; dtypes and shapes are filled in by the op graph."""
    if not ref.outputs:
        return None
    unknown = TensorSpec("", "unknown", None)
    return Signature(
        key="(from --outputs)",
        inputs={n.split(":")[0]: TensorSpec(_tensor_name(n), unknown.dtype, None) for n in ref.input_names},
        outputs={n.split(":")[0]: TensorSpec(_tensor_name(n), unknown.dtype, None) for n in ref.outputs},
        from_user=True,
    )


def _check_ops_known(graph_def: Any) -> None:
    from tensorflow.python.framework import op_def_registry  # noqa: PLC0415

    library = {f.signature.name for f in graph_def.library.function}
    unknown: dict[str, str] = {}
    nodes = list(graph_def.node) + [n for f in graph_def.library.function for n in f.node_def]
    for node in nodes:
        if node.op not in library and op_def_registry.get(node.op) is None:
            unknown.setdefault(node.op, node.name)
    if unknown:
        listed = ", ".join(f"{op} (node {name!r})" for op, name in sorted(unknown.items()))
        raise TftraceError(
            f"the graph uses ops unknown to TensorFlow {tf().__version__}: {listed}",
            "load their custom-op library first (tf.load_op_library) or use the TensorFlow build the model was made with",
        )


def _note_device_pins(artifact: Artifact) -> None:
    pinned = sorted({n.device for n in artifact.graph_def.node if "GPU" in n.device.upper()})
    if pinned:
        count = sum(1 for n in artifact.graph_def.node if "GPU" in n.device.upper())
        artifact.notes.append(
            f"{count} ops are pinned to {', '.join(pinned)}; where that device is missing they run "
            "elsewhere through soft placement"
        )


# --------------------------------------------------------------------------------------------
# graph import and the op graph


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
BOOKKEEPING_SCOPE = re.compile(r"^(save|init|init_all_tables|gradients|report_uninitialized_variables|global_step)(_\d+)?(/|$)")


def _bookkeeping(op: Any) -> bool:
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
