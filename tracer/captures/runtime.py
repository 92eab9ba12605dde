"""In the child: a TF1 session for one side, configured exactly as the side says.

Runs only inside the capture/isolation child process (it imports TensorFlow). Every artifact
kind ends as (``tf.Graph``, ``Session``, signature, op graph): checkpoints are imported from
their ``.meta`` and restored, TF1 SavedModels go through the v1 loader (which also runs their
init ops), TF2 SavedModels and frozen GraphDefs are imported as graphs.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

import numpy as np

from .._tf import tf
from ..artifacts.loader import Artifact, ArtifactRef, Signature, detect, load, load_lender
from ..artifacts.graph import build_opgraph
from ..artifacts.tf2_inline import gpu_alternatives_note
from ..errors import TftraceError
from ..artifacts.safety import describe_unsafe, find_unsafe_ops, unconfined_assets
from ..opgraph import OpGraph
from ..optypes import VARIABLE_OPS
from ..runspec import Side, parse_device
from ..text import count
from .reader import Capture, is_capture_dir

__all__ = ["Runtime", "open_runtime", "load_checked", "apply_process_knobs", "session_config", "tf_error_text", "determinism_fix"]

TOGGLE_ON, TOGGLE_OFF = 1, 2  # RewriterConfig.Toggle


@dataclass
class Runtime:
    side: Side
    artifact: Artifact
    graph: Any
    session: Any
    signature: Signature
    opgraph: OpGraph
    notes: list[str]
    config_text: str = ""  # the ConfigProto the session really got, as text (for the manifest)

    def close(self) -> None:
        self.session.close()


def apply_process_knobs(side: Side) -> list[str]:
    """Process-wide switches; must run before any op executes."""
    t = tf()
    notes = []
    if side.knobs.determinism:
        t.config.experimental.enable_op_determinism()
        notes.append("op determinism enabled")
    if side.knobs.tf32 != "default":
        t.config.experimental.enable_tensor_float_32_execution(side.knobs.tf32 == "on")
    kind, index = parse_device(side.device)
    if kind == "gpu":
        gpus = t.config.list_physical_devices("GPU")
        if index >= len(gpus):
            seen = ", ".join(d.name for d in t.config.list_physical_devices()) or "none"
            raise TftraceError(
                f"--device {side.device} asked for a GPU but TensorFlow sees {count(len(gpus), 'GPU')} (devices: {seen})",
                "run this side on the machine with the GPU (tftrace capture there, then compare the capture "
                "directories anywhere), or use --device cpu",
            )
    return notes


def session_config(side: Side) -> Any:
    """ConfigProto: the user's session config file first, then every knob on top of it."""
    t = tf()
    config = t.compat.v1.ConfigProto()
    if side.knobs.session_config_text:
        from google.protobuf import text_format  # noqa: PLC0415

        try:
            text_format.Parse(side.knobs.session_config_text, config)
        except text_format.ParseError as exc:
            raise TftraceError(
                f"session config {side.knobs.session_config_path or ''} is not a valid text ConfigProto: {exc}",
                "write it in protobuf text format, as for TF Serving's --tensorflow_session_config_file",
            ) from exc
    config.allow_soft_placement = True  # models pinned to /device:GPU:0 still load on a CPU machine
    if side.knobs.threads:
        intra, inter = side.knobs.threads
        config.intra_op_parallelism_threads = intra
        if inter:  # --threads 4 keeps the session config's inter-op count
            config.inter_op_parallelism_threads = inter
    rewrite = config.graph_options.rewrite_options
    for key, value in side.knobs.grappler:
        if key == "disable_meta_optimizer":
            rewrite.disable_meta_optimizer = value == "on"
        else:
            setattr(rewrite, key, TOGGLE_ON if value == "on" else TOGGLE_OFF)
    if side.knobs.xla == "on":
        config.graph_options.optimizer_options.global_jit_level = 2  # ON_2
    elif side.knobs.xla == "off":
        config.graph_options.optimizer_options.global_jit_level = -1  # OFF
    kind, index = parse_device(side.device)
    if kind == "gpu":
        config.gpu_options.visible_device_list = str(index)
        config.gpu_options.allow_growth = True
    return config


