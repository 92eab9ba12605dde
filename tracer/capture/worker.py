"""The capture child: run one side plainly, then instrumented, and stream every tensor to disk.

Started by :mod:`tracer.capture.launcher` as ``python -m tracer.capture.worker -`` (the job
JSON on stdin, so no job file outlives a SIGKILLed tftrace; a JOB.json path works too) with
the side's environment already in place (TF reads it at import). It speaks to the parent in
JSON lines on stdout (``progress``, ``error``) and exits 0, or 3 for a user error.

Order matters for the observer effect: the *plain* run (signature outputs only) comes first,
warmed up and timed; then the *instrumented* run fetches every capturable tensor. Both runs ask
for the partition graphs, so the manifest records which op types really executed in each, and
the difference of the final outputs between them. The plain run's outputs are stored too
(the manifest's ``plain_outputs``): they are what production computes, and what compare
compares its outputs and verdict on.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
import traceback
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .._tf import tf
from ..errors import TftraceError
from ..inputs import Examples, batches, make_examples
from ..opgraph import OpGraph, tensor_op, tensor_slot
from ..runspec import Side
from ..safewrite import refuse_link_dir
from ._format import bitwise_equal
from .fetch_plan import (
    DEAD_BRANCH_REASON, BranchSchedule, FetchPlan, check_fetched, chunked, fetch_plan, refit_sizes,
)
from .fingerprint import environment_fingerprint
from .observer import observer_effect
from .orphan import exit_with_parent
from .runtime import Runtime, determinism_fix, open_runtime, tf_error_text
from .store import CaptureWriter

__all__ = ["run_capture", "main", "emit"]

RUNTIME_PLUMBING = ("_Send", "_Recv", "_HostSend", "_HostRecv", "_Arg", "_Retval", "_DeviceArg", "_DeviceRetval")


def emit(event: str, **fields: Any) -> None:
    """One JSON line to the parent."""
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def run_capture(side: Side, out_dir: str, force: bool) -> None:
    """Validate everything that can be wrong with the request, then run and write.

    Every user error that does not need the tensors (the output directory, the device, the
    session config, the inputs, a tensor larger than --max-memory) is raised *before* the
    capture directory is touched, so fixing a flag and re-running needs no --force.
    """
    t_start = time.perf_counter()
    emit("stage", text="loading model")
    _refuse_out_dir_early(out_dir, force)
    runtime = open_runtime(side)
    load_s = time.perf_counter() - t_start
    takes_strings = any(spec.dtype == "string" for spec in runtime.signature.inputs.values())
    examples = make_examples(
        runtime.signature.inputs, side.inputs.examples, side.inputs.seed, side.inputs.inputs_file,
        alternatives=_tensor_signatures(runtime.artifact) if takes_strings and not side.inputs.inputs_file else (),
    )
    notes = list(runtime.notes)
    batch_size = side.batch_size if examples.batch_major else (1 if examples.per_example else None)
    if examples.per_example:
        notes.append(f"the signature has no batch axis: ran the {examples.count} example(s) one per run")
    elif side.batch_size and not examples.batch_major and examples.count:
        notes.append(f"the signature fixes its input shapes: ran all {examples.count} example(s) in one run")
    ranges = batches(examples.count, batch_size)
    plan = fetch_plan(runtime.opgraph, ranges, side.max_memory)
    emit("stage", text="plain run")
    plain = _plain_runs(runtime, examples, ranges, side.timing_runs)
    refit_sizes(plan, plain["sizes"])  # shapes known only at run time: measured, refused before writing
    emit("stage", text="instrumented run")
    with CaptureWriter(out_dir, force=force, durable=side.durable) as writer:
        for name, reason in plan.uncaptured.items():
            writer.mark_uncaptured(name, reason)
        instrumented = _instrumented_runs(runtime, examples, ranges, writer, plan)
        branches = instrumented["branch_chunks"]
        if instrumented["chunks"] - branches > 1:
            notes.append(
                f"fetched in {instrumented['chunks'] - branches} chunks to stay under --max-memory "
                f"{side.max_memory:,}: each chunk is its own session.run over the same inputs with a different "
                "fetch set, which Grappler may optimise differently"
            )
        if branches:
            notes.append(
                f"{branches} more fetch chunk(s) for cond branches, each after the predicates that decide it (a "
                "branch that does not run is never fetched): each is its own session.run over the same inputs "
                "with a different fetch set, which Grappler may optimise differently"
            )
        observer = observer_effect(runtime.signature.outputs, runtime.opgraph, plain, instrumented)
        for key, value in _plain_outputs(runtime, plain["outputs"], ranges, instrumented["layout"]).items():
            writer.write_plain_output(key, value)
        manifest = {
            "spec": side.with_(artifact=runtime.artifact.ref).to_json(),  # with a borrowed signature, resolved
            "artifact": {
                "kind": runtime.artifact.kind,
                "location": runtime.artifact.location,
                "tf_version_written": runtime.artifact.tf_version_written,
                "inlined_by_loader": runtime.artifact.inlined_by_loader,
            },
            "signature": runtime.signature.to_json(),
            "graph": runtime.opgraph.to_json(),
            "examples": {"count": examples.count, "source": examples.source, "batch_major": examples.batch_major,
                         **({"per_example": True} if examples.per_example else {})},
            "batch_size": batch_size or examples.count,
            "runs": [list(r) for r in ranges],
            "tensor_layout": instrumented["layout"],
            "fetch_chunks": instrumented["chunks"],
            "session_config": runtime.config_text,
            "observer_effect": observer,
            "timings": {
                "load_s": round(load_s, 4),
                "plain_latency_ms": plain["latency_ms"],
                "instrumented_s": round(instrumented["seconds"], 4),
            },
            "environment": environment_fingerprint(runtime.session),
            "notes": notes,
        }
        manifest["environment"]["onednn"]["ops_executed"] = sorted(
            op for op in observer["executed_ops"]["plain"] if op.startswith("_Mkl")
        )
        manifest["timings"]["sync_s"] = round(writer.sync(), 4)  # the last background writes and fsyncs
        manifest["timings"]["total_s"] = round(time.perf_counter() - t_start, 4)  # all but writing the manifest
        writer.finalize(manifest)
    runtime.close()


def _refuse_out_dir_early(out_dir: str, force: bool) -> None:
    """Refuse a non-empty --out before spending seconds on loading the model.

    Opening a :class:`CaptureWriter` on a non-empty directory without ``force`` raises its own
    precise message (not empty / interrupted / another capture running) without changing
    anything; the writer opened later repeats the check under its lock.
    """
    path = Path(out_dir)
    refuse_link_dir(path)  # --out a link: refused before the model loads, with or without --force
    if force or not path.is_dir() or not any(path.iterdir()):
        return
    writer = CaptureWriter(path, force=False)  # returns only if the directory emptied meanwhile
    writer.abort()
    (path / "tensors").rmdir()  # leave it as empty as it was


def _tensor_signatures(artifact: Any) -> list[str]:
    """Signature keys whose inputs are all tensors tftrace can generate (no strings)."""
    meta = artifact.meta_graph
    if meta is None and artifact.kind == "saved_model_v2":
        from tensorflow.python.saved_model import loader_impl  # noqa: PLC0415

        tags = {t.strip() for t in artifact.ref.tag.split(",") if t.strip()}
        saved = loader_impl.parse_saved_model(artifact.location)
        meta = next((m for m in saved.meta_graphs if set(m.meta_info_def.tags) == tags), None)
    if meta is None:
        return []
    string = tf().string.as_datatype_enum
    return sorted(key for key, sig in meta.signature_def.items() if all(i.dtype != string for i in sig.inputs.values()))


# ---- plain run -------------------------------------------------------------------------------


def _feed(runtime: Runtime, examples: Examples, start: int, stop: int) -> dict[Any, np.ndarray]:
    feed = {}
    for key, spec in runtime.signature.inputs.items():
        feed[runtime.graph.get_tensor_by_name(spec.name)] = examples.feed(key, start, stop)
    return feed


def _traced_run(runtime: Runtime, fetches: list[Any], feed: dict[Any, np.ndarray],
                sizes: dict[str, int] | None = None, partitions: bool = True) -> tuple[list[Any], Counter, dict]:
    """Run with the partition graphs returned (the executed ops); with ``sizes``, also the step
    statistics, from which every executed tensor's bytes on this feed are put in ``sizes``."""
    t = tf()
    trace = t.compat.v1.RunOptions.SOFTWARE_TRACE if sizes is not None else t.compat.v1.RunOptions.NO_TRACE
    options = t.compat.v1.RunOptions(output_partition_graphs=partitions, trace_level=trace)
    metadata = t.compat.v1.RunMetadata()
    values = runtime.session.run(fetches, feed_dict=feed, options=options, run_metadata=metadata)
    if sizes is not None:
        _measured_sizes(metadata, sizes)
    ops: Counter = Counter()
    nodes: dict[str, str] = {}
    for partition in metadata.partition_graphs:
        for node in partition.node:
            if not node.op.startswith(RUNTIME_PLUMBING):
                ops[node.op] += 1
                nodes[node.name] = node.op
    return values, ops, nodes


