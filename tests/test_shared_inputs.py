"""A signature that takes a scalar beside batched inputs (a detector's ``score_threshold`` beside
its ``images``): the scalar is fed whole to every run, at every batch size, and compared as the
same value on both sides. Built the way its users write it: a ``tf.Module`` saved with
``tf.saved_model.save`` and a serving signature."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import build_model, run_cli

pytestmark = pytest.mark.slow

THRESHOLDED = '''
import sys
import tensorflow as tf

class Detector(tf.Module):
    def __init__(self):
        self.kernel = tf.Variable(tf.random.stateless_normal([3, 3, 3, 4], seed=[3, 4]))

    @tf.function(input_signature=[tf.TensorSpec([None, 8, 8, 3], tf.float32, name="images"),
                                  tf.TensorSpec([], tf.float32, name="threshold")])
    def serve(self, images, threshold):
        scores = tf.reduce_max(tf.nn.relu(tf.nn.conv2d(images, self.kernel, 1, "SAME")), axis=[1, 2])
        return {"scores": scores, "kept": tf.cast(scores > threshold, tf.int32)}

detector = Detector()
tf.saved_model.save(detector, sys.argv[1], signatures={"serving_default": detector.serve})
'''
ENV = {"CUDA_VISIBLE_DEVICES": "-1", "TF_ENABLE_ONEDNN_OPTS": "0"}
NOTE = "input 'threshold' without a batch axis beside batched inputs: every run was fed the same value"


@pytest.fixture(scope="module")
def detector(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("thresholded") / "savedmodel"
    build_model(THRESHOLDED, path)
    return path


def test_batch_1_vs_8_feeds_the_threshold_whole_to_every_run(detector: Path, tmp_path: Path) -> None:
    """It stopped before any run at "the inputs disagree on the number of examples: {'images': 8,
    'threshold': 1}", for inputs tftrace had generated itself."""
    out = tmp_path / "out"
    proc = run_cli("compare", str(detector), str(detector), "--a-batch-size", "1", "--b-batch-size", "8",
                   "--out", str(out), env=ENV)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "identical"
    for side, runs in (("a", 8), ("b", 1)):
        assert report["sides"][side]["examples"]["shared"] == ["threshold"]
        assert report["sides"][side]["examples"]["count"] == 8 and report["sides"][side]["examples"]["batch_major"]
        assert NOTE in report["sides"][side]["notes"]
    assert report["nodes"]["threshold"]["status"] == "identical"


def test_received_captures_at_two_batch_sizes_with_a_threshold_from_the_file(detector: Path, tmp_path: Path) -> None:
    """Captured apart from an inputs file that holds the threshold as a scalar, then compared as
    received: the manifests carry ``examples.shared`` and are read back."""
    inputs = tmp_path / "in.npz"
    rng = np.random.default_rng(5)
    np.savez(inputs, images=rng.standard_normal((4, 8, 8, 3)).astype(np.float32), threshold=np.float32(0.25))
    for name, batch in (("b1", "1"), ("b4", "4")):
        proc = run_cli("capture", str(detector), "--inputs", str(inputs), "--batch-size", batch,
                       "--out", str(tmp_path / name), env=ENV)
        assert proc.returncode == 0, proc.stderr
        manifest = json.loads((tmp_path / name / "manifest.json").read_text())
        assert manifest["examples"]["shared"] == ["threshold"] and manifest["examples"]["count"] == 4
        assert len(manifest["runs"]) == (4 if batch == "1" else 1)
    out = tmp_path / "out"
    proc = run_cli("compare", str(tmp_path / "b1"), str(tmp_path / "b4"), "--out", str(out), env=ENV)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["verdict"] == "identical" and report["nodes"]["threshold"]["status"] == "identical"
