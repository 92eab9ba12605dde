"""Measuring every aligned pair of tensors of two captures, reading each side once.

Values kept only by digest (capture format 2: a variable the checkpoint holds) with equal digests
are identical without a read; packed tensors are decoded chunk by chunk straight into
:func:`tracer.metrics.compare_arrays`, so a compare holds a few chunks, never a whole capture;
values that cannot be read back make their pair not comparable, saying why and how to get them.
The plain runs' outputs (what production computes) are measured here too.
"""

from __future__ import annotations

import re
from dataclasses import replace
from typing import Any, NamedTuple

import numpy as np

from .align import Alignment, CaptureView
from ..captures.reader import Capture
from ..captures._format import EXTENDED, widens
from ..captures._packed import content_digest
from ..captures._packing import RowsCheck
from ..captures._stream import common_steps
from ..captures._values import ValuesNotStored
from .divergence import Tolerance
from ..captures.loaded_state import written_variables
from ..metrics import TensorMetrics, compare_arrays
from ..metrics.arrays import trim_memory
from ..metrics.in_step import InStepReader, PairScan, compare_in_step
from ..opgraph import tensor_op

__all__ = ["pair_metrics", "plain_output_metrics", "value_source"]

SHA256 = re.compile(r"sha256:[0-9a-f]{64}")
MAX_IN_STEP = 8  # pairs read in step at most (see _InStep)


def plain_output_metrics(
    view_a: CaptureView, view_b: CaptureView, metrics: dict[str, TensorMetrics], tolerance: Tolerance,
    signature_map: dict[str, str],
) -> dict[str, TensorMetrics]:
    """Signature key -> A's plain output vs B's: the outputs as production computes them.

    Fetching every tensor can change the kernels that run (a fetched conv is not fused; a
    preserved op is not converted to bfloat16), so the instrumented outputs may not be what a
    plain ``session.run`` returns. Compared for each output whose instrumented pair was
    compared (the same layout question) and whose plain value both captures stored with the
    same shape; the others stay compared as instrumented (see the report's ``compared_as``).
    """
    out: dict[str, TensorMetrics] = {}
    for key, ta in view_a.graph.outputs.items():
        if ta not in metrics:
            continue
        va = view_a.capture.plain_output(key)
        vb = view_b.capture.plain_output(signature_map.get(key, key))
        if va is None or vb is None or va.shape != vb.shape:
            continue
        _, rtol = tolerance.for_tensor(ta)
        out[key] = compare_arrays(va, vb, rtols=(rtol,))
    return out


def value_source(cap: Capture, view: CaptureView):  # noqa: ANN202 - a ValueSource
    """Weights by op name from the captured tensors (a resource variable's value is its read).

    A variable the model writes when it runs (a training graph's moving averages, a counter) is
    the value the capture read as the model loaded it, before the first run (``loaded_values``):
    its captured reads hold what the runs before them left, which says nothing of the weight the
    artifact holds. A capture that kept no such value has none to give (made before they were
    kept, or a variable it could not read alone): then no weight is compared for it."""
    readers = {}
    for op in view.graph.topo_order():
        if view.graph.op_type(op) == "ReadVariableOp":
            readers.setdefault(tensor_op(view.graph.data_inputs(op)[0]), f"{op}:0")
    written = set(written_variables(view.graph))

    class Values:
        def __call__(self, op: str) -> np.ndarray | None:
            if op in written:
                return cap.loaded_value(op)
            name = readers.get(op, f"{op}:0")
            return np.asarray(cap.tensor(name)) if cap.has(name) else None

        def kept_digest(self, op: str) -> str | None:
            """The digest a capture kept instead of the value (format 2), else None: then read it."""
            name = readers.get(op, f"{op}:0")
            return cap.digest(name) if cap.has(name) and op not in written else None

        def content_digest(self, op: str) -> str | None:
            """The sha256 digest of the value (kept, or taken of the stored values), the scheme of
            the moving averages a checkpoint's capture records."""
            if op in written:
                loaded = cap.loaded_value(op)
                return None if loaded is None else content_digest(loaded)
            name = readers.get(op, f"{op}:0")
            return cap.digest(name, compute=True) if cap.has(name) else None

        def moving_average(self, op: str) -> dict[str, str] | None:
            """``{"key", "digest"}`` of the moving average this side's checkpoint holds for variable
            ``op`` (recorded by its capture); None when it holds none or the record is malformed
            (a received manifest is checked before it is believed)."""
            found = averages.get(op) if isinstance(averages, dict) else None
            if not isinstance(found, dict):
                return None
            key, digest = found.get("key"), found.get("digest")
            if not (isinstance(key, str) and isinstance(digest, str) and SHA256.fullmatch(digest)):
                return None
            return {"key": key, "digest": digest}

    averages = cap.manifest.get("moving_averages")
    return Values()


