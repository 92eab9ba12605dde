"""The child that reads a capture's kept-by-digest values back from its checkpoint.

Started by :class:`tracer.captures._values.ArtifactReads` as ``python -m
tracer.captures.values_worker JOBS`` (a JSON list, one job per capture: a compare reads both sides' in one child); it imports TensorFlow, which the parent never does.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from ..children import load_report, note_start
from .runtime import tf, weights_prefix

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """The child: for each job (one per capture), write each checkpoint key's value as ``OUT/<i>.npy``;
    then print how it came up (:func:`tracer.children.load_report`, reading included) on stdout."""
    note_start()
    jobs = json.loads((argv or sys.argv[1:])[0])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    began = time.perf_counter()
    for job in jobs:
        prefix = weights_prefix(job["path"])
        if prefix is None:
            print(f"{job['path']} holds no checkpoint", file=sys.stderr)
            return 2
        reader = tf().compat.v1.train.NewCheckpointReader(prefix)
        for i, key in enumerate(job["keys"]):
            np.save(Path(job["out"]) / f"{i}.npy", np.asarray(reader.get_tensor(key)), allow_pickle=False)
    print(json.dumps(load_report((began, time.perf_counter()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
