"""The alternatives tftrace is measured against, each run as its own script (child process).

``python -m bench.peers MODE JOB.json`` prints one JSON line with its in-process timings; the
harness times the whole process from outside, as it times ``tftrace capture``. Modes:

- ``plain``: what production does: load the checkpoint, run the signature outputs only.
- ``naive``: the script a user writes instead of tftrace: load the checkpoint, then one
  ``session.run`` over every tensor tftrace captured (the same fetch set, the same bytes),
  held in memory as numpy arrays, nothing written.
- ``tfdbg``: ``tf.debugging.experimental.enable_dump_debug_info(dump, "FULL_TENSOR",
  circular_buffer_size=-1)``. tfdbg v2 instruments ops through *op callbacks*, which fire
  when Python code constructs an op; a graph imported from a ``.meta``/GraphDef is created
  by TF's C++ importer and would dump nothing (checked: ``Session.run`` of an imported graph
  writes no tensor). So the graph is rebuilt by the model's own Python builder *after*
  enabling the dump, in TF1 graph mode, and the checkpoint's values are loaded with
  ``Variable.load`` (which feeds the initializer and creates no op, so restoring is not
  dumped: only the inference is). One ``session.run`` of the outputs, then both flushes:
  the dump is complete.

Every mode feeds the same ``.npy`` inputs tftrace was given. A job with a ``device`` (the GPU
mode, ``bench.gpu_bench``) builds or imports its graph under ``tf.device("/GPU:0")`` (or
``/CPU:0``), as a user places a model, in a session with soft placement (ops without a kernel
there fall back to the CPU) and, on a GPU, memory grown on demand: the settings tftrace's own
``--device gpu`` session uses. A job without one runs exactly as the CPU benchmark always has.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from sample_models.tf1_detector import build_detector

from .workloads import build

__all__ = ["main"]

STARTED = time.perf_counter()
# tfdbg replaces every instrumented op output by its DebugIdentityV2's. For a TF1 ref variable
# (VariableV2) and its initializer (Assign) that breaks the variable itself ("'SymbolicTensor'
# object has no attribute 'assign'"), so those two op types are left alone. Nothing of the
# inference is lost: each variable's value is dumped through its ``/read`` Identity.
ALL_BUT_REF_VARIABLES = r"(?!(VariableV2|Assign)$)"


def _tf() -> ModuleType:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import tensorflow as tf  # only the child imports TensorFlow, after its environment is set

    tf.get_logger().setLevel("ERROR")
    return tf


def _placement(tf: ModuleType, job: dict[str, Any]) -> tuple[Any, Any]:
    """(device scope, session config) for the job's ``device``; (no scope, default config) without."""
    device = job.get("device")
    if not device:
        return contextlib.nullcontext(), None
    kind, _, index = str(device).lower().partition(":")
    config = tf.compat.v1.ConfigProto(allow_soft_placement=True)
    if kind == "gpu":
        config.gpu_options.allow_growth = True
    return tf.device(f"/{kind.upper()}:{index or 0}"), config


def _seen(tf: ModuleType, job: dict[str, Any]) -> dict[str, Any]:
    """With a ``device``: the GPUs this process's TensorFlow saw (none when ``CUDA_VISIBLE_DEVICES=-1``)."""
    return {"gpus_seen": [d.name for d in tf.config.list_physical_devices("GPU")]} if job.get("device") else {}


def _load_checkpoint(tf: ModuleType, prefix: str, job: dict[str, Any]) -> tuple[Any, Any]:
    """``import_meta_graph`` + restore: how a TF1 user opens a training checkpoint."""
    scope, config = _placement(tf, job)
    graph = tf.Graph()
    sess = tf.compat.v1.Session(graph=graph, config=config)
    with graph.as_default(), scope:
        saver = tf.compat.v1.train.import_meta_graph(f"{prefix}.meta", clear_devices=True)
        saver.restore(sess, prefix)
    return graph, sess


def _signature_tensors(graph: Any, prefix: str, tf: ModuleType) -> tuple[Any, list[Any]]:
    meta = tf.compat.v1.MetaGraphDef()
    meta.ParseFromString(Path(f"{prefix}.meta").read_bytes())
    sig = meta.signature_def["serving_default"]
    (inp,) = sig.inputs.values()
    outs = [graph.get_tensor_by_name(sig.outputs[k].name) for k in sorted(sig.outputs)]
    return graph.get_tensor_by_name(inp.name), outs


def _timed_runs(sess: Any, fetches: Any, feed: dict[Any, np.ndarray], repeats: int) -> tuple[float, list[float]]:
    t0 = time.perf_counter()
    sess.run(fetches, feed_dict=feed)
    first = time.perf_counter() - t0
    later = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sess.run(fetches, feed_dict=feed)
        later.append(time.perf_counter() - t0)
    return first, later


