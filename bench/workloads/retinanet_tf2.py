"""A RetinaNet-like TF2 detector, as ``tf.saved_model.save`` writes it (issue 25 item 5).

Model Garden's RetinaNet (``tf-models-official``) pins a TensorFlow of its own and takes longer
to install and export than a session has, so this builds the same *shape* of graph with plain
TensorFlow: a ``tf.map_fn`` preprocessing over the batch (resize + normalise each image), a
ResNet-50 v1 backbone (bottleneck blocks 3-4-6-3, batch norm as one ``FusedBatchNormV3``), an
FPN over levels 3-7 with per-level class and box heads (4 conv units each, as RetinaNet's), per
level and per class a top-k of the scores before NMS (Model Garden's multilevel detection
generator unrolls that loop in Python, which is where most of its ~51,000 ops come from), box
decoding and ``tf.image.combined_non_max_suppression``. Weights are random (seeded) with the
classifier bias raised so that NMS keeps real detections, not padded rows.

Run in its own process::

    python -m bench.workloads.retinanet_tf2 --out DIR [--classes N]

It writes ``DIR/fp32`` and ``DIR/fp32_again`` (the same weights exported twice, by two fresh
modules) and ``DIR/mixed_float16`` (the same weights computing in float16 between casts, as a
Keras ``mixed_float16`` policy runs them: variables float32, cast at each read; the heads' logits
and box codes cast back to float32 before decoding, so the decoder's constants stay float32), plus
``DIR/workload.json`` with the op count once the signature is inlined (35,447 at 90 classes and
128x128; Model Garden's own export has ~51,000, see ``bench/workloads/retinanet.py``). The anchors
are a simple grid, not RetinaNet's: the workload is about graph size and shape, not accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["build_module", "main"]

IMAGE_SIZE = 128
INPUT_SIZE = 160
SEED = 25
CLASSIFIER_BIAS = -1.0
STAGES = ((2, 3, 64, 1), (3, 4, 128, 2), (4, 6, 256, 2), (5, 3, 512, 2))
FPN_CHANNELS = 64
ANCHORS = 3
PRE_NMS_TOP_K = 50


def _weights(classes: int) -> dict[str, np.ndarray]:
    """Every variable's value, drawn in one seeded order, so every export holds the same bytes."""
    rng = np.random.RandomState(SEED)
    shapes: dict[str, tuple[int, ...]] = {}

    def conv(name: str, k: int, cin: int, cout: int, bn: bool = True) -> None:
        shapes[f"{name}/kernel"] = (k, k, cin, cout)
        if bn:
            for p in ("gamma", "beta", "mean", "variance"):
                shapes[f"{name}/{p}"] = (cout,)
        else:
            shapes[f"{name}/bias"] = (cout,)

    conv("stem", 7, 3, 64)
    cin = 64
    for stage, blocks, filters, _stride in STAGES:
        for b in range(blocks):
            n = f"c{stage}b{b}"
            if b == 0:
                conv(f"{n}/short", 1, cin, 4 * filters)
            conv(f"{n}/a", 1, cin, filters)
            conv(f"{n}/b", 3, filters, filters)
            conv(f"{n}/c", 1, filters, 4 * filters)
            cin = 4 * filters
    for level, c in ((3, 512), (4, 1024), (5, 2048)):
        conv(f"fpn/lateral{level}", 1, c, FPN_CHANNELS, bn=False)
    conv("fpn/p6", 3, 2048, FPN_CHANNELS, bn=False)
    conv("fpn/p7", 3, FPN_CHANNELS, FPN_CHANNELS, bn=False)
    for head, out in (("class", ANCHORS * classes), ("box", ANCHORS * 4)):
        for level in range(3, 8):
            for i in range(4):
                conv(f"{head}/l{level}/u{i}", 3, FPN_CHANNELS, FPN_CHANNELS)
        conv(f"{head}/out", 3, FPN_CHANNELS, out, bn=False)
    values = {}
    for name, shape in shapes.items():
        kind = name.rsplit("/", 1)[-1]
        if kind == "kernel":
            v = rng.normal(0.0, np.sqrt(2.0 / np.prod(shape[:-1])), size=shape)
        elif kind in ("gamma", "variance"):
            v = rng.uniform(0.5, 1.5, size=shape)
        else:
            v = rng.normal(0.0, 0.05, size=shape)
        values[name] = v.astype(np.float32)
    values["class/out/bias"] = np.full_like(values["class/out/bias"], CLASSIFIER_BIAS)
    return values