def _measured_sizes(metadata: Any, sizes: dict[str, int]) -> None:
    """Each executed node output's bytes, from a traced run's step statistics (its real shape)."""
    for device in metadata.step_stats.dev_stats:
        for node in device.node_stats:
            for out in node.output:
                desc = out.tensor_description
                try:
                    count = int(np.prod([d.size for d in desc.shape.dim], dtype=object))
                    nbytes = count * tf().as_dtype(desc.dtype).size
                except (TypeError, ValueError):
                    nbytes = 0
                nbytes = max(nbytes, int(desc.allocation_description.requested_bytes))
                name = f"{node.node_name}:{out.slot}"
                sizes[name] = max(sizes.get(name, 0), nbytes)


def _plain_runs(runtime: Runtime, examples: Examples, ranges: list[tuple[int, int]], timing_runs: int) -> dict:
    """The side as it runs in production: signature outputs only, warmed up, then timed.

    One traced warm-up (the executed op types), ``timing_runs`` timed runs of the first batch
    (the last one's outputs are that batch's plain outputs), then one run per further batch.
    A failure here is the model failing on these inputs (not tftrace's fetching), so it is
    reported as the user's problem with TensorFlow's own message.
    """
    outputs = [runtime.graph.get_tensor_by_name(s.name) for s in runtime.signature.outputs.values()]
    keys = list(runtime.signature.outputs)
    feed0 = _feed(runtime, examples, *ranges[0])
    try:
        sizes: dict[str, int] = {}
        _, executed_ops, executed_nodes = _traced_run(runtime, outputs, feed0, sizes)  # also the warm-up
        times = []
        for _ in range(timing_runs):  # at least 1 (Side checks it)
            t0 = time.perf_counter()
            first = runtime.session.run(outputs, feed_dict=feed0)
            times.append((time.perf_counter() - t0) * 1000)
        # the last timed run is the first batch's plain run: the observer effect needs one per batch, not one more
        rest = [_traced_run(runtime, outputs, _feed(runtime, examples, *r), sizes, partitions=False)[0]
                for r in ranges[1:]]  # untimed: each batch's tensor sizes measured too
        per_run = [dict(zip(keys, values)) for values in [first, *rest]]
    except tf().errors.OpError as exc:
        raise TftraceError(
            f"the model fails on these inputs ({type(exc).__name__}): {tf_error_text(exc)}",
            determinism_fix(runtime.side, exc)
            or "check the inputs against the signature (tftrace fed them as given), or capture another signature",
        ) from exc
    return {
        "outputs": per_run,
        "executed_ops": executed_ops,
        "executed_nodes": executed_nodes,
        "sizes": sizes,  # bytes of every tensor the plain runs executed, the most over the batches
        "latency_ms": {
            "median": round(statistics.median(times), 4),
            "min": round(min(times), 4),
            "max": round(max(times), 4),
            "runs": len(times),
            "batch_rows": ranges[0][1] - ranges[0][0],
        },
    }


