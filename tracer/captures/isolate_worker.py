"""The isolation child: replay single ops of one side with tensors fed from A's capture.

A TF1 session can be fed any intermediate tensor, so "run this op alone on identical inputs"
is: feed the op's inputs (the nearest captured tensors above it) with A's captured values and
fetch its output. Rows are fed in this side's own batches, so a batch-size comparison replays
the same example at the batch size the side really ran with.

Replaying part of a graph runs it in a way the model never ran, and TensorFlow may refuse
(a kernel error, a fed value it will not take): that op gets a failure record with
TensorFlow's one-line reason instead of a value (:mod:`tracer.captures.replay_records`), and
the job goes on to its other ops. Errors that are the user's (a refused model, a report made
from another model) still end the job.
"""

from __future__ import annotations

import io
import os
import sys
import time
from typing import Any

import numpy as np

from .._tf import tf
from ..children import load_report
from ..errors import TftraceError
from ..runspec import job_side
from ._format import to_storage
from ._packed import digest
from .reader import Capture
from .replay_records import record_failure, record_value
from .runtime import open_runtime, tf_error_text
from ._events import emit

__all__ = ["run_isolation"]


def run_isolation(job: dict[str, Any]) -> dict[str, float]:
    """Replay the job's ops in this process; returns how it came up (:func:`tracer.children.load_report`)."""
    side = job_side(job)
    source = Capture.open(job["feeds_from"])
    layout = source.manifest.get("tensor_layout", {})
    runs = [tuple(r) for r in job["runs"]]
    count = int(job["count"])
    os.makedirs(job["out_dir"], exist_ok=True)
    other = _other_release(job.get("tensorflow"))
    if other is not None:  # another TensorFlow's kernels would be measured: no op is replayed, each says why
        for op in job["ops"]:
            record_failure(job["out_dir"], op["id"], other)
        return load_report((0.0, 0.0))
    emit("stage", text="loading model")
    began = time.perf_counter()
    runtime = open_runtime(side)
    came_up = load_report((began, time.perf_counter()))
    try:
        for index, op in enumerate(job["ops"]):
            try:
                result = _replay(runtime, source, layout, op, runs, count)
            except NotReplayed as exc:  # this op's answer is "could not be replayed"; the others still run
                record_failure(job["out_dir"], op["id"], exc.reason)
                emit("progress", done=index + 1, total=len(job["ops"]), bytes=0)
                continue
            # the job may come from a received report: a plain integer name, never through a planted link
            buffer = io.BytesIO()
            np.save(buffer, result)
            record_value(job["out_dir"], op["id"], buffer.getvalue())
            emit("progress", done=index + 1, total=len(job["ops"]), bytes=int(result.nbytes))
    finally:
        runtime.close()
    return came_up


def _other_release(captured: Any) -> str | None:
    """Why this interpreter must not replay a side captured under TensorFlow ``captured``, or None.

    "Given identical inputs, the kernels differ" is a statement about the release that ran the
    side; a replay under another one (``tftrace isolate`` without the side's ``--python``) would
    measure that release instead."""
    running = tf().__version__
    if not isinstance(captured, str) or not captured or captured == running:
        return None
    return (f"the side was captured with TensorFlow {captured} but this replay would run TensorFlow {running} "
            f"({sys.executable}); replay it in the side's own environment: tftrace isolate MODEL --from REPORT_DIR "
            "--python PATH_TO_ITS_PYTHON")


class NotReplayed(Exception):
    """TensorFlow refused to run one op's replay: that op's verdict, not the whole job's failure."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _run(runtime: Any, fetch: Any, feed: dict[Any, np.ndarray]) -> np.ndarray:
    """One replay run; TensorFlow's refusal (a kernel error, a fed value it will not take) as
    :class:`NotReplayed` with its one-line reason. A replay runs part of a graph in a way the
    model never ran, so TensorFlow may refuse it where the whole graph works."""
    try:
        return np.asarray(runtime.session.run(fetch, feed_dict=feed))
    except tf().errors.OpError as exc:
        raise NotReplayed(f"{type(exc).__name__}: {tf_error_text(exc)}") from exc
    except ValueError as exc:  # a fed value of a shape or dtype the tensor cannot take
        raise NotReplayed(f"ValueError: {str(exc).splitlines()[0] if str(exc) else ''}") from exc


def _replay(runtime: Any, source: Capture, layout: dict[str, str], op: dict[str, Any], runs: list, count: int) -> np.ndarray:
    graph = runtime.graph
    try:
        fetch = graph.get_tensor_by_name(op["fetch"])
        feeds = {graph.get_tensor_by_name(name): a_tensor for name, a_tensor in op["feeds"].items()}
    except (KeyError, ValueError) as exc:
        raise TftraceError(
            f"isolation: tensor missing in {runtime.artifact.location}: {exc}",
            "isolate against the same model the report was made from",
        ) from exc
    pieces = []
    same = {t for t, a_name in feeds.items() if _restored_the_same(runtime, t, source.digest(a_name))}
    for start, stop in runs:
        feed = {}
        for tensor, a_name in feeds.items():
            if tensor in same:
                continue  # this side restored A's very values (equal digests): nothing to feed, nothing to read
            value = source.tensor(a_name)  # A's values kept by digest are read back from A's model
            value = np.asarray(value[start:stop] if layout.get(a_name) == "rows" else value)
            if tensor.shape.is_fully_defined() and value.shape != tuple(tensor.shape) \
                    and value.size == tensor.shape.num_elements():
                value = value.reshape(tensor.shape)  # A's row, fed to a side without a batch axis
            feed[tensor] = value.astype(tensor.dtype.as_numpy_dtype, copy=False)
        out = _run(runtime, fetch, feed)
        out = out[np.newaxis] if out.ndim == 0 and layout.get(op["a_tensor"]) == "rows" else out  # a scalar row
        if layout.get(op["a_tensor"]) != "rows":
            return out.astype(np.float32) if out.dtype.name == "bfloat16" else out
        pieces.append(out.astype(np.float32) if out.dtype.name == "bfloat16" else out)
    result = np.concatenate(pieces, axis=0)
    if result.shape[0] != count:
        raise TftraceError(f"isolation of {op['fetch']} produced {result.shape[0]} rows, expected {count}", "")
    return result


def _restored_the_same(runtime: Any, tensor: Any, kept: str | None) -> bool:
    """Whether this side's own value of ``tensor`` (a restored variable) has the digest A's capture
    kept instead of the values; False for anything else, or when it cannot be evaluated alone."""
    if kept is None:
        return False
    try:
        own = np.asarray(runtime.session.run(tensor))
        return digest(to_storage(own)[1]) == kept
    except Exception:  # noqa: BLE001 - not evaluable without feeds: read A's values instead
        return False
