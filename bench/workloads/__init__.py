"""The benchmark's models: generated, deterministic, no downloads.

``MODELS`` names every model the harness can build; :func:`build` puts one into the default
TF1 graph. Building needs TensorFlow (it is passed in), importing this package does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

from .layers import Params
from .resnet import build_resnet50, build_resnet152
from .ssd import build_ssd300
from .wide import build_wide, units_for

__all__ = ["MODELS", "WIDE_OPS", "ModelSpec", "build"]

WIDE_OPS = 5000


@dataclass(frozen=True)
class ModelSpec:
    """A benchmark model: its builder's name and the shape of one example."""

    name: str
    input_key: str
    example_shape: tuple[int, ...]
    seed: int


MODELS: dict[str, ModelSpec] = {
    "resnet50": ModelSpec("resnet50", "images", (224, 224, 3), 50),
    "resnet152": ModelSpec("resnet152", "images", (224, 224, 3), 152),
    "ssd300": ModelSpec("ssd300", "images", (300, 300, 3), 300),
    "wide": ModelSpec("wide", "x", (32,), 5000),
    "wide_planted": ModelSpec("wide_planted", "x", (32,), 5000),
}


def build(tf: ModuleType, name: str, wide_ops: int = WIDE_OPS) -> tuple[Any, dict[str, Any], Params]:
    """Build model ``name`` into the default graph: (input placeholder, outputs, its Params)."""
    params = Params(tf)
    if name == "resnet50":
        images, outputs = build_resnet50(tf, params)
    elif name == "resnet152":
        images, outputs = build_resnet152(tf, params)
    elif name == "ssd300":
        images, outputs = build_ssd300(tf, params)
    elif name in ("wide", "wide_planted"):
        units = units_for(wide_ops)
        images, outputs = build_wide(tf, params, units, planted_unit=units // 5 if name == "wide_planted" else None)
    else:
        raise KeyError(f"no benchmark model {name!r}; known: {', '.join(MODELS)}")
    return images, outputs, params