def pair_metrics(cap_a: Capture, cap_b: Capture, alignment: Alignment, tolerance: Tolerance) -> dict[str, TensorMetrics]:
    """Every comparable pair's metrics. Values kept only by digest (capture format 2: a variable
    the checkpoint holds) with equal digests are bitwise identical: not read at all, unless a
    capture was received (not written by this run), whose digests are first checked against what
    they name (:meth:`Capture.bear_out`). Consecutive packed pairs whose chunks cover the same rows
    are read in step (:class:`_InStep`), each chunk decoded once. Values that
    cannot be read back make their pair not comparable, its note saying why and how to get them."""
    out: dict[str, TensorMetrics] = {}
    order: list[str] = []  # the pairs' order, which the pairs read in step would change
    for cap in (cap_a, cap_b):  # what the stages before decoded: the pairs are read chunk by chunk
        cap.forget()
    trim_memory()
    in_step = _InStep(cap_a, cap_b, out)
    for node in alignment.nodes.values():
        for index, pair in enumerate(node.tensors):
            if pair.comparable and pair.b is not None:
                order.append(pair.a)
                _, rtol = tolerance.for_tensor(pair.a)
                da, db = cap_a.digest(pair.a), cap_b.digest(pair.b)
                if (da is None) != (db is None):  # one side stored its values: its digest settles identity too
                    da, db = da or cap_a.digest(pair.a, compute=True), db or cap_b.digest(pair.b, compute=True)
                va = cap_a.values_digest(pair.a)
                if (da is not None and da == db) or (va is not None and va == cap_b.values_digest(pair.b)):
                    # a received capture's digests are claims, checked before they decide (its values
                    # digest as the rows are read, in step with the pairs around it, where it can be)
                    rows_checked = in_step.check(pair.a, pair.b)
                    cap_a.bear_out(pair.a, rows_checked)
                    cap_b.bear_out(pair.b, rows_checked)
                    out[pair.a] = _identical_by_digest(cap_a.record(pair.a), rtol)
                    continue
                # each pair is read once here: its mapped pages are given back as it is scanned, and
                # packed (format 2) values are decoded chunk by chunk into the comparison
                streams = _streams(cap_a, cap_b, pair.a, pair.b)
                if streams is not None:
                    in_step.add(pair.a, pair.b, streams, rtol)
                    continue
                in_step.run()
                try:
                    ta, tb = cap_a.tensor(pair.a), cap_b.tensor(pair.b)
                except ValuesNotStored as exc:
                    node.tensors[index] = replace(pair, comparable=False,
                                                  note=f"values not measured: {exc.problem} (to measure them: {exc.fix})")
                    continue
                tb = tb.reshape(ta.shape) if tb.shape != ta.shape else tb  # paired row by row (align)
                out[pair.a] = compare_arrays(ta, tb, rtols=(rtol,), release=True)
                del ta, tb  # a decoded (format 2) pair is let go before the next is read
    in_step.run()
    for cap in (cap_a, cap_b):
        cap.forget()
    trim_memory()  # the decoding threads' freed pages, back for the stages that follow
    return {name: out[name] for name in order if name in out}


class _Read(NamedTuple):
    """One pair of a run read in step."""

    a: str
    b: str
    reader: InStepReader  # a PairScan, or a _Checked
    metrics: bool  # the reader's result is A's tensor's metrics
    alone: tuple[tuple[Any, Any], float] | None  # a compared pair's streams and rtol (read alone if alone in its run)


_Spans = tuple[tuple[tuple[int, int], ...], tuple[tuple[int, int], ...]]  # A's chunk rows and B's (Capture.chunk_spans)


