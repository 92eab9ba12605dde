"""Stage 1 — find out what the user pointed at and load its graph, signature and weights.

Kinds: a TF1 checkpoint (directory with a ``checkpoint`` file, a prefix path, or a ``.meta``
file), a TF1 SavedModel, a TF2 SavedModel (its signature function is inlined and its variables
frozen so that every op is visible), a frozen GraphDef (``.pb``/``.pbtxt``), and a TF Serving
version directory (``model/00000123/saved_model.pb``: the newest version is taken). Capture
directories are recognised here too, so callers can say "that is a capture, open it with
:class:`tracer.captures.Capture`".

Which kind a path holds is decided first, without loading it (:mod:`tracer.artifacts.kinds`).
Every path goes through ``tf.io.gfile`` so ``gs://`` and ``ram://`` work like local paths.
This module imports TensorFlow (lazily, through :mod:`tracer._tf`); compare and render never
call it.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable
from typing import Any

from .._tf import tf
from .checkpoint_index import graphless_checkpoint
from .graph import borrow_signature, build_opgraph
from .kinds import detect
from .kinds import io_gfile as _gfile
from .lowering import lower_control_flow
from .records import USER_SIGNATURE, Artifact, ArtifactRef, Signature, TensorSpec, signature_keys
from ..errors import TftraceError
from ..opgraph import OpGraph
from .safety import UNCALLED, describe_unsafe, refuse_ambiguous_tags, unconfined_assets, unsafe_at_load_v2
from .tf2_inline import load_saved_model_v2

__all__ = [
    "loads_by_running",
    "ArtifactRef",
    "Artifact",
    "Signature",
    "TensorSpec",
    "detect",
    "load",
    "load_lender",
    "Lender",
]

# the lending side (a signature_from ref) -> its signature and op graph, or None when it has none
Lender = Callable[[ArtifactRef, bool], "tuple[Signature, OpGraph] | None"]

V1_SHARDS = "-?????-of-?????"  # the shard names of a sharded SaverDef.V1 checkpoint


# --------------------------------------------------------------------------------------------
# loading


def load(ref: ArtifactRef | str, *, allow_unsafe_ops: bool = False, lender: Lender | None = None) -> Artifact:
    """Detect and load an artifact statically (no session, no weights restored into a graph).

    One kind is not static: a TF2 SavedModel is inlined through ``tf.saved_model.load``, which
    runs the model's resource initialisers and restore functions. Those are checked first and a
    model whose loading reaches outside the computation is refused unless ``allow_unsafe_ops``.

    An artifact without a signature of its own borrows the one of ``ref.signature_from``:
    ``lender`` reads that side's signature and op graph (by default :func:`load_lender` loads it).
    """
    if isinstance(ref, str):
        ref = ArtifactRef(ref)
    kind, location = detect(ref.path)
    if kind == "capture":
        raise TftraceError(
            f"{ref.path} is a capture directory, not a model",
            "open it with tracer.captures.Capture.open, or pass the model it was captured from",
        )
    if kind == "incomplete_capture":
        raise TftraceError(
            f"incomplete capture at {ref.path}: manifest.json is missing",
            "the capture was interrupted or is still running; re-run the capture with --force",
        )
    if kind == "saved_model":
        artifact = _load_saved_model(ref, location, allow_unsafe_ops)
    else:
        artifact = {"checkpoint": _load_checkpoint, "graphdef": _load_graphdef}[kind](ref, location)
    _check_ops_known(artifact.graph_def, artifact.location)
    _lower_functional_control_flow(artifact)
    _note_device_pins(artifact)
    if ref.signature_from is not None or ref.borrowed is not None:
        if artifact.signature is None or artifact.signature.from_user:
            lent = None if ref.borrowed is not None else (lender or load_lender)(ref.signature_from, allow_unsafe_ops)
            borrow_signature(artifact, lent)
        else:  # it has its own: what it would have borrowed from is no part of it
            artifact.ref = ref.lender()
    return artifact


def load_lender(ref: ArtifactRef, allow_unsafe_ops: bool) -> tuple[Signature, OpGraph] | None:
    """The lending artifact's resolved signature and op graph (for :func:`borrow_signature`), by
    loading it statically: the ``lender`` of :func:`load` unless its caller reads lenders another way
    (a capture directory lends what it recorded: :func:`tracer.captures.runtime.load_checked`)."""
    lender = load(ref.lender(), allow_unsafe_ops=allow_unsafe_ops)
    if lender.signature is None:
        return None
    graph, sig = build_opgraph(lender)
    return sig, graph


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
        index = _read_bytes(prefix + ".index") if gfile.exists(prefix + ".index") else None
        raise graphless_checkpoint(prefix, index)  # a tf.train.Checkpoint is told the export that helps it
    index_ok = gfile.exists(prefix + ".index")
    data_ok = bool(gfile.glob(prefix + ".data-*"))
    weights = prefix
    notes = []
    v1_shards = gfile.glob(prefix + V1_SHARDS) if not index_ok else []
    if v1_shards or (not index_ok and gfile.exists(prefix) and not gfile.isdir(prefix)):
        # SaverDef.V1 (TF < 1.0 wrote it by default; TF Serving's bad_half_plus_two ships one):
        # no .index, the tensors in PREFIX-00000-of-0000N, or in PREFIX itself when unsharded.
        # TensorFlow still reads it, given the shard pattern.
        weights = prefix + V1_SHARDS if v1_shards else prefix
        notes.append(f"a V1-format checkpoint (no .index; weights read from {posixpath.basename(weights)})")
    elif not (index_ok and data_ok):
        missing = [s for s, ok in ((".index", index_ok), (".data-*", data_ok)) if not ok]
        what = "only the graph (a .meta file)" if not (index_ok or data_ok) else "an incomplete V2 checkpoint"
        raise TftraceError(
            f"checkpoint {prefix} is {what}: the .meta is there but {' and '.join(prefix + m for m in missing)} "
            f"{'are' if len(missing) > 1 else 'is'} missing, so the weights cannot be read",
            "copy the complete checkpoint (.meta, .index and every .data-* shard), "
            "or give the SavedModel or frozen GraphDef exported from it",
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
        available_signatures={"(checkpoint .meta)": signature_keys(meta)},
        checkpoint_prefix=weights,
        tf_version_written=meta.meta_info_def.tensorflow_version,
        notes=notes,
    )


def _load_saved_model(ref: ArtifactRef, directory: str, allow_unsafe_ops: bool) -> Artifact:
    meta, by_tags = _meta_graph(ref, directory)
    available = {tags: signature_keys(mg) for tags, mg in by_tags.items()}
    is_v2 = _is_v2(meta)
    variables_prefix = posixpath.join(directory, "variables", "variables")
    has_variables = _gfile().exists(variables_prefix + ".index")
    if is_v2:
        if not allow_unsafe_ops:
            _refuse_unsafe_at_load(directory, meta)
        return load_saved_model_v2(ref, directory, meta, available)
    # None at all (exported without a signature_def_map) is like a checkpoint's .meta: the other
    # side lends one, or the "no signature" error lists the candidates.
    required = not (ref.outputs or ref.input_names or not signature_keys(meta))
    signature = _pick_signature(ref, by_tags, meta, required=required)
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


def _meta_graph(ref: ArtifactRef, directory: str) -> tuple[Any, dict[str, Any]]:
    """The MetaGraphDef of the tag set ``ref`` names, and every tag set's, by its sorted tags."""
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415

    pb = posixpath.join(directory, "saved_model.pb")
    text = not _gfile().exists(pb)
    if text:
        pb = posixpath.join(directory, "saved_model.pbtxt")
    saved = _parse(saved_model_pb2.SavedModel(), _read_bytes(pb), pb, "SavedModel", text=text)
    by_tags = {",".join(sorted(mg.meta_info_def.tags)): mg for mg in saved.meta_graphs}
    wanted = ",".join(sorted(t.strip() for t in ref.tag.split(",") if t.strip()))
    refuse_ambiguous_tags(directory, [",".join(sorted(mg.meta_info_def.tags)) for mg in saved.meta_graphs], wanted)
    if wanted not in by_tags:
        raise TftraceError(
            f"{directory} has no tag set {ref.tag!r}; it has {', '.join(repr(t) for t in by_tags) or 'none'}",
            "choose one with --tag",
        )
    return by_tags[wanted], by_tags


