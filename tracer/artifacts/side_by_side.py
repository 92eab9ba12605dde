"""Two artifacts loaded at once, each in a process of its own, for the static diff (``diff-graph``).

Loading a TF2 SavedModel runs TensorFlow's own loader and inliner: one busy core for tens of
seconds on a large model (39 s for a 51,000-op RetinaNet), most of it in Python. Two such loads
in one process take twice that; in two processes, about once. Each child loads its side, builds
its op graph and sends both back pickled on its stdout (its own prints and TensorFlow's logs go
to a file kept for the error message). The parent imports TensorFlow meanwhile, as it reads the
weights afterwards.

A child is ``python -m tracer.artifacts.side_by_side``, not a ``multiprocessing`` worker: a spawned
worker re-imports the caller's main module, which re-runs a user's script that has no
``if __name__ == "__main__"`` guard.

What crosses back is a pickle this module's own child wrote, read from a pipe only this process
holds: never a file another user could have put in its place.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
import threading
from typing import IO, Any

from .._tf import tf
from ..errors import TftraceError
from ..opgraph import OpGraph
from ..pythons import with_package_on_path
from .graph import build_opgraph
from .loader import load
from .records import Artifact, ArtifactRef, Signature

__all__ = ["LoadedSide", "load_with_graph", "load_side_by_side"]

LoadedSide = tuple[Artifact, OpGraph, Signature]


def load_with_graph(ref: ArtifactRef, allow_unsafe_ops: bool) -> LoadedSide:
    """One side: the artifact, and its inference subgraph with the signature resolved in it."""
    artifact = load(ref, allow_unsafe_ops=allow_unsafe_ops)
    graph, signature = build_opgraph(artifact)
    return artifact, graph, signature


def load_side_by_side(ref_a: ArtifactRef, ref_b: ArtifactRef, allow_unsafe_ops: bool) -> tuple[LoadedSide, LoadedSide]:
    """Both sides loaded in two child processes at once; A's error is raised first, as a load of
    A then B in one process would."""
    children = [_Child(ref, allow_unsafe_ops) for ref in (ref_a, ref_b)]
    try:
        tf()  # while the children load
        return children[0].result(), children[1].result()
    finally:
        for child in children:
            child.stop()


class _Child:
    """One loading child, its result read on a thread as it comes (a child writing a large pickle
    to a full pipe would otherwise wait for the parent to finish reading the other one)."""

    def __init__(self, ref: ArtifactRef, allow_unsafe_ops: bool) -> None:
        self.ref = ref
        self.log: IO[bytes] = tempfile.TemporaryFile(prefix="tftrace-load-")
        env = dict(os.environ)
        # On a GPU machine TensorFlow reserves nearly all of a GPU's memory in the first process that
        # touches it; two loading children (and the parent) must share it. No kernel or number changes.
        env.setdefault("TF_FORCE_GPU_ALLOW_GROWTH", "true")
        with_package_on_path(env)
        self.proc = subprocess.Popen([sys.executable, "-m", "tracer.artifacts.side_by_side"], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=self.log, env=env)
        assert self.proc.stdin is not None and self.proc.stdout is not None
        try:
            self.proc.stdin.write(pickle.dumps((ref, allow_unsafe_ops)))
            self.proc.stdin.close()
        except BrokenPipeError:  # it died at start: its exit status and log say why (result)
            pass
        self._data = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        self._data = self.proc.stdout.read()

    def result(self) -> LoadedSide:
        self._reader.join()
        code = self.proc.wait()
        try:
            outcome, value = pickle.loads(self._data) if code == 0 else (None, None)
        except Exception:  # noqa: BLE001 - a truncated pickle: the child died writing it
            outcome, value = None, None
        if outcome == "loaded":
            return value
        if outcome == "refused":
            raise value
        self.log.seek(0)
        tail = self.log.read().decode("utf-8", "replace").strip().splitlines()[-3:]
        error = TftraceError(
            f"loading {self.ref.path} failed in its process (exit status {code}): {' / '.join(tail)[:300] or 'no message'}",
            "check that the artifact loads on its own (tftrace diff-graph on it alone), and that memory is free")
        error.debug_detail = "\n".join(tail)
        raise error

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def _serve() -> int:
    """The child: load what stdin names, answer on stdout (moved off fd 1 first, so that nothing the
    model or TensorFlow prints lands in the pickle)."""
    answer = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    ref, allow_unsafe_ops = pickle.load(sys.stdin.buffer)
    try:
        loaded = load_with_graph(ref, allow_unsafe_ops)
        loaded[1].topo_order()  # the parent needs it next: sorted here, beside the other side's load
        result: tuple[str, Any] = ("loaded", loaded)
    except TftraceError as exc:
        result = ("refused", exc)
    answer.write(pickle.dumps(result, protocol=pickle.HIGHEST_PROTOCOL))
    answer.close()
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
