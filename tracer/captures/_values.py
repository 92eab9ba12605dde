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

from .. import children
from ..errors import TftraceError
from ._format import Unstorable, to_storage
from ._packed import digest

__all__ = ["ValuesNotStored", "ArtifactReads"]

READ_TIMEOUT_S = 600


class ValuesNotStored(TftraceError):
    """A tensor kept by digest whose values cannot be read back here."""


def _kept(capture: Any) -> list[str]:
    """The tensors ``capture`` keeps only by digest (an alias reads its owner's)."""
    return [n for n, rec in capture.manifest["tensors"].items() if rec.get("values") == "artifact" and "alias_of" not in rec]


def _model_path(capture: Any) -> str:
    return str((capture.spec.get("artifact") or {}).get("path", ""))


class ArtifactReads:
    """The values one or more captures keep by digest, as their artifacts hold them: read in one
    TensorFlow child when the first is needed (shared by the two sides of a compare, that is one
    import of TensorFlow, most of such a read's seconds, instead of two), then kept.

    :meth:`value` hands out a tensor's values only when they match the digest its capture
    recorded; :meth:`held_digest` says what the artifact holds, whatever the capture claims (what
    checking a received capture's claim needs)."""

    def __init__(self, captures: Sequence[Any]) -> None:
        self._unread = list(captures)
        self._held: dict[str, dict[str, np.ndarray] | str] = {}  # capture path -> its kept values, or why none
        self._digests: dict[tuple[str, str], str] = {}  # (capture path, tensor) -> digest of the values held

    def value(self, capture: Any, name: str) -> np.ndarray:
        """The stored values of ``capture``'s tensor ``name``; :class:`ValuesNotStored` says why not."""
        path = _model_path(capture)
        what = f"the values of {name!r} (kept as a digest in {capture.path}: the model's checkpoint holds them)"
        fix = (f"re-capture {capture.path} with --keep-weights to store the weights in it, or run this where the "
               f"model {path or '(unknown)'} is")
        held = self._read(capture)
        if isinstance(held, str):
            raise ValuesNotStored(f"{what} {held}", fix)
        if self.held_digest(capture, name) != capture.manifest["tensors"][name]["digest"]:
            raise ValuesNotStored(f"{what} cannot be used: the checkpoint of {path} no longer holds the values "
                                  f"captured for {name!r} (their digest differs); the model changed since the capture",
                                  fix)
        return held[name]

    def held_digest(self, capture: Any, name: str) -> str | None:
        """The digest of the values ``capture``'s artifact holds for ``name``; None when they cannot be read here."""
        key = (str(capture.path), name)
        if key not in self._digests:
            held = self._read(capture)
            if isinstance(held, str):
                return None
            self._digests[key] = digest(held[name])
        return self._digests[key]

    def _read(self, capture: Any) -> dict[str, np.ndarray] | str:
        unread, self._unread = self._unread, []
        if unread:
            self._held.update(_read_together(unread))
        if str(capture.path) not in self._held:
            self._held.update(_read_together([capture]))
        return self._held[str(capture.path)]


def _read_together(captures: list[Any]) -> dict[str, dict[str, np.ndarray] | str]:
    """Capture path -> the values its artifact holds for the tensors it keeps by digest (read in
    one child for all), or what kept them from being read (said after the tensor asked for)."""
    found: dict[str, dict[str, np.ndarray] | str] = {}
    readable = []
    for capture in captures:
        path = _model_path(capture)
        if not _kept(capture):
            found[str(capture.path)] = {}
        elif not path or not os.path.exists(path):
            found[str(capture.path)] = f"cannot be read: the model {path or '(unknown)'} is not on this machine"
        else:
            readable.append(capture)
    outs = [Path(tempfile.mkdtemp(prefix="tftrace-values-")) for _ in readable]
    try:
        problem = _read_in_one_child(list(zip(readable, outs))) if readable else ""
        for capture, out in zip(readable, outs):
            found[str(capture.path)] = (f"could not be read from {_model_path(capture)}{problem}" if problem
                                        else _loaded(capture, out))
    finally:
        for out in outs:
            shutil.rmtree(out, ignore_errors=True)
    return found


def _read_in_one_child(jobs: list[tuple[Any, Path]]) -> str:
    """Each capture's kept values written by one values_worker child into its directory; "" when
    it succeeded, else what went wrong (said after "could not be read from PATH")."""
    spec = [{"path": _model_path(capture), "keys": [capture.manifest["tensors"][n]["checkpoint_key"]
                                                     for n in _kept(capture)], "out": str(out)} for capture, out in jobs]
    env = dict(os.environ)
    started = children.stamp(env)
    try:
        done = subprocess.run([sys.executable, "-m", "tracer.captures.values_worker", json.dumps(spec)], env=env,
                              capture_output=True, text=True, timeout=READ_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        children.record("weights", started)
        return f": {exc}"
    children.record("weights", started, _came_up(done.stdout) if done.returncode == 0 else None)
    if done.returncode != 0:
        return f" (TensorFlow is needed): {(done.stderr.strip().splitlines() or ['no message'])[-1][:300]}"
    return ""


def _came_up(stdout: str) -> dict[str, Any] | None:
    """The child's last stdout line, how it came up (:func:`tracer.children.load_report`)."""
    try:
        report = json.loads((stdout.strip().splitlines() or ["null"])[-1])
    except json.JSONDecodeError:
        return None
    return report if isinstance(report, dict) else None


def _loaded(capture: Any, out: Path) -> dict[str, np.ndarray] | str:
    """The values the child wrote for ``capture`` (stored dtype, not yet checked against their
    digests), or why one cannot be read."""
    values = {}
    for i, n in enumerate(_kept(capture)):
        try:
            _, values[n] = to_storage(np.load(out / f"{i}.npy", mmap_mode="r", allow_pickle=False))
        except (OSError, ValueError, Unstorable) as exc:
            return f"could not be read from {_model_path(capture)}: {exc}"
    return values  # memory-mapped: the files stay readable after their directory is gone
