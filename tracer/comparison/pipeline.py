"""``tftrace compare``'s stages in order: two sides in, a :class:`Comparison` out.

Each side is an artifact (captured here, in a child process, with its own options) or a capture
directory made earlier, possibly on another machine. From there on everything works on the two
capture directories, without TensorFlow: graph diff from the manifests' op graphs (weights
compared through the captured values), alignment, metrics, divergence; then isolation replays
the top origins in children again. The result is handed back; writing it down is the caller's
(the CLI, the API, diagnose: :func:`tracer.report.build.report_comparison`), so this stage
never imports the report stage.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.console import Console

from .align import Alignment, CaptureView, align
from ..captures._values import ArtifactReads
from ..captures.launcher import ChildrenAhead, PreparedChild, prepared_if_room
from ..captures.launcher import capture as capture_side
from ..captures.progress_view import working
from ..captures.reader import Capture, is_capture_dir
from .divergence import Divergence, Tolerance
from ..errors import EXIT_OK, TftraceError
from ..diff.records import GraphDiff
from ..diff.rewrites import diff_graphs
from .detection_lists import DetectionList, measure_detection_lists
from .detection_groups import detection_verdicts, detections_net_of_noise
from .detections import detections_of, recognise
from .list_runs import observed_detections
from .isolate import IsolationResult
from .judging import Judging
from .replay_choice import to_isolate
from ..metrics import TensorMetrics
from ..runspec import InputSpec, Side
from ..safewrite import claim, output_directory
from .measure import pair_metrics, plain_output_metrics, value_source
from .noise import OutputNoise, first_repeat_child, plan_repeats
from .pairing import (apply_signature_map, cannot_take_examples, examples_digest, examples_of_a_given_capture,
                      inputs_from, is_capture, one_input_each, refused_examples, require_pairable,
                      require_same_examples)
from .statuses import BORN_HERE, verdict_exit_code, worse

__all__ = ["Comparison", "compare", "comparing", "directory_size", "open_or_capture", "to_isolate"]


@dataclass
class Comparison:
    """Everything a comparison found; ``bool(comparison)`` is True when nothing diverged."""

    view_a: CaptureView
    view_b: CaptureView
    diff: GraphDiff
    alignment: Alignment
    metrics: dict[str, TensorMetrics]
    divergence: Divergence
    tolerance: Tolerance
    isolation: dict[str, IsolationResult] = field(default_factory=dict)
    out_dir: Path | None = None
    command: str = ""
    noise: dict[str, Any] | None = None
    noise_per_tensor: dict[str, float] = field(default_factory=dict)  # A tensor -> run-to-run max |diff| (--repeat)
    noise_per_output: dict[str, float] = field(default_factory=dict)  # signature key -> the same, plain outputs
    # set when the report is written (tracer.report.build.report_comparison): report.json's dict,
    # and what writing it noticed, e.g. "Graphviz is missing: no graph drawn"
    report: dict[str, Any] = field(default_factory=dict)
    notices: list[str] = field(default_factory=list)
    # signature key -> A's plain output vs B's (what production computes; see plain_output_metrics)
    plain_outputs: dict[str, TensorMetrics] = field(default_factory=dict)
    kept_captures: dict[str, bool] = field(default_factory=lambda: {"a": True, "b": True})
    # "a"/"b" -> examples_digest of the side, taken while its capture is still on disk
    examples_digests: dict[str, str | None] = field(default_factory=dict)
    # report.json's "detections": each group of detector outputs matched by class and IoU (detections.py)
    detections: list[dict[str, Any]] = field(default_factory=list)
    # A's tensor -> the detection list it holds, measured between matched detections (detection_lists.py)
    detection_lists: dict[str, DetectionList] = field(default_factory=dict)
    # --intermediates-decide: an op beyond tolerance anywhere makes the verdict, even when the outputs agree
    intermediates_decide: bool = False
    noise_outputs: dict[str, OutputNoise] = field(default_factory=dict)  # A's key -> over every pair of runs
    noise_not_measured: list[dict[str, str]] = field(default_factory=list)  # sides that could move, not measured
    # "a"/"b" -> the side's own output key -> its observer effect between matched detections (list_runs.py)
    observer_detections: dict[str, dict[str, float]] = field(default_factory=dict)
    signature_map: dict[str, str] = field(default_factory=dict)  # --map: A's key -> B's own key

    @property
    def verdict(self) -> str:
        """What the user tests decides: the outputs (the plain runs, as production computes them),
        each judged over every pair of runs against each side's own spread. An intermediate op
        beyond tolerance whose difference heals before the outputs is a finding (the report's
        ``intermediates``), not a failure, unless ``intermediates_decide``; with no output compared
        at all, the ops decide (equivalence not shown is not equivalence)."""
        outputs = self.outputs_verdict
        if self.intermediates_decide or not self.output_verdicts():
            return worse(self.divergence.verdict, outputs)
        if outputs == "identical" and (self.divergence.verdict != "identical" or self.noise_per_tensor):
            # bit-identical outputs, but not every op, or an op of one side moved between its own runs
            # (a GPU side's intermediates, its outputs not: the H200, 2026-12-02): "identical" would say more
            return "within_tolerance"
        return outputs

    @property
    def decided_by(self) -> str:
        """What made :attr:`verdict`: "outputs", or "outputs_and_intermediates"."""
        return "outputs" if not self.intermediates_decide and self.output_verdicts() else "outputs_and_intermediates"

    @property
    def outputs_verdict(self) -> str:
        """The verdict of the outputs alone ("identical" when none were compared)."""
        return worse("identical", *self.output_verdicts().values())

    def output_verdicts(self) -> dict[str, str]:
        """A's signature key -> its verdict: the plain runs' outputs where both captures hold
        them, else the captured output tensors. ``identical`` only when every run of A equals
        every run of B bit for bit and no side moved by itself; ``within_noise`` when A and B
        differ beyond tolerance, or a side moves beyond it, but A and B come as close in some pair of
        runs as a side comes to itself (:mod:`tracer.comparison.noise` says why not the farthest pair)."""
        found = {}
        for key, (ta, _tb, observed) in self.output_metrics().items():
            m = self.plain_outputs.get(key) or observed
            if m is None:
                continue
            atol, rtol = self.tolerance.for_tensor(ta)
            over = self.noise_outputs.get(key) if key in self.plain_outputs else None
            noise = over.noise if over else self.noise_per_output.get(key, 0.0)
            nonfinite = bool(m.nan_mismatch or m.inf_mismatch) or bool(over and over.cross_nonfinite)
            identical = m.identical and (over.cross_identical if over else True) and noise == 0
            within = m.within(atol, rtol) and (over.cross_within_tolerance and over.spread_within_tolerance
                                                if over else True)
            closest = min(m.max_abs, over.cross_closest) if over else m.max_abs  # see tracer.comparison.noise
            found[key] = ("identical" if identical else "within_tolerance" if within and not nonfinite
                          else "within_noise" if closest <= noise and not nonfinite else "diverged")
        found.update(detections_net_of_noise(detection_verdicts(self.detections), found, self.detections))
        return found

    def __bool__(self) -> bool:
        """True where the CLI exits 0 (the verdict's record says)."""
        return verdict_exit_code(self.verdict) == EXIT_OK

    def output_metrics(self) -> dict[str, tuple[str, str, TensorMetrics | None]]:
        out = {}
        for key, ta in self.view_a.graph.outputs.items():
            tb = self.view_b.graph.outputs.get(key, "")
            out[key] = (ta, tb, self.metrics.get(ta))
        return out


def open_or_capture(
    target: str | Side, out_dir: Path, name: str, *, console: Console | None, shared_inputs: InputSpec | None = None,
    allow_unsafe_ops: bool = False, prepared: PreparedChild | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None, read_memory: int | None = None,
    own_captures: bool = False,
) -> Capture:
    """A capture directory is opened; an artifact (or a Side) is captured into ``out_dir/captures/name``
    (by ``prepared``, its child started ahead by :func:`prepare_ahead`, when given; ``on_event``
    hears the capture child's events; ``read_memory``: --max-memory, the most one decode of a
    given capture directory may inflate; ``own_captures``: see :func:`comparing`)."""
    if isinstance(target, str):
        if is_capture_dir(target):
            return Capture.open(target, received=not own_captures, max_memory=read_memory)
        if os.path.isdir(os.path.join(target, "tensors")) and not os.path.exists(os.path.join(target, "saved_model.pb")):
            Capture.open(target)  # raises the "incomplete capture" error
        from ..artifacts.loader import ArtifactRef  # noqa: PLC0415

        target = Side(ArtifactRef(target), allow_unsafe_ops=allow_unsafe_ops)
    if shared_inputs is not None:
        target = replace(target, inputs=shared_inputs)
    claim(out_dir, ["captures"])  # before it exists: --force after a killed run may delete it
    return capture_side(target, out_dir / "captures" / name, force=True, console=console, prepared=prepared,
                        on_event=on_event)


def prepare_ahead(target: str | Side, other: str | Side, allow_unsafe_ops: bool) -> PreparedChild | None:
    """Start ``target``'s capture child now, to import TensorFlow and load its model while
    ``other`` is captured (its examples, ``other``'s, are known only then), when it is to be
    captured here and memory allows both at once; None otherwise (captured after, as before)."""
    if is_capture(target) or (isinstance(target, str) and os.path.isdir(os.path.join(target, "tensors"))):
        return None
    from ..artifacts.loader import ArtifactRef  # noqa: PLC0415

    side = target if isinstance(target, Side) else Side(ArtifactRef(target), allow_unsafe_ops=allow_unsafe_ops)
    return prepared_if_room(side, other.max_memory if isinstance(other, Side) else Side.max_memory)


@contextlib.contextmanager
def comparing(
    a: str | Side,
    b: str | Side,
    out_dir: str | os.PathLike[str],
    *,
    tolerance: Tolerance | None = None,
    isolate: int = 5,
    force: bool = False,
    console: Console | None = None,
    command: str = "",
    signature_map: dict[str, str] | None = None,
    repeat: int | None = None,
    allow_unsafe_ops: bool = False,
    keep_captures: bool = False,
    detections: dict[str, Any] | None = None,
    intermediates_decide: bool = False,
    read_memory: int | None = None,
    own_captures: bool = False,
) -> Iterator[Comparison]:
    """Capture (or open) both sides, align, measure, find where they diverge, isolate; yield the
    :class:`Comparison` while ``out_dir`` is still this run's, so the caller writes the report
    into it (``with comparing(...) as c: report_comparison(c)``) before another run may.

    ``out_dir`` is locked for this run (a second run into it exits 2 naming this one's pid),
    and ``force`` replaces only what tftrace recorded writing there (:mod:`tracer.safewrite`).
    ``repeat``: runs of each side (None: a second one only where a side can change from run to run,
    :mod:`tracer.comparison.noise`; 1: never). ``own_captures``: the capture directories given were
    written by this process's own capture children (diagnose's), so the digests they record are
    what those children computed, not claims from a sender to check against the model again
    (:meth:`Capture.bear_out`; a TensorFlow child per comparison).
    """
    if repeat is not None and repeat < 1:
        raise TftraceError(f"--repeat {repeat}: a side runs at least once",
                           "give --repeat 1 (no noise measured), 2 or more, or leave it out (measured where needed)")
    out = Path(out_dir).absolute()
    with output_directory(out, force, "report"):
        yield _compare(a, b, out, tolerance=tolerance, isolate=isolate, console=console, command=command,
                       signature_map=signature_map, repeat=repeat, allow_unsafe_ops=allow_unsafe_ops,
                       keep_captures=keep_captures, detections=detections,
                       intermediates_decide=intermediates_decide, read_memory=read_memory,
                       own_captures=own_captures)


def compare(a: str | Side, b: str | Side, out_dir: str | os.PathLike[str], **options: Any) -> Comparison:
    """:func:`comparing` for a caller that writes no report (``out_dir`` then holds no report.json)."""
    with comparing(a, b, out_dir, **options) as comparison:
        return comparison


def _compare(
    a: str | Side,
    b: str | Side,
    out: Path,
    *,
    tolerance: Tolerance | None,
    isolate: int,
    console: Console | None,
    command: str,
    signature_map: dict[str, str] | None,
    repeat: int | None,
    allow_unsafe_ops: bool,
    keep_captures: bool,
    detections: dict[str, Any] | None = None,
    intermediates_decide: bool = False,
    read_memory: int | None = None,
    own_captures: bool = False,
) -> Comparison:
    """:func:`compare` inside its prepared, locked ``out`` directory.

    Sides captured here are written to ``out_dir/captures`` and, unless ``keep_captures``,
    deleted before the comparison is handed back: the report directory keeps what the report and a later
    ``tftrace isolate --from`` need (the origins' A tensors in ``work/feeds``), small enough to
    attach to an issue. Captures given as directories are never touched.

    ``allow_unsafe_ops`` lets sides given as paths run ops with outside effects (when captured
    here, and when their origins are replayed); a :class:`Side` carries its own flag. A capture
    directory's recorded flag is never used: it may come from anyone.
    """
    permits = {key: t.allow_unsafe_ops if isinstance(t, Side) else allow_unsafe_ops for key, t in (("a", a), ("b", b))}
    a, b = _lend_signatures(a, b, allow_unsafe_ops)
    console = console or Console(stderr=True)
    cap_a, cap_b = _capture_sides(a, b, out, console, allow_unsafe_ops, signature_map or {}, read_memory, own_captures)
    cap_a.artifact_reads = cap_b.artifact_reads = ArtifactReads([cap_a, cap_b])  # one TensorFlow child for both
    view_a, view_b = CaptureView(cap_a), CaptureView(cap_b)
    signature_map = {**one_input_each(view_a, view_b, signature_map), **(signature_map or {})}
    apply_signature_map(view_a, view_b, signature_map)
    require_pairable(view_a, view_b)
    require_same_examples(view_a, view_b)
    plan = plan_repeats({"a": a, "b": b}, {"a": cap_a, "b": cap_b}, repeat)
    with ChildrenAhead() as ahead:  # every child started before its job is certain is stopped on the way out
        ahead.hold("first_repeat", first_repeat_child(plan))  # loads its model while this process compares
        doing = f"diffing the graphs and comparing every tensor ({len(view_a.graph):,} ops)"
        with working(console, "compare", doing):
            diff = diff_graphs(
                view_a.graph, view_b.graph, value_source(cap_a, view_a), value_source(cap_b, view_b),
                a_inlined_by_loader=cap_a.artifact.get("inlined_by_loader", False),
                b_inlined_by_loader=cap_b.artifact.get("inlined_by_loader", False),
            )
            alignment = align(view_a, view_b, diff)
            tolerance = tolerance or Tolerance()
            metrics = pair_metrics(cap_a, cap_b, alignment, tolerance)
            # a detector's outputs matched as detections, and the tensors inside that hold the same lists, which
            # the ops are judged by (their status, whether one is the first divergence) before anything is replayed
            groups = detections_of(view_a, view_b, tolerance, signature_map or {}, detections)
            lists = measure_detection_lists(view_a, view_b, alignment, tolerance, groups, signature_map or {},
                                            detections)
            specs = recognise(list(view_a.graph.outputs), detections)
            observed = {"a": observed_detections(cap_a, specs),
                        "b": observed_detections(cap_b, specs, signature_map or {})}
        judged = Judging(targets={"a": a, "b": b}, captures={"a": cap_a, "b": cap_b}, views=(view_a, view_b),
                          alignment=alignment, metrics=metrics, tolerance=tolerance, out=out, console=console,
                          signature_map=signature_map or {}, permits=permits, lists=lists, plan=plan, ahead=ahead)
        divergence, isolation, noise = judged.run(repeat, isolate)
    _drop_load_state(diff, alignment, judged.loaded)
    # An origin where the difference is born (its own kernel, its weights) outranks one that only inherited.
    own = {name for name, iso in isolation.items() if iso.verdict in BORN_HERE}
    divergence.origins.sort(key=lambda r: r.name not in own)
    made_here = out / "captures"
    kept = {key: keep_captures or not _inside(cap.path, made_here) for key, cap in (("a", cap_a), ("b", cap_b))}
    comparison = Comparison(view_a, view_b, diff, alignment, metrics, divergence, tolerance, isolation, out, command,
                            noise=noise.summary, noise_per_tensor=noise.per_tensor, noise_per_output=noise.per_output,
                            kept_captures=kept, intermediates_decide=intermediates_decide,
                            noise_outputs=noise.outputs, noise_not_measured=noise.not_measured,
                            plain_outputs=plain_output_metrics(view_a, view_b, metrics, tolerance, signature_map or {}),
                            examples_digests={"a": examples_digest(view_a), "b": examples_digest(view_b)},
                            detections=groups, detection_lists=lists, observer_detections=observed,
                            signature_map=dict(signature_map or {}))
    if not keep_captures and made_here.is_dir():
        shutil.rmtree(made_here)  # before the report: a report.json present means the directory is as it stays
    return comparison


def _capture_sides(a: str | Side, b: str | Side, out: Path, console: Console, allow_unsafe_ops: bool,
                   signature_map: dict[str, str], read_memory: int | None,
                   own_captures: bool = False) -> tuple[Capture, Capture]:
    """Both sides opened or captured: A first, B fed A's examples. B's child is started as soon as
    A's is up, so that B imports TensorFlow and loads its model while A captures."""
    ahead: dict[str, PreparedChild | None] = {}

    def start_b(_event: dict[str, Any]) -> None:
        if "b" not in ahead:
            ahead["b"] = prepare_ahead(b, a, allow_unsafe_ops)

    try:
        from_b = examples_of_a_given_capture(a, b, out, signature_map)
        try:
            cap_a = open_or_capture(a, out, "a", console=console, allow_unsafe_ops=allow_unsafe_ops, on_event=start_b,
                                    shared_inputs=from_b, read_memory=read_memory, own_captures=own_captures)
        except TftraceError as exc:  # A refused the examples of the capture given as B
            if from_b is None or not refused_examples(exc):
                raise
            raise cannot_take_examples(exc, list(Capture.open(str(b)).inputs), "B", "A") from exc
        shared = inputs_from(cap_a, out, signature_map) if not is_capture(b) else None
        try:
            cap_b = open_or_capture(b, out, "b", console=console, shared_inputs=shared,
                                    allow_unsafe_ops=allow_unsafe_ops, prepared=ahead.get("b"), read_memory=read_memory,
                                    own_captures=own_captures)
        except TftraceError as exc:
            if shared is None or not refused_examples(exc):
                raise
            raise cannot_take_examples(exc, list(cap_a.inputs)) from exc
    finally:
        if ahead.get("b") is not None:
            ahead["b"].cancel()  # its job never came (A failed), or it is over: nothing is left running
    return cap_a, cap_b


def _drop_load_state(diff: GraphDiff, alignment: Alignment, loaded: set[str]) -> None:
    """The same weights loaded twice came out different (``loaded``: variables set at load, and
    their reads): not a change of the weights, so no const_changed, and their ops sit in none."""
    dropped = [r for r in diff.rewrites if r.kind == "const_changed" and set(r.a_nodes) <= loaded]
    diff.rewrites[:] = [r for r in diff.rewrites if r not in dropped]
    for op in (op for r in dropped for op in r.a_nodes):
        node = alignment.nodes.get(op)
        if node is not None and node.rewrite == "const_changed":
            node.rewrite = None


def directory_size(path: str | os.PathLike[str]) -> int:
    """Bytes under ``path`` as they occupy a disk or an archive: a hard-linked file once."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            st = os.lstat(os.path.join(root, name))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def _inside(path: Path, folder: Path) -> bool:
    return Path(path).absolute().is_relative_to(folder.absolute())


def _lend_signatures(a: str | Side, b: str | Side, allow_unsafe_ops: bool) -> tuple[str | Side, str | Side]:
    """Each side to be captured may borrow the other's signature when it has none of its own (a
    TF1 training checkpoint against its SavedModel): its ArtifactRef names the other side, and
    the capture child uses it only if needed (see :func:`tracer.artifacts.graph.borrow_signature`)."""
    from ..artifacts.loader import ArtifactRef  # noqa: PLC0415

    def ref(target: str | Side) -> ArtifactRef:
        return ArtifactRef(target) if isinstance(target, str) else target.artifact.lender()

    def lend(target: str | Side, other: str | Side) -> str | Side:
        if isinstance(target, str) and (is_capture(target) or os.path.isdir(os.path.join(target, "tensors"))):
            return target  # a capture (open_or_capture refuses an incomplete one)
        side = target if isinstance(target, Side) else Side(ArtifactRef(target), allow_unsafe_ops=allow_unsafe_ops)
        if side.artifact.signature_from is not None or side.artifact.borrowed is not None:
            return side
        return side.with_(artifact=replace(side.artifact, signature_from=ref(other)))

    return lend(a, b), lend(b, a)
