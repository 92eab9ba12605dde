"""A detector exported the way the Object Detection API's TF2 exporter writes it: ``input_tensor`` of
``uint8 [1, ?, ?, 3]`` (one image a run, any size), a ``map_fn`` that resizes it, a combined NMS and
the API's output keys. Given a file of four images, every command refused it ("the signature
expects [1, ?, ?, 3]. Reshape the array to fit"), so a detector could only be compared on one image.
Now each image is one run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import build_model, run_cli

pytestmark = pytest.mark.slow

_EXPORT = """
import sys
import tensorflow as tf

class Detector(tf.Module):
    def __init__(self):
        self.kernel = tf.Variable(tf.random.stateless_normal([3, 3, 3, 8], seed=[1, 2]))
        self.box = tf.Variable(tf.random.stateless_normal([8, 16], seed=[3, 4]) * 0.1)
        self.cls = tf.Variable(tf.random.stateless_normal([8, 12], seed=[5, 6]))

    @tf.function(input_signature=[tf.TensorSpec([1, None, None, 3], tf.uint8, name="input_tensor")])
    def detect(self, input_tensor):
        x = tf.map_fn(lambda im: tf.image.resize(tf.cast(im, tf.float32) / 255.0, [32, 32]), input_tensor,
                      fn_output_signature=tf.float32)
        features = tf.reduce_mean(tf.nn.relu(tf.nn.conv2d(x, self.kernel, 2, "SAME")), axis=[1, 2])
        boxes = tf.sigmoid(tf.reshape(tf.matmul(features, self.box), [-1, 4, 1, 4]))
        scores = tf.sigmoid(tf.reshape(tf.matmul(features, self.cls), [-1, 4, 3]))
        nms = tf.image.combined_non_max_suppression(boxes, scores, 10, 10, 0.5, 0.1)
        return {"detection_boxes": nms.nmsed_boxes, "detection_scores": nms.nmsed_scores,
                "detection_classes": nms.nmsed_classes,
                "num_detections": tf.cast(nms.valid_detections, tf.float32)}

detector = Detector()
tf.saved_model.save(detector, sys.argv[1], signatures={"serving_default": detector.detect})
"""


def test_four_images_are_four_runs_of_one(tmp_path: Path) -> None:
    build_model(_EXPORT, tmp_path / "saved_model")
    images = np.random.default_rng(2).integers(0, 256, (4, 48, 40, 3)).astype(np.uint8)
    np.save(tmp_path / "images.npy", images)
    out = tmp_path / "report"
    proc = run_cli("compare", str(tmp_path / "saved_model"), str(tmp_path / "saved_model"), "--inputs",
                   str(tmp_path / "images.npy"), "--onednn", "off", "--b-batch-size", "4", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((out / "report.json").read_text(encoding="utf-8"))
    assert report["verdict"] == "identical"
    examples = report["sides"]["a"]["examples"]
    assert (examples["count"], examples["per_example"], examples["batch_major"]) == (4, True, False)
    # B asked for batches of 4, which a signature that fixes its batch at one cannot run: said, not dropped
    assert "the signature has no batch axis: ran the 4 examples one per run (--batch-size 4 cannot apply)" in \
        report["sides"]["b"]["notes"]
    assert "the signature has no batch axis: ran the 4 examples one per run" in report["sides"]["a"]["notes"]
    [group] = report["detections"]
    assert group["total"]["a"] == group["total"]["matched"] > 0  # every image's detections, matched