def build_module(tf: ModuleType, values: dict[str, np.ndarray], classes: int, compute: str) -> Any:
    """A ``tf.Module`` whose ``serve`` signature takes uint8 images [None, H, W, 3]."""
    half = compute == "float16"
    dt = tf.float16 if half else tf.float32

    class Detector(tf.Module):
        def __init__(self) -> None:
            super().__init__(name="retinanet")
            self.v = {k: tf.Variable(val, name=k.replace("/", "_")) for k, val in values.items()}

        def w(self, name: str) -> Any:
            var = self.v[name]
            return tf.cast(var, dt) if half else var  # an AutoCastVariable read: a Cast per use

        def conv(self, x: Any, name: str, stride: int = 1, bn: bool = True, relu: bool = True) -> Any:
            y = tf.nn.conv2d(x, self.w(f"{name}/kernel"), stride, "SAME")
            if bn:
                y = tf.raw_ops.FusedBatchNormV3(
                    x=y, scale=self.v[f"{name}/gamma"], offset=self.v[f"{name}/beta"],
                    mean=self.v[f"{name}/mean"], variance=self.v[f"{name}/variance"],
                    epsilon=1e-3, is_training=False)[0]
            else:
                y = tf.nn.bias_add(y, self.w(f"{name}/bias"))
            return tf.nn.relu(y) if relu else y

        @tf.function(input_signature=[tf.TensorSpec([None, None, None, 3], tf.uint8, name="inputs")])
        def serve(self, images: Any) -> dict[str, Any]:
            def prep(image: Any) -> Any:
                x = tf.image.resize(tf.cast(image, tf.float32), [IMAGE_SIZE, IMAGE_SIZE])
                return (x - tf.constant([123.7, 116.3, 103.5])) / tf.constant([58.4, 57.1, 57.4])

            x = tf.map_fn(prep, images, fn_output_signature=tf.float32)
            x = tf.cast(x, dt)
            x = tf.nn.max_pool2d(self.conv(x, "stem", 2), 3, 2, "SAME")
            feats = {}
            for stage, blocks, filters, stride in STAGES:
                for b in range(blocks):
                    n = f"c{stage}b{b}"
                    s = stride if b == 0 else 1
                    short = self.conv(x, f"{n}/short", s, relu=False) if b == 0 else x
                    y = self.conv(self.conv(x, f"{n}/a", s), f"{n}/b")
                    x = tf.nn.relu(short + self.conv(y, f"{n}/c", relu=False))
                feats[stage] = x
            p5 = self.conv(feats[5], "fpn/lateral5", bn=False, relu=False)
            p4 = self.conv(feats[4], "fpn/lateral4", bn=False, relu=False) + tf.image.resize(p5, tf.shape(feats[4])[1:3], "nearest")
            p3 = self.conv(feats[3], "fpn/lateral3", bn=False, relu=False) + tf.image.resize(p4, tf.shape(feats[3])[1:3], "nearest")
            p6 = self.conv(feats[5], "fpn/p6", 2, bn=False, relu=False)
            p7 = self.conv(tf.nn.relu(p6), "fpn/p7", 2, bn=False, relu=False)
            levels = {3: p3, 4: p4, 5: p5, 6: p6, 7: p7}
            all_boxes, all_scores = [], []
            for level, p in levels.items():
                c, bx = p, p
                for i in range(4):
                    c = self.conv(c, f"class/l{level}/u{i}")
                    bx = self.conv(bx, f"box/l{level}/u{i}")
                logits = tf.reshape(tf.cast(self.conv(c, "class/out", bn=False, relu=False), tf.float32), [tf.shape(p)[0], -1, classes])
                codes = tf.reshape(tf.cast(self.conv(bx, "box/out", bn=False, relu=False), tf.float32), [tf.shape(p)[0], -1, 4])
                scores = tf.sigmoid(logits)
                n = tf.shape(scores)[1]
                cells = tf.cast(tf.range(n), tf.float32)
                stride_ = float(2 ** level) / (IMAGE_SIZE * 1.0)
                anchor_y = (tf.math.floordiv(cells, 8.0) + 0.5) * stride_
                anchor_x = (tf.math.floormod(cells, 8.0) + 0.5) * stride_
                size = 4.0 * stride_
                k = tf.minimum(PRE_NMS_TOP_K, n)
                per_class_boxes, per_class_scores = [], []
                for cls in range(classes):  # the multilevel generator's per-class loop, unrolled
                    top, idx = tf.math.top_k(scores[:, :, cls], k)
                    code = tf.gather(codes, idx, batch_dims=1) * 0.1
                    cy = tf.gather(anchor_y, idx) + code[..., 0] * size
                    cx = tf.gather(anchor_x, idx) + code[..., 1] * size
                    h = size * tf.exp(tf.clip_by_value(code[..., 2], -4.0, 4.0))
                    w_ = size * tf.exp(tf.clip_by_value(code[..., 3], -4.0, 4.0))
                    box = tf.stack([cy - h / 2, cx - w_ / 2, cy + h / 2, cx + w_ / 2], axis=-1)
                    per_class_boxes.append(box)
                    per_class_scores.append(tf.one_hot(tf.fill(tf.shape(top), cls), classes) * top[..., None])
                all_boxes.append(tf.concat(per_class_boxes, axis=1))
                all_scores.append(tf.concat(per_class_scores, axis=1))
            boxes = tf.concat(all_boxes, axis=1)[:, :, None, :]
            scores = tf.concat(all_scores, axis=1)
            nms = tf.image.combined_non_max_suppression(
                boxes, scores, max_output_size_per_class=20, max_total_size=100,
                iou_threshold=0.5, score_threshold=0.05, clip_boxes=True)
            return {"detection_boxes": nms.nmsed_boxes, "detection_scores": nms.nmsed_scores,
                    "detection_classes": nms.nmsed_classes, "num_detections": tf.cast(nms.valid_detections, tf.float32)}

    return Detector()


