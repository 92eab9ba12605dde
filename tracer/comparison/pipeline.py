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
from ..captures.launcher import PreparedChild
from ..captures.launcher import capture as capture_side
from ..captures.reader import Capture, is_capture_dir
from .divergence import Divergence, NodeResult, Tolerance, classify
from ..errors import TftraceError
from ..diff.records import GraphDiff
from ..diff.rewrites import diff_graphs
from .detections import detection_verdicts, detections_of
from .isolate import IsolationResult, isolate_origins, load_state_variables
from ..metrics import TensorMetrics, compare_arrays
from ..interpreter import made_with
from ..runspec import InputSpec, Side
from ..safewrite import claim, output_directory
from .measure import pair_metrics, plain_output_metrics, value_source
from .pairing import (apply_signature_map, examples_digest, examples_of_a_given_capture, inputs_from, is_capture,
                      one_input_each, require_pairable, require_same_examples)
from .statuses import BORN_HERE, VERDICTS

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

    @property
    def verdict(self) -> str:
        """The worse of the op-by-op verdict (the instrumented runs) and the plain outputs' one:
        a difference observation hides is still a difference in production."""
        return max(self.divergence.verdict, self.outputs_verdict, key=VERDICTS.index)

    @property
    def outputs_verdict(self) -> str:
        """The verdict of the plain runs' outputs alone ("identical" when none were compared)."""
        found = "identical"
        as_detections = detection_verdicts(self.detections)  # a detector's outputs: judged as detections
        for verdict in as_detections.values():
            found = max(found, verdict, key=VERDICTS.index)
        for key, m in self.plain_outputs.items():
            if key in as_detections:
                continue
            atol, rtol = self.tolerance.for_tensor(self.view_a.graph.outputs.get(key, key))
            noise = self.noise_per_output.get(key, 0.0)
            here = ("identical" if m.identical else "within_tolerance" if m.within(atol, rtol)
                    else "within_noise" if 0 < m.max_abs <= noise and not (m.nan_mismatch or m.inf_mismatch)
                    else "diverged")
            found = max(found, here, key=VERDICTS.index)
        return found

    def __bool__(self) -> bool:
        return self.verdict != "diverged"

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
) -> Capture:
    """A capture directory is opened; an artifact (or a Side) is captured into ``out_dir/captures/name``
    (by ``prepared``, its child started ahead by :func:`prepare_ahead`, when given; ``on_event``
    hears the capture child's events; ``read_memory``: --max-memory, the most one decode of a
    given capture directory may inflate)."""
    if isinstance(target, str):
        if is_capture_dir(target):
            return Capture.open(target, max_memory=read_memory)
        if os.path.isdir(os.path.join(target, "tensors")) and not os.path.exists(os.path.join(target, "saved_model.pb")):
            Capture.open(target)  # raises the "incomplete capture" error
        from ..artifacts.loader import ArtifactRef  # noqa: PLC0415

        target = Side(ArtifactRef(target), allow_unsafe_ops=allow_unsafe_ops)
    if shared_inputs is not None:
        target = replace(target, inputs=shared_inputs)
    claim(out_dir, ["captures"])  # before it exists: --force after a killed run may delete it
    return capture_side(target, out_dir / "captures" / name, force=True, console=console, prepared=prepared,
                        on_event=on_event)


# A side's child started ahead holds TensorFlow and the model's weights while the other side is
# captured: done only when both sides' --max-memory and this much more fit in what is available.
PREPARE_HEADROOM = 1 << 30


def prepare_ahead(target: str | Side, other: str | Side, allow_unsafe_ops: bool) -> PreparedChild | None:
    """Start ``target``'s capture child now, to import TensorFlow and load its model while
    ``other`` is captured (its examples, ``other``'s, are known only then), when it is to be
    captured here and memory allows both at once; None otherwise (captured after, as before)."""
    if is_capture(target) or (isinstance(target, str) and os.path.isdir(os.path.join(target, "tensors"))):
        return None
    from ..artifacts.loader import ArtifactRef  # noqa: PLC0415

    side = target if isinstance(target, Side) else Side(ArtifactRef(target), allow_unsafe_ops=allow_unsafe_ops)
    other_memory = other.max_memory if isinstance(other, Side) else Side.max_memory
    if _available_memory() < side.max_memory + other_memory + PREPARE_HEADROOM:
        return None
    return PreparedChild(side, prepare=True)


