"""A graph of 5,000+ small ops, for the report at scale (rendering, page size).

Detector graphs exported from training code reach thousands of ops; the report must stay fast
and small there. The graph is a chain of residual units under ``stage<s>/unit<u>`` name scopes
(13 ops each: a dense layer with its two variables, a scale variable, a shift constant, relu,
the residual add), so the page's scope grouping has something to group. Its ``planted``
variant changes one unit's shift constant: the same op names, one ``const_changed`` rewrite,
a first divergence there and everything after it propagated.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .layers import Params, dense

__all__ = ["OUTPUT_KEYS", "WIDTH", "build_wide", "units_for"]

WIDTH = 32
OPS_PER_UNIT = 13
UNITS_PER_STAGE = 16
OUTPUT_KEYS = ("y",)


def units_for(n_ops: int) -> int:
    """How many units make at least ``n_ops`` ops."""
    return max(1, -(-n_ops // OPS_PER_UNIT))


def build_wide(tf: ModuleType, params: Params, units: int, planted_unit: int | None = None) -> tuple[Any, dict[str, Any]]:
    """Build into the default graph: (``x`` placeholder [None, 32], outputs by key)."""
    x = tf.compat.v1.placeholder(tf.float32, [None, WIDTH], name="x")
    h = x
    for u in range(units):
        with tf.compat.v1.variable_scope(f"stage{u // UNITS_PER_STAGE}/unit{u % UNITS_PER_STAGE}"):
            y = dense(tf, params, h, "dense", WIDTH)
            y = tf.multiply(y, params.get("gamma", (WIDTH,)), name="scale")
            shift = tf.constant(0.01 if u == planted_unit else 0.0, tf.float32, name="shift")
            y = tf.nn.relu(tf.add(y, shift, name="shifted"), name="relu")
            # 0.5 keeps the residual stream bounded over hundreds of units
            h = tf.add(tf.multiply(h, 0.5, name="damp"), y, name="residual")
    with tf.compat.v1.name_scope("outputs"):
        return x, {"y": tf.identity(h, name="y")}
