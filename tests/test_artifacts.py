"""Loading every kind of artifact users have, including the messy ones (TF in-process).

TensorFlow is imported once per test process (module-scoped ``tf`` fixture): loading is static
(no session except where a test freezes a graph to have a .pb), so it does not depend on the
environment TF read at import. Variants of the sample models (frozen, re-rooted, GPU-pinned,
several tag sets, copies on ``ram://``) are written into temporary directories here, so the
tests never depend on files they did not make or check in.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracer.errors import TftraceError

pytestmark = pytest.mark.slow

OUTPUT_KEYS = ("boxes", "detection_boxes", "detection_classes", "detection_scores", "num_detections", "scores")
OUTPUT_OPS = tuple(f"outputs/{key}" for key in OUTPUT_KEYS)
HALF_PLUS_TWO_SIGNATURES = [
    "classify_x_to_y", "regress_x2_to_y3", "regress_x_to_y", "regress_x_to_y2", "serving_default",
]


@pytest.fixture(scope="module")
def tf() -> Any:
    from tracer._tf import tf as import_tf  # noqa: PLC0415

    return import_tf()


def load(path: Path | str, **ref: Any) -> Any:
    from tracer.artifacts.loader import ArtifactRef  # noqa: PLC0415
    from tracer.artifacts.loader import load as load_artifact  # noqa: PLC0415

    return load_artifact(ArtifactRef(str(path), **ref))


def opgraph(artifact: Any) -> tuple[Any, Any]:
    from tracer.artifacts.graph import build_opgraph  # noqa: PLC0415

    return build_opgraph(artifact)


def error_of(path: Path | str, **ref: Any) -> str:
    with pytest.raises(TftraceError) as caught:
        artifact = load(path, **ref)
        opgraph(artifact)
    return str(caught.value)


def copy_to_gfile(tf: Any, src: Path, dst: str) -> None:
    """Copy a local tree to any tf.io.gfile scheme (``ram://`` here)."""
    for root, _, files in os.walk(src):
        rel = os.path.relpath(root, src)
        target = dst if rel == "." else f"{dst}/{rel}"
        tf.io.gfile.makedirs(target)
        for name in files:
            tf.io.gfile.copy(os.path.join(root, name), f"{target}/{name}", overwrite=True)


@pytest.fixture(scope="module")
def frozen(tf: Any, models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The faithful detector frozen the classic way: a .pb and a .pbtxt GraphDef, no signature."""
    out = tmp_path_factory.mktemp("frozen")
    with tf.Graph().as_default() as graph, tf.compat.v1.Session(graph=graph) as session:
        tf.compat.v1.saved_model.loader.load(session, ["serve"], str(models["detector"]))
        freeze = tf.compat.v1.graph_util.convert_variables_to_constants
        graph_def = freeze(session, graph.as_graph_def(), list(OUTPUT_OPS))
        backbone = freeze(session, graph.as_graph_def(), ["block4/relu"])
    (out / "detector.pb").write_bytes(graph_def.SerializeToString())
    # Text protos parse slowly in Python (the 16 MB dense kernel alone takes ~25 s), so the text
    # form is tested on the conv backbone, which has the same structure.
    (out / "backbone.pb").write_bytes(backbone.SerializeToString())
    tf.io.write_graph(backbone, str(out), "backbone.pbtxt", as_text=True)
    return out


# --------------------------------------------------------------------------- TF1 checkpoints


def test_checkpoint_dir_whose_checkpoint_file_points_to_another_machine(tf: Any, models: dict[str, Path]) -> None:
    ckpt = models["detector_ckpt"]
    state = (ckpt / "checkpoint").read_text()
    written = state.split('model_checkpoint_path: "', 1)[1].split('"', 1)[0]
    assert os.path.isabs(written) and not os.path.exists(written + ".index")  # as after copying a training dir
    assert tf.train.latest_checkpoint(str(ckpt)) is None  # TensorFlow's own lookup gives up here
    art = load(ckpt)
    assert (art.kind, art.location, art.checkpoint_prefix) == ("checkpoint", f"{ckpt}/model.ckpt", f"{ckpt}/model.ckpt")
    assert (art.signature.key, art.tf_version_written) == ("serving_default", "2.21.0")
    assert art.available_signatures == {"(checkpoint .meta)": ["serving_default"]}
    assert art.meta_graph is not None and art.notes == []


@pytest.mark.parametrize("suffix", ["", ".meta", ".index", ".data-00000-of-00001"])
def test_checkpoint_prefix_and_its_files(tf: Any, models: dict[str, Path], suffix: str) -> None:
    prefix = f"{models['detector_ckpt']}/model.ckpt"
    art = load(prefix + suffix)
    assert (art.kind, art.location) == ("checkpoint", prefix)
    graph, sig = opgraph(art)
    assert (len(graph), sorted(sig.outputs)) == (130, list(OUTPUT_KEYS))


def test_checkpoint_weights_are_read_by_value(tf: Any, models: dict[str, Path]) -> None:
    from tracer.artifacts.graph import value_source  # noqa: PLC0415

    art = load(models["detector_ckpt"])
    reader = tf.train.load_checkpoint(f"{models['detector_ckpt']}/model.ckpt")
    values = value_source(art)
    weights = values("block1/conv/weights")
    assert weights.shape == (3, 3, 3, 16) and weights.dtype == np.float32
    np.testing.assert_array_equal(weights, reader.get_tensor("block1/conv/weights"))
    assert values("anchors/anchors").shape == (64, 4)  # a constant, from the graph itself
    assert values("block1/conv/Conv2D") is None  # computed, not stored


def _checkpoint_steps(models: dict[str, Path], directory: Path, steps: tuple[int, ...]) -> None:
    directory.mkdir()
    for step in steps:
        for ext in ("meta", "index", "data-00000-of-00001"):
            shutil.copy(models["detector_ckpt"] / f"model.ckpt.{ext}", directory / f"model.ckpt-{step}.{ext}")


def test_checkpoint_file_with_a_relative_path_chooses_among_several(
    tf: Any, models: dict[str, Path], tmp_path: Path
) -> None:
    _checkpoint_steps(models, tmp_path / "train", (5, 40))
    (tmp_path / "train" / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-5"\n')
    assert load(tmp_path / "train").location == f"{tmp_path}/train/model.ckpt-5"


def test_several_checkpoints_without_a_checkpoint_file(tf: Any, models: dict[str, Path], tmp_path: Path) -> None:
    _checkpoint_steps(models, tmp_path / "train", (5, 40, 300))
    assert error_of(tmp_path / "train") == (
        f"{tmp_path}/train holds several checkpoints (model.ckpt-5.meta, model.ckpt-40.meta, model.ckpt-300.meta) "
        "and no `checkpoint` file says which is current. Pass one checkpoint prefix (or its .meta file) instead of "
        f"the directory, e.g. {tmp_path}/train/model.ckpt-300."
    )
    assert load(tmp_path / "train" / "model.ckpt-40").location == f"{tmp_path}/train/model.ckpt-40"


def test_checkpoint_file_without_a_path(tf: Any, models: dict[str, Path], tmp_path: Path) -> None:
    _checkpoint_steps(models, tmp_path / "train", (5,))
    (tmp_path / "train" / "checkpoint").write_text("all_model_checkpoint_paths: \"model.ckpt-5\"\n")
    assert error_of(tmp_path / "train") == (
        f"{tmp_path}/train/checkpoint has no model_checkpoint_path line. "
        "Pass the checkpoint prefix directly, e.g. DIR/model.ckpt-1000."
    )


def test_checkpoint_without_its_meta_graph(tf: Any, models: dict[str, Path], tmp_path: Path) -> None:
    for ext in ("index", "data-00000-of-00001"):
        shutil.copy(models["detector_ckpt"] / f"model.ckpt.{ext}", tmp_path / f"model.ckpt.{ext}")
    assert error_of(tmp_path / "model.ckpt").startswith(f"checkpoint {tmp_path}/model.ckpt has no graph: "
                                                        f"{tmp_path}/model.ckpt.meta is missing.")


TF2_CHECKPOINT = """
import sys
import keras
import tensorflow as tf
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
tf.train.Checkpoint(model=model, step=tf.Variable(5)).save(sys.argv[1] + "/ckpt")
"""


def test_a_tf2_object_based_checkpoint_is_told_to_export_a_saved_model(tf: Any, tmp_path: Path) -> None:
    """A tf.train.Checkpoint holds no graph, ever: the Saver's write_meta_graph advice helps no one
    who wrote one. Refused as what it is, by the loader and, before any child starts, by the CLI
    (diagnose once printed "[base side] capturing" first)."""
    from conftest import assert_user_error, build_model, run_cli  # noqa: PLC0415

    build_model(TF2_CHECKPOINT, tmp_path / "tf2ckpt")
    said = (f"checkpoint {tmp_path}/tf2ckpt/ckpt-1 is a TF2 object-based checkpoint (tf.train.Checkpoint; its index "
            f"holds _CHECKPOINTABLE_OBJECT_GRAPH), which holds weights but no graph ({tmp_path}/tf2ckpt/ckpt-1.meta "
            "does not exist, and TF2 never writes one). Rebuild the model in Python, restore this checkpoint into it "
            "and export it: tf.saved_model.save(model, 'exported') (Keras 3: model.export('exported')); then give "
            "that directory.")
    assert error_of(tmp_path / "tf2ckpt") == said
    for args in (("diagnose", str(tmp_path / "tf2ckpt")), ("compare", f"{tmp_path}/tf2ckpt/ckpt-1.index", str(tmp_path))):
        proc = run_cli(*args, "--out", str(tmp_path / "out"))
        assert_user_error(proc, f"tftrace: error: {said}")
        assert "capturing" not in proc.stderr and not (tmp_path / "out").exists()


def _tf2_said(prefix: str) -> str:
    return (f"checkpoint {prefix} is a TF2 object-based checkpoint (tf.train.Checkpoint; its index holds "
            f"_CHECKPOINTABLE_OBJECT_GRAPH), which holds weights but no graph ({prefix}.meta does not exist, and TF2 "
            "never writes one). Rebuild the model in Python, restore this checkpoint into it and export it: "
            "tf.saved_model.save(model, 'exported') (Keras 3: model.export('exported')); then give that directory.")


def test_a_tf2_checkpoint_whose_index_is_snappy_compressed_is_told_so_before_any_child(tf: Any, tmp_path: Path) -> None:
    """TensorFlow's table format allows snappy-compressed blocks in an index; such a
    tf.train.Checkpoint was taken for a TF1 Saver's without its .meta (write_meta_graph advice), in
    the parent and in the loader alike. The index here is rewritten byte by byte
    (tests/table_bytes.py) and TensorFlow's own reader reads it back as it wrote it."""
    from conftest import assert_user_error, build_model, run_cli  # noqa: PLC0415
    from table_bytes import compress_index  # noqa: PLC0415

    build_model(TF2_CHECKPOINT, tmp_path / "plain")
    shutil.copytree(tmp_path / "plain", tmp_path / "tf2ckpt")
    index = tmp_path / "tf2ckpt" / "ckpt-1.index"
    index.write_bytes(compress_index(index.read_bytes()))
    plain, packed = (tf.train.load_checkpoint(str(tmp_path / d / "ckpt-1")) for d in ("plain", "tf2ckpt"))
    names = sorted(plain.get_variable_to_shape_map())
    assert sorted(packed.get_variable_to_shape_map()) == names and len(names) == 5
    assert all(np.array_equal(plain.get_tensor(n), packed.get_tensor(n)) for n in names)

    said = _tf2_said(f"{tmp_path}/tf2ckpt/ckpt-1")
    assert error_of(tmp_path / "tf2ckpt") == said
    for args in (("diagnose", str(tmp_path / "tf2ckpt")), ("compare", str(index), str(tmp_path / "plain")),
                 ("capture", f"{tmp_path}/tf2ckpt/ckpt-1")):
        proc = run_cli(*args, "--out", str(tmp_path / "out"))
        assert_user_error(proc, f"tftrace: error: {said}")
        assert "capturing" not in proc.stderr and not (tmp_path / "out").exists()


GS = "gs://tftrace-test-bucket/training/ckpt"


def _offline_gcs(tmp_path: Path) -> dict[str, str]:
    """An environment in which TensorFlow's GCS filesystem fails the same way on any machine: its
    proxy lies under .invalid, which never resolves, and no credentials or GCE metadata are looked for."""
    (tmp_path / "gcloud").mkdir(exist_ok=True)
    proxy = "http://proxy.invalid:9"
    return {"https_proxy": proxy, "http_proxy": proxy, "HTTPS_PROXY": proxy, "HTTP_PROXY": proxy,
            "NO_GCE_CHECK": "true", "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), "GOOGLE_APPLICATION_CREDENTIALS": ""}


def test_a_gs_path_that_cannot_be_read_is_refused_before_anything_is_captured(models: dict[str, Path],
                                                                                tmp_path: Path) -> None:
    """A gs:// checkpoint was read only by the capture child: diagnose printed "capturing" first.
    Now a short child reads it before anything starts, and the line says what TensorFlow said."""
    from conftest import assert_user_error, run_cli  # noqa: PLC0415

    fix = ("Check the URL, and that this machine reaches it with credentials (gcloud auth application-default "
           "login); or copy the model's files to a local directory (gsutil -m cp -r) and give that.")
    failed = ("TensorFlow's gs:// filesystem said FailedPreconditionError: Error executing an HTTP request: libcurl "
              "code 6 meaning 'Could not resolve hostname', error details: Could not resolve proxy: proxy.invalid")
    for args, where in ((("diagnose", GS), GS), (("capture", f"{GS}-1.index"), f"{GS}-1.index"),
                        (("compare", str(models["detector"]), GS), f"side B's path {GS}")):
        proc = run_cli(*args, "--out", str(tmp_path / "out"), env=_offline_gcs(tmp_path))
        assert_user_error(proc)
        assert proc.stderr.strip().splitlines()[-1] == f"tftrace: error: {where} cannot be read here: {failed}. {fix}"
        assert "capturing" not in proc.stderr and not (tmp_path / "out").exists()


def test_a_remote_tf2_checkpoint_is_judged_from_what_the_child_read(tf: Any, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """What the child answers for a checkpoint without its .meta (its index, read through
    tf.io.gfile) is judged in the parent as a local one is: here the child's reading of a real
    tf.train.Checkpoint stands for a bucket's."""
    from conftest import build_model  # noqa: PLC0415
    from tracer.artifacts import remote  # noqa: PLC0415

    build_model(TF2_CHECKPOINT, tmp_path / "tf2ckpt")
    answer = remote._look(str(tmp_path / "tf2ckpt"))
    assert (answer["kind"], answer["location"], answer["meta"]) == ("checkpoint", f"{tmp_path}/tf2ckpt/ckpt-1", False)
    monkeypatch.setattr(remote, "_ask", lambda path, python, where: answer)
    with pytest.raises(TftraceError) as caught:
        remote.refuse_unreadable_remote("gs://bucket/tf2ckpt", "a")
    assert str(caught.value) == _tf2_said(f"{tmp_path}/tf2ckpt/ckpt-1")
    assert remote._look(str(tmp_path / "nothing")) == {
        "refused": [f"{tmp_path}/nothing does not exist", "check the path (and the scheme, for gs:// or ram://)"]}
    remote.refuse_unreadable_remote(str(tmp_path / "tf2ckpt"))  # a local path: the parent's own checks hold it


def test_a_tf1_checkpoint_without_its_meta_is_refused_before_any_child(models: dict[str, Path],
                                                                       tmp_path: Path) -> None:
    from conftest import assert_user_error, run_cli  # noqa: PLC0415

    for ext in ("index", "data-00000-of-00001"):
        shutil.copy(models["detector_ckpt"] / f"model.ckpt.{ext}", tmp_path / f"model.ckpt.{ext}")
    proc = run_cli("diagnose", str(tmp_path / "model.ckpt"), "--out", str(tmp_path / "out"))
    assert_user_error(proc, f"checkpoint {tmp_path}/model.ckpt has no graph: {tmp_path}/model.ckpt.meta is missing. "
                            "Tftrace needs the .meta file written by tf.compat.v1.train.Saver (write_meta_graph=True)")
    assert "capturing" not in proc.stderr


def test_checkpoint_meta_without_a_signature(tf: Any, models: dict[str, Path], tmp_path: Path) -> None:
    """An old training checkpoint: its .meta names no inputs or outputs; --outputs says what to trace."""
    from tensorflow.core.protobuf import meta_graph_pb2  # noqa: PLC0415

    meta = meta_graph_pb2.MetaGraphDef()
    meta.ParseFromString((models["detector_ckpt"] / "model.ckpt.meta").read_bytes())
    meta.ClearField("signature_def")
    (tmp_path / "model.ckpt.meta").write_bytes(meta.SerializeToString())
    for ext in ("index", "data-00000-of-00001"):
        shutil.copy(models["detector_ckpt"] / f"model.ckpt.{ext}", tmp_path / f"model.ckpt.{ext}")
    message = error_of(tmp_path / "model.ckpt")
    assert message == (
        f"{tmp_path}/model.ckpt has no signature to say what to trace (candidate inputs: images; candidate "
        "outputs, best first: outputs/detection_boxes, outputs/detection_classes, outputs/detection_scores, "
        "outputs/boxes, outputs/scores, outputs/num_detections). Name them with --outputs NAME[,NAME...] and "
        "--input-names NAME[,NAME...], e.g. --outputs outputs/detection_boxes --input-names images."
    )
    graph, sig = opgraph(load(tmp_path / "model.ckpt", outputs=("outputs/scores",), input_names=("images",)))
    assert (sig.key, sig.from_user, sig.outputs["outputs/scores"].shape) == ("(from --outputs)", True, (None, 64, 4))
    assert len(graph) == 72 and "nms/combined_non_max_suppression/CombinedNonMaxSuppression" not in graph


# --------------------------------------------------------------------------- SavedModels


def test_tf1_saved_model(tf: Any, models: dict[str, Path]) -> None:
    art = load(models["detector"])
    assert (art.kind, art.location, art.checkpoint_prefix) == (
        "saved_model_v1", str(models["detector"]), f"{models['detector']}/variables/variables")
    assert art.available_signatures == {"serve": ["serving_default"]}
    assert art.signature.inputs["images"].to_json() == {"name": "images:0", "dtype": "float32",
                                                        "shape": [None, 64, 64, 3]}
    assert art.signature.method_name == "tensorflow/serving/predict"
    assert "saved_model.pb" not in art.describe() and art.describe().startswith("TF1-style SavedModel at ")


def test_tf2_saved_model_is_inlined_with_its_variables_kept(tf: Any, models: dict[str, Path]) -> None:
    from tracer.artifacts.graph import value_source  # noqa: PLC0415
    from tracer.diff.match import canonical_tensor  # noqa: PLC0415

    art = load(models["detector_tf2"])
    assert (art.kind, art.inlined_by_loader, art.meta_graph, art.checkpoint_prefix) == (
        "saved_model_v2", True, None, None)
    assert art.available_signatures == {"serve": ["serving_default"]}  # not TF2's __saved_model_init_op
    assert art.notes == ["TF2 signature function inlined for tracing (its variables kept as variables)"]
    op_types = {node.op for node in art.graph_def.node}
    assert not op_types & {"StatefulPartitionedCall", "PartitionedCall"}
    assert {"VarHandleOp", "ReadVariableOp", "FusedBatchNormV3", "CombinedNonMaxSuppression"} <= op_types
    assert len(art.variable_values) == 26  # 4 conv kernels, 4 x 4 batch-norm parameters, 6 dense/head
    graph, sig = opgraph(art)
    assert {k: (v.name, v.dtype, v.shape) for k, v in sig.inputs.items()} == {
        "images": ("images:0", "float32", (None, 64, 64, 3))}
    assert [sig.outputs[k].name for k in OUTPUT_KEYS] == ["Identity:0"] + [f"Identity_{i}:0" for i in range(1, 6)]
    conv = "StatefulPartitionedCall/detector/block1/conv/Conv2D"
    handle = canonical_tensor(graph, graph.data_inputs(conv)[1]).split(":")[0]
    assert graph.op_type(handle) == "VarHandleOp"
    reader = tf.train.load_checkpoint(f"{models['detector_ckpt']}/model.ckpt")
    np.testing.assert_array_equal(value_source(art)(handle), reader.get_tensor("block1/conv/weights"))


def test_serving_version_dirs_take_the_newest_version(tf: Any, real_models: dict[str, Path], tmp_path: Path) -> None:
    assert load(real_models["half_plus_two"]).location == f"{real_models['half_plus_two']}/00000123"
    for version in ("7", "10", "9"):
        shutil.copytree(real_models["half_plus_two"] / "00000123", tmp_path / version)
    (tmp_path / "11").mkdir()  # a version still being written: no saved_model.pb yet
    assert load(tmp_path).location == f"{tmp_path}/10"
    assert load(tmp_path / "10" / "saved_model.pb").location == f"{tmp_path}/10"


def test_serving_version_dirs_holding_a_tf1_checkpoint_take_the_newest(tf: Any, models: dict[str, Path],
                                                                        tmp_path: Path) -> None:
    """TF Serving's older layout (its test data's ``bad_half_plus_two``): ``base/<version>/`` holds
    what ``tf.train.Saver`` wrote (``checkpoint``, ``export``, ``export.meta``), no saved_model.pb."""
    for version in ("5", "12"):
        shutil.copytree(models["detector_ckpt"], tmp_path / version)
    (tmp_path / "13").mkdir()  # a version still being written
    art = load(tmp_path)
    assert (art.kind, art.location, art.signature.key) == ("checkpoint", f"{tmp_path}/12/model.ckpt", "serving_default")


def test_a_tflite_model_is_refused_for_what_it_is(tf: Any, tmp_path: Path) -> None:
    """As TF Serving serves one (``base/<version>/model.tflite``): given the base, the version or
    the file, the error names the flatbuffer and what to give instead."""
    version = tmp_path / "half_plus_two_tflite" / "00000123"
    version.mkdir(parents=True)
    (version / "model.tflite").write_bytes(b"\x1c\x00\x00\x00TFL3" + bytes(24))
    for given in (version.parent, version, version / "model.tflite"):
        assert error_of(given) == (
            f"{version}/model.tflite is a TensorFlow Lite model: it runs in the TFLite interpreter with its own "
            "kernels, not as a TensorFlow graph tftrace can capture op by op. Give the SavedModel, checkpoint or "
            "Keras export it was converted from (what tf.lite.TFLiteConverter read).")


def test_tf1_12_model_with_several_signatures(tf: Any, real_models: dict[str, Path]) -> None:
    art = load(real_models["half_plus_two"])
    assert (art.tf_version_written, art.kind) == ("1.12.0-rc0", "saved_model_v1")
    assert art.available_signatures == {"serve": HALF_PLUS_TWO_SIGNATURES}
    regress = load(real_models["half_plus_two"], signature="regress_x_to_y")
    assert regress.signature.method_name == "tensorflow/serving/regress"
    assert regress.signature.inputs["inputs"].to_json() == {"name": "tf_example:0", "dtype": "string", "shape": None}
    classify = load(real_models["half_plus_two"], signature="classify_x_to_y")
    assert (classify.signature.method_name, list(classify.signature.outputs)) == ("tensorflow/serving/classify",
                                                                                  ["scores"])
    assert error_of(real_models["half_plus_two"], signature="predict") == (
        "no signature 'predict' (available — tags 'serve': " + ", ".join(HALF_PLUS_TWO_SIGNATURES) + "). "
        "Choose one with --signature, or name tensors with --outputs/--input-names."
    )


def test_tf1_5_stateful_model(tf: Any, real_models: dict[str, Path]) -> None:
    art = load(real_models["counter"], signature="get_counter")
    assert art.tf_version_written == "1.5.0-rc1"
    assert art.available_signatures == {"serve": ["get_counter", "incr_counter", "incr_counter_by", "reset_counter"]}
    graph, sig = opgraph(art)
    assert (graph.topo_order(), sig.inputs, sig.outputs["output"].name) == (["counter"], {}, "counter:0")
    graph, sig = opgraph(load(real_models["counter"], signature="incr_counter_by"))
    assert graph.topo_order() == ["counter", "delta", "incr_counter_by_op/AssignAdd"]
    assert "serving_default" in error_of(real_models["counter"])


def test_several_tag_sets(tf: Any, models: dict[str, Path], tmp_path: Path) -> None:
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((models["detector"] / "saved_model.pb").read_bytes())
    gpu = saved.meta_graphs.add()
    gpu.CopyFrom(saved.meta_graphs[0])
    gpu.meta_info_def.tags.append("gpu")
    gpu.signature_def["gpu_default"].CopyFrom(gpu.signature_def.pop("serving_default"))
    shutil.copytree(models["detector"] / "variables", tmp_path / "variables")
    (tmp_path / "saved_model.pb").write_bytes(saved.SerializeToString())

    art = load(tmp_path, tag="serve,gpu", signature="gpu_default")
    assert art.available_signatures == {"serve": ["serving_default"], "gpu,serve": ["gpu_default"]}
    assert (art.signature.key, len(opgraph(art)[0])) == ("gpu_default", 130)
    assert load(tmp_path, tag="gpu, serve", signature="gpu_default").signature.key == "gpu_default"
    assert load(tmp_path).signature.key == "serving_default"
    assert error_of(tmp_path, tag="tpu") == (
        f"{tmp_path} has no tag set 'tpu'; it has 'serve', 'gpu,serve'. Choose one with --tag.")
    assert error_of(tmp_path, tag="gpu,serve") == (
        "no signature 'serving_default' (available — tags 'serve': serving_default; tags 'gpu,serve': gpu_default). "
        "Choose one with --signature, or name tensors with --outputs/--input-names."
    )


def test_ops_pinned_to_a_gpu_load_with_a_notice(tf: Any, models: dict[str, Path], tmp_path: Path) -> None:
    from tensorflow.core.protobuf import saved_model_pb2  # noqa: PLC0415

    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((models["detector"] / "saved_model.pb").read_bytes())
    for node in saved.meta_graphs[0].graph_def.node:
        if node.name.startswith(("block", "dense")):
            node.device = "/device:GPU:0"
    pinned = sum(1 for n in saved.meta_graphs[0].graph_def.node if "GPU" in n.device)
    assert pinned == 111 and "/device:CPU:0" in {n.device for n in saved.meta_graphs[0].graph_def.node}  # the saver's
    shutil.copytree(models["detector"] / "variables", tmp_path / "variables")
    (tmp_path / "saved_model.pb").write_bytes(saved.SerializeToString())
    art = load(tmp_path)
    assert art.notes == [f"{pinned} ops are pinned to /device:GPU:0; where that device is missing they run "
                         "elsewhere through soft placement"]
    graph, _ = opgraph(art)
    assert graph.node("block1/conv/Conv2D")["device"] == "/device:GPU:0"
    assert graph.node("images")["device"] == ""


# --------------------------------------------------------------------------- frozen GraphDefs


def test_frozen_graph_def_without_signature_lists_candidates(tf: Any, frozen: Path) -> None:
    pb = frozen / "detector.pb"
    assert error_of(pb) == (
        f"{pb} has no signature to say what to trace (candidate inputs: images; candidate outputs, best first: "
        + ", ".join(("outputs/detection_boxes", "outputs/detection_classes", "outputs/detection_scores",
                     "outputs/boxes", "outputs/scores", "outputs/num_detections"))  # the count, an int32, last
        + "). Name them with --outputs NAME[,NAME...] and --input-names NAME[,NAME...], "
        "e.g. --outputs outputs/detection_boxes --input-names images."
    )
    art = load(pb, outputs=OUTPUT_OPS, input_names=("images",))
    graph, sig = opgraph(art)
    assert (art.kind, art.location, art.meta_graph, len(graph)) == ("graphdef", str(pb), None, 130)
    assert sig.inputs["images"].to_json() == {"name": "images:0", "dtype": "float32", "shape": [None, 64, 64, 3]}
    assert sig.outputs["outputs/num_detections"].to_json() == {
        "name": "outputs/num_detections:0", "dtype": "int32", "shape": [None]}
    assert {graph.op_type(n) for n in graph.topo_order()} & {"VariableV2", "VarHandleOp"} == set()


def test_pb_and_pbtxt_give_the_same_op_graph(tf: Any, frozen: Path) -> None:
    assert "candidate inputs: images; candidate outputs, best first: block4/relu)" in error_of(frozen / "backbone.pbtxt")
    ref = {"outputs": ("block4/relu",), "input_names": ("images",)}
    pb, _ = opgraph(load(frozen / "backbone.pb", **ref))
    text, _ = opgraph(load(frozen / "backbone.pbtxt", **ref))
    assert pb.to_json() == text.to_json()
    assert len(pb) == 1 + 4 * 13  # images; per block: weights + read, 4 batch-norm parameters + reads, conv, bn, relu


def test_outputs_alone_feed_the_placeholders_they_need(tf: Any, frozen: Path) -> None:
    graph, sig = opgraph(load(frozen / "detector.pb", outputs=("outputs/scores:0",)))
    assert {k: v.to_json() for k, v in sig.inputs.items()} == {
        "images": {"name": "images:0", "dtype": "float32", "shape": [None, 64, 64, 3]}}
    assert graph.inputs == {"images": "images:0"} and graph.outputs == {"outputs/scores": "outputs/scores:0"}
    assert error_of(frozen / "detector.pb", outputs=("outputs/scores:3",)).startswith(
        "signature output 'outputs/scores' names tensor 'outputs/scores:3', which is not in the graph")
    assert error_of(frozen / "detector.pb", outputs=("logits",)) == (
        f"signature output 'logits' names tensor 'logits:0', which is not in the graph of {frozen}/detector.pb. "
        "Check --outputs/--input-names (op names, optionally with :slot)."
    )


def test_frozen_export_against_its_checkpoint(tf: Any, models: dict[str, Path], frozen: Path) -> None:
    """Every variable became a constant of exactly the checkpoint's value; nothing else changed."""
    from tracer.comparison.static import diff_artifacts  # noqa: PLC0415
    from tracer.artifacts.loader import ArtifactRef  # noqa: PLC0415

    result = diff_artifacts(str(models["detector_ckpt"]),
                            ArtifactRef(str(frozen / "detector.pb"), outputs=OUTPUT_OPS, input_names=("images",)))
    diff = result.diff
    assert (diff.matched, diff.only_in_a, diff.only_in_b) == (130, [], [])
    assert {r.kind for r in diff.rewrites} == {"variable_frozen"}
    assert len(diff.rewrites) == 26
    assert all(r.detail == {"exact": True, "verified_by_value": True} for r in diff.rewrites)
    assert sorted(r.a_nodes[0] for r in diff.rewrites) == sorted(
        n for n in result.graph_a.topo_order() if result.graph_a.op_type(n) == "VariableV2")
    assert all(r.a_nodes == r.b_nodes and len(r.a_nodes) == 1 for r in diff.rewrites)  # the /read stays matched


# --------------------------------------------------------------------------- other file systems


def test_ram_file_system(tf: Any, models: dict[str, Path]) -> None:
    from tracer.artifacts.graph import value_source  # noqa: PLC0415

    copy_to_gfile(tf, models["detector"], "ram://tftrace-test/savedmodel")
    copy_to_gfile(tf, models["detector_ckpt"], "ram://tftrace-test/ckpt")
    saved = load("ram://tftrace-test/savedmodel")
    assert (saved.kind, saved.checkpoint_prefix) == (
        "saved_model_v1", "ram://tftrace-test/savedmodel/variables/variables")
    ckpt = load("ram://tftrace-test/ckpt")  # its `checkpoint` file names a local path that does not exist
    assert (ckpt.kind, ckpt.location) == ("checkpoint", "ram://tftrace-test/ckpt/model.ckpt")
    assert len(opgraph(ckpt)[0]) == len(opgraph(saved)[0]) == 130
    reader = tf.train.load_checkpoint(f"{models['detector_ckpt']}/model.ckpt")
    for art in (saved, ckpt):
        np.testing.assert_array_equal(value_source(art)("dense/biases"), reader.get_tensor("dense/biases"))
    assert error_of("ram://tftrace-test/nothing") == (
        "ram://tftrace-test/nothing does not exist. Check the path (and the scheme, for gs:// or ram://).")


def test_ram_file_system_tf2(tf: Any, models: dict[str, Path]) -> None:
    copy_to_gfile(tf, models["detector_tf2"], "ram://tftrace-test/tf2")
    art = load("ram://tftrace-test/tf2")
    assert (art.kind, len(art.variable_values), len(opgraph(art)[0])) == ("saved_model_v2", 26, 178)


# --------------------------------------------------------------------------- what is not a model


def test_capture_directories_are_recognised_not_loaded(tf: Any, tmp_path: Path) -> None:
    from tracer.artifacts.loader import detect  # noqa: PLC0415

    (tmp_path / "done" / "tensors").mkdir(parents=True)
    (tmp_path / "done" / "manifest.json").write_text("{}")
    (tmp_path / "partial" / "tensors").mkdir(parents=True)
    assert detect(str(tmp_path / "done")) == ("capture", str(tmp_path / "done"))
    assert error_of(tmp_path / "done").startswith(f"{tmp_path}/done is a capture directory, not a model.")
    assert error_of(tmp_path / "partial") == (
        f"incomplete capture at {tmp_path}/partial: manifest.json is missing. "
        "The capture was interrupted or is still running; re-run the capture with --force."
    )


def test_unrecognised_file(tf: Any, tmp_path: Path) -> None:
    (tmp_path / "model.onnx").write_bytes(b"\x08\x07")  # a .tflite is told what it is (above)
    assert error_of(tmp_path / "model.onnx") == (
        f"{tmp_path}/model.onnx is a file tftrace does not recognise. Give a SavedModel directory, a checkpoint "
        "directory or prefix, or a GraphDef ending in .pb or .pbtxt."
    )


def test_keras_weights_and_a_directory_holding_a_keras_file_say_how_to_export(tf: Any, tmp_path: Path) -> None:
    (tmp_path / "w.weights.h5").write_bytes(b"\x89HDF")
    assert error_of(tmp_path / "w.weights.h5") == (
        f"{tmp_path}/w.weights.h5 holds a Keras model's weights only (model.save_weights), not a graph tftrace can "
        "run. Rebuild the model in Python, load these weights into it (model.load_weights(...)) and export it as a "
        "SavedModel: model.export('exported'); then give that directory."
    )
    (tmp_path / "saved").mkdir()
    (tmp_path / "saved" / "model.keras").write_bytes(b"PK")
    assert error_of(tmp_path / "saved").startswith(f"{tmp_path}/saved/model.keras is a Keras model file")


def test_keras_file_is_refused_with_the_export_that_makes_it_readable(tf: Any, tmp_path: Path) -> None:
    (tmp_path / "model.h5").write_bytes(b"\x89HDF")
    assert error_of(tmp_path / "model.h5") == (
        f"{tmp_path}/model.h5 is a Keras model file; tftrace reads TensorFlow graphs, and a Keras file holds a "
        "Python model. Export it as a SavedModel and give that directory: in Python, "
        f"keras.models.load_model('{tmp_path}/model.h5').export('exported') (Keras 3; `tf.saved_model.save(model, "
        "'exported')` works too)."
    )


_TF1_MAP_FN = textwrap.dedent("""
    import sys, tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.disable_control_flow_v2()  # TF1's loops: Enter/Merge/NextIteration, TensorArrays
    g = tf.Graph()
    with g.as_default():
        images = tf.compat.v1.placeholder(tf.float32, [None, 4], name="images")
        w = tf.constant([[0.5], [1.0], [-1.0], [2.0]])
        def per_image(x):
            scores = tf.matmul(x[None, :], w)[0]
            return scores * 2.0, tf.shape(tf.where(scores > 0.0))[0]
        scores, counts = tf.map_fn(per_image, images, dtype=(tf.float32, tf.int32))
        tf.identity(scores, name="detection_scores")
        tf.identity(counts, name="num_detections")
    tf.io.write_graph(g.as_graph_def(), sys.argv[1], "map_fn.pb", as_text=False)
""")


def test_candidate_outputs_of_a_tf1_loop_graph_are_its_results_not_its_back_edges(tmp_path: Path) -> None:
    """A TF1 loop's NextIteration is created after the Merge it feeds, so "creation order is
    producers first" does not hold there: the back edges once headed the candidate outputs, and
    the results after the loop were missing."""
    subprocess.run([sys.executable, "-c", _TF1_MAP_FN, str(tmp_path)], check=True, capture_output=True, timeout=300)
    pb = tmp_path / "map_fn.pb"
    assert error_of(pb) == (
        f"{pb} has no signature to say what to trace (candidate inputs: images; candidate outputs, best first: "
        "detection_scores). Name them with --outputs NAME[,NAME...] and --input-names NAME[,NAME...], "
        "e.g. --outputs detection_scores --input-names images."
    )


_TF1_TRAINING_GRAPH = textwrap.dedent("""
    import sys, tensorflow as tf
    tf.compat.v1.disable_eager_execution()
    g = tf.Graph()
    with g.as_default():
        images = tf.compat.v1.placeholder(tf.float32, [None, 4], name="images")
        logits = tf.matmul(images, tf.constant([[0.5, 1.0], [1.0, -1.0], [-1.0, 0.0], [2.0, 0.5]]), name="logits")
        tf.nn.softmax(logits, name="probs")
        tf.reduce_mean(tf.square(logits), name="loss")  # a loss from the logits alone: one number
    tf.io.write_graph(g.as_graph_def(), sys.argv[1], "train.pb", as_text=False)
""")


def test_a_loss_reduced_to_one_number_is_not_the_first_candidate_output(tmp_path: Path) -> None:
    """A training graph whose loss needs no labels (a regulariser on the logits) lies deeper
    than the prediction; the prediction, which keeps a value per example, comes first."""
    subprocess.run([sys.executable, "-c", _TF1_TRAINING_GRAPH, str(tmp_path)], check=True, capture_output=True,
                   timeout=300)
    pb = tmp_path / "train.pb"
    assert error_of(pb) == (
        f"{pb} has no signature to say what to trace (candidate inputs: images; candidate outputs, best first: "
        "probs, loss). Name them with --outputs NAME[,NAME...] and --input-names NAME[,NAME...], "
        "e.g. --outputs probs --input-names images."
    )


NO_SIGNATURES = '''
import sys
import tensorflow as tf

class Scorer(tf.Module):  # saved as a TF Hub module is: its tf.functions, no serving signature
    def __init__(self):
        self.w = tf.Variable(tf.random.stateless_normal([4, 3], seed=[1, 2]))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def score(self, x):
        return tf.nn.relu(tf.matmul(x, self.w))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def logits(self, x):
        return tf.matmul(x, self.w)

tf.saved_model.save(Scorer(), sys.argv[1])
'''


def test_a_tf2_savedmodel_saved_without_signatures_is_refused_with_the_export_that_gives_one(tmp_path: Path) -> None:
    """Two tf.functions and no signature: TensorFlow writes none, and nothing says what to trace.
    The refusal names the functions and the export to type; it used to say "it has none. Choose
    one with --signature", which there is none to choose."""
    from conftest import assert_user_error, build_model, run_cli  # noqa: PLC0415

    model = tmp_path / "scorer"
    build_model(NO_SIGNATURES, model)
    for command in (("compare", str(model), str(model), "--out", str(tmp_path / "out")),
                    ("diff-graph", str(model), str(model))):
        proc = run_cli(*command, env={"CUDA_VISIBLE_DEVICES": "-1"})
        assert_user_error(proc, f"{model} was saved without signatures, so nothing names the inputs and outputs to "
                                "trace (its object's tf.functions: logits, score)",
                          "tf.saved_model.save(obj, DIR, signatures={'serving_default': "
                          "obj.logits.get_concrete_function(tf.TensorSpec(SHAPE, DTYPE))})")
    assert not (tmp_path / "out" / "report.json").exists()
