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
from ._packed import content_digest
from .runtime import tf, weights_prefix

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """The child: for each job (one per capture), hash each checkpoint key's value as a capture
    stores it and, where the job names an ``out`` directory, write it there as ``<i>.npy``; then
    print ``{"digests": [[...] per job], "came_up": ...}`` (:func:`tracer.children.load_report`,
    reading included) as the last line on stdout."""
    note_start()
    jobs = json.loads((argv or sys.argv[1:])[0])
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    began = time.perf_counter()
    digests = []
    for job in jobs:
        prefix = weights_prefix(job["path"])
        if prefix is None:
            print(f"{job['path']} holds no checkpoint", file=sys.stderr)
            return 2
        reader = tf().compat.v1.train.NewCheckpointReader(prefix)
        digests.append([])
        for i, key in enumerate(job["keys"]):
            value = np.asarray(reader.get_tensor(key))
            digests[-1].append(content_digest(value))
            if job.get("out"):
                np.save(Path(job["out"]) / f"{i}.npy", value, allow_pickle=False)
    print(json.dumps({"digests": digests, "came_up": load_report((began, time.perf_counter()))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
