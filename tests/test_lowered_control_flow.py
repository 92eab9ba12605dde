"""TF1 code run on TensorFlow 2 with only ``disable_eager_execution()`` builds ``tf.cond`` as an
``If`` op whose branches are library functions. Its training checkpoint's batch norm, switched by an
``is_training`` placeholder, lives inside ``bn/cond``'s then-branch.

Traced as one op, ``bn/cond`` fed ``is_training=True`` at batch 1 against batch 8 was reported as
the origin whose "own kernel differs", blamed on a shape-dependent kernel choice: a confident,
wrong cause. Lowered as TensorFlow runs it (:mod:`tracer.artifacts.lowering`), the batch norm in
the branch that ran is the origin, and the verdict is the training graph's batch statistics.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import build_model, run_cli

pytestmark = pytest.mark.slow

_TRAINING = """
import sys
import numpy as np
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()  # graph mode, TF2 control flow: tf.cond is an If with function branches
out = sys.argv[1]
with tf.Graph().as_default():
    x = v1.placeholder(tf.float32, [None, 6, 6, 2], name="x")
    is_training = v1.placeholder(tf.bool, [], name="is_training")
    kernel = v1.get_variable("conv/kernel", [3, 3, 2, 4])
    h = tf.nn.conv2d(x, kernel, 1, "SAME", name="conv")
    scale = v1.get_variable("bn/gamma", [4], initializer=v1.ones_initializer())
    offset = v1.get_variable("bn/beta", [4], initializer=v1.zeros_initializer())
    mean = v1.get_variable("bn/moving_mean", [4], initializer=v1.zeros_initializer(), trainable=False)
    variance = v1.get_variable("bn/moving_variance", [4], initializer=v1.ones_initializer(), trainable=False)
    y = tf.cond(is_training,
                lambda: v1.nn.fused_batch_norm(h, scale, offset, is_training=True)[0],
                lambda: v1.nn.fused_batch_norm(h, scale, offset, mean, variance, is_training=False)[0],
                name="bn/cond")
    probs = tf.nn.softmax(tf.reduce_mean(tf.nn.relu(y), axis=[1, 2]), name="probs")
    with v1.Session() as s:
        s.run(v1.global_variables_initializer())
        v1.train.Saver().save(s, out + "/ckpt/model.ckpt")
        builder = v1.saved_model.Builder(out + "/export")
        builder.add_meta_graph_and_variables(s, ["serve"], signature_def_map={
            "serving_default": v1.saved_model.predict_signature_def({"x": x, "is_training": is_training},
                                                                   {"probs": probs})})
        builder.save()
