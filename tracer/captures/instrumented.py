"""The instrumented run of a capture: every planned tensor fetched, batch by batch and chunk
by chunk, and streamed to the capture directory.

Cond branches that did not run are known from their predicates before they are fetched
(:class:`tracer.captures.fetch_plan.BranchSchedule`); a chunk TensorFlow refuses is bisected,
never re-fetched one tensor at a time; a tensor over ``--max-memory`` stops the capture before
it is written; a pass-through op's output that repeats its input's bytes is stored once. String
tensors are sized by their contents before they are fetched (:class:`_StringSizes`), so they are
chunked by what will come back.
"""

from __future__ import annotations

import re
import time
from functools import partial
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .._tf import tf
from .inputs import Examples
from ..errors import TftraceError
from ..opgraph import OpGraph, tensor_op, tensor_slot
from ..optypes import MAYBE_UNCHANGED_OPS
from ..text import count
from ._events import emit
from ._format import bitwise_equal, storage_nbytes, string_storage_nbytes
from .fetch_plan import DEAD_BRANCH_REASON, BranchSchedule, FetchPlan, check_fetched, chunked, too_big
from .part_feeds import BetweenParts, Part, PartPlans, takes_feed
from .runtime import Runtime, tf_error_text
from .session_runs import feed_for, traced_run
from .store import CaptureWriter

__all__ = ["instrumented_runs"]


