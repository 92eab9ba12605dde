"""Values a capture kept only by digest, read back from the artifact that holds them.

A large variable restored from a checkpoint is in that checkpoint already, so a capture keeps
its sha256 (``values: "artifact"``) instead of a copy: two sides whose digests agree are
bitwise identical without reading anything. When the values themselves are needed (digests
differ, a report shows elements), they are read from the checkpoint the manifest names, in a
TensorFlow child process (:mod:`tracer.captures.values_worker`; this module never imports TensorFlow), and checked against the
digest. When that cannot happen (the model is not on this machine, TensorFlow is missing, the
checkpoint changed since), :class:`ValuesNotStored` says which tensor, why, and how to get it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TftraceError
from ._format import Unstorable, to_storage
from ._packed import digest

__all__ = ["ValuesNotStored", "artifact_values"]

READ_TIMEOUT_S = 600


class ValuesNotStored(TftraceError):
    """A tensor kept by digest whose values cannot be read back here."""


def artifact_values(capture: Any, name: str) -> dict[str, np.ndarray]:
    """Every kept-by-digest tensor of ``capture`` (stored dtype), read from its artifact in one child."""
    tensors = capture.manifest["tensors"]
    wanted = [n for n, rec in tensors.items() if rec.get("values") == "artifact" and "alias_of" not in rec]
    path = str((capture.spec.get("artifact") or {}).get("path", ""))
    fix = (f"re-capture {capture.path} with --keep-weights to store the weights in it, or run this where the "
           f"model {path or '(unknown)'} is")
    what = f"the values of {name!r} (kept as a digest in {capture.path}: the model's checkpoint holds them)"
    if not path or not os.path.exists(path):
        raise ValuesNotStored(f"{what} cannot be read: the model {path or '(unknown)'} is not on this machine", fix)
    out = Path(tempfile.mkdtemp(prefix="tftrace-values-"))
    try:
        job = {"path": path, "keys": [tensors[n]["checkpoint_key"] for n in wanted], "out": str(out)}
        try:
            done = subprocess.run([sys.executable, "-m", "tracer.captures.values_worker", json.dumps(job)],
                                  capture_output=True, text=True, timeout=READ_TIMEOUT_S, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ValuesNotStored(f"{what} could not be read from {path}: {exc}", fix) from exc
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no message"])[-1][:300]
            raise ValuesNotStored(f"{what} could not be read from {path} (TensorFlow is needed): {tail}", fix)
        values = {}
        for i, n in enumerate(wanted):
            try:
                _, stored = to_storage(np.load(out / f"{i}.npy", mmap_mode="r", allow_pickle=False))
            except (OSError, ValueError, Unstorable) as exc:
                raise ValuesNotStored(f"{what} could not be read from {path}: {exc}", fix) from exc
            if digest(stored) != tensors[n]["digest"]:
                raise ValuesNotStored(f"the checkpoint of {path} no longer holds the values captured for {n!r} "
                                      "(their digest differs): the model changed since the capture", fix)
            values[n] = stored
        return values  # memory-mapped: the files stay readable after their directory is gone
    finally:
        shutil.rmtree(out, ignore_errors=True)
