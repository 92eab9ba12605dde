"""Generate every sample model into one directory: ``python -m sample_models.generate --out DIR``.

The whole tree is written to ``DIR.partial`` next to ``DIR`` and renamed into place at the
end, so an interrupted run never leaves a half-written tree that looks complete. A previous
``DIR`` is replaced only after the new one is finished.

A side effect worth knowing: the detector checkpoint's ``checkpoint`` state file names
absolute paths inside ``DIR.partial`` (``Saver.save`` writes what it was given), which no
longer exist after the rename, exactly like a training directory copied to another machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import numpy as np

from . import weights as w
from .folded import NodeDiff, export_folded
from .forward import Variant
from .nan_model import export_nan_model
from .tf1_detector import export_variant_from_checkpoint, write_detector_checkpoint
from .tf2_detector import export_tf2

__all__ = ["DEFAULT_OUT", "MODEL_PATHS", "generate", "main"]

DEFAULT_OUT = Path(__file__).resolve().parent / "generated"

# Model name -> path inside the output directory. "detector_ckpt" is the TF1 checkpoint
# directory (with its `checkpoint` file); every other entry is a SavedModel directory.
MODEL_PATHS: dict[str, str] = {
    "detector_ckpt": "detector/ckpt",
    "detector": "detector/savedmodel",
    "detector_folded": "detector_folded/savedmodel",
    "detector_bf16": "detector_bf16/savedmodel",
    "detector_planted": "detector_planted/savedmodel",
    "detector_tf2": "detector_tf2/savedmodel",
    "nan_model": "nan_model/savedmodel",
    "nan_model_safe": "nan_model_safe/savedmodel",
}
FOLD_DIFF_FILE = "detector_folded/node_diff.txt"
INDEX_FILE = "models.json"


def _import_tf() -> ModuleType:
    """Import TensorFlow quietly; only generation needs it, never an import of this package."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # noqa: PLC0415 - deliberately lazy

    tf.get_logger().setLevel("ERROR")
    return tf


def _checkpoint_values(tf: ModuleType, prefix: Path) -> dict[str, np.ndarray]:
    """Read every detector variable back from the checkpoint, so exports use its exact bytes."""
    reader = tf.train.load_checkpoint(str(prefix))
    return {name: reader.get_tensor(name) for name in w.detector_shapes()}


def _write_all(tf: ModuleType, root: Path, log: Callable[[str], None]) -> NodeDiff:
    """Write every model below ``root`` (which must not exist yet). Returns the fold diff."""
    prefix = write_detector_checkpoint(tf, root / "detector", w.detector_weights())
    log(f"detector: checkpoint {prefix} and SavedModel")
    diff = export_folded(tf, prefix, root / MODEL_PATHS["detector_folded"])
    (root / FOLD_DIFF_FILE).write_text("\n".join(diff.lines()) + "\n")
    log(f"detector_folded: {len(diff.removed)} removed, {len(diff.added)} added, "
        f"{len(diff.op_changed)} op changed (see {FOLD_DIFF_FILE})")
    export_variant_from_checkpoint(tf, prefix, root / MODEL_PATHS["detector_bf16"],
                                   Variant(dense_bfloat16=True))
    log("detector_bf16: dense/MatMul in bfloat16")
    export_variant_from_checkpoint(tf, prefix, root / MODEL_PATHS["detector_planted"],
                                   Variant(bn_epsilon={"block2": 0.01}))
    log("detector_planted: block2/bn/FusedBatchNormV3 epsilon 0.01")
    export_tf2(tf, _checkpoint_values(tf, prefix), root / MODEL_PATHS["detector_tf2"])
    log("detector_tf2: TF2 SavedModel")
    export_nan_model(tf, root / MODEL_PATHS["nan_model"], safe=False)
    export_nan_model(tf, root / MODEL_PATHS["nan_model_safe"], safe=True)
    log("nan_model, nan_model_safe")
    (root / INDEX_FILE).write_text(json.dumps(MODEL_PATHS, indent=2) + "\n")
    return diff


def generate(out_dir: str, log: Callable[[str], None] | None = None) -> dict[str, str]:
    """Generate all sample models into ``out_dir``; return model name -> absolute path.

    Deterministic: the variables are byte-identical on every run (seed
    :data:`sample_models.weights.SEED`).
    """
    log = log or (lambda _message: None)
    out = Path(out_dir).resolve()
    staging = out.with_name(out.name + ".partial")
    retired = out.with_name(out.name + ".old")
    for leftover in (staging, retired):
        if leftover.exists():
            shutil.rmtree(leftover)
    staging.mkdir(parents=True)
    _write_all(_import_tf(), staging, log)
    if out.exists():
        out.rename(retired)
    staging.rename(out)
    if retired.exists():
        shutil.rmtree(retired)
    return {name: str(out / rel) for name, rel in MODEL_PATHS.items()}


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; prints one line per model and the folded node diff's size."""
    parser = argparse.ArgumentParser(
        prog="python -m sample_models.generate",
        description="Write the deterministic sample models used by tftrace's demo and tests.",
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT),
                        help="output directory (replaced atomically; default: %(default)s)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    paths = generate(args.out, log=lambda message: print(message, flush=True))
    print(f"wrote {len(paths)} models to {Path(args.out).resolve()} "
          f"in {time.monotonic() - started:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
