"""Every number the sample models hold, drawn from one seeded numpy generator.

The values live here, in plain numpy and in a fixed draw order, so that each run of the
generator produces byte-identical checkpoints and every export (TF1, TF2, folded, bfloat16)
starts from exactly the same arrays. Nothing here imports TensorFlow.

Scales keep activations O(1) through the network (He-normal convolutions and dense layer), and
the batch-norm parameters are far from the identity on purpose: a folding or epsilon mistake
must move the numbers visibly.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "SEED",
    "IMAGE_SIZE",
    "BLOCKS",
    "BN_EPSILON",
    "NUM_ANCHORS",
    "NUM_CLASSES",
    "DENSE_UNITS",
    "FLAT_FEATURES",
    "BOX_SCALES",
    "detector_shapes",
    "detector_weights",
    "anchors",
    "nan_model_weights",
]

SEED = 20240611
IMAGE_SIZE = 64
# (name, stride, output channels): 64x64x3 -> 32 -> 16 -> 8 -> 8x8x128.
BLOCKS: tuple[tuple[str, int, int], ...] = (
    ("block1", 2, 16),
    ("block2", 2, 32),
    ("block3", 2, 64),
    ("block4", 1, 128),
)
BN_EPSILON = 0.001
GRID = 8
NUM_ANCHORS = GRID * GRID
NUM_CLASSES = 4  # class 0 is background
DENSE_UNITS = 512
FLAT_FEATURES = GRID * GRID * BLOCKS[-1][2]  # 8192
# SSD / TF Object Detection API centre-size coder scale factors (y, x, h, w).
BOX_SCALES = (10.0, 10.0, 5.0, 5.0)
ANCHOR_SIZE = 0.25


def detector_shapes() -> dict[str, tuple[int, ...]]:
    """Variable name -> shape, in the order the values are drawn (the order is part of the seed)."""
    shapes: dict[str, tuple[int, ...]] = {}
    in_channels = 3
    for block, _stride, channels in BLOCKS:
        shapes[f"{block}/conv/weights"] = (3, 3, in_channels, channels)
        for param in ("gamma", "beta", "moving_mean", "moving_variance"):
            shapes[f"{block}/bn/{param}"] = (channels,)
        in_channels = channels
    shapes["dense/weights"] = (FLAT_FEATURES, DENSE_UNITS)
    shapes["dense/biases"] = (DENSE_UNITS,)
    for head in ("class_head", "box_head"):
        shapes[f"{head}/weights"] = (DENSE_UNITS, NUM_ANCHORS * 4)
        shapes[f"{head}/biases"] = (NUM_ANCHORS * 4,)
    return shapes


def _he_normal(rng: np.random.RandomState, shape: tuple[int, ...], gain: float = 1.0) -> np.ndarray:
    """He-normal: std sqrt(2 / fan_in), fan_in = every axis but the last."""
    fan_in = int(np.prod(shape[:-1]))
    return rng.normal(0.0, gain * np.sqrt(2.0 / fan_in), size=shape)


def detector_weights(seed: int = SEED) -> dict[str, np.ndarray]:
    """All detector variables as float32 arrays, identical for identical ``seed``."""
    rng = np.random.RandomState(seed)
    values: dict[str, np.ndarray] = {}
    for name, shape in detector_shapes().items():
        kind = name.rsplit("/", 1)[1]
        if kind == "weights" and name.startswith("box_head"):
            # Small box regressions keep the decoded boxes near their anchors (exp() stays tame).
            value = _he_normal(rng, shape, gain=0.1)
        elif kind == "weights" and name.startswith("class_head"):
            value = _he_normal(rng, shape, gain=0.5)
        elif kind == "weights":
            value = _he_normal(rng, shape)
        elif kind == "biases":
            value = rng.normal(0.0, 0.01, size=shape)
        elif kind in ("gamma", "moving_variance"):
            value = rng.uniform(0.5, 1.5, size=shape)
        elif kind in ("beta", "moving_mean"):
            value = rng.normal(0.0, 0.1, size=shape)
        else:  # pragma: no cover - detector_shapes() names only the kinds above
            raise ValueError(f"no initialiser rule for variable {name!r}")
        values[name] = value.astype(np.float32)
    return values


def anchors() -> np.ndarray:
    """One square anchor per cell of the 8x8 grid, as (y_centre, x_centre, height, width)."""
    centres = (np.arange(GRID, dtype=np.float32) + 0.5) / GRID
    y, x = np.meshgrid(centres, centres, indexing="ij")
    size = np.full(NUM_ANCHORS, ANCHOR_SIZE, dtype=np.float32)
    return np.stack([y.ravel(), x.ravel(), size, size], axis=1).astype(np.float32)


def nan_model_weights(seed: int = SEED) -> np.ndarray:
    """A [4, 6] matrix whose last three columns are the negatives of the first three.

    Of each +/- pair of products one is negative (unless both are exactly zero), so ``log`` of
    the product is NaN on every row: the NaN does not depend on which random inputs a tool
    happens to draw.
    """
    half = np.random.RandomState(seed + 1).normal(0.0, 1.0, size=(4, 3)).astype(np.float32)
    return np.concatenate([half, -half], axis=1)