def open_runtime(side: Side) -> Runtime:
    """Load the side's artifact into a configured session (weights restored)."""
    t = tf()
    notes = apply_process_knobs(side)
    config = session_config(side)  # before loading: a bad config file should not cost a model load
    refuse_oversized_weights(side)  # from the checkpoint's index, before a byte of it is restored
    artifact = load_checked(side)
    graph = t.Graph()
    session = t.compat.v1.Session(graph=graph, config=config)
    try:
        with graph.as_default():
            _restore(artifact, session, side)
    except TftraceError:
        session.close()
        raise
    except Exception as exc:  # restoring foreign artifacts fails in many ways
        session.close()
        raise TftraceError(
            f"TensorFlow could not load {artifact.location} into a session: {type(exc).__name__}: {tf_error_text(exc)}",
            determinism_fix(side, exc)
            or "check that the model runs in this TensorFlow version (and that checkpoint shards are complete)",
        ) from exc
    opgraph, signature = build_opgraph(artifact, graph)
    notes += artifact.notes  # after the op graph: resolving the signature may add one (a shape it contradicts)
    if parse_device(side.device)[0] == "gpu" and artifact.gpu_alternatives:
        notes.append(gpu_alternatives_note(artifact.gpu_alternatives))
    from google.protobuf import text_format  # noqa: PLC0415 - comes with TF

    return Runtime(side, artifact, graph, session, signature, opgraph, notes, text_format.MessageToString(config))


INIT_OP_SIGNATURE = "__saved_model_init_op"  # TF >= 2's v1 loader runs it before the collections
INIT_OP_COLLECTIONS = ("saved_model_main_op", "legacy_init_op", "table_initializer")
UNSAFE_FIX = "inspect the model (tftrace diff-graph works without running it); if you trust it, pass --allow-unsafe-ops"


def weights_prefix(path: str) -> str | None:
    """The checkpoint prefix a side's artifact restores its variables from (None: no variables)."""
    kind, location = detect(path)
    if kind == "checkpoint":
        return location
    if kind == "saved_model":
        prefix = posixpath.join(location, "variables", "variables")
        return prefix if tf().io.gfile.exists(prefix + ".index") else None
    return None


def refuse_oversized_weights(side: Side) -> None:
    """Refuse a checkpoint whose variables exceed ``--max-memory`` before restoring it.

    Restoring reads every variable into memory at once, so the limit must hold before it:
    the index lists each variable's shape and dtype (what the restore allocates), and the
    ``.data`` shards' sizes on disk bound it too (strings, or an index that lies about shapes).
    Reading the index allocates nothing for the values.
    """
    prefix = weights_prefix(side.artifact.path)
    if prefix is None:
        return
    t = tf()
    try:
        reader = t.compat.v1.train.NewCheckpointReader(prefix)
        shapes, dtypes = reader.get_variable_to_shape_map(), reader.get_variable_to_dtype_map()
    except Exception:  # noqa: BLE001 - an unreadable index is reported by the restore with its context
        return
    sizes = {}
    for name, shape in shapes.items():
        dtype = dtypes.get(name)
        itemsize = 1 if dtype is None or dtype == t.string else dtype.size
        sizes[name] = int(np.prod(shape, dtype=object)) * itemsize
    on_disk = sum(t.io.gfile.stat(f).length for f in t.io.gfile.glob(prefix + ".data-*"))
    total = max(sum(sizes.values()), on_disk)
    if total > side.max_memory:
        largest = max(sizes, key=sizes.get) if sizes else None
        biggest = f"; the largest, {largest!r}, {sizes[largest]:,} bytes" if largest else ""
        raise TftraceError(
            f"the weights in {prefix} take {total:,} bytes ({len(sizes)} variables in its index{biggest}), more than "
            f"--max-memory {side.max_memory:,}; restoring them would load them all into memory",
            "raise --max-memory if this machine has the memory for the model's weights",
        )


