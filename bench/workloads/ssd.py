"""An SSD300-style detector: the sample detector's design scaled up to a realistic size.

The sample detector (``sample_models/``) is a 4-conv toy at 64x64 with a dense head. Users
trace detectors like SSD300: a deeper backbone, several feature maps each with its own
convolutional class and box heads, thousands of anchors, centre-size box decoding and
non-max suppression. This one has 14 conv + batch-norm + relu units at 300x300, heads on the
19x19, 10x10, 5x5 and 3x3 maps (3 anchors per cell, 1,485 anchors, 21 classes with class 0
the background), and ``combined_non_max_suppression`` (100 boxes).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from sample_models.forward import OUTPUT_KEYS, decode_boxes, detections

from .layers import Params, conv, conv_bn_relu

__all__ = ["IMAGE_SIZE", "OUTPUT_KEYS", "anchors", "build_ssd300"]

IMAGE_SIZE = 300
NUM_CLASSES = 21
ANCHORS_PER_CELL = 3
# (unit name, kernel, channels, stride); the names in FEATURE_MAPS feed the heads.
BACKBONE = (
    ("conv1", 3, 32, 2), ("conv2", 3, 32, 1),      # 150
    ("conv3", 3, 64, 2), ("conv4", 3, 64, 1),      # 75
    ("conv5", 3, 128, 2), ("conv6", 3, 128, 1), ("conv7", 3, 128, 1),  # 38
    ("conv8", 3, 256, 2), ("conv9", 3, 256, 1), ("conv10", 3, 256, 1),  # 19
    ("extra1", 3, 256, 2),                          # 10
    ("extra2", 3, 256, 2),                          # 5
    ("extra3", 3, 128, 2),                          # 3
    ("extra4", 1, 128, 1),                          # 3
)
FEATURE_MAPS = (("conv10", 19, 0.1), ("extra1", 10, 0.25), ("extra2", 5, 0.45), ("extra4", 3, 0.7))


def anchors() -> np.ndarray:
    """(y, x, h, w) per anchor: per cell of each map, a square and two 2:1 / 1:2 boxes."""
    out = []
    for _name, grid, size in FEATURE_MAPS:
        centres = (np.arange(grid, dtype=np.float64) + 0.5) / grid
        for y in centres:
            for x in centres:
                for ratio in (1.0, 2.0, 0.5):
                    out.append((y, x, size / np.sqrt(ratio), size * np.sqrt(ratio)))
    return np.asarray(out, dtype=np.float32)


def _heads(tf: ModuleType, params: Params, maps: dict[str, Any]) -> tuple[Any, Any]:
    classes, codes = [], []
    for name, grid, _size in FEATURE_MAPS:
        with tf.compat.v1.variable_scope(f"head_{name}"):
            c = conv(tf, params, maps[name], "class", 3, ANCHORS_PER_CELL * NUM_CLASSES)
            b = conv(tf, params, maps[name], "box", 3, ANCHORS_PER_CELL * 4)
            classes.append(tf.reshape(c, [-1, grid * grid * ANCHORS_PER_CELL, NUM_CLASSES], name="class_flat"))
            codes.append(tf.reshape(b, [-1, grid * grid * ANCHORS_PER_CELL, 4], name="box_flat"))
    logits = tf.concat(classes, axis=1, name="class_logits")
    return tf.nn.softmax(logits, axis=-1, name="scores"), tf.concat(codes, axis=1, name="box_codes")


def build_ssd300(tf: ModuleType, params: Params) -> tuple[Any, dict[str, Any]]:
    """Build into the default graph: (``images`` placeholder [None, 300, 300, 3], outputs by key)."""
    images = tf.compat.v1.placeholder(tf.float32, [None, IMAGE_SIZE, IMAGE_SIZE, 3], name="images")
    x = images
    maps: dict[str, Any] = {}
    for name, size, channels, stride in BACKBONE:
        x = conv_bn_relu(tf, params, x, name, size, channels, stride)
        maps[name] = x
    scores, codes = _heads(tf, params, maps)
    scope = tf.compat.v1.name_scope
    with scope("anchors"):
        anchor = tf.constant(anchors(), name="anchors")
    # box codes scaled down first, so random weights keep the decoder's exp tame
    boxes = decode_boxes(tf, tf.multiply(codes, 0.1, name="damp_codes"), anchor, scope)
    return images, detections(tf, scores, boxes, scope, max_boxes=100)
