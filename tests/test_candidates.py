"""The candidate outputs offered for a graph without a signature: inference tensors, never training.

A TF1 Saver checkpoint of a training graph names no outputs, so the "no signature" error lists
candidates for ``--outputs``. It once listed the optimiser's updates (``ApplyMomentum``,
``ApplyAdam``: with ref variables each has an output), a moving average's arithmetic and the
``train_op`` among them; fetching those runs a training step. The checkpoints here are written the
way TF1 users wrote them (``tf.compat.v1`` graph, an optimiser's ``minimize``, a summary, a
``Saver``), in a child process; the op lists are held to TensorFlow's own op registry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import assert_user_error, build_model, run_cli

TRAIN = """
import sys
import numpy as np
import tensorflow as tf
v1 = tf.compat.v1
if sys.argv[3] == "ref":
    v1.disable_v2_behavior()  # TF1 ref variables: each optimiser update has an output
else:
    v1.disable_eager_execution()  # resource variables
out, optimiser = sys.argv[1], sys.argv[2]
with tf.Graph().as_default():
    images = v1.placeholder(tf.float32, [None, 8], name="images")
    labels = v1.placeholder(tf.int64, [None], name="labels")
    learning_rate = v1.placeholder_with_default(0.01, [], name="learning_rate")
    with v1.variable_scope("net"):
        w1 = v1.get_variable("w1", [8, 16])
        b1 = v1.get_variable("b1", [16], initializer=v1.zeros_initializer())
        hidden = tf.nn.relu(tf.matmul(images, w1) + b1, name="hidden")
        logits = tf.matmul(hidden, v1.get_variable("w2", [16, 4]), name="logits")
        probs = tf.nn.softmax(logits, name="probs")
    loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
    v1.summary.scalar("loss", loss)
    v1.summary.histogram("logits", logits)
    step = v1.train.get_or_create_global_step()
    if optimiser == "momentum":
        opt = v1.train.MomentumOptimizer(learning_rate, 0.9)
    else:
        opt = v1.train.AdamOptimizer(learning_rate)
    train_op = opt.minimize(loss, global_step=step)
    with tf.control_dependencies([train_op]):
        train_loss = tf.identity(loss, name="train_loss")  # the loss, fetched with the step that trains
    summaries = v1.summary.merge_all()
    saver = v1.train.Saver()
    with v1.Session() as s:
        s.run(v1.global_variables_initializer())
        rng = np.random.RandomState(0)
        for _ in range(3):
            s.run([train_loss, summaries], {images: rng.randn(4, 8), labels: rng.randint(0, 4, 4)})
        saver.save(s, out + "/model.ckpt", global_step=step)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("optimiser", "variables", "update"), [
    ("momentum", "ref", "Momentum/update_net/w1/ApplyMomentum"),
    ("adam", "ref", "Adam/update_net/w1/ApplyAdam"),
    ("adam", "resource", "Adam/update_net/w1/ResourceApplyAdam"),
])
def test_a_training_checkpoint_offers_its_predictions_not_its_training_ops(
        optimiser: str, variables: str, update: str, tmp_path: Path) -> None:
    ckpt = tmp_path / "ckpt"
    build_model(TRAIN, ckpt, optimiser, variables)
    proc = run_cli("capture", str(ckpt), "--out", str(tmp_path / "cap"))
    assert_user_error(proc)
    said = proc.stderr.strip().splitlines()[-1]
    assert said == (
        f"tftrace: error: {ckpt}/model.ckpt-3 has no signature to say what to trace (candidate inputs: images, "
        "labels; candidate outputs, best first: net/probs, sparse_softmax_cross_entropy_loss/value). Name them "
        "with --outputs NAME[,NAME...] and --input-names NAME[,NAME...], e.g. --outputs net/probs --input-names "
        "images."), said  # labels: the loss's alone; learning_rate has a default
    assert not (tmp_path / "cap").exists()
    meta = (ckpt / "model.ckpt-3.meta").read_bytes()  # the training ops are there, and left out for what they are
    assert all(name.encode() in meta for name in (update, "train_loss", "learning_rate", "save/RestoreV2"))