def load_checked(side: Side) -> Artifact:
    """Load the side's artifact statically, refusing it *before* any of it runs when running it
    would reach outside the computation (see :mod:`tracer.safety`), unless ``allow_unsafe_ops``."""
    # a TF2 load is checked; a side without a signature may borrow a capture's (from its manifest)
    artifact = load(side.artifact, allow_unsafe_ops=side.allow_unsafe_ops, lender=_lender)
    _refuse_unsafe(artifact, side)
    return artifact


def _lender(ref: ArtifactRef, allow_unsafe_ops: bool) -> tuple[Signature, OpGraph] | None:
    """What the other side lends a side without a signature of its own: a capture directory's
    recorded signature and op graph, read from its manifest (no TensorFlow work), else the
    artifact's, loaded statically (:func:`tracer.artifacts.loader.load`'s own way)."""
    if not is_capture_dir(ref.path):
        return load_lender(ref, allow_unsafe_ops)
    manifest = Capture.open(ref.path).manifest
    return Signature.from_json(manifest["signature"]), OpGraph.from_json(manifest["graph"])


def _refuse_unsafe(artifact: Artifact, side: Side) -> None:
    """Nothing runs before this check: what a session will run for this side, checked statically.

    Three things run: the signature's outputs (with its inputs fed); a TF1 SavedModel's init op
    (the ``__saved_model_init_op`` signature, else the main/legacy init op collections; the
    loader feeds the asset tensors, so reading an asset is fine); and the saver's restore op
    (fed the artifact's own checkpoint prefix, so its RestoreV2 is fine, anything else is not).
    """
    roots = []
    if artifact.signature is not None:
        roots += [spec.name for spec in artifact.signature.outputs.values()]
    roots += list(side.artifact.outputs)
    fed = [spec.name for spec in artifact.signature.inputs.values()] if artifact.signature else []
    fed += list(side.artifact.input_names)
    found = find_unsafe_ops(artifact.graph_def, roots, fed)
    meta = artifact.meta_graph
    if meta is not None and artifact.kind == "saved_model_v1":
        init_roots = [t.name for t in meta.signature_def[INIT_OP_SIGNATURE].outputs.values()] if (
            INIT_OP_SIGNATURE in meta.signature_def) else []
        for key in INIT_OP_COLLECTIONS:
            if key in meta.collection_def:
                init_roots += list(meta.collection_def[key].node_list.value)
        pairs = _asset_files(meta)
        outside = unconfined_assets(artifact.location, pairs)  # ../, absolute or a symlink: not the model's own file
        found += outside
        assets = [tensor for tensor, _ in pairs]
        trusted = sorted(set(assets) - {tensor for tensor, _, _ in outside})
        found += find_unsafe_ops(artifact.graph_def, init_roots, assets, trusted_files=trusted)
    if meta is not None and artifact.kind in ("saved_model_v1", "checkpoint") and meta.saver_def.restore_op_name:
        prefix = [meta.saver_def.filename_tensor_name]
        found += find_unsafe_ops(artifact.graph_def, [meta.saver_def.restore_op_name], prefix, trusted_files=prefix)
    found = sorted(set(found))
    if found and not side.allow_unsafe_ops:
        raise TftraceError(
            f"refusing to run {artifact.location}: running it would execute ops with effects outside the "
            f"computation: {describe_unsafe(found)}",
            UNSAFE_FIX,
        )


def _asset_files(meta: Any) -> list[tuple[str, str]]:
    """``(tensor, file name)`` for the tensors the SavedModel loader feeds with ``assets/<file name>``."""
    from tensorflow.core.protobuf import meta_graph_pb2  # noqa: PLC0415 - comes with TF

    pairs = [(a.tensor_info.name, a.filename) for a in meta.asset_file_def]
    collection = meta.collection_def.get("saved_model_assets")  # the layout of TF < 1.13
    for packed in collection.any_list.value if collection is not None else ():
        asset = meta_graph_pb2.AssetFileDef()
        if packed.Unpack(asset):
            pairs.append((asset.tensor_info.name, asset.filename))
    return pairs


