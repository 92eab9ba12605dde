"""A tiny TF1 model whose ``layer/Log`` produces NaN, and its NaN-free twin.

For a "where does the first NaN appear" test: ``y = sum(log(x @ W), axis=1)``. ``W`` holds
three columns and their negatives (:func:`sample_models.weights.nan_model_weights`), so for any
input row at least one product is negative and ``layer/Log`` is NaN on every row, whatever
random inputs a tool draws (a product that is exactly 0 would give -inf; with normal inputs
that has probability zero). The safe twin computes ``log(|x @ W| + 1)`` and keeps the name
``layer/Log`` for the final op, so the two graphs align by name.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from . import weights as w
from .tf1_detector import fresh_session, write_savedmodel

__all__ = ["export_nan_model"]


def export_nan_model(tf: ModuleType, path: Path, safe: bool) -> None:
    """Write the NaN model (``safe=False``) or its twin (``safe=True``) as a TF1 SavedModel."""
    matrix = w.nan_model_weights()
    with fresh_session(tf) as (_graph, sess):
        x = tf.compat.v1.placeholder(tf.float32, [None, matrix.shape[0]], name="x")
        with tf.compat.v1.variable_scope("layer"):
            kernel = tf.compat.v1.get_variable(
                "weights", shape=matrix.shape, dtype=tf.float32,
                initializer=tf.compat.v1.zeros_initializer(), use_resource=False,
            )
            h = tf.linalg.matmul(x, kernel, name="MatMul")
            if safe:
                h = tf.math.log(tf.add(tf.abs(h, name="Abs"), 1.0, name="add"), name="Log")
            else:
                h = tf.math.log(h, name="Log")
            y = tf.reduce_sum(h, axis=1, name="Sum")
        with tf.compat.v1.variable_scope("outputs"):
            y = tf.identity(y, name="y")
        sess.run(kernel.initializer, feed_dict={kernel.initial_value: matrix})
        sig = tf.compat.v1.saved_model.signature_def_utils.predict_signature_def(
            inputs={"x": x}, outputs={"y": y}
        )
        write_savedmodel(tf, sess, path, sig)