TUTORIAL = """
import sys
import numpy as np
import tensorflow as tf
v1 = tf.compat.v1
if sys.argv[2] == "cf1":
    v1.disable_v2_behavior()  # what the migration guide says: TF1 control flow, Switch/Merge
else:
    v1.disable_eager_execution()  # TF2 control flow: the cond is an If (lowered when tftrace loads it)
with tf.Graph().as_default():
    x = v1.placeholder(tf.float32, [None, 8], name="x")
    keep_prob = v1.placeholder(tf.float32, name="keep_prob")  # no shape, as the tutorial wrote it
    is_training = v1.placeholder(tf.bool, [], name="is_training")
    labels = v1.placeholder(tf.int64, [None], name="labels")
    with v1.variable_scope("net"):
        h = tf.nn.relu(tf.matmul(x, v1.get_variable("w1", [8, 16])), name="hidden")
        mean, var = tf.nn.moments(h, [0])
        m, v = tf.cond(is_training, lambda: (mean, var), lambda: (tf.zeros([16]), tf.ones([16])), name="stats")
        normed = tf.nn.batch_normalization(h, m, v, None, None, 1e-3)
        dropped = tf.nn.dropout(normed, rate=1 - keep_prob)
        logits = tf.matmul(dropped, v1.get_variable("w2", [16, 4]), name="logits")
        probs = tf.nn.softmax(logits, name="probs")
    loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = v1.train.AdamOptimizer(0.01).minimize(loss, global_step=v1.train.get_or_create_global_step())
    with v1.Session() as s:
        s.run(v1.global_variables_initializer())
        rng = np.random.RandomState(0)
        s.run(train_op, {x: rng.randn(4, 8), labels: rng.randint(0, 4, 4), keep_prob: 0.5, is_training: True})
        v1.train.Saver().save(s, sys.argv[1] + "/model.ckpt")
"""


@pytest.mark.slow
@pytest.mark.parametrize("flow", ["cf1", "cf2"])
def test_the_tutorials_prediction_comes_first_and_the_fix_names_its_placeholders(flow: str, tmp_path: Path) -> None:
    """The TF1 tutorial's pattern: ``probs`` needs ``x`` and the two settings ``keep_prob`` and
    ``is_training``. Ranked by the number of placeholders first, the list led with the ops only
    ``x`` reaches (``net/hidden``) and ``probs`` came after them; and the user was left to find
    which placeholders it needs."""
    ckpt = tmp_path / "ckpt"
    build_model(TUTORIAL, ckpt, flow)
    proc = run_cli("capture", str(ckpt), "--out", str(tmp_path / "cap"))
    assert_user_error(proc)
    said = proc.stderr.strip().splitlines()[-1]
    assert "candidate inputs: x, keep_prob, is_training, labels; candidate outputs, best first: net/probs, " in said
    assert said.endswith("e.g. --outputs net/probs --input-names x,keep_prob,is_training."), said
    assert "Func/" not in said and "branch_executed" not in said  # a lowered cond's plumbing is no output


QUEUED = """
import sys
import numpy as np
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_v2_behavior()
with tf.Graph().as_default():  # the CIFAR-10 tutorial's shape: the examples come from a queue, no placeholder
    data = tf.constant(np.random.RandomState(0).rand(64, 8, 8, 3).astype(np.float32))
    labels_all = tf.constant(np.random.RandomState(1).randint(0, 4, 64).astype(np.int32))
    image, label = v1.train.slice_input_producer([data, labels_all], shuffle=True, seed=1)
    images, labels = v1.train.shuffle_batch([image, label], batch_size=16, capacity=64, min_after_dequeue=16, seed=2)
    h = tf.nn.relu(tf.nn.conv2d(images, v1.get_variable("conv/kernel", [3, 3, 3, 4]), 1, "SAME"))
    logits = tf.matmul(tf.reduce_mean(h, [1, 2]), v1.get_variable("fc/w", [4, 4]), name="logits")
    probs = tf.nn.softmax(logits, name="probs")
    loss = v1.losses.sparse_softmax_cross_entropy(labels, logits)
    train_op = v1.train.GradientDescentOptimizer(0.1).minimize(loss)
    with v1.Session() as s:
        s.run([v1.global_variables_initializer(), v1.local_variables_initializer()])
        coord = v1.train.Coordinator()
        threads = v1.train.start_queue_runners(s, coord)
        for _ in range(3):
            s.run(train_op)
        coord.request_stop()
        coord.join(threads)
        v1.train.Saver().save(s, sys.argv[1] + "/model.ckpt")
"""


