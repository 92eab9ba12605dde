"""Two checkpoints of one training run, as ``tf.train.Saver(...).save(..., global_step=step)``
leaves them: a directory holding ``model.ckpt-1``, ``-2`` and ``-3`` and the ``checkpoint`` file
naming the latest. The directory is the latest one; an older one is named by its prefix, a
path that is no file of its own (only its ``.index``, ``.data-*`` and ``.meta`` are).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import build_model, run_cli

TRAINED = """
import os, sys
import numpy as np
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_eager_execution()
root = sys.argv[1]
os.makedirs(root)
with tf.Graph().as_default():
    x = tf1.placeholder(tf.float32, [None, 6], name="x")
    w = tf1.get_variable("fc/w", [6, 3], initializer=tf1.random_normal_initializer(seed=3))
    probs = tf.nn.softmax(tf.matmul(x, w), name="probs")
    step = tf1.train.get_or_create_global_step()
    with tf1.Session() as s:
        s.run(tf1.global_variables_initializer())
        saver = tf1.train.Saver(sharded=True)
        for i in range(3):
            s.run(tf1.assign_add(step, 1))
            if i == 2:  # the last step moves the weights
                s.run(tf1.assign(w, tf.zeros([6, 3])))
            saver.save(s, os.path.join(root, "model.ckpt"), global_step=step)
np.save(sys.argv[2], np.random.RandomState(0).randn(8, 6).astype("float32"))
"""


@pytest.mark.slow
def test_the_latest_checkpoint_against_an_older_prefix_blames_the_weights_after_replaying_them(tmp_path: Path) -> None:
    """B named by its prefix was taken for a model "not on this machine": its replay was never run,
    the origin's isolation said "not run: pending on the machine that has a side's model", and the
    summary printed a `tftrace isolate MODEL --from ...` to run elsewhere."""
    run_dir, inputs = tmp_path / "train", tmp_path / "x.npy"
    build_model(TRAINED, run_dir, inputs)
    proc = run_cli("compare", str(run_dir), f"{run_dir}/model.ckpt-2", "--outputs", "probs", "--input-names", "x",
                   "--inputs", str(inputs), "--out", str(tmp_path / "out"), env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 1, proc.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text(encoding="utf-8"))
    assert report["sides"]["a"]["artifact"]["location"] == f"{run_dir}/model.ckpt-3"
    origin = report["origins"][0]
    assert origin["node"] == "MatMul/ReadVariableOp" and origin["rewrite"] == "const_changed"
    assert origin["isolation"]["verdict"] == "weights_differ" and origin["isolation"]["command"] is None
    assert origin["isolation"]["rewritten"] == [{"op": "fc/w", "kind": "const_changed"}]
    capture_a = tmp_path / "out" / "captures" / "a"
    assert not capture_a.exists()  # deleted after the report: nothing to rely on but the report
    assert "Isolate on the other machine" not in proc.stdout