def _available_memory() -> int:
    """Bytes the kernel says new work can use (MemAvailable); 0 where it does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


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
    repeat: int = 1,
    allow_unsafe_ops: bool = False,
    keep_captures: bool = False,
    detections: dict[str, Any] | None = None,
    read_memory: int | None = None,
) -> Iterator[Comparison]:
    """Capture (or open) both sides, align, measure, find where they diverge, isolate; yield the
    :class:`Comparison` while ``out_dir`` is still this run's, so the caller writes the report
    into it (``with comparing(...) as c: report_comparison(c)``) before another run may.

    ``out_dir`` is locked for this run (a second run into it exits 2 naming this one's pid),
    and ``force`` replaces only what tftrace recorded writing there (:mod:`tracer.safewrite`).
    """
    out = Path(out_dir).absolute()
    with output_directory(out, force, "report"):
        yield _compare(a, b, out, tolerance=tolerance, isolate=isolate, console=console, command=command,
                       signature_map=signature_map, repeat=repeat, allow_unsafe_ops=allow_unsafe_ops,
                       keep_captures=keep_captures, detections=detections,
                       read_memory=read_memory)


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
    repeat: int,
    allow_unsafe_ops: bool,
    keep_captures: bool,
    detections: dict[str, Any] | None = None,
    read_memory: int | None = None,
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
    ahead: dict[str, PreparedChild | None] = {}

    def start_b(_event: dict[str, Any]) -> None:  # A's child is up: B's imports TF and loads while A captures
        if "b" not in ahead:
            ahead["b"] = prepare_ahead(b, a, allow_unsafe_ops)

    try:
        from_b = examples_of_a_given_capture(a, b, out, signature_map or {})
        cap_a = open_or_capture(a, out, "a", console=console, allow_unsafe_ops=allow_unsafe_ops, on_event=start_b,
                                shared_inputs=from_b, read_memory=read_memory)
        prepared_b = ahead.get("b")
        shared = inputs_from(cap_a, out, signature_map or {}) if not is_capture(b) else None
        try:
            cap_b = open_or_capture(b, out, "b", console=console, shared_inputs=shared,
                                    allow_unsafe_ops=allow_unsafe_ops, prepared=prepared_b, read_memory=read_memory)
        except TftraceError as exc:
            if shared is None or not any(t in exc.problem for t in ("the signature expects", "holds one array")):
                raise
            raise TftraceError(
                f"the two signatures cannot be paired: B cannot take A's examples ({exc.problem})",
                "map keys with --map A_KEY=B_KEY[,...], or choose matching signatures with --a-signature/--b-signature",
            ) from exc
    finally:
        if ahead.get("b") is not None:
            ahead["b"].cancel()  # its job never came (A failed), or it is over: nothing is left running
    view_a, view_b = CaptureView(cap_a), CaptureView(cap_b)
    signature_map = signature_map or one_input_each(view_a, view_b)
    apply_signature_map(view_a, view_b, signature_map)
    require_pairable(view_a, view_b)
    require_same_examples(view_a, view_b)
    diff = diff_graphs(
        view_a.graph, view_b.graph, value_source(cap_a, view_a), value_source(cap_b, view_b),
        a_inlined_by_loader=cap_a.manifest.get("artifact", {}).get("inlined_by_loader", False),
        b_inlined_by_loader=cap_b.manifest.get("artifact", {}).get("inlined_by_loader", False),
    )
    alignment = align(view_a, view_b, diff)
    tolerance = tolerance or Tolerance()
    metrics = pair_metrics(cap_a, cap_b, alignment, tolerance)
    noise = _noise(a, b, cap_a, cap_b, alignment, out, repeat, console, signature_map or {})
    divergence = classify(view_a.graph, alignment, metrics, tolerance, noise.per_tensor)
    top = to_isolate(divergence, isolate)
    if top:
        claim(out, ["work"])
    isolation = isolate_origins(top, alignment, view_a, view_b, str(out / "work"), console,
                                allow_unsafe_ops=permits, repeat_noise=noise.known(alignment)) if top else {}
    _drop_load_state(diff, alignment, load_state_variables(isolation, view_a.graph))
    # An origin where the difference is born (its own kernel, its weights) outranks one that only inherited.
    own = {name for name, iso in isolation.items() if iso.verdict in BORN_HERE}
    divergence.origins.sort(key=lambda r: r.name not in own)
    made_here = out / "captures"
    kept = {key: keep_captures or not _inside(cap.path, made_here) for key, cap in (("a", cap_a), ("b", cap_b))}
    comparison = Comparison(view_a, view_b, diff, alignment, metrics, divergence, tolerance, isolation, out, command,
                            noise=noise.summary, noise_per_tensor=noise.per_tensor, noise_per_output=noise.per_output,
                            kept_captures=kept,
                            plain_outputs=plain_output_metrics(view_a, view_b, metrics, tolerance, signature_map or {}),
                            examples_digests={"a": examples_digest(view_a), "b": examples_digest(view_b)},
                            detections=detections_of(view_a, view_b, tolerance, signature_map or {}, detections))
    if not keep_captures and made_here.is_dir():
        shutil.rmtree(made_here)  # before the report: a report.json present means the directory is as it stays
    return comparison


def _drop_load_state(diff: GraphDiff, alignment: Alignment, loaded: set[str]) -> None:
    """The same weights loaded twice came out different (``loaded``: variables set at load, and
    their reads): not a change of the weights, so no const_changed, and their ops sit in none."""
    dropped = [r for r in diff.rewrites if r.kind == "const_changed" and set(r.a_nodes) <= loaded]
    diff.rewrites[:] = [r for r in diff.rewrites if r not in dropped]
    for op in (op for r in dropped for op in r.a_nodes):
        node = alignment.nodes.get(op)
        if node is not None and node.rewrite == "const_changed":
            node.rewrite = None


def to_isolate(divergence: Divergence, count: int) -> list[NodeResult]:
    """The origins to replay (``--isolate N``): the first divergence (bitwise, then beyond
    tolerance) and then the top-ranked origins, N in all. The first divergence is the op every
    summary names first, so its verdict must be there even when others differ more."""
    firsts = [r for r in (divergence.first_bitwise, divergence.first_beyond_tolerance) if r is not None]
    chosen = {r.name: r for r in [*firsts, *divergence.origins] if r.metrics is not None}
    return list(chosen.values())[: max(0, count)]


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


@dataclass
class _Noise:
    per_tensor: dict[str, float]  # A tensor -> the larger run-to-run max |diff| of the two sides
    summary: dict[str, Any] | None
    per_output: dict[str, float] = field(default_factory=dict)  # A's signature key -> the same, plain outputs

    def known(self, alignment: Alignment) -> dict[str, float] | None:
        """A tensor -> its measured run-to-run noise, 0.0 included where both sides were repeated
        and it did not move; None when ``--repeat`` did not run. A tensor absent is not known."""
        if not self.summary:
            return None
        if all("max_abs" in (self.summary.get(key) or {}) for key in ("a", "b")):
            return {p.a: self.per_tensor.get(p.a, 0.0)
                    for n in alignment.nodes.values() for p in n.tensors if p.comparable and p.a}
        return {name: v for name, v in self.per_tensor.items() if v > 0}  # one side only: a zero is half a measure


def _noise(
    a: str | Side, b: str | Side, cap_a: Capture, cap_b: Capture, alignment: Alignment, out: Path, repeat: int,
    console: Console, signature_map: dict[str, str],
) -> _Noise:
    """``--repeat K``: capture each side K-1 more times, in fresh processes, and measure how much
    every tensor moves by itself. Sides given as capture directories cannot be repeated here."""
    if repeat <= 1:
        return _Noise({}, None)
    per_tensor: dict[str, float] = {}
    per_output: dict[str, float] = {}
    a_keys = {b_key: a_key for a_key, b_key in signature_map.items()}  # B's output key -> A's (--map)
    summary: dict[str, Any] = {"repeats": repeat}
    for name, target, base in (("a", a, cap_a), ("b", b, cap_b)):
        if is_capture(target):
            summary[name] = {"skipped": "given as a capture directory: re-run it to measure its noise"}
            continue
        side = Side.from_json(base.manifest["spec"])  # exactly what ran, the examples included; the permission
        side = side.with_(allow_unsafe_ops=isinstance(target, Side) and target.allow_unsafe_ops,  # is not recorded
                          python=made_with(base.path))  # nor the interpreter: the one that captured it here
        worst, noisy = 0.0, 0
        for i in range(1, repeat):
            claim(out, ["captures"])
            again = capture_side(side, out / "captures" / f"{name}_repeat{i}", force=True, console=console)
            for node in alignment.nodes.values():
                for pair in node.tensors:
                    own = pair.a if name == "a" else pair.b
                    if not pair.comparable or own is None or not again.has(own):
                        continue
                    m = compare_arrays(base.tensor(own), again.tensor(own))
                    if not m.identical:
                        noisy += 1
                        per_tensor[pair.a] = max(per_tensor.get(pair.a, 0.0), m.max_abs)
                        worst = max(worst, m.max_abs)
            for key in base.manifest["graph"]["outputs"]:  # the plain runs' outputs move by themselves too
                first, later = base.plain_output(key), again.plain_output(key)
                if first is not None and later is not None and first.shape == later.shape:
                    m = compare_arrays(first, later)
                    moved = 0.0 if m.identical else m.max_abs
                    a_key = key if name == "a" else a_keys.get(key, key)
                    per_output[a_key] = max(per_output.get(a_key, 0.0), moved)
        summary[name] = {"max_abs": worst, "tensors_that_moved": noisy}
    return _Noise(per_tensor, summary, per_output)



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