def _plain_outputs(
    runtime: Runtime, per_run: list[dict[str, Any]], ranges: list[tuple[int, int]], layout: dict[str, str]
) -> dict[str, np.ndarray]:
    """Each signature output of the plain runs as one array, laid out as its captured tensor:
    the runs' rows in example order ("rows"), or the one value every run computes ("whole",
    "const"). An output whose layout is unknown or varies between runs is left out (compared as
    instrumented); with a single run there is nothing to assemble."""
    out: dict[str, np.ndarray] = {}
    for key, spec in runtime.signature.outputs.items():
        values = [np.asarray(run[key]) for run in per_run]
        kind = layout.get(spec.name)
        if len(values) == 1:
            out[key] = values[0]
        elif kind == "rows" and all(v.ndim > 0 and v.shape[0] == b - a for v, (a, b) in zip(values, ranges)):
            out[key] = np.concatenate(values, axis=0)
        elif kind in ("whole", "const"):
            out[key] = values[0]
    return out


# ---- instrumented run ------------------------------------------------------------------------


def _instrumented_runs(
    runtime: Runtime, examples: Examples, ranges: list[tuple[int, int]], writer: CaptureWriter, plan: FetchPlan
) -> dict:
    """Fetch every planned tensor, batch by batch, chunk by chunk, streaming each to disk."""
    opgraph = runtime.opgraph
    layout: dict[str, str] = {}
    output_keys: dict[str, list[str]] = {}
    for key, spec in runtime.signature.outputs.items():
        output_keys.setdefault(spec.name, []).append(key)
    outputs_per_run: list[dict[str, np.ndarray]] = []
    executed_ops: Counter = Counter()
    executed_nodes: dict[str, str] = {}
    chunk_count = branch_chunks = 0
    t0 = time.perf_counter()
    written = 0
    for run_index, (start, stop) in enumerate(ranges):
        wanted = plan.names if run_index == 0 else [n for n in plan.names if tensor_op(n) not in plan.constant and n in layout]
        feed = _feed(runtime, examples, start, stop)
        where = _Where(run_index, start, stop, examples.count, examples.batch_major or examples.per_example,
                       examples.per_example)
        outputs: dict[str, np.ndarray] = {}
        schedule = BranchSchedule(wanted, plan)
        chunks = 0
        for step in _fetch_steps(schedule, plan, writer, layout):  # lazily: each step follows the predicates
            chunks += 1
            fetched, values, failed, ops, nodes = _run_chunk(runtime, step.names, feed, run_index == 0, step.branch)
            for name, reason in failed.items():
                if name not in step.extra:
                    writer.mark_uncaptured(name, reason)
                    layout.pop(name, None)
            executed_ops |= ops
            executed_nodes.update(nodes)
            stored: dict[str, np.ndarray] = {}  # this chunk's tensors, for pass-through ops to be compared with
            for name, value in zip(fetched, values):
                value = np.asarray(value)
                for switch in step.preds.get(name, ()):
                    schedule.record(switch, value)
                if name in step.extra:
                    continue
                check_fetched(plan, name, value.nbytes)  # before a byte of it is written
                written += value.nbytes
                for key in output_keys.get(name, ()):
                    outputs[key] = value
                _store(writer, name, value, where, opgraph, plan.constant, layout, stored)
                stored[name] = value
            del values, stored  # peak memory: one chunk's tensors (plus what the writer still has to write)
        if chunks > chunk_count:
            chunk_count = chunks
            branch_chunks = max(0, chunks - len(chunked(wanted, plan.sizes, plan.max_memory)))
        outputs_per_run.append(outputs)
        emit("progress", done=run_index + 1, total=len(ranges), bytes=written)
    return {
        "layout": layout,
        "chunks": chunk_count,
        "branch_chunks": branch_chunks,
        "seconds": time.perf_counter() - t0,
        "outputs": outputs_per_run,
        "executed_ops": executed_ops,
        "executed_nodes": executed_nodes,
    }


