"""Stage 8, the verdict — what two replays of an origin op say about its difference.

:mod:`tracer.comparison.isolate` replays each origin alone, on both sides, fed A's captured
inputs. This module reads the two replays next to what each side captured and names the one
cause the evidence supports:

* ``own_error``: the replays differ — the op's kernel computes differently given identical inputs.
* ``weights_differ``: the op is a weight (a variable, a constant, or a read of one) and the two
  sides hold different values for it — nothing computes it, so no kernel differs: the artifacts
  hold different weights (an export that restored a checkpoint's moving averages, another step).
* ``inherited``: the replays agree and the op's inputs differed in the runs — it only passed on
  a difference from upstream.
* ``nondeterministic``: two runs of the *same* computation disagree. Only three things show
  that: the same op with the same settings replayed in two processes, a ``--repeat`` that saw
  the tensor move between whole runs, or a replay that differs from its own side's capture on a
  side where a fresh process alone changes kernels (a GPU without op determinism: cuDNN
  autotuning picks per process).
* ``run_time_rewrite``: the replays agree, a side's replay differs from what that side computed
  inside its whole graph, and the two runs executed the op as different kernels — a rewrite
  applied when the graph ran (Grappler's remapper splits a batch norm whose parameters are
  constants into Mul + Add, so freezing a graph changes what runs although the graph is exact).
* ``batch_statistics``: the replays differ, but the op normalises each row with the statistics of
  its whole batch (a batch norm with ``is_training=True``, or an op its replay computes from a
  reduction over the batch axis: ``tf.nn.moments``' Mean over ``[0, 1, 2]``) and the sides do not normalise over the
  same batch: they group the examples into other runs, or one side is in inference mode (its
  moving averages). Fed identical rows, its output still depends on the rows beside them, so the
  difference is the training graph's batch statistics, not the kernel.
* ``state``: the op is, or reads, a variable that the graph itself writes on every run (a Keras
  random layer's seed state); the replays, which read it as loaded, agree, but the runs read
  what their earlier runs left — different runs before, different values. No kernel is involved.
* ``not_reproduced``: the replays agree although the runs differed at identical inputs, and
  nothing measured tells whether the runs' difference came from the graph around the op or from
  run to run; the detail says which experiment tells (``--repeat 2``).

A replay differs from its side's capture for one of two reasons: the run is not repeatable, or
the op computes differently inside its graph than alone (a fusion, a split, a layout change).
The replay alone cannot tell them apart, so it is read as noise only where one of the
measurements above backs it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..captures.inputs import same_rows
from ..captures.reader import Capture
from ..diff.kinds import kind_of
from ..errors import TftraceError
from ..metrics import TensorMetrics, compare_arrays
from .isolation_plan import PlannedOrigin
from .list_runs import replayed_lists
from ..text import count, listed
from ..opgraph import OpGraph, tensor_op
from ..optypes import loop_result

__all__ = ["IsolationResult", "judge", "executed_form", "per_process_nondeterminism"]


@dataclass
class IsolationResult:
    verdict: str  # one of tracer.comparison.statuses.ISOLATION_VERDICTS
    max_abs: float | None = None
    max_rel: float | None = None
    detail: str = ""
    command: str | None = None
    noise_max_abs: float | None = None  # the larger replay-vs-capture difference of one side (None: not measured)
    load_state: bool = False  # a variable whose value differs from one load of the model to the next
    rel_l2: float | None = None  # ||a-b|| / ||a||: max rel is inflated by near-zero elements
    executed: dict[str, list[str]] | None = None  # run_time_rewrite: each side's kernel(s) for the op in its run
    loop: str | None = None  # the Exit of a while loop the replay recomputed with the op (isolate.loop_above)
    writes: list[str] | None = None  # state: the ops that write the variable the op reads (isolate.variable_writes)
    # ops the replay recomputed with the origin that an export rewrote ({"op", "kind"}: a constant
    # inside a loop body, a While whose body changed): an own error may be theirs (isolate.rewritten_in_replay)
    rewritten: list[dict[str, str]] | None = None
    # "a"/"b": the sides whose replay differed from their own capture (the run may not repeat itself)
    replay_moved: list[str] | None = None
    # not_reproduced: a moved side's further whole runs repeated the op bit for bit (alone it computes otherwise)
    repeated: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "max_abs": self.max_abs, "max_rel": self.max_rel, "rel_l2": self.rel_l2,
                "detail": self.detail, "command": self.command, "noise_max_abs": self.noise_max_abs,
                "load_state": self.load_state, "executed": self.executed, "loop": self.loop,
                "writes": self.writes, "rewritten": self.rewritten, "replay_moved": self.replay_moved,
                "repeated": self.repeated}


def executed_form(capture: Capture, graph: OpGraph, node: str) -> list[str] | None:
    """How ``node`` ran in a capture's instrumented run: its kernel's op type, then the op types
    of the nodes a run-time rewrite added under its name (``bn/Mul`` when a batch norm was split
    into Mul + Add). None when the capture did not record its executed graph."""
    observer = capture.recorded_observer
    executed = observer.executed_nodes_instrumented if observer else None
    if not executed or node not in graph:
        return None
    # the record holds only nodes whose op type differs from the graph's, or that are new
    kernel = str(executed.get(node, graph.op_type(node)))
    added = sorted({str(op) for name, op in executed.items()
                    if name.startswith(node + "/") and name not in graph and op != "Const"})
    return [kernel, *added]


def per_process_nondeterminism(capture: Capture) -> bool:
    """Whether a fresh process alone can change this side's kernels: a GPU run without op
    determinism, where cuDNN autotuning picks algorithms by timing in each process."""
    spec, environment = capture.spec, capture.environment
    knobs = spec.get("knobs") or {}
    on_gpu = str(spec.get("device") or "").startswith("gpu")
    return on_gpu and not knobs.get("determinism") and not environment.get("op_determinism")


Replays = Mapping[str, tuple[np.ndarray, np.ndarray]]  # role -> A's and B's replay of the lists born with an origin


@dataclass(frozen=True)
class _Compared:
    """Two runs of an origin compared: replay against replay, or a side's capture against its replay.
    An origin that holds a detector's lists (``op.detections``) is compared between the detections the
    two runs matched, as its difference between A and B was: its figures are its matched rows', and two
    runs that list the same detections bit for bit in another order agree."""

    metrics: TensorMetrics  # the figures: the matched rows' for lists
    agree: bool  # bit for bit (lists: the same detections, matched rows bit for bit, in whatever order)
    size: float  # what a noise is held against (DetectionList.size)
    changes: int | None = None  # lists: detections that appeared, disappeared or changed class; None: no lists
    identical: bool = True  # bitwise, row by row

    @property
    def words(self) -> str:
        """What the comparison of lists adds to a detail, or ""."""
        if self.changes is None or (self.agree and self.identical):
            return ""
        if self.agree:
            return "compared as detections: the same detections, bit for bit, listed in another order"
        changed = (f"; {count(self.changes, 'detection')} appeared, disappeared or changed class"
                   if self.changes else "")
        return f"compared as detections, between the detections the two runs matched{changed}"


def _compare(x: np.ndarray, y: np.ndarray, op: PlannedOrigin, x_roles: Mapping[str, np.ndarray] | None = None,
             y_roles: Mapping[str, np.ndarray] | None = None) -> _Compared:
    """Two runs of the origin's tensor (``x_roles``/``y_roles``: the lists born with it in each run, for
    an origin that holds a detector's lists; else, or where they cannot be matched, index by index)."""
    m = compare_arrays(x, y)
    listed = (replayed_lists(op.detections, op.a_tensor, x_roles, y_roles)
              if op.detections and x_roles is not None and y_roles is not None else None)
    if listed is None or listed.matched is None:
        return _Compared(m, m.identical, 0.0 if m.identical else m.max_abs)
    agree = m.identical or (not listed.changes and listed.matched.identical)
    return _Compared(listed.matched, agree, listed.size(m), listed.changes, m.identical)


