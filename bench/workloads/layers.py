"""Building blocks shared by the benchmark models: variables on demand, conv + batch norm.

A model is written once against a :class:`Params` object that creates each TF1 variable the
first time it is asked for and remembers its shape, in creation order. The same builder
therefore serves the exporter (which then draws every value from one seeded numpy generator,
in that order) and the tfdbg peer (which rebuilds the graph under instrumentation and loads
the checkpoint's values into it), so both run exactly the same ops on exactly the same
weights. Nothing here imports TensorFlow: the module is handed in.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

__all__ = ["Params", "batch_norm", "conv", "conv_bn_relu", "dense", "draw_values"]


@dataclass
class Params:
    """Creates ``VariableV2`` variables (with their ``/read`` Identity), as TF1 training code does.

    Zero initialisers keep the graph small: the real values are fed in afterwards through
    each variable's initializer (export) or ``Variable.load`` (peers), never baked in as
    constants.
    """

    tf: ModuleType
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)
    variables: list[Any] = field(default_factory=list)

    def get(self, name: str, shape: tuple[int, ...]) -> Any:
        """The variable ``<current variable scope>/name``; its full name must be new."""
        var = self.tf.compat.v1.get_variable(
            name, shape=shape, dtype=self.tf.float32,
            initializer=self.tf.compat.v1.zeros_initializer(), use_resource=False,
        )
        if var.op.name in self.shapes:
            raise ValueError(f"variable {var.op.name} created twice")
        self.shapes[var.op.name] = tuple(shape)
        self.variables.append(var)
        return var


def draw_values(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, np.ndarray]:
    """float32 values for every variable, by kind of name, in the order the model created them.

    He-normal kernels keep activations O(1) through 50+ layers; batch-norm statistics far from
    the identity so that a folding or epsilon slip would show. The draw order is part of the
    seed, so the same builder gives byte-identical checkpoints on every run.
    """
    rng = np.random.RandomState(seed)
    values: dict[str, np.ndarray] = {}
    for name, shape in shapes.items():
        kind = name.rsplit("/", 1)[-1]
        if kind == "kernel":
            fan_in = int(np.prod(shape[:-1]))
            value = rng.normal(0.0, np.sqrt(2.0 / fan_in), size=shape)
        elif kind in ("bias", "beta", "moving_mean"):
            value = rng.normal(0.0, 0.05, size=shape)
        elif kind in ("gamma", "moving_variance"):
            value = rng.uniform(0.5, 1.5, size=shape)
        else:
            raise ValueError(f"no initialiser rule for variable {name!r}")
        values[name] = value.astype(np.float32)
    return values


def conv(tf: ModuleType, params: Params, x: Any, name: str, size: int, channels: int, stride: int = 1,
         padding: str = "SAME", bias: bool = True) -> Any:
    """A Keras-style ``Conv2D`` layer: ``name/Conv2D`` (+ ``name/BiasAdd``), NHWC."""
    cin = int(x.shape[-1])
    with tf.compat.v1.variable_scope(name):
        kernel = params.get("kernel", (size, size, cin, channels))
        y = tf.nn.conv2d(x, kernel, strides=[1, stride, stride, 1], padding=padding, name="Conv2D")
        if bias:
            y = tf.nn.bias_add(y, params.get("bias", (channels,)), name="BiasAdd")
    return y


def batch_norm(tf: ModuleType, params: Params, x: Any, name: str, epsilon: float = 1.001e-5) -> Any:
    """Inference batch norm as TF1 and Keras graphs run it: one ``FusedBatchNormV3``."""
    channels = int(x.shape[-1])
    with tf.compat.v1.variable_scope(name):
        gamma, beta = params.get("gamma", (channels,)), params.get("beta", (channels,))
        mean, variance = params.get("moving_mean", (channels,)), params.get("moving_variance", (channels,))
        return tf.raw_ops.FusedBatchNormV3(
            x=x, scale=gamma, offset=beta, mean=mean, variance=variance, epsilon=epsilon,
            is_training=False, data_format="NHWC", name="FusedBatchNormV3",
        )[0]


def conv_bn_relu(tf: ModuleType, params: Params, x: Any, name: str, size: int, channels: int, stride: int = 1,
                 epsilon: float = 1.001e-5) -> Any:
    """conv -> batch norm -> relu under one scope, the unit every CNN here is made of."""
    with tf.compat.v1.variable_scope(name):
        y = conv(tf, params, x, "conv", size, channels, stride, bias=False)
        y = batch_norm(tf, params, y, "bn", epsilon)
        return tf.nn.relu(y, name="relu")


def dense(tf: ModuleType, params: Params, x: Any, name: str, units: int) -> Any:
    """``name/MatMul`` -> ``name/BiasAdd``."""
    with tf.compat.v1.variable_scope(name):
        kernel = params.get("kernel", (int(x.shape[-1]), units))
        y = tf.linalg.matmul(x, kernel, name="MatMul")
        return tf.nn.bias_add(y, params.get("bias", (units,)), name="BiasAdd")