def _is_v2(meta: Any) -> bool:
    return len(meta.object_graph_def.nodes) > 0 and len(meta.graph_def.library.function) > 0


def loads_by_running(ref: ArtifactRef) -> bool:
    """Whether loading ``ref`` runs TensorFlow's own loader (a TF2 SavedModel, inlined through
    ``tf.saved_model.load``: tens of seconds for a large model) rather than parsing files. False
    where it cannot be read: :func:`load` is the one to say why."""
    try:
        kind, location = detect(ref.path)
        return kind == "saved_model" and _is_v2(_meta_graph(ref, location)[0])
    except TftraceError:
        return False


def _refuse_unsafe_at_load(directory: str, meta: Any) -> None:
    """Checked before loading: what TensorFlow's load of this TF2 SavedModel would run. A model is
    refused for that, whichever way it is then loaded: a signature that captures only variables is
    loaded alone (:mod:`.tf2_functions`) and runs no initialiser, anything else by that load."""
    found = unsafe_at_load_v2(meta) + unconfined_assets(directory, [(a.tensor_info.name, a.filename) for a in meta.asset_file_def])
    if not found:
        return
    uncalled = [f for f in found if f[0].startswith(f"{UNCALLED}/")]
    said = f"refusing to load {directory}: loading this TF2 SavedModel runs its resource initialisers and restore functions"
    if len(uncalled) < len(found):
        said += ", which would execute ops with effects outside the computation"
    if uncalled:  # not run by the load as tftrace reads it: say so, and why they count
        said += (f"{';' if len(uncalled) < len(found) else ','} and tftrace checks the functions nothing calls too "
                 f"('{UNCALLED}/...'), as it cannot rule out that they run; these hold ops not known to be safe")
    raise TftraceError(f"{said}: {describe_unsafe(found)}", "tftrace reads a TF2 SavedModel by loading it, so every "
                       "command needs this: if you trust the model, pass --allow-unsafe-ops")


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
        if not required and not signature_keys(meta):
            return None
        listing = "; ".join(f"tags {tags!r}: {', '.join(signature_keys(mg)) or 'none'}" for tags, mg in by_tags.items())
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



