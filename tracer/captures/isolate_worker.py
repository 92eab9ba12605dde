"""The isolation child: replay single ops of one side with tensors fed from A's capture.

A TF1 session can be fed any intermediate tensor, so "run this op alone on identical inputs"
is: feed the op's inputs (the nearest captured tensors above it) with A's captured values and
fetch its output. Rows are fed in this side's own batches, so a batch-size comparison replays
the same example at the batch size the side really ran with. An op may name tensors to fetch
``with`` it in the same runs (the other lists a detector's NMS makes beside it, which its rows are
matched by: :mod:`tracer.comparison.list_runs`); each is recorded under its own id.

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
from ._format import Unstorable, to_storage
from ._packed import digest
from .reader import Capture
from .replay_records import record_failure, record_value
from .prepared import Prepared, runtime_for
from .runtime import tf_error_text
from ._events import emit

__all__ = ["run_isolation"]


def run_isolation(job: dict[str, Any], prepared: Prepared | None = None) -> dict[str, float]:
    """Replay the job's ops in this process; returns how it came up (:func:`tracer.children.load_report`).
    ``prepared``: the side's runtime, opened before the job came (the other side's job ran meanwhile)."""
    side = job_side(job)
    source = Capture.open(job["feeds_from"])
    layout = source.manifest.get("tensor_layout", {})
    runs = [tuple(r) for r in job["runs"]]
    count = int(job["count"])
    os.makedirs(job["out_dir"], exist_ok=True)
    other = _other_release(job.get("tensorflow"))
    if other is not None:  # another TensorFlow's kernels would be measured: no op is replayed, each says why
        if prepared is not None:
            prepared.close()
        for op in job["ops"]:
            record_failure(job["out_dir"], op["id"], other)
        return load_report((0.0, 0.0))
    emit("stage", text="loading model")
    opened = runtime_for(side, prepared, time.perf_counter())
    runtime, came_up = opened.runtime, load_report(opened.window)
    try:
        for index, op in enumerate(job["ops"]):
            fetches = [op, *op.get("with", [])]  # fetched in one run: the lists of one NMS, matched afterwards
            try:
                results = _replay(runtime, source, layout, op, runs, count)
            except NotReplayed as exc:  # this op's answer is "could not be replayed"; the others still run
                for fetched in fetches:
                    record_failure(job["out_dir"], fetched["id"], exc.reason)
                emit("progress", done=index + 1, total=len(job["ops"]), bytes=0)
                continue
            for fetched, result in zip(fetches, results):
                try:
                    result = _without_objects(result)
                except Unstorable as exc:
                    record_failure(job["out_dir"], fetched["id"], str(exc))
                    continue
                # the job may come from a received report: a plain integer name, never through a planted link
                buffer = io.BytesIO()
                np.save(buffer, result)
                record_value(job["out_dir"], fetched["id"], buffer.getvalue())
            emit("progress", done=index + 1, total=len(job["ops"]), bytes=int(sum(r.nbytes for r in results)))
    finally:
        runtime.close()
    return came_up


def _without_objects(result: np.ndarray) -> np.ndarray:
    """A fetched string tensor (an array of Python bytes) as fixed-width bytes, as a capture stores
    it: saved as objects, it is a pickle, which its reader rightly refuses to load."""
    return to_storage(result)[1] if result.dtype.kind in "OU" else result


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


def _run(runtime: Any, fetches: list[Any], feed: dict[Any, np.ndarray]) -> list[np.ndarray]:
    """One replay run; TensorFlow's refusal (a kernel error, a fed value it will not take) as
    :class:`NotReplayed` with its one-line reason. A replay runs part of a graph in a way the
    model never ran, so TensorFlow may refuse it where the whole graph works."""
    try:
        return [np.asarray(v) for v in runtime.session.run(fetches, feed_dict=feed)]
    except tf().errors.OpError as exc:
        raise NotReplayed(f"{type(exc).__name__}: {tf_error_text(exc)}") from exc
    except ValueError as exc:  # a fed value of a shape or dtype the tensor cannot take
        raise NotReplayed(f"ValueError: {str(exc).splitlines()[0] if str(exc) else ''}") from exc


def _replay(runtime: Any, source: Capture, layout: dict[str, str], op: dict[str, Any], runs: list,
            count: int) -> list[np.ndarray]:
    """The op's tensor, and those it is to be fetched ``with`` (``op["with"]``: the other lists of a
    detector's NMS, which its rows are matched by), replayed in the same runs on the same feeds."""
    graph = runtime.graph
    wanted = [op, *op.get("with", [])]
    try:
        fetches = [graph.get_tensor_by_name(w["fetch"]) for w in wanted]
        feeds = {graph.get_tensor_by_name(name): a_tensor for name, a_tensor in op["feeds"].items()}
    except (KeyError, ValueError) as exc:
        raise TftraceError(
            f"isolation: tensor missing in {runtime.artifact.location}: {exc}",
            "isolate against the same model the report was made from",
        ) from exc
    pieces: list[list[np.ndarray]] = [[] for _ in wanted]
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
        for w, got, out in zip(wanted, pieces, _run(runtime, fetches, feed)):
            rows = layout.get(w["a_tensor"]) == "rows"
            out = out[np.newaxis] if out.ndim == 0 and rows else out  # a scalar row
            got.append(out.astype(np.float32) if out.dtype.name == "bfloat16" else out)
        if all(layout.get(w["a_tensor"]) != "rows" for w in wanted):
            break  # nothing of it comes in rows: one run is the whole value
    results = []
    for w, got in zip(wanted, pieces):
        if layout.get(w["a_tensor"]) != "rows":
            results.append(got[0])
            continue
        result = np.concatenate(got, axis=0)
        if result.shape[0] != count:
            raise TftraceError(f"isolation of {w['fetch']} produced {result.shape[0]} rows, expected {count}", "")
        results.append(result)
    return results


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