@pytest.mark.slow
def test_a_graph_fed_by_a_queue_offers_the_dequeued_images_as_its_input(tmp_path: Path) -> None:
    """No placeholder at all: the refusal said "candidate inputs: none; candidate outputs, best first:
    none", a dead end. A session can be fed the dequeued batch as it is fed a placeholder: it is
    offered, the prediction computed from it comes first, and the command it ends with runs."""
    ckpt = tmp_path / "ckpt"
    build_model(QUEUED, ckpt)
    proc = run_cli("capture", str(ckpt), "--out", str(tmp_path / "cap"))
    assert_user_error(proc)
    said = proc.stderr.strip().splitlines()[-1]
    assert said.endswith(
        "(candidate inputs: shuffle_batch; candidate outputs, best first: probs, sparse_softmax_cross_entropy_loss/value)."
        " Name them with --outputs NAME[,NAME...] and --input-names NAME[,NAME...], e.g. --outputs probs "
        "--input-names shuffle_batch:0."), said
    proc = run_cli("capture", str(ckpt), "--outputs", "probs", "--input-names", "shuffle_batch:0", "--out",
                   str(tmp_path / "cap"), env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 0, proc.stderr
    manifest = json.loads((tmp_path / "cap" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest["examples"]["count"] == 8 and manifest["examples"]["per_example"]  # the queue fixed the batch at 16
    assert manifest["observer_effect"]["stateful_ops"] == []  # the dequeue is fed: it never runs


# ---- the op lists, held to TensorFlow's registry ----------------------------------------------------------


@pytest.fixture(scope="module")
def registry() -> dict[str, Any]:
    """Every op TensorFlow registers: type -> OpDef."""
    from tracer._tf import tf  # noqa: PLC0415
    from tensorflow.python.framework import op_def_registry  # noqa: PLC0415

    tf()
    return {name: op_def_registry.get(name) for name in dir(tf().raw_ops)
            if not name.startswith("_") and op_def_registry.get(name) is not None}


def _takes_variable_by_ref(op_def: Any) -> bool:
    return any(arg.is_ref and arg.type != 7 for arg in op_def.input_arg)  # 7: DT_STRING, a TF1 queue's handle


def test_every_op_that_writes_a_variable_by_ref_changes_state_and_so_does_its_resource_twin(
        registry: dict[str, Any]) -> None:
    """``SparseApplyMomentum``, ``ResourceSparseApplyFtrl``, ``StridedSliceAssign``, ``ScatterNdMax``
    were missing: the observer and diagnose's replays did not count them as changing state."""
    from tracer.optypes import REF_PASSING_OPS, changes_state  # noqa: PLC0415

    writers = [name for name, op_def in registry.items()
               if _takes_variable_by_ref(op_def) and name not in REF_PASSING_OPS]
    assert len(writers) > 40, writers  # the registry was read
    twins = [f"Resource{name}" for name in writers if f"Resource{name}" in registry]
    assert [name for name in writers + twins if not changes_state(name)] == []
    assert not any(changes_state(name) for name in REF_PASSING_OPS)
    assert set(REF_PASSING_OPS) <= set(registry)


def test_every_summary_op_is_bookkeeping(registry: dict[str, Any]) -> None:
    from tracer.optypes import BOOKKEEPING_OPS, SUMMARY_OPS  # noqa: PLC0415

    summaries = {name for name in registry if "Summary" in name} - {"BoostedTreesMakeStatsSummary"} | {"ImportEvent"}
    assert summaries == set(SUMMARY_OPS)
    assert SUMMARY_OPS <= BOOKKEEPING_OPS