"""


@pytest.fixture(scope="module")
def model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cond_v2")
    build_model(_TRAINING, out)
    rng = np.random.default_rng(3)
    images = rng.standard_normal((8, 6, 6, 2)).astype(np.float32)
    np.savez(out / "training.npz", x=images, is_training=np.array(True))
    np.savez(out / "serving.npz", x=images, is_training=np.array(False))
    return out


def test_a_batch_norm_in_a_functional_cond_is_the_origin_and_the_cause_is_the_training_graph(
        model: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = run_cli("compare", str(model / "ckpt"), str(model / "ckpt"), "--input-names", "x,is_training",
                   "--outputs", "probs", "--inputs", str(model / "training.npz"), "--a-batch-size", "1",
                   "--b-batch-size", "8", "--onednn", "off", "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["first_divergence"]["node"] == "bn/cond/then/_0/FusedBatchNormV3"
    assert report["origins"][0]["isolation"]["verdict"] == "batch_statistics"
    assert report["answers"]["causes"][0] == "training_graph"
    notes = report["sides"]["a"]["notes"]
    assert any(note.startswith("1 functional control-flow op (bn/cond) lowered") for note in notes), notes


def test_the_checkpoint_and_its_tf1_export_lowered_alike_are_identical(model: Path, tmp_path: Path) -> None:
    out = tmp_path / "report"
    proc = run_cli("compare", str(model / "ckpt"), str(model / "export"), "--inputs", str(model / "serving.npz"),
                   "--onednn", "off", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "identical"
    assert report["rewrites"] == []
    for side in "ab":  # the TF1 SavedModel ran through TensorFlow's own loader, given the lowered graph
        assert any("(bn/cond) lowered" in note for note in report["sides"][side]["notes"])
    assert report["nodes"]["bn/cond/else/_1/FusedBatchNormV3"]["status"] == "identical"


def _meta_graph(path: Path):  # noqa: ANN202 - a MetaGraphDef
    from tensorflow.core.protobuf import meta_graph_pb2  # noqa: PLC0415 - TF in this test alone

    meta = meta_graph_pb2.MetaGraphDef()
    meta.ParseFromString(path.read_bytes())
    return meta


def test_the_processes_of_one_command_lower_a_graph_once_between_them(model: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """The first process lowers and leaves the graph in the command's folder; the next reads it back
    without asking Grappler, byte for byte the same. Other kept names, or a cut file, lower again."""
    from tensorflow.python.grappler import tf_optimizer  # noqa: PLC0415

    from tracer.artifacts.lowered_folder import CACHE_ENV  # noqa: PLC0415
    from tracer.artifacts.lowering import lower_control_flow  # noqa: PLC0415
    from tracer.errors import TftraceError  # noqa: PLC0415

    folder = tmp_path / "lowered"  # named, made by the first process that lowers
    monkeypatch.setenv(CACHE_ENV, str(folder))
    meta, kept = _meta_graph(model / "ckpt" / "model.ckpt.meta"), {"x", "is_training", "probs"}
    first, note = lower_control_flow(meta, "ckpt", kept)
    [stored] = list(folder.iterdir())
    assert stored.suffix == ".pb" and note.startswith("1 functional control-flow op (bn/cond) lowered")

    def no_grappler(*_: object) -> None:
        raise RuntimeError("Grappler was asked")

    with monkeypatch.context() as patch:
        patch.setattr(tf_optimizer, "OptimizeGraph", no_grappler)
        again, note_again = lower_control_flow(meta, "ckpt", kept)
        assert again.SerializeToString(deterministic=True) == first.SerializeToString(deterministic=True)
        assert note_again == note and len(list(folder.iterdir())) == 1
        with pytest.raises(TftraceError, match="Grappler was asked"):  # other names kept: another graph
            lower_control_flow(meta, "ckpt", {"x"})
        stored.write_bytes(stored.read_bytes()[:200])  # a cut file is no lowered graph
        with pytest.raises(TftraceError, match="Grappler was asked"):
            lower_control_flow(meta, "ckpt", kept)
    lowered_again, _ = lower_control_flow(meta, "ckpt", kept)  # and is replaced, whole
    assert lowered_again.SerializeToString(deterministic=True) == first.SerializeToString(deterministic=True)
    from tensorflow.core.framework import graph_pb2  # noqa: PLC0415

    replaced = graph_pb2.GraphDef()
    replaced.ParseFromString(stored.read_bytes())
    assert replaced.SerializeToString(deterministic=True) == first.graph_def.SerializeToString(deterministic=True)


def test_a_compare_shares_its_lowered_graph_and_leaves_no_folder_behind(model: Path, tmp_path: Path) -> None:
    """``compare`` loads the checkpoint in its own process, both captures and the replays: one
    lowered graph between them, in a folder of its own under TMPDIR that is gone when it ends."""
    temp = tmp_path / "tmp"
    temp.mkdir()
    out = tmp_path / "report"
    proc = run_cli("compare", str(model / "ckpt"), str(model / "ckpt"), "--input-names", "x,is_training",
                   "--outputs", "probs", "--inputs", str(model / "training.npz"), "--a-batch-size", "1",
                   "--b-batch-size", "8", "--onednn", "off", "--out", str(out), env={"TMPDIR": str(temp)})
    assert proc.returncode == 1, proc.stderr
    assert json.loads((out / "report.json").read_text())["first_divergence"]["node"] == "bn/cond/then/_0/FusedBatchNormV3"
    assert not [p.name for p in temp.iterdir() if p.name.startswith("tftrace-lowered-")]
    shared = tmp_path / "shared"  # a folder named by the caller is used as it stands, and kept
    shared.mkdir(mode=0o700)
    proc = run_cli("compare", str(model / "ckpt"), str(model / "ckpt"), "--input-names", "x,is_training",
                   "--outputs", "probs", "--inputs", str(model / "training.npz"), "--a-batch-size", "1",
                   "--b-batch-size", "8", "--onednn", "off", "--out", str(tmp_path / "again"),
                   env={"TFTRACE_LOWERED_GRAPHS": str(shared)})
    assert proc.returncode == 1, proc.stderr
    assert len(list(shared.glob("*.pb"))) == 1, sorted(shared.iterdir())


def test_a_cond_tensorflow_cannot_lower_is_refused_naming_it_and_the_way_out() -> None:
    """An ``If`` whose branches the library lacks (a graph cut by a GraphDef tool): Grappler cannot
    lower it, and the user is told which op and how to export the model instead."""
    from tensorflow.core.protobuf import meta_graph_pb2  # noqa: PLC0415 - TF in this test alone

    from tracer.artifacts.lowering import lower_control_flow  # noqa: PLC0415
    from tracer.errors import TftraceError  # noqa: PLC0415

    meta = meta_graph_pb2.MetaGraphDef()
    fed = meta.graph_def.node.add(name="p", op="Placeholder")
    fed.attr["dtype"].type = 1  # DT_FLOAT
    cond = meta.graph_def.node.add(name="cond", op="If", input=["p", "p"])
    cond.attr["_lower_using_switch_merge"].b = True
    cond.attr["then_branch"].func.name = cond.attr["else_branch"].func.name = "missing_branch"
    cond.attr["Tcond"].type = 1
    cond.attr["Tin"].list.type.append(1)
    cond.attr["Tout"].list.type.append(1)
    with pytest.raises(TftraceError) as info:
        lower_control_flow(meta, "train/model.ckpt")
    said = str(info.value)
    assert said.startswith("TensorFlow could not lower the functional control flow of train/model.ckpt (cond): ")
    assert said.endswith("Export the model with tf.compat.v1.disable_v2_behavior() (TF1 control flow), or give its "
                         "frozen GraphDef or a SavedModel.")
    kept, note = lower_control_flow(meta, "train/model.ckpt", named={"cond"})  # its output named: left as it stands
    assert (kept, note) == (meta, None)


_NESTED = """
import sys
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()
with tf.Graph().as_default():
    x = v1.placeholder(tf.float32, [None, 4], name="x")
    flag = v1.placeholder_with_default(True, [], name="flag")
    y = tf.cond(flag, lambda: tf.cond(tf.reduce_sum(x) > 0, lambda: x * 2.0, lambda: x - 1.0), lambda: x + 1.0)
    def body(i, acc):
        return i + 1, tf.cond(i > 1, lambda: acc * 1.5, lambda: acc + 0.5)
    _, z = tf.while_loop(lambda i, a: i < 4, body, [tf.constant(0), y])
    out = tf.identity(z, name="out")
    v1.get_variable("w", [1])
    with v1.Session() as s:
        s.run(v1.global_variables_initializer())
        v1.train.Saver().save(s, sys.argv[1] + "/model.ckpt")