def run_plain(job: dict[str, Any]) -> dict[str, Any]:
    tf = _tf()
    imported = time.perf_counter()
    graph, sess = _load_checkpoint(tf, job["ckpt_prefix"], job)
    inp, outs = _signature_tensors(graph, job["ckpt_prefix"], tf)
    loaded = time.perf_counter()
    first, later = _timed_runs(sess, outs, {inp: np.load(job["inputs"])}, job.get("repeats", 3))
    done_at = time.time() - sum(later)  # the first run's outputs were in hand before the repeats
    return {"import_s": imported - STARTED, "load_s": loaded - imported, "first_run_s": first, "next_runs_s": later,
            "done_at": done_at, **_seen(tf, job)}


def run_naive(job: dict[str, Any]) -> dict[str, Any]:
    tf = _tf()
    imported = time.perf_counter()
    graph, sess = _load_checkpoint(tf, job["ckpt_prefix"], job)
    inp, _outs = _signature_tensors(graph, job["ckpt_prefix"], tf)
    names = [n for n in json.loads(Path(job["tensors"]).read_text()) if n != inp.name]
    fetches = [graph.get_tensor_by_name(n) for n in names]
    loaded = time.perf_counter()
    feed = {inp: np.load(job["inputs"])}
    t0 = time.perf_counter()
    values = sess.run(fetches, feed_dict=feed)
    first = time.perf_counter() - t0
    done_at = time.time()
    held = sum(np.asarray(v).nbytes for v in values)
    del values
    _, later = _timed_runs(sess, fetches, feed, job.get("repeats", 1))
    return {"import_s": imported - STARTED, "load_s": loaded - imported, "first_run_s": first,
            "next_runs_s": later, "tensors": len(fetches), "bytes_in_memory": held, "done_at": done_at, **_seen(tf, job)}


def _build(tf: ModuleType, model: str) -> tuple[Any, list[Any], list[Any]]:
    """(input placeholder, outputs in signature-key order, variables) of the model's builder."""
    if model == "detector":  # the --quick workload
        images, outputs, variables = build_detector(tf)
        return images, [outputs[k] for k in sorted(outputs)], variables
    images, outputs, params = build(tf, model)
    return images, [outputs[k] for k in sorted(outputs)], params.variables


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def run_tfdbg(job: dict[str, Any]) -> dict[str, Any]:
    tf = _tf()
    imported = time.perf_counter()
    dump = Path(job["dump"])
    scope, config = _placement(tf, job)
    graph = tf.Graph()
    with graph.as_default():
        writer = tf.debugging.experimental.enable_dump_debug_info(
            str(dump), tensor_debug_mode="FULL_TENSOR", circular_buffer_size=-1, op_regex=ALL_BUT_REF_VARIABLES)
        with scope:
            inp, outs, variables = _build(tf, job["model"])
        built = time.perf_counter()
        sess = tf.compat.v1.Session(graph=graph, config=config)
        reader = tf.train.load_checkpoint(job["ckpt_prefix"])
        # One run of every initializer with the checkpoint's values fed: Variable.load per
        # variable would build an executor per variable (seconds on ResNet-50) and is not
        # what tfdbg costs.
        sess.run([v.initializer for v in variables],
                 feed_dict={v.initializer.inputs[1]: reader.get_tensor(v.op.name) for v in variables})
        writer.FlushNonExecutionFiles()
        writer.FlushExecutionFiles()
        loaded = time.perf_counter()
        before = _dir_bytes(dump)
        feed = {inp: np.load(job["inputs"])}
        t0 = time.perf_counter()
        sess.run(outs, feed_dict=feed)
        writer.FlushNonExecutionFiles()
        writer.FlushExecutionFiles()
        first = time.perf_counter() - t0
        done_at = time.time()
        after_first = _dir_bytes(dump)
        later = []
        for _ in range(job.get("repeats", 1)):
            t0 = time.perf_counter()
            sess.run(outs, feed_dict=feed)
            writer.FlushExecutionFiles()
            later.append(time.perf_counter() - t0)
        tf.debugging.experimental.disable_dump_debug_info()
    return {"import_s": imported - STARTED, "build_s": built - imported, "load_s": loaded - built, "first_run_s": first,
            "next_runs_s": later, "dump_bytes_before_run": before, "dump_bytes_one_run": after_first,
            "done_at": done_at, "graph_ops": len(graph.get_operations()),
            "debug_ops": sum(op.type == "DebugIdentityV2" for op in graph.get_operations()), **_seen(tf, job)}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    mode, job_path = argv
    job = json.loads(Path(job_path).read_text())
    run = {"plain": run_plain, "naive": run_naive, "tfdbg": run_tfdbg}[mode]
    result = run(job)
    print(json.dumps({"mode": mode, **result}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
