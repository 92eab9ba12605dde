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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TftraceError
from ._format import Unstorable, to_storage
from ._packed import digest

__all__ = ["ValuesNotStored", "ArtifactReads", "artifact_values"]

READ_TIMEOUT_S = 600


class ValuesNotStored(TftraceError):
    """A tensor kept by digest whose values cannot be read back here."""


def _kept(capture: Any) -> list[str]:
    """The tensors ``capture`` keeps only by digest (an alias reads its owner's)."""
    return [n for n, rec in capture.manifest["tensors"].items() if rec.get("values") == "artifact" and "alias_of" not in rec]


def _model_path(capture: Any) -> str:
    return str((capture.spec.get("artifact") or {}).get("path", ""))


def artifact_values(capture: Any, name: str) -> dict[str, np.ndarray]:
    """Every kept-by-digest tensor of ``capture`` (stored dtype), read from its artifact in one child."""
    path = _model_path(capture)
    fix = (f"re-capture {capture.path} with --keep-weights to store the weights in it, or run this where the "
           f"model {path or '(unknown)'} is")
    what = f"the values of {name!r} (kept as a digest in {capture.path}: the model's checkpoint holds them)"
    if not path or not os.path.exists(path):
        raise ValuesNotStored(f"{what} cannot be read: the model {path or '(unknown)'} is not on this machine", fix)
    out = Path(tempfile.mkdtemp(prefix="tftrace-values-"))
    try:
        problem = _read_in_one_child([(capture, out)])
        if problem:
            raise ValuesNotStored(f"{what} could not be read from {path}{problem}", fix)
        values = _checked(capture, out)
        if isinstance(values, str):
            raise ValuesNotStored(f"{what} {values}", fix)
        return values
    finally:
        shutil.rmtree(out, ignore_errors=True)


class ArtifactReads:
    """The digest-kept values of one or more captures, read in one TensorFlow child when the first
    of them is needed. Shared by the two sides of a compare, that is one import of TensorFlow (most
    of such a read's seconds) instead of two. A capture the joint read could not serve is read
    alone by :func:`artifact_values`, whose error says which tensor and why."""

    def __init__(self, captures: Sequence[Any]) -> None:
        self._unread = list(captures)
        self._values: dict[str, dict[str, np.ndarray]] = {}  # capture path -> its kept values

    def value(self, capture: Any, name: str) -> np.ndarray:
        """The stored values of ``capture``'s tensor ``name`` (kept by digest)."""
        if len(self._unread) > 1:
            self._values.update(_read_together(self._unread))
        self._unread = []
        found = self._values.get(str(capture.path))
        if found is None or name not in found:
            found = self._values[str(capture.path)] = artifact_values(capture, name)
        return found[name]


def _read_together(captures: list[Any]) -> dict[str, dict[str, np.ndarray]]:
    """Capture path -> its kept values, for the captures one child could read and check; the
    others are left out (read alone later, to say why)."""
    readable = [c for c in captures if _kept(c) and os.path.exists(_model_path(c) or "/nonexistent")]
    outs = [Path(tempfile.mkdtemp(prefix="tftrace-values-")) for _ in readable]
    try:
        if not readable or _read_in_one_child(list(zip(readable, outs))):
            return {}
        checked = ((c, _checked(c, out)) for c, out in zip(readable, outs))
        return {str(c.path): values for c, values in checked if isinstance(values, dict)}
    finally:
        for out in outs:
            shutil.rmtree(out, ignore_errors=True)


def _read_in_one_child(jobs: list[tuple[Any, Path]]) -> str:
    """Each capture's kept values written by one values_worker child into its directory; "" when
    it succeeded, else what went wrong (said after "could not be read from PATH")."""
    spec = [{"path": _model_path(capture), "keys": [capture.manifest["tensors"][n]["checkpoint_key"]
                                                     for n in _kept(capture)], "out": str(out)} for capture, out in jobs]
    try:
        done = subprocess.run([sys.executable, "-m", "tracer.captures.values_worker", json.dumps(spec)],
                              capture_output=True, text=True, timeout=READ_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f": {exc}"
    if done.returncode != 0:
        return f" (TensorFlow is needed): {(done.stderr.strip().splitlines() or ['no message'])[-1][:300]}"
    return ""


def _checked(capture: Any, out: Path) -> dict[str, np.ndarray] | str:
    """The values the child wrote for ``capture``, each checked against the digest it recorded;
    or, when one cannot be read or does not match, what is wrong (said after the tensor asked for)."""
    path, tensors = _model_path(capture), capture.manifest["tensors"]
    values = {}
    for i, n in enumerate(_kept(capture)):
        try:
            _, stored = to_storage(np.load(out / f"{i}.npy", mmap_mode="r", allow_pickle=False))
        except (OSError, ValueError, Unstorable) as exc:
            return f"could not be read from {path}: {exc}"
        if digest(stored) != tensors[n]["digest"]:
            return (f"cannot be used: the checkpoint of {path} no longer holds the values captured for {n!r} "
                    "(their digest differs); the model changed since the capture")
        values[n] = stored
    return values  # memory-mapped: the files stay readable after their directory is gone