def _tensor_name(name: str) -> str:
    return name if ":" in name else name + ":0"


def _user_signature(ref: ArtifactRef) -> Signature | None:
    """A signature from --outputs/--input-names; dtypes and shapes are filled in by the op graph."""
    if not ref.outputs:
        return None
    unknown = TensorSpec("", "unknown", None)
    return Signature(
        key=USER_SIGNATURE,
        inputs={n.split(":")[0]: TensorSpec(_tensor_name(n), unknown.dtype, None) for n in ref.input_names},
        outputs={n.split(":")[0]: TensorSpec(_tensor_name(n), unknown.dtype, None) for n in ref.outputs},
        from_user=True,
    )


def _lower_functional_control_flow(artifact: Artifact) -> None:
    """A TF1 graph built with TF2's ``If``/``While`` runs them lowered: trace them so
    (:mod:`.lowering`). The tensors the side names keep their producers as they stand."""
    if artifact.kind not in ("checkpoint", "saved_model_v1", "graphdef"):
        return  # a TF2 SavedModel's signature was inlined and lowered as it loaded
    named = {name.split(":")[0].lstrip("^") for name in (*artifact.ref.outputs, *artifact.ref.input_names)}
    if artifact.signature is not None:
        named |= {spec.name.split(":")[0] for spec in (*artifact.signature.inputs.values(),
                                                       *artifact.signature.outputs.values())}
    meta = artifact.meta_graph
    if meta is None:  # a frozen GraphDef: lowered in a MetaGraphDef of its own
        from tensorflow.core.protobuf import meta_graph_pb2  # noqa: PLC0415 - comes with TF

        meta = meta_graph_pb2.MetaGraphDef(graph_def=artifact.graph_def)
    lowered, note = lower_control_flow(meta, artifact.location, named)
    if note is None:
        return
    artifact.graph_def = lowered.graph_def
    if artifact.meta_graph is not None:
        artifact.meta_graph = lowered
    artifact.control_flow_lowered = True
    artifact.notes.append(note)


def _check_ops_known(graph_def: Any, where: str) -> None:
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
            f"the graph of {where} uses ops unknown to TensorFlow {tf().__version__}: {listed}",
            "load their custom-op library first (tf.load_op_library) or use the TensorFlow build the model was made with",
        )
    missing = _missing_functions(nodes, library)
    if missing:
        listed = ", ".join(f"{func} (called by {name!r})" for func, name in sorted(missing.items())[:5])
        raise TftraceError(
            f"the graph of {where} calls functions it does not define: {listed}",
            "export it again with its function library: optimize_for_inference and other GraphDef tools that rebuild "
            "the graph node by node drop it (a TF2 while loop's body and cond are such functions)",
        )


def _missing_functions(nodes: list[Any], library: set[str]) -> dict[str, str]:
    """Function name -> a node that calls it (a While's ``body``, an If's branch, a call's ``f``)
    where the GraphDef's library lacks it: TensorFlow would refuse it only when the graph runs,
    in words that point at the inputs."""
    missing: dict[str, str] = {}
    for node in nodes:
        for value in node.attr.values():
            called = [value.func.name] if value.HasField("func") else [f.name for f in value.list.func]
            for func in called:
                if func and func not in library and not _is_registered_op(func):
                    missing.setdefault(func, node.name)
    return missing


def _is_registered_op(name: str) -> bool:
    from tensorflow.python.framework import op_def_registry  # noqa: PLC0415

    return op_def_registry.get(name) is not None


def _note_device_pins(artifact: Artifact) -> None:
    pinned = sorted({n.device for n in artifact.graph_def.node if "GPU" in n.device.upper()})
    if pinned:
        count = sum(1 for n in artifact.graph_def.node if "GPU" in n.device.upper())
        artifact.notes.append(
            f"{count} ops are pinned to {', '.join(pinned)}; where that device is missing they run "
            "elsewhere through soft placement"
        )
