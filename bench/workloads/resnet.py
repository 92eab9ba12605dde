"""ResNet v1 classifiers in TF1 graph ops, laid out as ``tf_keras.applications.ResNet50`` (and 152).

Why not tf_keras itself: its wheel depends on the full ``tensorflow`` package, which would be
installed over ``tensorflow-cpu`` in the same environment. The layers, shapes, names and op
types below follow the Keras model (conv with bias -> FusedBatchNormV3 -> Relu, bottleneck
blocks 3-4-6-3, stride in the first 1x1 conv, global average pool, 1000-way softmax), so the
graph has the same size and the same kinds of tensors: 25.6 M parameters, ~230 float
activations, ~190 MB of them per example at 224x224. ResNet-152 (blocks 3-8-36-3, 60 M
parameters) is the scale workload: its activations at a large batch exceed the machine's memory.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .layers import Params, batch_norm, conv, dense

__all__ = ["IMAGE_SIZE", "OUTPUT_KEYS", "build_resnet50", "build_resnet152"]

IMAGE_SIZE = 224
OUTPUT_KEYS = ("probabilities",)
STAGES = ((2, 3, 64, 1), (3, 4, 128, 2), (4, 6, 256, 2), (5, 3, 512, 2))  # (stage, blocks, filters, stride)
STAGES_152 = ((2, 3, 64, 1), (3, 8, 128, 2), (4, 36, 256, 2), (5, 3, 512, 2))


def _block(tf: ModuleType, params: Params, x: Any, name: str, filters: int, stride: int, shortcut_conv: bool) -> Any:
    """The bottleneck block: 1x1 (stride) -> 3x3 -> 1x1 (4x filters), plus the shortcut."""
    if shortcut_conv:
        shortcut = conv(tf, params, x, f"{name}_0_conv", 1, 4 * filters, stride, padding="VALID")
        shortcut = batch_norm(tf, params, shortcut, f"{name}_0_bn")
    else:
        shortcut = x
    y = conv(tf, params, x, f"{name}_1_conv", 1, filters, stride, padding="VALID")
    y = tf.nn.relu(batch_norm(tf, params, y, f"{name}_1_bn"), name=f"{name}_1_relu")
    y = conv(tf, params, y, f"{name}_2_conv", 3, filters)
    y = tf.nn.relu(batch_norm(tf, params, y, f"{name}_2_bn"), name=f"{name}_2_relu")
    y = conv(tf, params, y, f"{name}_3_conv", 1, 4 * filters, padding="VALID")
    y = batch_norm(tf, params, y, f"{name}_3_bn")
    return tf.nn.relu(tf.add(shortcut, y, name=f"{name}_add"), name=f"{name}_out")


def build_resnet50(tf: ModuleType, params: Params) -> tuple[Any, dict[str, Any]]:
    """Build into the default graph: (``images`` placeholder [None, 224, 224, 3], outputs by key)."""
    return _build_resnet(tf, params, STAGES)


def build_resnet152(tf: ModuleType, params: Params) -> tuple[Any, dict[str, Any]]:
    """ResNet-152, as :func:`build_resnet50` builds ResNet-50."""
    return _build_resnet(tf, params, STAGES_152)


def _build_resnet(tf: ModuleType, params: Params, stages: tuple[tuple[int, int, int, int], ...]
                  ) -> tuple[Any, dict[str, Any]]:
    images = tf.compat.v1.placeholder(tf.float32, [None, IMAGE_SIZE, IMAGE_SIZE, 3], name="images")
    x = tf.pad(images, [[0, 0], [3, 3], [3, 3], [0, 0]], name="conv1_pad")
    x = conv(tf, params, x, "conv1_conv", 7, 64, 2, padding="VALID")
    x = tf.nn.relu(batch_norm(tf, params, x, "conv1_bn"), name="conv1_relu")
    x = tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], name="pool1_pad")
    x = tf.nn.max_pool2d(x, 3, 2, "VALID", name="pool1_pool")
    for stage, blocks, filters, stride in stages:
        for b in range(1, blocks + 1):
            x = _block(tf, params, x, f"conv{stage}_block{b}", filters, stride if b == 1 else 1, b == 1)
    x = tf.reduce_mean(x, axis=[1, 2], name="avg_pool")
    logits = dense(tf, params, x, "predictions", 1000)
    with tf.compat.v1.name_scope("outputs"):
        return images, {"probabilities": tf.nn.softmax(logits, name="probabilities")}
