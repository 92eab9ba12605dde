"""A model on another filesystem (``gs://``, ``s3://``, ``hdfs://``…), judged before anything runs.

Why: a local path is checked in the parent before any child starts (it exists; a checkpoint there
has a graph: :mod:`tracer.artifacts.kinds`), but a URL can only be read through TensorFlow's
filesystems, which the parent never imports. So a ``gs://`` checkpoint without a graph (a
``tf.train.Checkpoint``), or one this machine cannot reach, was refused by the capture child,
after ``tftrace diagnose`` had printed "capturing" and started its work. Now a short child,
``python -m tracer.artifacts.remote`` (the interpreter the side will run in, so that it has the
same filesystems), reads what ``detect`` reads and, for a checkpoint without its ``.meta``, the
``.index``; the parent judges its answer before the command starts anything else: the
refusal a local path would get (:func:`tracer.artifacts.checkpoint_index.graphless_checkpoint`),
or one line naming what could not be read and how to get the model here.

``ram://`` is not checked this way: it lives in one process's memory, and ``diff-graph`` reads
it in the parent, where it is.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from typing import Any

from ..errors import TftraceError
from ..pythons import with_package_on_path
from .bundle import MAX_INDEX_BYTES
from .checkpoint_index import graphless_checkpoint

__all__ = ["PROBE_TIMEOUT_S", "is_remote", "refuse_unreadable_remote"]

PROBE_TIMEOUT_S = 120.0  # TensorFlow's GCS filesystem retries a flaky request for about a minute


def is_remote(path: str) -> bool:
    """A URL of another filesystem than this machine's and this process's memory."""
    return "://" in path and not path.startswith(("ram://", "file://"))


def refuse_unreadable_remote(path: str, side: str = "", python: str | None = None) -> None:
    """Refuse a remote ``path`` that cannot be run, before a capture starts: one it cannot read,
    one that does not exist, a checkpoint without its graph. ``side`` (``a``/``b``) names the
    side; ``python`` is the interpreter its child will run (None: this one). A local path, or a
    remote one that holds a model, passes."""
    if not is_remote(path):
        return
    where = f"side {side.upper()}'s path {path}" if side else path
    answer = _ask(path, python or sys.executable, where)
    if "refused" in answer:
        problem, fix = answer["refused"]
        raise TftraceError(problem, fix)
    if "failed" in answer:
        scheme = path.split("://", 1)[0]
        gs = scheme == "gs"
        raise TftraceError(
            f"{where} cannot be read here: TensorFlow's {scheme}:// filesystem said {answer['failed']}",
            "check the URL, and that this machine reaches it with credentials"
            + (" (gcloud auth application-default login)" if gs else "")
            + "; or copy the model's files to a local directory" + (" (gsutil -m cp -r)" if gs else "")
            + " and give that")
    if answer.get("kind") == "checkpoint" and not answer.get("meta", True):
        index = answer.get("index")
        raise graphless_checkpoint(answer["location"], None if index is None else base64.b64decode(index))


def _ask(path: str, python: str, where: str) -> dict[str, Any]:
    """The child's answer about ``path`` (a dict: the keys of :func:`_look`)."""
    env = with_package_on_path(dict(os.environ))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    try:
        proc = subprocess.run([python, "-m", "tracer.artifacts.remote"], input=json.dumps({"path": path}),
                              capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, env=env, check=False)
    except subprocess.TimeoutExpired as exc:
        raise TftraceError(f"{where} did not answer within {PROBE_TIMEOUT_S:.0f} s",
                           "check the URL and this machine's network, or copy the model to a local directory "
                           "and give that") from exc
    except OSError as exc:
        raise TftraceError(f"{where} could not be checked: {python} did not start ({exc.strerror or exc})",
                           "check --python") from exc
    lines = proc.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1]) if proc.returncode == 0 and lines else None
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        tail = " / ".join(proc.stderr.strip().splitlines()[-2:])[:300] or "no message"
        error = TftraceError(f"{where} could not be checked: the process reading it exited with {proc.returncode} "
                             f"({tail})", "check that TensorFlow imports in that Python, or copy the model to a "
                             "local directory and give that")
        error.debug_detail = proc.stderr
        raise error
    return answer


def _look(path: str) -> dict[str, Any]:
    """In the child: what ``detect`` finds at ``path`` and, for a checkpoint without its graph,
    its ``.index`` (base64; None when absent or too large to judge), or why it cannot say."""
    from .._tf import tf  # noqa: PLC0415
    from .kinds import detect, io_gfile  # noqa: PLC0415

    try:
        kind, location = detect(path)
        answer: dict[str, Any] = {"kind": kind, "location": location}
        if kind == "checkpoint":
            gfile = io_gfile()
            answer["meta"] = gfile.exists(location + ".meta")
            index = location + ".index"
            if not answer["meta"] and gfile.exists(index) and gfile.stat(index).length <= MAX_INDEX_BYTES:
                with gfile.GFile(index, "rb") as file:
                    answer["index"] = base64.b64encode(file.read()).decode("ascii")
        return answer
    except TftraceError as exc:
        return {"refused": [exc.problem, exc.fix]}
    except (tf().errors.OpError, OSError, ValueError) as exc:
        message = getattr(exc, "message", None) or str(exc)
        return {"failed": f"{type(exc).__name__}: {message.strip().splitlines()[0][:300] if message.strip() else ''}"}


def _serve() -> int:
    """The child: the path from stdin, the answer as one JSON line on stdout (moved off fd 1
    first, so that nothing TensorFlow prints lands in it)."""
    answer = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    request = json.load(sys.stdin)
    answer.write(json.dumps(_look(str(request["path"]))) + "\n")
    answer.close()
    return 0


if __name__ == "__main__":
    sys.exit(_serve())