"""


@pytest.mark.slow
def test_conds_nested_in_a_branch_and_in_a_loop_body_are_lowered_too(tmp_path: Path) -> None:
    """Lowering asks Grappler for one meta-optimizer pass a call, not its default two: a cond
    inside a cond's branch, or inside a loop body, reaches the top only as the outer op is
    inlined, and that one pass must lower it too. None is left, and the batch-dependent inner cond
    (it tests the sum of the whole batch) is the origin of batch 1 against 8, by its batch statistics."""
    from tracer.artifacts.loader import ArtifactRef, load  # noqa: PLC0415
    from tracer.artifacts.lowering import FUNCTIONAL_CONTROL_FLOW  # noqa: PLC0415

    model = tmp_path / "nested"
    model.mkdir()
    build_model(_NESTED, model)
    artifact = load(ArtifactRef(path=str(model), outputs=("out",), input_names=("x",)))
    assert not [n.name for n in artifact.graph_def.node if n.op in FUNCTIONAL_CONTROL_FLOW]
    assert artifact.notes[-1].startswith("2 functional control-flow ops (cond, while) lowered")
    out = tmp_path / "out"
    proc = run_cli("compare", str(model), str(model), "--outputs", "out", "--input-names", "x",
                   "--a-batch-size", "1", "--out", str(out), env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 1, proc.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    origin = report["origins"][0]
    assert origin["node"].startswith("cond/then/_0/cond/") and origin["isolation"]["verdict"] == "batch_statistics"
    prevent = " ".join(report["answers"]["prevent"])  # no batch norm: the reduction itself is the fix
    assert "where the inference graph itself reduces over the batch axis, compute that statistic per example" in prevent
    assert "`cond/then/_0/Sum` (Sum) reduces over the batch axis (axis 0)" in " ".join(report["answers"]["why"])