@dataclass
class _Step:
    """One chunk of one run: what to fetch, and which of it only decides cond branches."""

    names: list[str]
    branch: bool = False  # the tensors of one branch whose predicate could not be fetched
    preds: dict[str, list[str]] = field(default_factory=dict)  # predicate tensor -> the Switches it decides
    extra: frozenset[str] = frozenset()  # predicates fetched only for that: not stored


def _fetch_steps(schedule: BranchSchedule, plan: FetchPlan, writer: CaptureWriter, layout: dict[str, str]
                 ) -> Iterator[_Step]:
    """One run's chunks, following the :class:`BranchSchedule`.

    Dead branches are recorded as such without a fetch; the live ones are fetched (under
    --max-memory) together with the next level's predicates; the branches whose predicates could
    not be fetched come last, one branch per chunk.
    """
    while (step := schedule.next()) is not None:
        ready, dead, preds = step
        for name in dead:
            writer.mark_uncaptured(name, DEAD_BRANCH_REASON)
            layout.pop(name, None)
        chunks = chunked(ready, plan.sizes, plan.max_memory) if ready else []
        extra = [p for p in preds if p not in ready]
        if extra:
            chunks = chunks or [[]]
            chunks[0] = extra + chunks[0]
        for i, chunk in enumerate(chunks):
            yield _Step(chunk, preds=preds if i == 0 else {}, extra=frozenset(extra) if i == 0 else frozenset())
    for _, names in schedule.leftover():
        for chunk in chunked(names, plan.sizes, plan.max_memory):
            yield _Step(chunk, branch=True)


