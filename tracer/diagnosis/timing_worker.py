"""The child that times one side for :mod:`tracer.diagnosis.interleave`: load, warm up, then
one timed ``session.run`` each time the parent asks.

Started as ``python -m tracer.diagnosis.timing_worker`` with the side's environment (its knobs
set as for its capture). Its first stdin line is the job ``{"side", "allow_unsafe_ops",
"inputs", "warmup"}``: the side, the ``.npz`` of the signature inputs its capture fed to its
first batch, the warm-up runs. On its event pipe (:mod:`tracer.captures._events`, never its
stdout, where the model may print) it answers ``{"event": "ready", "tensorflow": VERSION}`` (the
release this child times: ``--python`` runs it under another), then for every ``run`` line
one ``{"event": "time", "ms": …}`` (only ``session.run`` is inside the clock), and stops at
``quit`` or at the end of its stdin. Between two runs it waits on its stdin, using no core, so
the other side's run is never slowed down by this one. Errors are one ``error`` event (the
user's problem and its fix) and exit status 3, as for every tftrace child.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np

from ..captures._events import claim_channel, emit
from ..children import load_report, note_start
from ..captures.orphan import exit_with_parent
from ..captures.runtime import open_runtime, tf, tf_error_text
from ..errors import TftraceError
from ..runspec import job_side

__all__ = ["main"]


def _serve(job: dict) -> None:
    began = time.perf_counter()
    runtime = open_runtime(job_side(job))
    came_up = load_report((began, time.perf_counter()))
    with np.load(job["inputs"], allow_pickle=False) as arrays:
        feed = {runtime.graph.get_tensor_by_name(spec.name): arrays[key]
                for key, spec in runtime.signature.inputs.items()}
    outputs = [runtime.graph.get_tensor_by_name(s.name) for s in runtime.signature.outputs.values()]
    try:
        for _ in range(max(1, int(job.get("warmup", 2)))):
            runtime.session.run(outputs, feed_dict=feed)
        emit("ready", tensorflow=tf().__version__, **came_up)
        for line in sys.stdin:
            if line.strip() != "run":
                break
            t0 = time.perf_counter()
            runtime.session.run(outputs, feed_dict=feed)
            emit("time", ms=(time.perf_counter() - t0) * 1000.0)
    except tf().errors.OpError as exc:
        raise TftraceError(f"the model failed while being timed ({type(exc).__name__}): {tf_error_text(exc)}",
                           "it ran when captured: run diagnose again; if it fails again, report it") from exc


def main() -> int:
    note_start()
    exit_with_parent()  # a SIGKILLed tftrace cannot stop its children itself
    claim_channel()  # the parent's event pipe, before the model loads (tracer.captures._events)
    job = json.loads(sys.stdin.readline())
    try:
        _serve(job)
    except TftraceError as exc:
        emit("error", problem=exc.problem, fix=exc.fix)
        return 3
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # skip TensorFlow's teardown
