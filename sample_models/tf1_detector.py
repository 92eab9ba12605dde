"""The detector as a TF1 user has it: a checkpoint from a training session and its exports.

Everything here runs inside ``with tf.Graph().as_default():`` so the process keeps eager mode
for the TF2 export (``disable_eager_execution`` would be global and one-way).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from . import weights as w
from .forward import OUTPUT_KEYS, Variant, forward

__all__ = [
    "SIGNATURE_KEY",
    "SERVE_TAG",
    "build_detector",
    "write_savedmodel",
    "write_detector_checkpoint",
    "export_variant_from_checkpoint",
    "fresh_session",
    "output_node_names",
    "signature",
]

SIGNATURE_KEY = "serving_default"
SERVE_TAG = "serve"
CHECKPOINT_BASENAME = "model.ckpt"


def build_detector(tf: ModuleType, variant: Variant | None = None
                   ) -> tuple[Any, dict[str, Any], list[Any]]:
    """Build the detector into the default graph: (images placeholder, outputs, variables)."""
    shapes = w.detector_shapes()
    created: list[Any] = []

    def param(full_name: str) -> Any:
        var = tf.compat.v1.get_variable(
            full_name.rsplit("/", 1)[1], shape=shapes[full_name], dtype=tf.float32,
            initializer=tf.compat.v1.zeros_initializer(), use_resource=False,
        )
        if var.op.name != full_name:
            raise AssertionError(f"variable came out as {var.op.name!r}, wanted {full_name!r}")
        created.append(var)
        return var

    images = tf.compat.v1.placeholder(
        tf.float32, [None, w.IMAGE_SIZE, w.IMAGE_SIZE, 3], name="images"
    )
    outputs = forward(tf, images, tf.compat.v1.variable_scope, param, variant)
    return images, outputs, created


def signature(tf: ModuleType, images: Any, outputs: Mapping[str, Any]) -> Any:
    """The ``serving_default`` predict SignatureDef shared by the checkpoint and every export."""
    return tf.compat.v1.saved_model.signature_def_utils.predict_signature_def(
        inputs={"images": images}, outputs=dict(outputs)
    )


def write_savedmodel(tf: ModuleType, sess: Any, path: Path, sig: Any) -> None:
    """Export ``sess``'s graph and variables as a TF1 SavedModel (tag ``serve``)."""
    builder = tf.compat.v1.saved_model.Builder(str(path))
    builder.add_meta_graph_and_variables(sess, [SERVE_TAG], signature_def_map={SIGNATURE_KEY: sig})
    builder.save()


@contextmanager
def fresh_session(tf: ModuleType) -> Iterator[tuple[Any, Any]]:
    """A fresh graph as default, and a session on it (closed on exit)."""
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as sess:
        yield graph, sess


def write_detector_checkpoint(tf: ModuleType, out: Path, values: Mapping[str, np.ndarray]) -> Path:
    """Write ``out/ckpt`` (checkpoint + .meta with signature) and ``out/savedmodel``.

    Both come from the same session, as a TF1 training job would export them. Values are put
    in through each variable's own initializer (its initial value fed from numpy), so the graph
    stays small and the data file is byte-identical across runs. Returns the checkpoint prefix.

    The ``checkpoint`` state file holds absolute paths, as ``Saver.save`` writes them for an
    absolute prefix; once the caller moves ``out`` they point nowhere, like a copied training
    directory.
    """
    ckpt_dir = out / "ckpt"
    ckpt_dir.mkdir(parents=True)
    prefix = (ckpt_dir / CHECKPOINT_BASENAME).resolve()
    with fresh_session(tf) as (_graph, sess):
        images, outputs, variables = build_detector(tf, Variant())
        sess.run(
            [var.initializer for var in variables],
            feed_dict={var.initial_value: values[var.op.name] for var in variables},
        )
        saver = tf.compat.v1.train.Saver()
        sig = signature(tf, images, outputs)
        saver.save(sess, str(prefix), write_meta_graph=False)
        meta = saver.export_meta_graph()
        meta.signature_def[SIGNATURE_KEY].CopyFrom(sig)
        Path(f"{prefix}.meta").write_bytes(meta.SerializeToString(deterministic=True))
        write_savedmodel(tf, sess, out / "savedmodel", sig)
    return prefix


def export_variant_from_checkpoint(tf: ModuleType, ckpt_prefix: Path, path: Path,
                                   variant: Variant) -> None:
    """Rebuild the detector with ``variant``'s changes, restore the checkpoint, export it.

    A Saver named ``save`` is created before the export, as in the training session, so the
    variant's graph matches the faithful export node for node outside the intended change.
    """
    with fresh_session(tf) as (_graph, sess):
        images, outputs, _variables = build_detector(tf, variant)
        tf.compat.v1.train.Saver().restore(sess, str(ckpt_prefix))
        write_savedmodel(tf, sess, path, signature(tf, images, outputs))


def output_node_names() -> list[str]:
    """The Identity ops that carry the signature outputs."""
    return [f"outputs/{key}" for key in OUTPUT_KEYS]