def _fetch_errors() -> tuple[type[Exception], ...]:
    """The errors TF raises for a fetch it cannot serve (as opposed to running out of memory)."""
    e = tf().errors
    return (e.OutOfRangeError, e.InvalidArgumentError, e.NotFoundError, e.InternalError, e.FailedPreconditionError)


def _run_chunk(
    runtime: Runtime, chunk: list[str], feed: dict, traced: bool, branch: bool = False
) -> tuple[list[str], list[Any], dict[str, str], Counter, dict[str, str]]:
    """Fetch a chunk; returns (fetched names, values, refused name -> reason, executed ops, nodes).

    The plain run already succeeded on this feed, so when TF refuses the chunk it is refusing a
    fetch. A ``branch`` chunk holds one cond branch whose predicate could not be fetched
    (:func:`fetch_plan.branch_of`): its tensors all run or all are dead, so its first tensor
    decides — dead, and the whole chunk is a dead branch (one extra run, not one per tensor).
    Any other refusal is found by bisection: k refused tensors cost O(k log n) runs, never one
    run per tensor of the graph (a detector's ~2,300 took 8 minutes that way).
    """
    errors = _fetch_errors()
    try:
        return _fetch(runtime, chunk, feed, traced)
    except errors as exc:
        if len(chunk) == 1:
            return [], [], {chunk[0]: _dead_or_refused(exc)}, Counter(), {}
    if branch:
        try:
            _fetch(runtime, chunk[:1], feed, traced=False)
        except errors as exc:
            if _is_dead(exc):
                return [], [], dict.fromkeys(chunk, DEAD_BRANCH_REASON), Counter(), {}
    half = len(chunk) // 2
    names: list[str] = []
    values: list[Any] = []
    failed: dict[str, str] = {}
    ops: Counter = Counter()
    nodes: dict[str, str] = {}
    for part in (chunk[:half], chunk[half:]):
        got, vals, refused, part_ops, part_nodes = _run_chunk(runtime, part, feed, traced, branch)
        names += got
        values += vals
        failed.update(refused)
        ops |= part_ops
        nodes.update(part_nodes)
    return names, values, failed, ops, nodes


def _fetch(runtime: Runtime, chunk: list[str], feed: dict, traced: bool
           ) -> tuple[list[str], list[Any], dict[str, str], Counter, dict[str, str]]:
    fetches = [runtime.graph.get_tensor_by_name(n) for n in chunk]
    if traced:
        values, ops, nodes = _traced_run(runtime, fetches, feed)
        return chunk, values, {}, ops, nodes
    return chunk, runtime.session.run(fetches, feed_dict=feed), {}, Counter(), {}


def _is_dead(exc: Exception) -> bool:
    """TF's refusal of a tensor its executor marked dead (the untaken side of a Switch)."""
    return "does not have value" in str(getattr(exc, "message", exc))


def _dead_or_refused(exc: Exception) -> str:
    return DEAD_BRANCH_REASON if _is_dead(exc) else _refusal(exc)


def _refusal(exc: Exception) -> str:
    return f"TensorFlow cannot fetch it: {tf_error_text(exc, limit=200)}"


@dataclass(frozen=True)
class _Where:
    """Which run a fetched value comes from, and where its rows go."""

    run_index: int
    start: int
    stop: int
    count: int  # examples in the whole capture
    batch_major: bool  # the examples are rows of the inputs
    per_example: bool = False  # one example per run, without a batch axis: each value is stored as a row


