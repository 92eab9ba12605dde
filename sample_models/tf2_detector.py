"""The same detector as a TF2 SavedModel: same numbers, other names.

A ``tf.Module`` holds ``tf.Variable``s made from the checkpoint's arrays and serves a
``tf.function`` whose ops live under ``tf.name_scope("detector")``, so an op that the TF1
graph calls ``block1/conv/Conv2D`` is ``detector/block1/conv/Conv2D`` here. A tool has to match
the two by structure. The maths is the shared :func:`sample_models.forward.forward`, with
``FusedBatchNormV3`` from ``tf.raw_ops`` so the op types match the TF1 graph one to one.

Must run with eager execution on (the default); the TF1 builders never turn it off.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from . import weights as w
from .forward import forward
from .tf1_detector import SIGNATURE_KEY

__all__ = ["export_tf2"]


def export_tf2(tf: ModuleType, values: Mapping[str, np.ndarray], path: Path) -> None:
    """Save the detector with ``values`` as its variables to ``path`` (TF2 SavedModel)."""
    if not tf.executing_eagerly():
        raise RuntimeError("the TF2 export needs eager execution; call it outside tf.Graph blocks")
    module = tf.Module(name="detector")
    module.params = {
        name: tf.Variable(values[name], name=name, trainable=False)
        for name in w.detector_shapes()
    }

    def param(full_name: str) -> Any:
        return module.params[full_name]

    @tf.function(input_signature=[
        tf.TensorSpec([None, w.IMAGE_SIZE, w.IMAGE_SIZE, 3], tf.float32, name="images")
    ])
    def serve(images: Any) -> dict[str, Any]:
        with tf.name_scope("detector"):
            return forward(tf, images, tf.name_scope, param)

    module.serve = serve
    tf.saved_model.save(module, str(path), signatures={SIGNATURE_KEY: serve})