def _run_to_run(capture: Any, side: str, op: PlannedOrigin, replay: np.ndarray, roles: Replays | None
                ) -> _Compared | None:
    """One side's captured value of the origin against its replay on the same inputs (``side``: "a" or
    "b"; ``roles``: the replays of the lists born with it), or None when not measurable."""
    tensor = op.a_tensor if side == "a" else op.b_tensor
    if capture is None or not capture.has(tensor):
        return None
    captured = np.asarray(capture.tensor(tensor))
    if captured.shape != replay.shape:
        return None
    captured_roles = replayed_roles = None
    if roles is not None and op.detections:
        try:
            captured_roles = {role: np.asarray(capture.tensor(entry[f"{side}_tensor"]))
                              for role, entry in op.detections["roles"].items()}
            replayed_roles = {role: pair[0 if side == "a" else 1] for role, pair in roles.items()}
        except (KeyError, TftraceError):
            captured_roles = replayed_roles = None
    return _compare(captured, replay, op, captured_roles, replayed_roles)


def judge(ra: np.ndarray, rb: np.ndarray, op: PlannedOrigin, capture_a: Any, capture_b: Any = None,
          roles: Replays | None = None) -> IsolationResult:
    """The verdict on one origin from its replays ``ra``/``rb`` and the sides' captures.

    ``op`` is the origin as isolation planned it (:class:`~.isolation_plan.PlannedOrigin`): besides
    names and op types, how each side executed it, what ``--repeat`` measured on its tensor, the
    sides whose kernels may change per process, whether the sides ran alike, and the weight it
    is or reads. A plan read from a report made before some of those were recorded holds the
    defaults that judge it without them. ``roles``: where the origin holds a detector's lists
    (``op.detections``), the replays of the lists born with it, by role, which its replays are
    matched by (:class:`_Compared`).
    """
    if op.weight and ra.shape != rb.shape:
        return IsolationResult("weights_differ", detail=f"{_weight_words(op)} have different shapes: {ra.shape} vs "
                                                        f"{rb.shape}; nothing computes them, so no kernel differs")
    if ra.shape != rb.shape and ra.shape[:1] == rb.shape[:1] and same_rows(ra.shape[1:], rb.shape[1:]):
        rb = rb.reshape(ra.shape)  # B has no batch axis: its rows hold A's rows' elements
    if ra.shape != rb.shape:
        return IsolationResult("own_error", detail=f"replayed shapes differ: {ra.shape} vs {rb.shape}")
    c = _compare(ra, rb, op, *((None, None) if roles is None else
                               ({r: v[0] for r, v in roles.items()}, {r: v[1] for r, v in roles.items()})))
    m = c.metrics
    runs = {"A": _run_to_run(capture_a, "a", op, ra, roles)}
    if op.inputs_identical:
        runs["B"] = _run_to_run(capture_b, "b", op, rb, roles)
    measured = {side: r.size for side, r in runs.items() if r is not None}
    replay_noise = max(measured.values()) if measured else None
    noisy = [side for side, v in measured.items() if v > 0]
    moved_text = "; ".join(f"{side}'s replay differs from {side}'s captured value by up to {measured[side]:.3g}"
                           + (f" ({runs[side].words})" if runs[side].words else "") for side in noisy)

    def result(verdict: str, detail: str, **extra: Any) -> IsolationResult:  # with the replays' metrics and noise
        return IsolationResult(verdict, m.max_abs, m.max_rel, detail + (f" ({c.words})" if c.words else ""),
                               noise_max_abs=replay_noise, rel_l2=m.rel_l2 if m.kind == "float" else None,
                               loop=op.loop, rewritten=[dict(r) for r in op.rewritten] or None,
                               replay_moved=[side.lower() for side in noisy] or None, **extra)

    if op.writes and c.agree and noisy:
        return result("state", _state_detail(list(op.writes), moved_text), writes=list(op.writes))
    if op.reads_variable and noisy and not op.writes:  # a variable the runs write: they moved it, not the load
        return result(
            "nondeterministic",
            f"the variable's value changes from one load of the model to the next ({moved_text}): it is set when the "
            "model loads (an initialiser that runs at load time, e.g. for a variable the checkpoint does not hold), "
            "not computed by a kernel and not changed by an export", load_state=True)
    if op.weight and not m.identical:
        rel_l2 = f", rel L2 {m.rel_l2:.3g}" if m.kind == "float" else ""
        return result("weights_differ", f"{_weight_words(op)} differ by up to {m.max_abs:.3g} (rel {m.max_rel:.3g}"
                                        f"{rel_l2}); nothing computes them, so no kernel differs: the two artifacts "
                                        "hold different weights")
    repeat_noise = op.repeat_noise  # what --repeat measured on this tensor; None: not measured
    repeated = [side for side in noisy if side.lower() in op.repeated]  # its further whole runs repeated it
    per_process = [side for side in noisy if side.lower() in op.per_process and side not in repeated]
    noise_is_shown = bool(repeat_noise) or bool(per_process)
    if c.agree and noisy:
        verdict, detail, extra = _agreeing_yet_moved(op, moved_text, repeat_noise, per_process, repeated)
        return result(verdict, detail, **extra)
    if c.agree and op.inputs_identical:
        return result("not_reproduced", "the captured runs differ here although this op's inputs were bitwise "
                                        "identical, yet its replays on those inputs agree bit for bit: the "
                                        "difference came from the runs, not from this op's kernel (run-to-run "
                                        "nondeterminism, or the op computed differently inside the whole graph); "
                                        "`--repeat 3` measures the noise of every tensor")
    if c.agree:
        return result("inherited", "given A's inputs, B's kernel computes A's result bit for bit: the difference "
                                   "is inherited")
    return result(*_differing(op, c, moved_text if noisy else "", noise_is_shown, replay_noise))