class _InStep:
    """The run of pairs gathered so far, read together once the run ends: in step
    (:func:`tracer.metrics.in_step.compare_in_step`) where both sides are packed and, on each
    side, every tensor's chunks cover the same rows, else one pair after another. A pair is
    compared (:class:`PairScan`), or, decided identical by a received capture's digests, has
    those digests checked as its rows are read (:class:`_Checked`). At most :data:`MAX_IN_STEP`
    pairs: each holds the tail of a block that straddles two chunks."""

    def __init__(self, cap_a: Capture, cap_b: Capture, out: dict[str, TensorMetrics]) -> None:
        self.cap_a, self.cap_b, self.out = cap_a, cap_b, out
        self.pairs: list[_Read] = []
        self.spans: _Spans | None = None  # A's chunk rows and B's, shared by the run's pairs
        self.steps: list[tuple[int, int]] = []

    def add(self, a: str, b: str, streams: tuple[Any, Any], rtol: float) -> None:
        """A pair to compare: in this run, or a run of its own, or now (read one after another)."""
        found = self._steps(a, b) if all(hasattr(s, "pieces") for s in streams) else None
        if found is None:
            self.run()
            self.out[a] = compare_arrays(*streams, rtols=(rtol,))
            return
        steps, spans = found
        self._join(a, b, PairScan(*streams, rtols=(rtol,)), True, steps, spans, (streams, rtol))

    def check(self, a: str, b: str) -> bool:
        """Whether the values digests of a pair decided identical are checked in step (both sides
        received and packed: :meth:`Capture.rows_check`); else they are the caller's to check."""
        checks = self.cap_a.rows_check(a), self.cap_b.rows_check(b)
        found = self._steps(a, b) if None not in checks else None
        if found is None:
            return False
        steps, spans = found
        self._join(a, b, _Checked(*checks, self.cap_a.record(a)), False, steps, spans)  # type: ignore[arg-type]
        return True

    def _steps(self, a: str, b: str) -> tuple[list[tuple[int, int]], _Spans] | None:
        """The steps a pair can be read in (:func:`common_steps`), with both sides' chunk spans
        they came from (what :meth:`_join` matches the run's with); None where it cannot be."""
        spans = self.cap_a.chunk_spans(a), self.cap_b.chunk_spans(b)
        if spans[0] is None or spans[1] is None:
            return None
        steps = common_steps(*spans)
        return None if steps is None else (steps, (spans[0], spans[1]))

    def _join(self, a: str, b: str, reader: InStepReader, metrics: bool, steps: list[tuple[int, int]],
              spans: _Spans, alone: tuple[tuple[Any, Any], float] | None = None) -> None:
        if spans != self.spans or len(self.pairs) >= MAX_IN_STEP:
            self.run()
        self.pairs.append(_Read(a, b, reader, metrics, alone))
        self.spans, self.steps = spans, steps

    def run(self) -> None:
        """Read the pairs gathered, and start a new run."""
        pairs, steps, self.pairs, self.spans = self.pairs, self.steps, [], None
        if len(pairs) == 1 and pairs[0].alone is not None:  # a pair alone: its pieces made on the decoding
            streams, rtol = pairs[0].alone  # thread while this one scans (compare_arrays)
            self.out[pairs[0].a] = compare_arrays(*streams, rtols=(rtol,))
            return
        if not pairs:
            return
        found = compare_in_step([p.reader for p in pairs], self.cap_a.in_step([p.a for p in pairs], steps),
                                self.cap_b.in_step([p.b for p in pairs], steps))
        self.out.update((p.a, result) for p, result in zip(pairs, found) if p.metrics)


class _Checked:
    """A pair decided identical by digests both received captures claim, read only to check them."""

    def __init__(self, check_a: RowsCheck, check_b: RowsCheck, record: dict[str, Any]) -> None:
        self.checks = check_a, check_b
        self.size = int(np.prod(record["shape"], dtype=object))
        self.da = self.db = np.dtype(record["stored_dtype"])

    def feed(self, pa: np.ndarray, pb: np.ndarray) -> None:
        self.checks[0].add(pa)
        self.checks[1].add(pb)

    def result(self) -> None:
        for check in self.checks:
            check.done()


def _streams(cap_a: Capture, cap_b: Capture, a: str, b: str) -> tuple[Any, Any] | None:
    """Both sides of a pair as chunk streams when either is packed and their shapes agree (a pair
    aligned row by row with other shapes, or values kept by digest, are read whole instead)."""
    ra, rb = cap_a.record(a), cap_b.record(b)
    if list(ra["shape"]) != list(rb["shape"]):
        return None
    sa, sb = cap_a.stream(a), cap_b.stream(b)
    if sa is None and sb is None:
        return None
    if (sa is None and cap_a.digest(a) is not None) or (sb is None and cap_b.digest(b) is not None):
        return None  # values in the artifact: read (or refused) by Capture.tensor
    return (sa if sa is not None else cap_a.tensor(a)), (sb if sb is not None else cap_b.tensor(b))


def _identical_by_digest(record: dict[str, Any], rtol: float) -> TensorMetrics:
    """The metrics of a tensor compared with a bitwise copy of itself, from its record alone (the
    NaN/inf counts are its statistics'): what compare_arrays gives for the pair, without reading it."""
    name = record["dtype"]  # as Capture.tensor gives it: bfloat16 and the other ml_dtypes widened
    dtype, shape = np.dtype(EXTENDED[name][1] if widens(name) else name), tuple(record["shape"])
    size = int(np.prod(shape, dtype=object))
    stats = record.get("stats") or {}
    nan, inf = int(stats.get("nan") or 0), int(stats.get("inf") or 0)
    one = compare_arrays(np.zeros(1, dtype), np.zeros(1, dtype), rtols=(rtol,))
    histogram = (size - nan - inf, *one.histogram[1:]) if one.histogram and size else ()
    return replace(one, shape=shape, size=size, nan_a=nan, nan_b=nan, inf_a=inf, inf_b=inf, histogram=histogram)