def _store(
    writer: CaptureWriter,
    name: str,
    value: np.ndarray,
    where: _Where,
    opgraph: OpGraph,
    constant: set[str],
    layout: dict[str, str],
    stored: dict[str, np.ndarray],
) -> None:
    """Rows of batch-major tensors go to their example indices; others are kept once.

    A tensor is batch-major when its first axis is the example axis: left open by its static
    shape (unknown first dimension, or unknown rank: shape inference gives up after a while
    loop or a cond) and equal to this run's rows. Later runs must agree, or it is uncaptured.
    A pass-through op's output that repeats its input's bytes is stored once (``same_as``).
    """
    static = opgraph.output_info(name)["shape"]
    rows = where.stop - where.start
    same_as = _same_bytes_input(opgraph, name, value, stored)
    if where.per_example and tensor_op(name) not in constant:
        value, static = value[np.newaxis], None  # this run's example, as row start of [count, *shape]
    if where.run_index == 0:
        batch_major = (
            where.batch_major
            and tensor_op(name) not in constant
            and (static is None or (len(static) > 0 and static[0] is None))
            and value.ndim > 0
            and value.shape[0] == rows
        )
        layout[name] = "rows" if batch_major else ("const" if tensor_op(name) in constant else "whole")
        if not batch_major:
            writer.write_whole(name, value, same_as=same_as)
            return
    kind = layout.get(name)
    if kind == "rows":
        if value.ndim == 0 or value.shape[0] != rows:
            writer.mark_uncaptured(name, f"its first axis is not the example axis in every run (shape {value.shape})")
            layout.pop(name)
            return
        writer.write_rows(name, value, where.start, where.count, same_as=same_as)
    elif kind == "whole" and not writer.stored_equals(name, value):
        layout[name] = "varies"  # e.g. a Shape op: its value depends on the batch, kept from run 0


# Ops whose output can be their input unchanged: compared byte for byte, stored once when it is.
PASS_THROUGH_OPS = frozenset({
    "Identity", "IdentityN", "Snapshot", "StopGradient", "PreventGradient", "RefIdentity", "ReadVariableOp",
    "Reshape", "Squeeze", "ExpandDims", "EnsureShape", "CheckNumerics", "CheckNumericsV2", "PlaceholderWithDefault",
    "Cast", "Merge", "RefMerge", "Switch", "RefSwitch", "Enter", "Exit", "Print", "PrintV2",
})


def _same_bytes_input(opgraph: OpGraph, name: str, value: np.ndarray, stored: dict[str, np.ndarray]) -> str | None:
    """The input, already stored, whose exact bytes (dtype and shape too) a pass-through op's
    output repeats; None when it has none. Compared, never assumed: a Reshape may change the
    shape, a Cast the dtype, a Switch may pass nothing."""
    op = tensor_op(name)
    kind = opgraph.op_type(op)
    if kind not in PASS_THROUGH_OPS:
        return None
    inputs = opgraph.data_inputs(op)
    if kind == "IdentityN":
        inputs = inputs[tensor_slot(name) : tensor_slot(name) + 1]
    for source in inputs:
        other = stored.get(source)
        if other is not None and bitwise_equal(value, other):
            return source
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    exit_with_parent()  # a SIGKILLed tftrace cannot stop its children itself
    if argv[0] == "-":  # the launcher's way: no job file is left behind if tftrace is SIGKILLed
        job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
        sys.stdin.close()
    else:
        with open(argv[0], encoding="utf-8") as fh:
            job = json.loads(fh.read())
    try:
        if job["mode"] == "capture":
            run_capture(Side.from_json(job["side"]), job["out_dir"], bool(job.get("force")))
        else:
            from .isolate_worker import run_isolation  # noqa: PLC0415

            run_isolation(job)
    except TftraceError as exc:
        emit("error", problem=exc.problem, fix=exc.fix)
        return 3
    except MemoryError:
        emit("error", problem="the capture ran out of memory", fix="lower --max-memory or --batch-size")
        return 3
    except OSError as exc:
        if exc.errno == 28:  # ENOSPC
            emit("error", problem=f"disk full while writing the capture ({exc})", fix="free space or choose another --out")
            return 3
        traceback.print_exc()
        return 4
    except Exception:  # noqa: BLE001 - the parent shows this traceback's tail
        traceback.print_exc()
        return 4
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the result is on disk: skip TensorFlow's teardown, which takes a second of the user's time