def _agreeing_yet_moved(op: PlannedOrigin, moved_text: str, repeat_noise: float | None,
                        per_process: list[str], repeated: list[str] = ()) -> tuple[str, str, dict[str, Any]]:
    """Both sides' replays agree bit for bit, and a side's replay differs from its own capture:
    a rewrite at run time, run-to-run noise where it was measured, or, without a measurement, not
    reproduced. ``repeated``: the moved sides whose further whole runs repeated the op bit for bit
    (run t on the H200: 4 runs of B agreed, its replay alone did not), which are no longer taken to
    change from process to process. Returns the verdict, its detail and what the result records besides."""
    rewritten = _rewritten_at_run_time(op)
    if rewritten:
        return ("run_time_rewrite", f"{rewritten}; {moved_text}, while both sides' replays agree bit for bit: the "
                                    "rewrite made the difference, not the op's kernel and not run-to-run noise",
                {"executed": dict(op.executed)})
    if repeat_noise:
        return ("nondeterministic", f"replayed alone on identical inputs, both sides compute the same result, and the "
                                    f"op's result changes from run to run: `--repeat` measured up to "
                                    f"{repeat_noise:.3g} on this tensor ({moved_text})", {})
    if repeated and not per_process:
        who = " and ".join(repeated)
        why = ("the algorithm picked for it: cuDNN autotuning picks per process and context, which `--autotune off` "
               "tells" if any(side.lower() in op.per_process for side in repeated) else
               "a rewrite at run time that the executed graph does not name")
        return ("not_reproduced", f"replayed alone on identical inputs, both sides compute the same result, but "
                                  f"{moved_text}, while {who}'s whole-model runs, run more for this, repeated it bit for "
                                  "bit: alone in a fresh process the op computes other numbers than inside the whole "
                                  f"model, where it did not change from run to run ({why}); not this op's kernel, and "
                                  "not shown to be run-to-run noise", {"repeated": True})
    if per_process:
        return ("nondeterministic", f"replayed alone on identical inputs, both sides compute the same result, but the "
                                    f"op's result changes from one process to the next on the GPU ({moved_text}): "
                                    "the difference is run-to-run nondeterminism, not this op's kernel", {})
    if repeat_noise == 0:
        return ("not_reproduced", f"replayed alone on identical inputs, both sides compute the same result "
                                  f"({moved_text}), and `--repeat` measured no run-to-run noise on this tensor: the op "
                                  "computed differently inside its whole graph than alone (a rewrite at run time "
                                  "that the executed graph does not name)", {})
    return ("not_reproduced", f"replayed alone on identical inputs, both sides compute the same result, but "
                              f"{moved_text}: either the op computed differently inside its whole graph than alone (a "
                              "Grappler or oneDNN rewrite at run time) or it changes from run to run; `--repeat 2` "
                              "tells which", {})


