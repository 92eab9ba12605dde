"""Deterministic sample models for tftrace's demo, tests and benchmarks.

Generate them with ``python -m sample_models.generate --out DIR`` or, from Python,
``from sample_models.generate import generate; generate(DIR)``. See README.md in this folder
for what each model reproduces and the answer a tool must give on it.

Importing this package does not import TensorFlow; generating does.
"""

from __future__ import annotations

__all__: list[str] = []
