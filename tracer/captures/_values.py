"""Values a capture kept only by digest, read back from the artifact that holds them.

A large variable restored from a checkpoint is in that checkpoint already, so a capture keeps
its sha256 (``values: "artifact"``) instead of a copy: two sides whose digests agree are
bitwise identical without reading anything. When the values themselves are needed (digests
differ, a report shows elements, a received capture's digest is checked), they are read from the
checkpoint the manifest names and checked against the digest: in this process by
:mod:`tracer.artifacts.bundle` where it can (a local V2 checkpoint of numeric tensors, what
nearly every model has), else in a TensorFlow child process (:mod:`tracer.captures.values_worker`;
this module never imports TensorFlow). When neither can (the model is not on this machine,
TensorFlow is missing, the checkpoint changed since), :class:`ValuesNotStored` says which tensor,
why, and how to get it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from .. import children
from ..artifacts.bundle import Bundle, NotReadableHere
from ..artifacts.kinds import exists_here
from ..errors import TftraceError
from ._format import Unstorable, to_storage
from ._packed import content_digest, digest_of_pieces

__all__ = ["ValuesNotStored", "ArtifactReads"]

READ_TIMEOUT_S = 600
_T = TypeVar("_T")


class ValuesNotStored(TftraceError):
    """A tensor kept by digest whose values cannot be read back here."""


def _kept(capture: Any) -> list[str]:
    """The tensors ``capture`` keeps only by digest (an alias reads its owner's)."""
    return [n for n, rec in capture.manifest["tensors"].items() if rec.get("values") == "artifact" and "alias_of" not in rec]


def _model_path(capture: Any) -> str:
    return str((capture.spec.get("artifact") or {}).get("path", ""))


def _digest_in(bundle: Bundle, key: str) -> str:
    """The digest a capture keeps of checkpoint tensor ``key``, read a few MB at a time."""
    dtype, shape = bundle.describe(key)
    return digest_of_pieces(dtype, shape, bundle.pieces(key))


def _local_bundle(capture: Any) -> Bundle | None:
    """The checkpoint the capture's manifest says its side restored, when this process can read it
    (a local V2 checkpoint): the very files the capture ran on, wherever the model's path points now."""
    artifact = capture.manifest.get("artifact")
    kind, location = (artifact.get("kind"), artifact.get("location")) if isinstance(artifact, dict) else (None, None)
    if not isinstance(location, str) or not location or "://" in location:
        return None
    if kind == "checkpoint":
        prefix = location
    elif kind in ("saved_model_v1", "saved_model_v2"):
        prefix = os.path.join(location, "variables", "variables")
    else:
        return None
    try:
        return Bundle(prefix)
    except (NotReadableHere, OSError):
        return None


class ArtifactReads:
    """The values one or more captures keep by digest, as their artifacts hold them: read in this
    process where :mod:`tracer.artifacts.bundle` can, else in one TensorFlow child for all of them
    when the first is needed (shared by the two sides of a compare, that is one import of
    TensorFlow, most of such a read's seconds, instead of two).

    :meth:`held_digest` says what the artifact holds, whatever the capture claims (what checking a
    received capture's claim needs): the child hashes the values and sends only the digests, so
    checking a ResNet's weights maps none of their megabytes here. :meth:`value` hands out a
    tensor's values, and only when they match the digest its capture recorded."""

    def __init__(self, captures: Sequence[Any]) -> None:
        self._captures = list(captures)
        self._values: dict[str, dict[str, np.ndarray]] = {}  # capture path -> its kept values
        self._digests: dict[str, dict[str, str]] = {}  # capture path -> tensor -> digest of the values held
        self._problems: dict[str, str] = {}  # capture path -> why its artifact could not be read
        self._bundles: dict[str, Bundle | None] = {}  # capture path -> its checkpoint, read in this process
        self._here: dict[str, dict[str, str]] = {}  # capture path -> tensor -> digest, of what was read here

    def value(self, capture: Any, name: str) -> np.ndarray:
        """The stored values of ``capture``'s tensor ``name``; :class:`ValuesNotStored` says why not."""
        path = _model_path(capture)
        what = f"the values of {name!r} (kept as a digest in {capture.path}: the model's checkpoint holds them)"
        fix = (f"re-capture {capture.path} with --keep-weights to store the weights in it, or run this where the "
               f"model {path or '(unknown)'} is")
        changed = (f"cannot be used: the checkpoint of {path} no longer holds the values captured for {name!r} "
                   "(their digest differs); the model changed since the capture")
        recorded = capture.manifest["tensors"][name]["digest"]
        key = str(capture.path)
        held = self._read_here(capture, name, lambda bundle, checkpoint_key: bundle.read(checkpoint_key))
        if held is not None:
            if content_digest(held) != recorded:
                raise ValuesNotStored(f"{what} {changed}", fix)
            stored = to_storage(held)[1]
            stored.flags.writeable = False
            return stored
        if key not in self._values and key not in self._problems:
            self._read(self._for_the_child(capture, self._values), values=True)
        if key in self._problems:
            raise ValuesNotStored(f"{what} {self._problems[key]}", fix)
        if self._digests[key][name] != recorded:
            raise ValuesNotStored(f"{what} {changed}", fix)
        return self._values[key][name]

    def held_digest(self, capture: Any, name: str) -> str | None:
        """The digest of the values ``capture``'s artifact holds for ``name``; None when they cannot be read here."""
        key = str(capture.path)
        if name not in self._here.get(key, {}):
            found = self._read_here(capture, name, _digest_in)
            if found is not None:
                self._here.setdefault(key, {})[name] = found
        if name in self._here.get(key, {}):
            return self._here[key][name]
        if key not in self._digests and key not in self._problems:
            self._read(self._for_the_child(capture, self._digests), values=False)
        return self._digests.get(key, {}).get(name)

    def _for_the_child(self, capture: Any, done: dict[str, Any]) -> list[Any]:
        """``capture`` and the others not read yet that this process cannot read: one child for them all."""
        return [c for c in [*self._captures, capture]
                if str(c.path) not in done and (c is capture or self._bundle(c) is None)]

    def _bundle(self, capture: Any) -> Bundle | None:
        key = str(capture.path)
        if key not in self._bundles:
            self._bundles[key] = _local_bundle(capture) if exists_here(_model_path(capture)) else None
        return self._bundles[key]

    def _read_here(self, capture: Any, name: str, how: Callable[[Bundle, str], _T]) -> _T | None:
        """``how(bundle, checkpoint key)`` of tensor ``name`` in this process; None when this reader
        cannot (a checkpoint not here, a tensor it leaves to TensorFlow): then the child reads it."""
        bundle = self._bundle(capture)
        if bundle is None:
            return None
        try:
            return how(bundle, capture.manifest["tensors"][name]["checkpoint_key"])
        except NotReadableHere:
            return None

    def _read(self, captures: list[Any], *, values: bool) -> None:
        """Read ``captures``' kept tensors in one child: their digests, and their values if ``values``."""
        readable = []
        for capture in dict((str(c.path), c) for c in captures).values():
            path = _model_path(capture)
            if not _kept(capture):
                self._values[str(capture.path)], self._digests[str(capture.path)] = {}, {}
            elif not path or not exists_here(path):
                self._problems[str(capture.path)] = f"cannot be read: the model {path or '(unknown)'} is not on this machine"
            else:
                readable.append(capture)
        if not readable:
            return
        outs = [Path(tempfile.mkdtemp(prefix="tftrace-values-")) if values else None for _ in readable]
        try:
            problem, digests = _read_in_one_child(list(zip(readable, outs)))
            for capture, out, held in zip(readable, outs, digests or [None] * len(readable)):
                key = str(capture.path)
                if problem or held is None:
                    self._problems[key] = f"could not be read from {_model_path(capture)}{problem or ': no digests'}"
                    continue
                self._digests[key] = dict(zip(_kept(capture), held))
                if out is not None:
                    loaded = _loaded(capture, out)
                    if isinstance(loaded, str):
                        self._problems[key] = loaded
                    else:
                        self._values[key] = loaded
        finally:
            for out in outs:
                if out is not None:
                    shutil.rmtree(out, ignore_errors=True)


def _read_in_one_child(jobs: list[tuple[Any, Path | None]]) -> tuple[str, list[list[str]] | None]:
    """One values_worker child for all ``jobs``: each capture's kept tensors hashed (their digests
    come back, one list per job) and, where the job names a directory, written there. Returns
    ("", digests) when it succeeded, else (what went wrong, said after "could not be read from
    PATH", None)."""
    spec = [{"path": _model_path(capture), "keys": [capture.manifest["tensors"][n]["checkpoint_key"]
                                                     for n in _kept(capture)],
             "out": None if out is None else str(out)} for capture, out in jobs]
    env = dict(os.environ)
    started = children.stamp(env)
    try:
        done = subprocess.run([sys.executable, "-m", "tracer.captures.values_worker", json.dumps(spec)], env=env,
                              capture_output=True, text=True, timeout=READ_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        children.record("weights", started)
        return f": {exc}", None
    answer = _answer(done.stdout) if done.returncode == 0 else {}
    children.record("weights", started, answer.get("came_up"))
    if done.returncode != 0:
        return f" (TensorFlow is needed): {(done.stderr.strip().splitlines() or ['no message'])[-1][:300]}", None
    digests = answer.get("digests")
    if not isinstance(digests, list) or len(digests) != len(jobs):
        return ": the child's answer was not understood", None
    return "", digests


def _answer(stdout: str) -> dict[str, Any]:
    """The child's last stdout line: ``{"digests": [...], "came_up": {...}}`` (:mod:`values_worker`)."""
    try:
        answer = json.loads((stdout.strip().splitlines() or ["null"])[-1])
    except json.JSONDecodeError:
        return {}
    return answer if isinstance(answer, dict) else {}


def _loaded(capture: Any, out: Path) -> dict[str, np.ndarray] | str:
    """The values the child wrote for ``capture`` (stored dtype; checked against their digests
    where they are used), or why one cannot be read."""
    values = {}
    for i, n in enumerate(_kept(capture)):
        try:
            _, values[n] = to_storage(np.load(out / f"{i}.npy", mmap_mode="r", allow_pickle=False))
        except (OSError, ValueError, Unstorable) as exc:
            return f"could not be read from {_model_path(capture)}: {exc}"
    return values  # memory-mapped: the files stay readable after their directory is gone