def tf_error_text(exc: BaseException, limit: int = 300) -> str:
    """What a TensorFlow error says failed, without its stack traces and framing lines.

    TF's messages start with "Graph execution error:" and end with the Python stack that
    built the op (its ``File "…", line N`` frames); the node and the reason are the useful part.
    """
    text = str(getattr(exc, "message", "") or exc).split("Original stack trace", 1)[0]
    lines = [
        line.strip()
        for line in text.splitlines()
        if line.strip() and not line.strip().startswith(("Graph execution error", "Detected at node", "[[", 'File "'))
    ]
    return "; ".join(lines)[:limit] or type(exc).__name__


def determinism_fix(side: Side, exc: BaseException) -> str | None:
    """The fix when --determinism is what TF refused (random ops without seeds, ops without a
    deterministic kernel), else None."""
    if side.knobs.determinism and "determinis" in str(exc).lower():
        return ("this model cannot run with op determinism in this TensorFlow (see the reason above); "
                "capture it without --determinism")
    return None


def _restore(artifact: Artifact, session: Any, side: Side) -> None:
    t = tf()
    clear_devices = parse_device(side.device)[0] == "cpu"
    if artifact.kind == "saved_model_v1":
        tags = [x.strip() for x in side.artifact.tag.split(",") if x.strip()]
        if artifact.control_flow_lowered:  # its If/While lowered: TF's own loader runs the lowered graph
            _lowered_loader(artifact).load(session, tags, clear_devices=clear_devices)
        else:
            t.compat.v1.saved_model.loader.load(session, tags, artifact.location, clear_devices=clear_devices)
        return
    if artifact.kind == "checkpoint":
        saver = t.compat.v1.train.import_meta_graph(artifact.meta_graph, clear_devices=clear_devices)
        if saver is None:  # a .meta without a SaverDef: restore every global variable by name
            saver = t.compat.v1.train.Saver()
        saver.restore(session, artifact.checkpoint_prefix)
        return
    t.graph_util.import_graph_def(artifact.graph_def, name="")
    if artifact.variable_values or artifact.table_values:  # a TF2 function's variables and tables
        _initialise_tf2_resources(artifact, session)
        return
    variables = [op.name for op in session.graph.get_operations() if op.type in VARIABLE_OPS]
    if variables:
        raise TftraceError(
            f"the GraphDef {artifact.location} still holds variables ({', '.join(variables[:5])}) but no weights",
            "freeze it first (convert_variables_to_constants) or give the checkpoint/SavedModel",
        )


def _lowered_loader(artifact: Artifact) -> Any:
    """TensorFlow's TF1 SavedModel loader (graph, restore, init ops and assets, as ``loader.load``
    runs them) given the artifact's meta graph, whose functional control flow tftrace lowered
    (:mod:`tracer.artifacts.lowering`), instead of the one it would read from the file."""
    from tensorflow.python.saved_model import loader_impl  # noqa: PLC0415 - the class loader.load uses

    class Loader(loader_impl.SavedModelLoader):
        def get_meta_graph_def_from_tags(self, tags: Any) -> Any:
            return artifact.meta_graph

    return Loader(artifact.location)


def _initialise_tf2_resources(artifact: Artifact, session: Any) -> None:
    """Assign the inlined variables their values and fill the inlined tables (see tracer.artifacts.tf2_inline)."""
    t = tf()
    feeds, ops = {}, []

    def fed(value: np.ndarray, name: str) -> Any:
        placeholder = t.compat.v1.placeholder(t.as_dtype(value.dtype), value.shape, name=name)
        feeds[placeholder] = value
        return placeholder

    for name, value in artifact.variable_values.items():
        handle = session.graph.get_tensor_by_name(f"{name}:0")
        ops.append(t.raw_ops.AssignVariableOp(resource=handle, value=fed(value, f"tftrace_init/{name}")))
    for name, (keys, values) in artifact.table_values.items():
        handle = session.graph.get_tensor_by_name(f"{name}:0")
        ops.append(t.raw_ops.InitializeTableV2(table_handle=handle, keys=fed(keys, f"tftrace_init/{name}/keys"),
                                               values=fed(values, f"tftrace_init/{name}/values")))
    session.run(ops, feed_dict=feeds)