def _differing(op: PlannedOrigin, c: _Compared, moved_text: str, noise_is_shown: bool,
               replay_noise: float | None) -> tuple[str, str]:
    """The replays differ given identical inputs: run-to-run noise where the same op with the same
    settings did it or a measured noise covers it, the batch it normalises over where the sides do
    not share it (:func:`_unshared_batch`), else the op's own error. ``moved_text`` says which side's
    replay moved from its capture ("" where none did)."""
    m = c.metrics
    if op.same_op_same_settings:
        return ("nondeterministic",
                f"the same {op.a_op or 'op'} with the same settings on identical inputs gives results that "
                f"differ by up to {m.max_abs:.3g} between processes: only run-to-run nondeterminism does that"
                + (f" ({moved_text})" if moved_text else ""))
    if noise_is_shown and replay_noise and c.size <= replay_noise:
        return ("nondeterministic", f"given identical inputs the sides' results differ by up to {m.max_abs:.3g}, no "
                                    f"more than the op moves from run to run on one side ({moved_text})")
    rel_l2 = f", rel L2 {m.rel_l2:.3g}" if m.kind == "float" else ""
    by = f"by up to {m.max_abs:.3g} (rel {m.max_rel:.3g}{rel_l2})"
    batches = _unshared_batch(op)
    verdict = "batch_statistics" if batches else "own_error"
    detail = (f"{batches}: fed the same rows, the replays differ {by}, as each row's output depends on the rows that "
              "share its batch (the training graph's batch statistics)" if batches
              else f"given identical inputs, {_b_computation(op)} {by}")
    if moved_text:
        detail += (f"; beyond its run-to-run noise ({moved_text})" if noise_is_shown
                   else f"; its replay also differs from its own capture ({moved_text})")
    return verdict, detail


