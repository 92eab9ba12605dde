"""The detector's forward pass, written once for TF1 graphs and TF2 functions.

TF1 needs ``variable_scope`` + ``get_variable`` (so names come out as ``block1/conv/weights``),
TF2 a ``tf.Module``'s variables under ``tf.name_scope``. The maths and the op names below the
scopes must be identical in both, because a tool compares the two exports op by op; so the
pass is written against two small callables, ``scope(name)`` and ``param(full_name)``, that
each export provides.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from . import weights as w

__all__ = ["Variant", "OUTPUT_KEYS", "forward", "decode_boxes", "detections"]

# Signature output keys, in a fixed order.
OUTPUT_KEYS: tuple[str, ...] = (
    "scores",
    "boxes",
    "detection_boxes",
    "detection_scores",
    "detection_classes",
    "num_detections",
)

Scope = Callable[[str], AbstractContextManager[Any]]
Param = Callable[[str], Any]


@dataclass(frozen=True)
class Variant:
    """What differs between the detector exports that share one graph builder."""

    bn_epsilon: dict[str, float] = field(default_factory=dict)
    """Per-block epsilon overrides, e.g. ``{"block2": 0.01}`` for the planted bug."""
    dense_bfloat16: bool = False
    """Compute ``dense/MatMul`` in bfloat16, with explicit casts around it."""


def _conv_block(tf: ModuleType, x: Any, block: str, stride: int, scope: Scope,
                param: Param, epsilon: float) -> Any:
    """conv 3x3 (no bias) -> inference batch norm -> relu, with the names tests rely on."""
    with scope(block):
        with scope("conv"):
            kernel = param(f"{block}/conv/weights")
            x = tf.nn.conv2d(x, kernel, strides=[1, stride, stride, 1], padding="SAME",
                             name="Conv2D")
        with scope("bn"):
            gamma = param(f"{block}/bn/gamma")
            beta = param(f"{block}/bn/beta")
            mean = param(f"{block}/bn/moving_mean")
            variance = param(f"{block}/bn/moving_variance")
            # raw_ops so that TF1 and TF2 both emit FusedBatchNormV3 with the same attrs.
            x = tf.raw_ops.FusedBatchNormV3(
                x=x, scale=gamma, offset=beta, mean=mean, variance=variance,
                epsilon=epsilon, is_training=False, data_format="NHWC",
                name="FusedBatchNormV3",
            )[0]
        return tf.nn.relu(x, name="relu")


def _dense(tf: ModuleType, x: Any, scope: Scope, param: Param, bfloat16: bool) -> Any:
    """The 8192x512 layer whose GEMM blocking depends on the batch size."""
    with scope("dense"):
        kernel = param("dense/weights")
        biases = param("dense/biases")
        if bfloat16:
            x16 = tf.cast(x, tf.bfloat16, name="to_bf16_input")
            k16 = tf.cast(kernel, tf.bfloat16, name="to_bf16_weights")
            y = tf.cast(tf.linalg.matmul(x16, k16, name="MatMul"), tf.float32, name="to_fp32")
        else:
            y = tf.linalg.matmul(x, kernel, name="MatMul")
        y = tf.nn.bias_add(y, biases, name="BiasAdd")
        return tf.nn.relu(y, name="Relu")


def _head(tf: ModuleType, x: Any, head: str, scope: Scope, param: Param) -> Any:
    """512 -> 64*4 projection reshaped to one 4-vector per anchor."""
    with scope(head):
        y = tf.linalg.matmul(x, param(f"{head}/weights"), name="MatMul")
        y = tf.nn.bias_add(y, param(f"{head}/biases"), name="BiasAdd")
        y = tf.reshape(y, [-1, w.NUM_ANCHORS, 4], name="Reshape")
        if head == "class_head":
            y = tf.nn.softmax(y, axis=-1, name="scores")
        return y


def decode_boxes(tf: ModuleType, rel: Any, anchor: Any, scope: Scope) -> Any:
    """SSD centre-size decoding (TF Object Detection API convention) to (ymin, xmin, ymax, xmax).

    Shared with the benchmark's SSD300 (``bench/workloads/ssd.py``), which scales this design up.
    """
    sy, sx, sh, sw = w.BOX_SCALES
    with scope("decode"):
        ty, tx, th, tw = tf.unstack(rel, axis=-1, name="unstack_codes")
        ya, xa, ha, wa = tf.unstack(anchor, axis=-1, name="unstack_anchors")
        yc = tf.add(ty / sy * ha, ya, name="y_centre")
        xc = tf.add(tx / sx * wa, xa, name="x_centre")
        h = tf.multiply(tf.exp(th / sh), ha, name="height")
        wd = tf.multiply(tf.exp(tw / sw), wa, name="width")
        return tf.stack(
            [yc - h / 2.0, xc - wd / 2.0, yc + h / 2.0, xc + wd / 2.0], axis=-1, name="boxes"
        )


def forward(tf: ModuleType, images: Any, scope: Scope, param: Param,
            variant: Variant | None = None) -> dict[str, Any]:
    """Build the detector on ``images`` and return its outputs keyed like the signature."""
    variant = variant or Variant()
    x = images
    for block, stride, _channels in w.BLOCKS:
        epsilon = variant.bn_epsilon.get(block, w.BN_EPSILON)
        x = _conv_block(tf, x, block, stride, scope, param, epsilon)
    with scope("flatten"):
        x = tf.reshape(x, [-1, w.FLAT_FEATURES], name="Reshape")
    x = _dense(tf, x, scope, param, variant.dense_bfloat16)
    scores = _head(tf, x, "class_head", scope, param)
    codes = _head(tf, x, "box_head", scope, param)
    with scope("anchors"):
        anchor = tf.constant(w.anchors(), name="anchors")
    boxes = decode_boxes(tf, codes, anchor, scope)
    return detections(tf, scores, boxes, scope, max_boxes=10)


def detections(tf: ModuleType, scores: Any, boxes: Any, scope: Scope, max_boxes: int) -> dict[str, Any]:
    """Non-max suppression over every foreground class (class 0 is the background), and the
    signature outputs keyed like ``OUTPUT_KEYS``."""
    with scope("nms"):
        nms = tf.image.combined_non_max_suppression(
            boxes[:, :, None, :], scores[:, :, 1:],
            max_output_size_per_class=max_boxes, max_total_size=max_boxes,
            iou_threshold=0.5, score_threshold=0.05,
        )
    raw = {
        "scores": scores,
        "boxes": boxes,
        "detection_boxes": nms.nmsed_boxes,
        "detection_scores": nms.nmsed_scores,
        "detection_classes": nms.nmsed_classes,
        "num_detections": nms.valid_detections,
    }
    with scope("outputs"):
        return {key: tf.identity(raw[key], name=key) for key in OUTPUT_KEYS}