def _inlined_ops(tf: ModuleType, path: Path) -> int:
    """Ops of the serving signature's graph once its functions are inlined (as tftrace loads it)."""
    loaded = tf.saved_model.load(str(path))  # kept alive: the signature holds only weak refs
    fn = loaded.signatures["serving_default"]
    from tensorflow.python.framework import convert_to_constants  # noqa: PLC0415

    return len(convert_to_constants.convert_variables_to_constants_v2(fn).graph.as_graph_def().node)


def main(argv: list[str] | None = None) -> int:
    """Write the three exports and ``workload.json``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--classes", type=int, default=90)
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # this child process alone imports TensorFlow

    values = _weights(args.classes)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, compute in (("fp32", "float32"), ("fp32_again", "float32"), ("mixed_float16", "float16")):
        target = args.out / name
        if target.exists():
            shutil.rmtree(target)
        module = build_module(tf, values, args.classes, compute)
        tf.saved_model.save(module, str(target), signatures={"serving_default": module.serve})
    ops = _inlined_ops(tf, args.out / "fp32")
    info = {"classes": args.classes, "image_size": IMAGE_SIZE, "inlined_ops": ops, "tensorflow": tf.__version__}
    (args.out / "workload.json").write_text(json.dumps(info, indent=1))
    print(json.dumps(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