def _unshared_batch(op: PlannedOrigin) -> str:
    """How the sides fail to normalise the op's rows over the same batch, in words, or "" where they
    do (or it normalises by no batch): an op that normalises with its whole batch's statistics (a batch
    norm in training mode, or an op its replay computes from a reduction over the batch axis) on both
    sides that group the examples into different runs, or on one side only (the other normalises with
    its moving averages)."""
    op_type = op.a_op or op.b_op
    above = [name for name in op.batch_ops if name not in (op.node, tensor_op(op.b_tensor))]
    if above:  # tf.nn.moments' Mean over the batch axis, which the replay recomputes with the op
        shown = listed(above, 2, "`")
        what = (f"computed from statistics over the batch it runs in ({shown}: a reduction over the batch axis, "
                "which its replay recomputes)")
        if len(op.batch_statistics) == 1:
            side = op.batch_statistics[0].upper()
            return f"{side}'s {op_type} is {what}, {'B' if side == 'A' else 'A'}'s takes no batch statistics there"
        if op.batched_alike is False:
            return f"the sides batch the examples differently, and both sides' {op_type} is {what}"
        return ""
    if len(op.batch_statistics) == 1:
        side = op.batch_statistics[0].upper()
        return (f"{side}'s {op_type} normalises each row with the statistics of the batch it runs in (is_training="
                f"True), {'B' if side == 'A' else 'A'}'s with its moving averages (is_training=False)")
    if op.batch_statistics and op.batched_alike is False:
        return (f"the sides batch the examples differently, and both sides' {op_type} normalise each row with the "
                "statistics of the batch it runs in (is_training=True)")
    return ""


