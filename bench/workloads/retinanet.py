"""RetinaNet from TensorFlow's Model Garden, exported as its users export it (issue 25 item 5).

``tf-models-official`` pins a TensorFlow of its own, so it never enters the project's venv:
``make bench-retinanet`` installs it and the few packages ``official.vision`` imports with
``pip install --no-deps --target out/bench/tfm-site`` and runs this script with that directory on
``PYTHONPATH`` (and ``TF_USE_LEGACY_KERAS=1``: the Model Garden builds on tf-keras); tftrace then
reads the exports like any user's. By hand::

    PYTHONPATH=out/bench/tfm-site TF_USE_LEGACY_KERAS=1 .venv/bin/python bench/workloads/retinanet.py \
        --out out/bench/models/retinanet

It writes, from one set of random weights (seeded; the classifier's bias raised so that the
scores clear NMS's 0.05 threshold and the detections are real ones, not 100 padded rows):

* ``fp32/``  -- ``export_inference_graph(input_type='image_tensor')`` of experiment
  ``retinanet_resnetfpn_coco`` (ResNet-50 + FPN, levels 3-7) at 256x256, float32;
* ``fp32_again/`` -- the same weights exported a second time (a fresh module, the same
  checkpoint): what "two exports of the same weights" means to a user;
* ``mixed_float16/`` -- the same checkpoint exported under the ``mixed_float16`` policy;
* ``ckpt/`` -- the object-based checkpoint all three were exported from;
* ``workload.json`` -- what was built, with the versions that built it.

This file imports nothing from ``bench`` or ``tracer``: it runs with tf-models-official's directory first.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

EXPERIMENT = "retinanet_resnetfpn_coco"
IMAGE_SIZE = 256
SEED = 25
# sigmoid(-1.0) = 0.27 before the random convolutions' own spread: thousands of anchors clear
# pre_nms_score_threshold = 0.05, so NMS keeps its 100 detections per image and they are real
CLASSIFIER_BIAS = -1.0


def _config(tfm: Any) -> Any:
    """The experiment as its users type it, at 256x256 and with no pretrained checkpoint."""
    config = tfm["exp_factory"].get_exp_config(EXPERIMENT)
    config.task.model.input_size = [IMAGE_SIZE, IMAGE_SIZE, 3]
    config.task.init_checkpoint = None  # random weights: nothing is downloaded
    config.runtime.mixed_precision_dtype = "float32"
    return config


def _imports() -> dict[str, Any]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf
    import tf_keras
    from official.core import exp_factory
    from official.vision import registry_imports  # noqa: F401  (registers the experiments)
    from official.vision.serving import detection, export_saved_model_lib

    tf.get_logger().setLevel("ERROR")
    return {"tf": tf, "tf_keras": tf_keras, "exp_factory": exp_factory, "detection": detection,
            "export": export_saved_model_lib}


def _module(tfm: Any, config: Any) -> Any:
    return tfm["detection"].DetectionModule(params=config, batch_size=None, input_image_size=[IMAGE_SIZE, IMAGE_SIZE],
                                            input_type="image_tensor", num_channels=3)


def _classifier_bias(model: Any) -> Any:
    """The class head's last convolution's bias (the one RetinaNet initialises to -log(99))."""
    head = model.head
    classifier = head._classifier  # noqa: SLF001  (the Model Garden keeps it private; no accessor)
    return classifier.bias


def _export(tfm: Any, config: Any, module: Any, ckpt: str, out: Path) -> None:
    tfm["export"].export_inference_graph(
        input_type="image_tensor", batch_size=None, input_image_size=[IMAGE_SIZE, IMAGE_SIZE], params=config,
        checkpoint_path=ckpt, export_dir=str(out), export_module=module)


def build(out: Path) -> dict[str, Any]:
    """Write the three exports and the checkpoint under ``out`` (replaced whole)."""
    tfm = _imports()
    tf, tf_keras = tfm["tf"], tfm["tf_keras"]
    staging = out.with_name(out.name + ".partial")
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    tf_keras.utils.set_random_seed(SEED)
    tf_keras.mixed_precision.set_global_policy("float32")
    config = _config(tfm)
    module = _module(tfm, config)
    bias = _classifier_bias(module.model)
    bias.assign(tf.fill(bias.shape, CLASSIFIER_BIAS))
    ckpt = tf.train.Checkpoint(model=module.model).write(str(staging / "ckpt" / "ckpt"))
    _export(tfm, config, module, ckpt, staging / "fp32")
    _export(tfm, config, _module(tfm, config), ckpt, staging / "fp32_again")
    tf_keras.mixed_precision.set_global_policy("mixed_float16")
    mixed = _config(tfm)
    mixed.runtime.mixed_precision_dtype = "float16"
    _export(tfm, mixed, _module(tfm, mixed), ckpt, staging / "mixed_float16")
    tf_keras.mixed_precision.set_global_policy("float32")
    import official  # noqa: PLC0415

    meta = {"experiment": EXPERIMENT, "image_size": IMAGE_SIZE, "seed": SEED, "classifier_bias": CLASSIFIER_BIAS,
            "input_type": "image_tensor", "exports": ["fp32", "fp32_again", "mixed_float16"],
            "tensorflow": tf.__version__, "tf_models_official": getattr(official, "__version__", "2.20"),
            "python": sys.version.split()[0]}
    (staging / "workload.json").write_text(json.dumps(meta, indent=1) + "\n")
    if out.exists():
        shutil.rmtree(out)
    staging.rename(out)
    return meta


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, required=True, help="directory to write (replaced whole)")
    args = parser.parse_args()
    print(json.dumps(build(args.out.resolve())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
