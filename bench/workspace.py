"""Where the benchmark keeps its models, inputs and outputs (``out/bench`` by default).

Models are generated once and kept: a stamp holds a hash of the generator's source, so editing
a builder regenerates, and nothing else does. Inputs are seeded normal images written as
``.npy``, the very file every contender is fed. The ``--quick`` workloads are the sample
detector (``make models`` writes it; generated here otherwise), so the smoke test needs no
model of its own.
"""

from __future__ import annotations

import hashlib
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .procs import REPO, run_child
from .workloads import MODELS

__all__ = ["Model", "Workspace"]

# the SSD300 shares its box decoder and NMS with the sample detector's forward pass
WORKLOAD_SOURCES = sorted((REPO / "bench" / "workloads").glob("*.py")) + [REPO / "sample_models" / "forward.py"]
SAMPLE_MODELS = REPO / "sample_models" / "generated"


@dataclass(frozen=True)
class Model:
    """A model as the contenders see it: its two exports and how tfdbg rebuilds it."""

    name: str
    ckpt: Path  # checkpoint directory (``model.ckpt.*`` + ``checkpoint``)
    savedmodel: Path
    builder: str  # the name bench.peers rebuilds it by ("detector" = the sample detector)
    example_shape: tuple[int, ...]

    @property
    def ckpt_prefix(self) -> Path:
        return self.ckpt / "model.ckpt"


class Workspace:
    def __init__(self, root: Path) -> None:
        self.root = root.resolve()
        self.models_dir = self.root / "models"
        self.inputs_dir = self.root / "inputs"
        self.runs_dir = self.root / "runs"

    def fresh(self, *parts: str) -> Path:
        """An empty directory for one measurement's output (the previous one is deleted)."""
        path = self.runs_dir.joinpath(*parts)
        if path.exists():
            shutil.rmtree(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return path

    def model(self, name: str, log: Callable[[str], None] = print) -> Model:
        """The model ``name`` (generated first if missing or its generator changed)."""
        if name == "detector":
            return self._sample_detector(log)
        spec = MODELS[name]
        out = self.models_dir / name
        stamp = out / ".stamp"
        digest = self._generator_digest()
        if not (stamp.exists() and stamp.read_text() == digest):
            log(f"generating {name} into {out} ...")
            run_child([sys.executable, "-m", "bench.workloads.export", "--out", str(self.models_dir), name])
            stamp.write_text(digest)
        return Model(name, out / "ckpt", out / "savedmodel", name, spec.example_shape)

    def _sample_detector(self, log: Callable[[str], None]) -> Model:
        root = SAMPLE_MODELS
        if not (root / "models.json").exists():
            root = self.models_dir / "sample_models"
            if not (root / "models.json").exists():
                log(f"generating the sample models into {root} ...")
                run_child([sys.executable, "-m", "sample_models.generate", "--out", str(root)])
        return Model("detector", root / "detector" / "ckpt", root / "detector" / "savedmodel", "detector", (64, 64, 3))

    @staticmethod
    def _generator_digest() -> str:
        h = hashlib.sha256()
        for path in WORKLOAD_SOURCES:
            h.update(path.name.encode())
            h.update(path.read_bytes())
        return h.hexdigest()

    def inputs(self, model: Model, batch: int) -> Path:
        """``batch`` seeded N(0, 1) examples for ``model`` as float32 ``.npy`` (written once)."""
        path = self.inputs_dir / f"{model.name}_b{batch}.npy"
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            rng = np.random.RandomState(batch)
            np.save(path, rng.normal(size=(batch, *model.example_shape)).astype(np.float32))
        return path