def _state_detail(writes: list[str], moved_text: str) -> str:
    """Why a variable the model writes differs between runs, with the measurements that show it."""
    more = f" and {len(writes) - 1} more" if len(writes) > 1 else ""
    return (f"the variable is the model's own state: the graph writes it on every run (`{writes[0]}`{more}), so a "
            f"run reads what the runs before it left. Replayed in fresh processes, both sides read the same value, "
            f"but {moved_text}: the sides' earlier runs left different states (a different number of runs, or "
            "other inputs, before the ones captured). No kernel, input or export makes this difference")


def _weight_words(op: PlannedOrigin) -> str:
    """What the two sides hold for a weight origin, in words: the variable's loaded values (read
    by this op, where the origin is its read) or the constant's values."""
    weight = str(op.weight)
    read = "" if weight == tensor_op(op.a_tensor) else ", which this op reads,"
    if op.reads_variable:
        return f"the values A and B load into the variable `{weight}`{read}"
    return f"the values A's and B's graphs hold in the constant `{weight}`{read}"


def _rewritten_at_run_time(op: PlannedOrigin) -> str:
    """The sentence saying how the two runs executed the op differently, or "" when they did
    not, or when the sides ran with different settings (then different kernels are the
    settings' doing: oneDNN on one side only, CPU against GPU). Sides that differ only in their
    TensorFlow build (``--python``) are judged alike: replayed alone each build computes the same,
    so the different kernels are a rewrite when the graph ran, of the builds' Grappler or of the
    graphs' difference, which :func:`tracer.causes.explain_comparison` tells apart."""
    a, b = op.executed.get("a"), op.executed.get("b")
    if not op.alike_but_build or not a or not b or a == b:
        return ""
    def ran(form: list[str]) -> str:
        return " + ".join(form) if len(form) > 1 else form[0]
    return (f"inside their whole graphs the two runs executed this op differently: A as {ran(a)}, B as {ran(b)} "
            "(a Grappler rewrite at run time; `--grappler remapping=off` on both sides is the first experiment)")


def _b_computation(op: PlannedOrigin) -> str:
    """What differs: B's kernel for the same op, or what an export rewrite put in its place
    (e.g. A's MatMul is B's Cast back from a bfloat16 MatMul: B's replay runs all of it)."""
    a_op, b_op = op.a_op, op.b_op  # a_op: None in the plan of a report made before it was recorded
    group = op.group
    if group:
        what = getattr(kind_of(group["kind"]), "group", None) or "fused op"
        inputs = ", ".join(f"`{t}`" for t in group.get("a_inputs", [])) or "the same inputs"
        return (f"B's {what} (`{tensor_op(op.b_tensor)}`, {op.b_op}, with the ops between it and its inputs) "
                f"differs from A's {a_op} and the {count(len(group['a_members']), 'op')} {what.split()[0]} into it "
                f"(from `{group['a_members'][0]}`), both replayed whole from the group's inputs ({inputs})")
    if loop_result(a_op or "") and op.b_op == a_op:
        return (f"B's while loop {loop_result(a_op)} (replayed whole: a session cannot fetch the ops inside a loop) "
                "differs from A's")
    if op.loop and a_op in (None, op.b_op):
        return (f"B's {op.b_op}, with the while loop above it (ending at `{op.loop}`, replayed whole: a session "
                "cannot fetch the ops inside a loop, and nothing between them was compared), differs from A's")
    if a_op in (None, op.b_op):
        return f"B's {op.b_op} kernel differs from A's"
    return (f"B's replacement for it (`{tensor_op(op.b_tensor)}`, {op.b_op}, with the ops between it and "
            f"those inputs) differs from A's {a_op}")