def instrumented_runs(
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
    strings = _StringSizes(runtime, plan)
    between = BetweenParts(runtime.graph)
    cut = PartPlans(opgraph, plan, partial(takes_feed, runtime, plan))  # once: later runs fetch the same sets
    for run_index, (start, stop) in enumerate(ranges):
        # Later runs fetch what run 0 fetched, the constants again too (their values are stored once,
        # from run 0): TensorFlow builds an executor, Grappler included, for each new set of fetches,
        # and on the 35,000-op RetinaNet stand-in a second set cost 13-16 s of a batch-1 run's 1-2 s.
        # Not a constant inside a cond branch: where a later run's predicate kills its branch, the
        # schedule would drop the value run 0 stored.
        wanted = plan.names if run_index == 0 else [
            n for n in plan.names if n in layout and not (layout[n] == "const" and n in plan.branches)]
        again = frozenset(n for n in wanted if run_index > 0 and layout.get(n) == "const")  # fetched, not stored
        feed = feed_for(runtime, examples, start, stop)
        where = _Where(run_index, start, stop, examples.count, examples.batch_major or examples.per_example,
                       examples.per_example)
        outputs: dict[str, np.ndarray] = {}
        schedule = BranchSchedule(wanted, plan)
        chunks = 0
        stores = [n for n in wanted if n not in again]
        told = _Told(run_index, len(ranges), len(stores), written,
                     _planned_bytes(plan, stores, (stop - start) / max(ranges[0][1] - ranges[0][0], 1)))
        steps = _fetch_steps(schedule, plan, writer, layout, lambda names, feed=feed: strings.size(names, feed), cut)
        between.new_run()
        for step in steps:  # lazily: each step follows the predicates
            chunks += 1
            emit("stage", text=f"instrumented run: fetching {len(step.names):,} tensors"
                               + (f" (part {chunks}{f' of {step.parts}' if step.parts and not plan.branches else ''})"
                                  if chunks > 1 else ""))
            rechecks = between.rechecks(step)
            fetched, values, failed, ops, nodes = _run_chunk(runtime, step.names + rechecks, between.feed(step, feed),
                                                             run_index == 0, step.branch)
            emit("stage", text=f"instrumented run: storing {sum(n not in again for n in fetched):,} tensors")
            for name, reason in failed.items():
                if name not in step.extra and name not in rechecks:
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
                if name in rechecks:
                    between.check(name, value, run_index, chunks)
                    continue
                between.keep(step, name, value)
                for key in output_keys.get(name, ()):  # a constant output too: the observer effect compares
                    outputs[key] = value  # every run's outputs with the plain run's
                if name in again:
                    continue
                check_fetched(plan, name, storage_nbytes(value))  # before a byte of it is converted or written
                written += value.nbytes
                _store(writer, name, value, where, opgraph, plan.constant, layout, stored)
                stored[name] = value
                told.stored(written)
            told.stored(written, force=True)
            between.release(step)
            del values, stored  # peak memory: one chunk's tensors, the values held for later ones, the writer's queue
        if chunks > chunk_count:
            chunk_count = chunks
            branch_chunks = max(0, chunks - len(chunked(wanted, plan.sizes, plan.part_limit()))) if plan.branches else 0
        outputs_per_run.append(outputs)
        emit("progress", done=run_index + 1, total=len(ranges), bytes=written)
    return {
        "layout": layout,
        "chunks": chunk_count,
        "branch_chunks": branch_chunks,
        "parts": between.record(),
        "seconds": time.perf_counter() - t0,
        "outputs": outputs_per_run,
        "executed_ops": executed_ops,
        "executed_nodes": executed_nodes,
    }


def _planned_bytes(plan: FetchPlan, wanted: list[str], rows_ratio: float) -> int:
    """What one run's fetch is expected to bring back: the plan's sizes (static shapes, or the
    plain run's measured ones) of the first batch, scaled by this run's rows. An estimate the
    progress bar moves by: tensors differ in size by orders of magnitude (a ResNet-152's first
    part of 1,883 tensors, mostly weights, is 74% of its tensors and 15% of its bytes), so a bar
    moved by the count of tensors would say 74% at a sixth of the way."""
    return int(sum(plan.sizes.get(name, 0) for name in wanted) * rows_ratio)


class _Told:
    """The parent's progress line while one run's tensors are stored: at most every
    ``TELL_EVERY_S``, so 35,000 tensors cost a few dozen events, not 35,000. Each event says
    the bytes of this run stored so far against those planned (``run_bytes``/``planned``)."""

    TELL_EVERY_S = 1.0

    def __init__(self, run_index: int, runs: int, tensors: int, written_before: int = 0, planned: int = 0) -> None:
        self.run_index, self.runs, self.tensors = run_index, runs, tensors
        self.written_before, self.planned = written_before, planned
        self.count, self.last = 0, time.monotonic()

    def stored(self, written: int, force: bool = False) -> None:
        """One more tensor stored (``force``: a chunk is done; say where we are now)."""
        self.count += 0 if force else 1
        if force or time.monotonic() - self.last >= self.TELL_EVERY_S:
            self.last = time.monotonic()
            emit("progress", done=self.run_index, total=self.runs, bytes=written,
                 stored=min(self.count, self.tensors), tensors=self.tensors,
                 run_bytes=written - self.written_before, planned=self.planned)


@dataclass
class _Step:
    """One chunk of one run: what to fetch, and which of it only decides cond branches."""

    names: list[str]
    branch: bool = False  # the tensors of one branch whose predicate could not be fetched
    preds: dict[str, list[str]] = field(default_factory=dict)  # predicate tensor -> the Switches it decides
    extra: frozenset[str] = frozenset()  # predicates fetched only for that: not stored
    parts: int = 0  # the chunks of its step (the whole run's, where the model has no cond branches)
    feeds: list[str] = field(default_factory=list)  # tensors an earlier chunk fetched, fed to this one
    rechecks: list[str] = field(default_factory=list)  # tensors an earlier chunk stored that this one computes again
    release: list[str] = field(default_factory=list)  # held values no later chunk of the step reads
    unfed: bool = False  # a later chunk not fed, for want of room: it computes its inputs again
    hold: frozenset[str] = frozenset()  # the step's tensors some later chunk is fed: kept once fetched
    digest: frozenset[str] = frozenset()  # the step's tensors some later chunk re-checks: their digests kept


def _fetch_steps(schedule: BranchSchedule, plan: FetchPlan, writer: CaptureWriter, layout: dict[str, str],
                 size_strings: Callable[[list[str]], None] = lambda names: None,
                 cut: Callable[[list[str]], list[Part]] | None = None) -> Iterator[_Step]:
    """One run's chunks, following the :class:`BranchSchedule`.

    Dead branches are recorded as such without a fetch; the live ones are fetched (under
    --max-memory) together with the next level's predicates, their strings sized first
    (``size_strings``); a step's later chunks are fed what its earlier ones fetched
    (:mod:`tracer.captures.part_feeds`); the branches whose predicates could not be fetched
    come last, one branch per chunk.
    """
    while (step := schedule.next()) is not None:
        ready, dead, preds = step
        for name in dead:
            writer.mark_uncaptured(name, DEAD_BRANCH_REASON)
            layout.pop(name, None)
        size_strings(ready)
        parts = (cut(ready) if ready and cut is not None
                 else [Part(c) for c in chunked(ready, plan.sizes, plan.part_limit())])
        extra = [p for p in preds if p not in ready]
        if extra:
            parts = parts or [Part([])]
            parts[0].names = extra + parts[0].names
        hold = frozenset(n for part in parts for n in part.feeds)
        digest = frozenset(n for part in parts for n in part.rechecks)
        for i, part in enumerate(parts):
            yield _Step(part.names, preds=preds if i == 0 else {}, extra=frozenset(extra) if i == 0 else frozenset(),
                        parts=len(parts), feeds=part.feeds, rechecks=part.rechecks, release=part.release,
                        unfed=part.unfed, hold=hold, digest=digest)
    for _, names in schedule.leftover():
        size_strings(names)  # a dead branch's strings are not sized (TensorFlow refuses): checked as fetched
        for chunk in chunked(names, plan.sizes, plan.part_limit()):
            yield _Step(chunk, branch=True)


class _StringSizes:
    """The real size of string tensors, measured before they are fetched.

    A string tensor's step statistics count only its header, and a fetch returns every fetched
    value whole: sixteen 40 MB strings built from a 1 KB constant came back in one
    ``session.run`` (2.5 GB at the peak under ``--max-memory 50000000``). So before a run's live
    tensors are chunked, one ``session.run`` fetches three numbers per string tensor (elements,
    bytes in all, the longest), computed in the graph by ops added beside the model's; each
    tensor's stored size is known from them (:func:`string_storage_nbytes`), one over the limit
    is refused before any of it is fetched, and the rest are chunked apart under the limit. A
    set TensorFlow refuses to fetch is sized one tensor at a time; one it refuses alone keeps its
    estimate, checked as it comes back (:func:`check_fetched`).

    Chunking bounds one fetch, not what the session keeps: a string that does not depend on the
    inputs is folded into a constant by Grappler in the executor of every fetch set that holds
    it, and a session keeps its executors (one per fetch set) until it closes. Fetched apart,
    the sixteen strings still ended at 2.0 GB. So the constant strings are also summed, and more
    than ``--max-memory`` of them in all is refused before any is fetched.
    """

    def __init__(self, runtime: Runtime, plan: FetchPlan) -> None:
        self.runtime = runtime
        self.plan = plan
        self.ops: dict[str, Any] = {}  # tensor -> its [elements, bytes, longest] op in the graph
        self.constant: dict[str, int] = {}  # constant string tensor -> its stored bytes

    def size(self, names: list[str], feed: dict) -> None:
        strings = [n for n in names if self.runtime.opgraph.output_info(n)["dtype"] == "string"]
        if not strings:
            return
        try:
            measured = self._measure(strings, feed)
        except _fetch_errors():
            measured = {}
            for name in strings:
                try:
                    measured.update(self._measure([name], feed))
                except _fetch_errors():
                    continue  # TensorFlow will not fetch it: the chunk's own refusal says so
        limit = self.plan.max_memory
        sizes = {name: string_storage_nbytes(int(n), int(total), int(widest)) for name, (n, total, widest) in measured.items()}
        for name, size in sizes.items():
            if size > limit:
                raise too_big(name, size, self.plan, "by its strings' lengths (sized before it was fetched)",
                              "; nothing of it was fetched, and the capture is left incomplete")
            self.plan.sizes[name] = size
            if tensor_op(name) in self.plan.constant:
                self.constant[name] = size
        total = sum(self.constant.values())
        if total > limit:
            largest = max(self.constant, key=self.constant.__getitem__)
            raise TftraceError(
                f"the string tensors that do not depend on the inputs take {total:,} bytes in all ({len(self.constant)} "
                f"of them; the largest, {largest}, {self.constant[largest]:,} bytes), more than "
                f"{self.plan.limit_words()}: TensorFlow folds each into a constant that the session keeps for as "
                "long as the capture runs; nothing of them was fetched, and the capture is left incomplete",
                f"{self.plan.fix} if this machine has the memory for them")

    def _measure(self, names: list[str], feed: dict) -> dict[str, Any]:
        t = tf()
        graph = self.runtime.graph
        for name in names:
            if name not in self.ops:
                with graph.as_default(), t.name_scope("tftrace_string_sizes"):
                    lengths = t.reshape(t.cast(t.strings.length(graph.get_tensor_by_name(name)), t.int64), [-1])
                    self.ops[name] = t.stack([t.size(lengths, out_type=t.int64), t.reduce_sum(lengths),
                                              t.reduce_max(t.concat([lengths, t.zeros([1], t.int64)], 0))])
        values = self.runtime.session.run([self.ops[n] for n in names], feed_dict=feed)
        return dict(zip(names, values))


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
    named: dict[str, str] = {}  # refusals TensorFlow's error pointed at by their place in the fetch list
    while True:
        try:
            got, vals, refused, ops, nodes = _fetch(runtime, chunk, feed, traced)
            return got, vals, {**named, **refused}, ops, nodes
        except errors as exc:
            index = _refused_index(exc, chunk)
            if index is None or len(chunk) == 1:
                if len(chunk) == 1:
                    return [], [], {**named, chunk[0]: _dead_or_refused(exc)}, Counter(), {}
                break
            named[chunk[index]] = _refusal(exc) + _RETVAL_WHY
            chunk = chunk[:index] + chunk[index + 1:]
            emit("stage", text=f"instrumented run: TensorFlow refused {count(len(named), 'fetch', 'fetches')} by "
                               f"name; fetching the other {len(chunk):,} tensors again")
    if len(chunk) > 64:
        emit("stage", text=f"instrumented run: TensorFlow refused a fetch of {len(chunk):,} tensors; "
                           "finding which, by halves (one run each)")
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
    return names, values, {**named, **failed}, ops, nodes


_RETVAL = re.compile(r"Retval\[(\d+)\] has already been set")
_RETVAL_NODE = re.compile(r"\{\{node _retval_(.+)_(\d+)_(\d+)\}\}")
_RETVAL_WHY = (" (at run time TensorFlow computes it with an op that runs more than once, inside a loop, so "
               "one run cannot return it)")


def _refused_index(exc: Exception, chunk: list[str]) -> int | None:
    """The place in ``chunk`` of the fetch TensorFlow's error names, where it names one.

    A fetch served from inside a loop is set once per iteration: "Retval[11149] has already been
    set. [[{{node _retval_<op>_<output>_11149}}]]". The node names the fetch. The index alone does
    not point into ``chunk``: the session counts its fetches in sorted order (a Model Garden
    RetinaNet, 2026-12-02: index 11149 of the list was an innocent Cast; each refusal then dropped
    the wrong tensor and ran the model again). So the fetch is found by the node's name, else by
    its place among the sorted names; dropping it and fetching the rest again costs one run, where
    bisection spends about log2(13,238) = 14."""
    text = str(getattr(exc, "message", exc))
    found = _RETVAL.search(text)
    if found is None:
        return None
    node = _RETVAL_NODE.search(text)
    if node is not None:
        name = f"{node.group(1)}:{node.group(2)}"
        if name in chunk:
            return chunk.index(name)
    ordered = sorted(set(chunk))
    index = int(found.group(1))
    return chunk.index(ordered[index]) if index < len(ordered) else None


def _fetch(runtime: Runtime, chunk: list[str], feed: dict, traced: bool
           ) -> tuple[list[str], list[Any], dict[str, str], Counter, dict[str, str]]:
    fetches = [runtime.graph.get_tensor_by_name(n) for n in chunk]
    if traced:
        values, ops, nodes = traced_run(runtime, fetches, feed)
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



def _same_bytes_input(opgraph: OpGraph, name: str, value: np.ndarray, stored: dict[str, np.ndarray]) -> str | None:
    """The input, already stored, whose exact bytes (dtype and shape too) a pass-through op's
    output repeats; None when it has none. Compared, never assumed: a Reshape may change the
    shape, a Cast the dtype, a Switch may pass nothing."""
    op = tensor_op(name)
    kind = opgraph.op_type(op)
    if kind not in MAYBE_UNCHANGED_OPS:  # output can be its input unchanged: stored once when it is
        return None
    inputs = opgraph.data_inputs(op)
    if kind == "IdentityN":
        inputs = inputs[tensor_slot(name) : tensor_slot(name) + 1]
    for source in inputs:
        other = stored.get(source)
        if other is not None and bitwise_equal(value, other):
            return source
    return None
