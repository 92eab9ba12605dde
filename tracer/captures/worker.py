"""The capture child: run one side plainly, then instrumented, and stream every tensor to disk.

Started by :mod:`tracer.captures.launcher` as ``python -m tracer.interpreter -`` (which checks the
interpreter has what the child imports, then runs :func:`main`; the job
JSON on stdin, so no job file outlives a SIGKILLed tftrace; a JOB.json path works too) with
the side's environment already in place (TF reads it at import). A child started ahead of its
job (``compare``'s side B) first gets a ``{"prepare": side}`` line and loads that side's model
while it waits for the job (:class:`Prepared`). It speaks to the parent in
JSON lines on stdout (``progress``, ``error``) and exits 0, or 3 for a user error.

Order matters for the observer effect: the *plain* run (signature outputs only) comes first,
warmed up and timed; then the *instrumented* run (:mod:`tracer.captures.instrumented`) fetches
every capturable tensor. Both runs ask
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
from pathlib import Path
from typing import Any

import numpy as np

from .._tf import tf
from ..children import load_report, note_start
from ..artifacts.graph import moving_averages
from ..artifacts.tf2_functions import COMPOSITE_WAYS
from ._packed import content_digest
from ..errors import TftraceError
from ..text import count, listed
from .inputs import Examples, batches, make_examples, run_batch_size
from .warmup import WARMUP_FILE
from ..runspec import Side, job_side
from ..safewrite import refuse_link_dir
from ._events import claim_channel, emit
from .child_errors import describe_exception
from .fetch_plan import FetchPlan, fetch_plan, refit_sizes, scaled_sizes, sizes_scale_with_rows
from .fingerprint import environment_fingerprint
from .instrumented import instrumented_runs
from .loaded_state import read_loaded_values
from .observer import observer_effect
from .process_memory import ProcessFit, fit_fetch, peak_rss, reset_peak, writer_share
from .orphan import exit_with_parent
from .prepared import Prepared, runtime_for
from .runtime import Runtime, determinism_fix, tf_error_text
from .session_runs import feed_for, traced_run
from .store import CaptureWriter

__all__ = ["run_capture", "main"]


def run_capture(side: Side, out_dir: str, force: bool, prepared: Prepared | None = None,
                file_sha256: str | None = None) -> dict[str, float]:
    """Validate everything that can be wrong with the request, then run and write.

    Every user error that does not need the tensors (the output directory, the device, the
    session config, the inputs, a tensor larger than --max-memory) is raised *before* the
    capture directory is touched, so fixing a flag and re-running needs no --force. A
    ``prepared`` runtime (loaded before the job came, for this very side but its inputs) is
    used as it is; its load time is the manifest's ``load_s``, with ``loaded_ahead``. Returns how
    this child came up (:func:`tracer.children.load_report`), for the parent's ledger.
    ``file_sha256``: the inputs file's sha256 as the parent took it (else taken here).
    """
    t_start = time.perf_counter()
    emit("stage", text="loading model")
    _refuse_out_dir_early(out_dir, force)
    opened = runtime_for(side, prepared, t_start)
    runtime, came_up = opened.runtime, load_report(opened.window)
    _refuse_composite_arguments(runtime.artifact)
    takes_strings = any(spec.dtype == "string" for spec in runtime.signature.inputs.values())
    warmup = None if side.inputs.inputs_file else _warmup_requests(runtime.artifact)
    try:
        examples = make_examples(
            runtime.signature.inputs, side.inputs.examples, side.inputs.seed, side.inputs.inputs_file,
            alternatives=_tensor_signatures(runtime.artifact) if takes_strings and not side.inputs.inputs_file else (),
            file_sha256=file_sha256, signature=runtime.artifact.ref.signature,
        )
    except TftraceError as exc:
        if warmup is None:
            raise
        raise TftraceError(exc.problem, f"--inputs {warmup} feeds the requests TF Serving warms this model up with; "
                                        f"or {exc.fix}") from exc
    notes = list(runtime.notes)
    if warmup is not None:
        notes.append(f"generated inputs, though the model carries TF Serving's warmup requests: --inputs {warmup} "
                     "runs the server's own")
    batch_size = side.batch_size if examples.batch_major else (1 if examples.per_example else None)
    if examples.per_example:
        asked = f" (--batch-size {side.batch_size} cannot apply)" if (side.batch_size or 1) > 1 else ""
        notes.append(f"the signature has no batch axis: ran the {count(examples.count, 'example')} one per run{asked}")
    elif side.batch_size and not examples.batch_major and examples.count:
        notes.append(f"the signature fixes its input shapes: ran all {count(examples.count, 'example')} in one run")
    if examples.shared:
        inputs = listed([f"'{k}'" for k in sorted(examples.shared)], 5)
        notes.append(f"input{'s' if len(examples.shared) > 1 else ''} {inputs} without a batch axis beside batched "
                     "inputs: every run was fed the same value")
    ranges = batches(examples.count, batch_size)
    plan = fetch_plan(runtime.opgraph, ranges, side.max_memory, side.part_bytes)
    # the variables the runs write, as loaded: read before the first run writes them
    loaded = read_loaded_values(runtime.session, runtime.graph, runtime.opgraph)
    emit("stage", text="plain run")
    load_peak, peak_reset = peak_rss(), reset_peak()
    plain = _plain_runs(runtime, examples, ranges, side.timing_runs, plan)
    refit_sizes(plan, plain["sizes"])  # shapes known only at run time: measured, refused before writing
    plain_peak = peak_rss()
    fit = _fit_process(side, plan, plain_peak, peak_reset)
    emit("stage", text="instrumented run")
    packed = side.tensor_format == "packed"
    restored = runtime.artifact.kind in ("checkpoint", "saved_model_v1") and not side.keep_weights and packed
    with CaptureWriter(out_dir, force=force, durable=side.durable, graph=runtime.opgraph.to_json(),
                       artifact_values=restored, packed=packed) as writer:
        for name, reason in plan.uncaptured.items():
            writer.mark_uncaptured(name, reason)
        for variable, value in loaded.items():
            writer.write_loaded_value(variable, value)
        instrumented = instrumented_runs(runtime, examples, ranges, writer, plan)
        notes += _chunk_notes(instrumented, plan)
        emit("stage", text="finishing: outputs, manifest, the last writes made durable")
        observer = observer_effect(runtime.signature.outputs, runtime.opgraph, plain, instrumented)
        for key, value in _plain_outputs(runtime, plain["outputs"], ranges, instrumented["layout"]).items():
            writer.write_plain_output(key, value)
        timings = {
            "load_s": round(opened.seconds, 4),  # TensorFlow's import included, when it happened then
            **{key: came_up[key] for key in ("start_s", "import_s") if key in came_up},
            **({"loaded_ahead": True} if opened.ahead else {}),
            "plain_latency_ms": plain["latency_ms"],
            "instrumented_s": round(instrumented["seconds"], 4),
        }
        manifest = _manifest(side, runtime, examples, ranges, instrumented, observer, timings, notes)
        if instrumented["chunks"] > 1:
            manifest["fetch_parts"] = instrumented["parts"]  # what the later parts were fed (part_feeds)
        manifest["environment"]["onednn"]["ops_executed"] = sorted(
            op for op in observer["executed_ops"]["plain"] if op.startswith("_Mkl")
        )
        manifest["timings"]["sync_s"] = round(writer.sync(), 4)  # the last background writes and fsyncs
        manifest["timings"]["total_s"] = round(time.perf_counter() - t_start, 4)  # all but writing the manifest
        manifest["memory"] = _memory_record(load_peak, plain_peak, peak_reset, fit)
        if fit is not None and manifest["memory"]["run_peak_bytes"] > fit.limit:
            manifest["notes"].append(
                f"the process peaked at {manifest['memory']['run_peak_bytes']:,} bytes, above --max-process-memory "
                f"{fit.limit:,}: more than TensorFlow's peak in the plain run, one fetch and the writer's share "
                "(allocator caches, or a run holding more than the plain run did)")
        writer.finalize(manifest)
    runtime.close()
    return came_up


def _fit_process(side: Side, plan: FetchPlan, plain_peak: int | None, peak_reset: bool) -> ProcessFit | None:
    """Under --max-process-memory: the fetch's share of it, from TensorFlow's peak in the plain
    runs just measured (refused here, before the capture directory is touched, when the rest
    cannot hold the largest tensor); None without the option."""
    if side.max_process_memory is None:
        return None
    largest = max(plan.names, key=plan.sizes.__getitem__, default="")
    fit = fit_fetch(side.max_process_memory, side.max_memory, (largest, plan.sizes.get(largest, 0)), plain_peak,
                    peak_reset, writer_share())
    if fit.fetch < plan.max_memory:
        plan.max_memory, plan.bound, plan.fix = fit.fetch, fit.words(), "raise --max-process-memory"
    return fit


def _memory_record(load_peak: int | None, plain_peak: int | None, peak_reset: bool,
                   fit: ProcessFit | None) -> dict[str, Any]:
    """The manifest's ``memory``: the process's resident-set peaks (VmHWM) while the model
    loaded, over the plain runs (TensorFlow and the model alone: what --max-process-memory must
    leave room above) and from the plain runs to the end; and how --max-process-memory was
    divided. Without a reset of the peak (refused by the kernel) each counts from the process start."""
    run_peak = peak_rss()
    record: dict[str, Any] = {}
    if run_peak is None:
        return record  # not Linux: nothing measured
    if peak_reset and load_peak is not None:
        record["load_peak_bytes"] = load_peak
    record["plain_peak_bytes"], record["run_peak_bytes"] = plain_peak, run_peak
    if not peak_reset:
        record["peak_since_start"] = True
    return {**record, **(fit.to_json() if fit is not None else {})}


def _chunk_notes(instrumented: dict[str, Any], plan: FetchPlan) -> list[str]:
    """What the manifest notes of a capture fetched in more than one run: each run is its own
    ``session.run`` with another fetch set, which Grappler may optimise differently."""
    notes = []
    branches = instrumented["branch_chunks"]
    parts = instrumented["parts"]
    if instrumented["chunks"] - branches > 1:
        notes.append(
            f"fetched in {instrumented['chunks'] - branches} chunks to stay under {plan.cut_words()}"
            + (f": each chunk is its own session.run, fed {count(parts['fed'], 'value')} that earlier chunks fetched "
               "for its inputs, so it computes from what is stored" if not parts["unfed_parts"] else
               f": {count(parts['unfed_parts'], 'later chunk')} computed {'its' if parts['unfed_parts'] == 1 else 'their'} "
               "inputs again from the examples, in a session.run with another fetch set, which Grappler may "
               "optimise differently (there was no room under the limit to hold the values earlier chunks "
               "fetched for them)")
            + (f"; {count(parts['rechecked'], 'tensor')} a part may not be fed (TensorFlow refuses them, or they carry "
               "the state of a TensorArray or another resource) were computed "
               "again and re-checked against what was stored" if parts["rechecked"] else "")
        )
    for differed in parts["differed"]:
        notes.append(
            f"{differed['tensor']}, computed again by chunk {differed['part']} of run {differed['run']}, differed from "
            "the value an earlier chunk stored: what that chunk stored rests on other values of it than the stored ones")
    if branches:
        notes.append(
            f"{count(branches, 'more fetch chunk')} for cond branches, each after the predicates that decide it (a "
            "branch that does not run is never fetched): each is its own session.run over the same inputs "
            "with a different fetch set, which Grappler may optimise differently"
        )
    return notes


def _manifest(side: Side, runtime: Any, examples: Any, ranges: list[tuple[int, int]], instrumented: dict[str, Any],
              observer: dict[str, Any], timings: dict[str, Any], notes: list[str]) -> dict[str, Any]:
    """manifest.json as the capture finishes (the caller adds the sync's and the total time last)."""
    return {
        "spec": side.with_(artifact=runtime.artifact.ref).to_json(),  # with a borrowed signature, resolved
        "artifact": {
            "kind": runtime.artifact.kind,
            "location": runtime.artifact.location,
            "tf_version_written": runtime.artifact.tf_version_written,
            "inlined_by_loader": runtime.artifact.inlined_by_loader,
            "gpu_alternatives": runtime.artifact.gpu_alternatives,
        },
        "signature": runtime.signature.to_json(),
        "graph": runtime.opgraph.to_json(),
        "examples": {"count": examples.count, "source": examples.source, "batch_major": examples.batch_major,
                     **({"per_example": True} if examples.per_example else {}),
                     **({"file_sha256": examples.file_sha256} if examples.file_sha256 else {}),
                     **({"shared": sorted(examples.shared)} if examples.shared else {})},
        "batch_size": run_batch_size({"runs": ranges}),  # the batch that ran, not the one asked for
        "runs": [list(r) for r in ranges],
        "tensor_layout": instrumented["layout"],
        "fetch_chunks": instrumented["chunks"],
        "session_config": runtime.config_text,
        "observer_effect": observer,
        "timings": timings,
        "environment": environment_fingerprint(runtime.session),
        "notes": notes,
        # the checkpoint's moving averages of the graph's variables (key, digest): a comparison
        # tells by them that the other side holds the averages (an export that restored them)
        "moving_averages": moving_averages(runtime.artifact, runtime.opgraph, content_digest),
    }


def _prepare_message(line: bytes) -> dict | None:
    """The launcher's ``{"prepare": side}`` line, or None when the first line is (part of) the job."""
    try:
        message = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return message if isinstance(message, dict) and set(message) in ({"prepare"}, {"prepare", "allow_unsafe_ops"}) else None


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


def _refuse_composite_arguments(artifact: Any) -> None:
    """A signature that passes a RaggedTensor (or a SparseTensor) on is fed its flat components: no
    input holds one row per example, so none can be cut into runs or generated. Said before any
    example is made, instead of the model failing on the rows tftrace would cut."""
    if not artifact.composite_arguments:
        return
    function, kind = artifact.composite_arguments[0]
    holds, way = COMPOSITE_WAYS[kind]
    keys = ", ".join(sorted(artifact.signature.inputs))
    raise TftraceError(
        f"signature {artifact.ref.signature!r} of {artifact.location} passes a {kind} to `{function}`, which the "
        f"signature takes as the inputs {keys} ({holds}): tftrace feeds examples as rows of dense inputs and cannot "
        "cut these into runs",
        f"export a signature that takes {way}",
    )


def _warmup_requests(artifact: Any) -> str | None:
    """The TF Serving warmup file a SavedModel carries (``assets.extra/tf_serving_warmup_requests``),
    its real requests, which ``--inputs`` takes (:mod:`.warmup`); None where there is none."""
    if not str(artifact.kind).startswith("saved_model") or "://" in str(artifact.location):
        return None
    path = Path(artifact.location, "assets.extra", WARMUP_FILE)
    return str(path) if path.is_file() else None


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
    return sorted(key for key, sig in meta.signature_def.items()  # not TF's own "__saved_model_init_op"
                  if not key.startswith("__") and sig.outputs and all(i.dtype != string for i in sig.inputs.values()))


# ---- plain run -------------------------------------------------------------------------------


def _plain_runs(runtime: Runtime, examples: Examples, ranges: list[tuple[int, int]], timing_runs: int,
                plan: FetchPlan | None = None) -> dict:
    """The side as it runs in production: signature outputs only, warmed up, then timed.

    One traced warm-up (the executed op types, every tensor's size), ``timing_runs`` timed runs
    of the first batch (the last one's outputs are that batch's plain outputs), then one run per
    further batch. The warm-up builds the session's executor for this fetch set (Grappler's
    rewrites included), which costs about the same at any batch; its compute grows with the
    rows. So when one example's trace tells every tensor's size at the whole batch
    (:func:`fetch_plan.sizes_scale_with_rows`), it runs on the first example only: the same
    executor, the same partition graphs (executed ops and nodes), a fraction of the compute;
    the timed runs then are the first full-batch runs, on a warm executor as before
    (``warmup_rows`` in the latency record says which). A failure here is the model failing on
    these inputs (not tftrace's fetching), so it is reported as the user's problem with
    TensorFlow's own message.
    """
    outputs = [runtime.graph.get_tensor_by_name(s.name) for s in runtime.signature.outputs.values()]
    keys = list(runtime.signature.outputs)
    start, stop = ranges[0]
    feed0 = feed_for(runtime, examples, start, stop)
    one_row = (plan is not None and examples.batch_major and not examples.per_example and stop - start > 1
               and sizes_scale_with_rows(runtime.opgraph, plan))
    try:
        sizes: dict[str, int] = {}
        warm_feed = feed_for(runtime, examples, start, start + 1) if one_row else feed0
        _, executed_ops, executed_nodes = traced_run(runtime, outputs, warm_feed, sizes)  # also the warm-up
        if one_row:
            scaled = scaled_sizes(runtime.opgraph, plan, sizes, stop - start)
            if scaled is None:  # the trace contradicts the static shapes: measure the whole batch after all
                one_row, sizes = False, {}
                _, executed_ops, executed_nodes = traced_run(runtime, outputs, feed0, sizes)
            else:
                sizes = scaled
        times = []
        for _ in range(timing_runs):  # at least 1 (Side checks it)
            t0 = time.perf_counter()
            first = runtime.session.run(outputs, feed_dict=feed0)
            times.append((time.perf_counter() - t0) * 1000)
        # the last timed run is the first batch's plain run: the observer effect needs one per batch, not one more
        rest = [traced_run(runtime, outputs, feed_for(runtime, examples, *r), sizes, partitions=False)[0]
                for r in ranges[1:]]  # untimed: each batch's tensor sizes measured too
        per_run = [dict(zip(keys, values)) for values in [first, *rest]]
    except tf().errors.OpError as exc:
        raise TftraceError(
            f"the model fails on these inputs ({type(exc).__name__}): {tf_error_text(exc)}",
            determinism_fix(runtime.side, exc)
            or (f"these inputs were {examples.source.replace('generated', 'generated by tftrace', 1)}, which may be "
                "outside what the model accepts "
                "(an embedding's vocabulary, an image's value range): pass real examples with --inputs FILE.npz"
                if examples.source.startswith("generated") else
                "check the inputs against the signature (tftrace fed them as given), or capture another signature"),
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
            "batch_rows": stop - start,
            "warmup_rows": 1 if one_row else stop - start,
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


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    note_start()
    exit_with_parent()  # a SIGKILLed tftrace cannot stop its children itself
    claim_channel()  # the events' own pipe, before any model code runs (its stdout is not the channel)
    prepared: Prepared | None = None
    if argv[0] == "-":  # the launcher's way: no job file is left behind if tftrace is SIGKILLed
        first = sys.stdin.buffer.readline()
        message = _prepare_message(first)
        if message is not None:  # started ahead of its job (launcher.PreparedChild): load while waiting
            prepared = Prepared(job_side({"side": message["prepare"], "allow_unsafe_ops": message.get("allow_unsafe_ops")}))
            first = b""
        job = json.loads((first + sys.stdin.buffer.read()).decode("utf-8"))
        sys.stdin.close()
    else:
        with open(argv[0], encoding="utf-8") as fh:
            job = json.loads(fh.read())
    try:
        if job["mode"] == "capture":
            came_up = run_capture(job_side(job), job["out_dir"], bool(job.get("force")), prepared, job.get("file_sha256"))
        else:
            from .isolate_worker import run_isolation  # noqa: PLC0415

            came_up = run_isolation(job, prepared)
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
        return _crashed(exc)
    except Exception as exc:  # noqa: BLE001 - the parent says it in one line; the stack is for --debug
        return _crashed(exc)
    emit("timings", **came_up)
    return 0


def _crashed(exc: BaseException) -> int:
    """An exception no stage turned into a user error: its stack to stderr (what ``--debug``
    shows), its one line to the parent, which says that line (TensorFlow's op and message)."""
    traceback.print_exc()
    line, from_tf = describe_exception(exc)
    emit("crash", error=line, tensorflow=from_tf)
    return 4


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the result is on disk: skip TensorFlow's teardown, which takes a second of the user's time
