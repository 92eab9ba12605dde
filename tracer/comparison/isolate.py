"""Stage 8 — does an origin op's own kernel differ, given identical inputs?

For each origin, both sides replay the op alone with **A's captured inputs** fed to both
(:mod:`tracer.captures.isolate_worker`, one child per side, in that side's environment). If the
two replays still differ, the kernel itself computes differently (``own_error``: a different
algorithm, precision, or batch-dependent blocking), unless the op normalises each row with its
whole batch's statistics (a batch norm in training mode) and the sides do not share that batch
(``batch_statistics``); if they agree, the op only inherited a difference too small to judge at
its inputs (``inherited``).

Each replay is also a second run of the op, in a fresh process, on inputs its side already
computed once; :mod:`tracer.comparison.judge` reads the replays next to the captures and names
the verdict (own error, inherited, nondeterministic, rewritten at run time, not reproduced).
Beside each origin the index records what that judgement needs besides the replays: how each
side's run executed the op, what ``--repeat`` measured on its tensor, and whether a fresh
process alone can change a side's kernels (a GPU without op determinism).

B's inputs are found by walking up from B's tensor to the nearest B tensors paired with A
tensors, so a rewritten region (a cast-wrapped MatMul, a folded conv) is replayed whole.
An origin that stands for a rewrite *group* (a folded batch norm: A's conv + batch norm against
B's conv with rescaled weights + bias; a fused chain against its fused op) is replayed from the
group's own data inputs on both sides: its members are paired only to be shown, never to be
fed, because a fold legitimately changes them (A's unscaled conv output fed to B's bias add
would compare a scaled convolution with an unscaled one).
When a side's model is not on this machine (captured on the GPU server), its replay is not run
here; the report carries the ``tftrace isolate`` command that runs it there, and the A tensors
the replays are fed (``work/feeds``, a small capture directory), so the report directory alone
is what travels.

A replay runs part of a graph in a way the model never ran, and TensorFlow may refuse it where
the whole graph works; a replay is an extra, so that costs only the verdict of the origins it
was replaying (``not_replayed``, with TensorFlow's one-line reason), never the report.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from .align import Alignment, CaptureView
from .detection_lists import DetectionList
from .list_runs import companions
from ..captures.launcher import ChildCrashed, PreparedChild, isolation_ahead, run_child
from ..captures.reader import Capture
from ..text import count
from ..captures.replay_records import failure, record_failure, replay_path
from .divergence import NodeResult
from .isolation_plan import RECEIVED_FIX, IsolationPlan, PlannedOrigin
from .judge import IsolationResult, executed_form, judge, per_process_nondeterminism
from ..artifacts.kinds import exists_here
from ..errors import TftraceError
from ..pythons import made_with
from ..captures.inputs import batched_alike
from ..jsonvalues import dumps, loads
from ..opgraph import OpGraph, tensor_op, weight_of, weight_reads
from .replay_plan import (loop_above, origin_feeds, reads_variable, replay_plan, replayed_alone_alike, replayed_ops,
                          rewritten_in_replay, variable_writes)
from ..runspec import Side, spec_without_permissions
from ..safewrite import refuse_links_within, write_file
from ..training import replay_coupled

__all__ = ["IsolationResult", "isolate_origins", "run_job", "evaluate", "judge_again", "isolate_remote", "same_run_settings",
           "load_state_variables"]

def isolate_origins(
    origins: list[NodeResult],
    alignment: Alignment,
    view_a: CaptureView,
    view_b: CaptureView,
    workdir: str,
    console: Any = None,
    *,
    allow_unsafe_ops: dict[str, bool],
    repeat_noise: dict[str, float] | None = None,
    lists: Mapping[str, DetectionList] | None = None,
    first: PreparedChild | None = None,
) -> dict[str, IsolationResult]:
    """Plan the replays of both sides, run those whose model is on this machine, evaluate.

    Every job is also written to ``workdir/isolation_<side>.job.json``: a side whose model is
    elsewhere is replayed there by ``tftrace isolate MODEL --from REPORT_DIR``. Whether a side's
    replay may run unsafe ops is ``allow_unsafe_ops[side]``, decided by this command: a capture
    (perhaps made elsewhere) records its own flag, and that record is never trusted.
    ``repeat_noise`` is what ``--repeat`` measured per A tensor (None: no repeat ran). ``lists``: the
    tensors holding a detector's lists of detections, judged between matched detections: an origin among
    them is replayed with the lists born beside it, and its replays are compared so too (:func:`_with_lists`).
    ``first``: the first local side's child, started ahead (its caller's to stop if unused).
    """
    if not origins:
        return {}
    os.makedirs(workdir, exist_ok=True)
    to_a = {"a": {p.a: p.a for n in alignment.nodes.values() for p in n.tensors if p.comparable},
            "b": alignment.b_to_a()}
    planned: list[PlannedOrigin] = []
    ops: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    captures = {"a": view_a.capture, "b": view_b.capture}
    same_settings = same_run_settings(captures["a"], captures["b"])
    same_but_build = same_run_settings(captures["a"], captures["b"], build=False)
    per_process = tuple(key for key, capture in captures.items() if per_process_nondeterminism(capture))
    batched = batched_alike(captures["a"].manifest, captures["b"].manifest)
    next_id = len(origins)  # the ids of the lists fetched with an origin, after the origins'
    for i, result in enumerate(origins):
        node = alignment.nodes[result.name]
        pair = next(p for p in node.tensors if p.a == result.tensor)
        assert pair.b is not None
        b_name = tensor_op(pair.b)
        plans, group = origin_feeds(alignment, {"a": view_a.graph, "b": view_b.graph}, result.name,
                                    {"a": result.tensor, "b": pair.b}, to_a)
        # the ops its replay runs that normalise by batch (a batch norm in training mode, tf.nn.moments' Mean over
        # the batch axis): fed identical rows, the replay still depends on the rows beside them
        coupled = {key: replay_coupled(graph, replayed_ops(graph, fetch, plans[key])) for key, graph, fetch in (
            ("a", view_a.graph, result.tensor), ("b", view_b.graph, pair.b))}
        planned.append(PlannedOrigin(
            id=i, node=result.name, a_tensor=result.tensor, b_tensor=pair.b,
            a_op=view_a.graph.op_type(result.name), b_op=view_b.graph.op_type(b_name),
            # B's captured value is B's op on A's inputs only when those inputs were bitwise A's
            inputs_identical=result.bitwise_origin,
            reads_variable=reads_variable(view_a.graph, result.name),
            writes=tuple(variable_writes(view_a.graph, result.name)),
            # a weight's value is loaded, never computed: its difference is no kernel's (on both sides: B
            # may compute A's weight, a cast of it in a mixed-precision export)
            weight=weight_of(view_a.graph, result.name) if weight_of(view_b.graph, b_name) is not None else None,
            executed={"a": executed_form(captures["a"], view_a.graph, result.name),
                      "b": executed_form(captures["b"], view_b.graph, b_name)},
            same_settings=same_settings, same_settings_but_build=same_but_build, per_process=per_process,
            repeat_noise=None if repeat_noise is None else repeat_noise.get(result.tensor),
            same_op_same_settings=same_settings and not node.rewrite
            and replayed_alone_alike(view_a.graph, view_b.graph, result.name, b_name, plans),
            loop=loop_above(view_a.graph, result.tensor, plans["a"]),
            rewritten=tuple(rewritten_in_replay(alignment, view_a.graph, result, plans["a"])),
            group=group, batch_statistics=tuple(key for key in ("a", "b") if coupled[key]),
            batch_ops=tuple(coupled["a"] or coupled["b"]), batched_alike=batched))
        detections, jobs = _with_lists(i, next_id, result.tensor, pair.b, plans, alignment, view_a.graph,
                                       view_b.graph, to_a, lists or {})
        if detections is not None:
            planned[-1] = replace(planned[-1], detections=detections)
            next_id += len(detections["roles"]) - 1
        for key, fetch in (("a", result.tensor), ("b", pair.b)):
            ops[key].append({"id": i, "a_tensor": result.tensor, "fetch": fetch, **jobs[key]})
    feeds_dir = write_feeds(view_a.capture, ops, os.path.join(workdir, FEEDS))
    plan = IsolationPlan(str(view_a.capture.path), str(view_b.capture.path), FEEDS, tuple(planned))
    _write_json(os.path.join(workdir, INDEX), plan.to_json())
    jobs: dict[str, dict[str, Any]] = {}
    for key, view in (("a", view_a), ("b", view_b)):
        spec = spec_without_permissions(view.capture.spec)  # decided by whoever runs the job
        jobs[key] = {"mode": "isolate", "side": spec, "feeds_from": feeds_dir,
                     # the release the side ran: a replay under another one is refused op by op (isolate_worker)
                     "tensorflow": view.capture.environment.get("tensorflow"),
                     "ops": ops[key], "runs": [list(r) for r in view.capture.runs],
                     "count": view.capture.examples.count, "out_dir": os.path.join(workdir, f"isolation_{key}")}
        _write_json(os.path.join(workdir, f"isolation_{key}.job.json"), jobs[key])
    _run_local_jobs(jobs, {"a": view_a, "b": view_b}, console, allow_unsafe_ops, first)
    return evaluate(workdir, plan, view_b.capture)


def replay_side(capture: Capture, allow_unsafe_ops: bool) -> Side:
    """The side a child on this machine replays ``capture``'s origins as (what :func:`run_job` runs
    its job as), known before any origin is: so a child can load its model ahead."""
    return job_run_side({"side": spec_without_permissions(capture.spec)}, allow_unsafe_ops=allow_unsafe_ops,
                        python=made_with(capture.path))


def replays_local(view: CaptureView) -> bool:
    """Whether this machine has the model ``view``'s side was captured from (its replays run here)."""
    return _local_side(view) is not None


def _run_local_jobs(jobs: dict[str, dict[str, Any]], views: dict[str, CaptureView], console: Any,
                    allow_unsafe_ops: dict[str, bool], first: PreparedChild | None = None) -> None:
    """Each side's replays whose model is on this machine, A's then B's; B's child loads its model
    while A's replays run (where memory holds both), as compare's side B does while A is captured.
    ``first``: the first side's child, already loading (started while the noise was measured)."""
    local = [key for key in ("a", "b") if replays_local(views[key])]
    pythons = {key: made_with(views[key].capture.path) for key in local}
    sides = {key: replay_side(views[key].capture, allow_unsafe_ops[key]) for key in local}
    ahead: PreparedChild | None = first
    try:
        for n, key in enumerate(local):
            child, ahead = ahead, None
            if n + 1 < len(local):
                ahead = isolation_ahead(sides[local[n + 1]], sides[key].max_memory)
            run_job(jobs[key], console=console, allow_unsafe_ops=allow_unsafe_ops[key], python=pythons[key],
                    child=child)
    finally:
        if ahead is not None:
            ahead.cancel()  # A's replays ended in an error: B's never run


def _with_lists(i: int, next_id: int, a_tensor: str, b_tensor: str, plans: dict[str, dict[str, str]],
                alignment: Alignment, graph_a: OpGraph, graph_b: OpGraph, to_a: dict[str, dict[str, str]],
                lists: Mapping[str, DetectionList]) -> tuple[dict[str, Any] | None, dict[str, dict[str, Any]]]:
    """The plan's ``detections`` of origin ``i`` and each side's job fields (``feeds``, and ``with``: the
    lists fetched in the same runs), where it holds a detector's lists and is where they are born
    (:func:`~tracer.comparison.list_runs.companions`): its replays, compared row k against row k, would
    read two detections NMS listed in another order as a box off by its size. None, and its own feeds
    alone, where it is not, or where a list's feeds would change what the origin's replay computes."""
    plain = {key: {"feeds": plans[key]} for key in ("a", "b")}
    listed = lists.get(a_tensor)
    roles = companions(graph_a, listed, lists) if listed is not None else None
    if roles is None or listed is None or listed.spec is None:
        return None, plain
    b_of = {p.a: p.b for n in alignment.nodes.values() for p in n.tensors if p.comparable and p.b}
    b_of[a_tensor] = b_tensor
    if any(t not in b_of for t in roles.values()):
        return None, plain
    entries, ids = {}, iter(range(next_id, next_id + len(roles)))
    for role, tensor in roles.items():
        entries[role] = {"id": i if tensor == a_tensor else next(ids), "a_tensor": tensor, "b_tensor": b_of[tensor]}
    jobs: dict[str, dict[str, Any]] = {}
    for key, graph, fetch in (("a", graph_a, a_tensor), ("b", graph_b, b_tensor)):
        feeds = dict(plans[key])
        walked = replayed_ops(graph, fetch, plans[key])
        with_ = [{"id": e["id"], "a_tensor": e["a_tensor"], "fetch": e[f"{key}_tensor"]}
                 for e in entries.values() if e["id"] != i]
        for item in with_:
            for name, source in replay_plan(graph, item["fetch"], to_a[key]).items():
                if name not in feeds and tensor_op(name) in walked:
                    return None, plain  # fed, it would change the origin's replay
                feeds[name] = source
        jobs[key] = {"feeds": feeds, "with": with_}
    return ({"output": listed.output, "box_format": listed.spec.box_format,
             "iou_threshold": listed.spec.iou_threshold, "roles": entries}, jobs)


FEEDS = "feeds"  # in the work directory: the capture of A's tensors that the replays need
INDEX = "isolation_index.json"  # in the work directory: the plan (IsolationPlan), for a later isolate or report


def write_feeds(capture_a: Capture, ops: dict[str, list[dict[str, Any]]], path: str) -> str:
    """Copy the A tensors the replays need (each origin's fed inputs and its A output, which
    judges whether A replays reproducibly) into a small capture directory of their own.

    The report directory then carries what ``tftrace isolate --from`` needs on another machine,
    whether A was captured here or given as a capture directory from elsewhere, without the
    whole captures (hundreds of MB for a ResNet at batch 8). Returns the path.
    """
    from ..captures.store import CaptureWriter  # noqa: PLC0415

    layout = capture_a.tensor_layout
    wanted = dict.fromkeys(name for side in ops.values() for op in side
                           for name in (*op["feeds"].values(), op["a_tensor"], *(w["a_tensor"] for w in op.get("with", ()))))
    count = capture_a.examples.count
    with CaptureWriter(path, force=True, durable=False) as writer:
        for name in wanted:
            if not capture_a.has(name):
                continue
            if capture_a.digest(name) is not None:  # the values are in A's model: its digest travels, not a read
                writer.keep_digest_of(name, capture_a.record(name))
                continue
            value = np.asarray(capture_a.tensor(name))
            if layout.get(name) == "rows":
                writer.write_rows(name, value, 0, count)
            else:
                writer.write_whole(name, value)
        writer.finalize({
            "spec": spec_without_permissions(capture_a.spec),
            "examples": dict(capture_a.manifest["examples"]),  # as recorded: the slice is a capture of its own
            "runs": [list(r) for r in capture_a.runs],
            "tensor_layout": {name: layout[name] for name in wanted if name in layout and capture_a.has(name)},
            "notes": [f"the tensors of {capture_a.path} that isolating its report's origins needs"],
        })
    return path


def job_run_side(job: dict[str, Any], *, allow_unsafe_ops: bool, max_memory: int | None = None,
                 artifact_path: str | None = None, python: str | None = None) -> Side:
    """The side an isolation job runs as here (see :func:`run_job`): its own, with this caller's
    permission and interpreter, its memory limit never above ``max_memory`` (default: a side's
    default limit), its model at ``artifact_path`` where given."""
    side = Side.from_json(job["side"]).with_(allow_unsafe_ops=allow_unsafe_ops, python=python)
    ceiling = max_memory if max_memory is not None else Side.__dataclass_fields__["max_memory"].default
    side = side.with_(max_memory=min(side.max_memory, ceiling))
    if artifact_path is not None:
        side = side.with_(artifact=replace(side.artifact, path=artifact_path))
    return side


def run_job(job: dict[str, Any], *, allow_unsafe_ops: bool, console: Any = None,
            artifact_path: str | None = None, max_memory: int | None = None, python: str | None = None,
            child: PreparedChild | None = None) -> None:
    """Replay one side's ops in a child process (optionally against a local copy of the model).

    A job file may come from anyone (a report attached to an issue), so whether unsafe ops may
    run is this caller's ``allow_unsafe_ops``, whatever the job's side says, and the memory
    limit is never raised by it: at most ``max_memory`` (default: a side's default limit). The
    interpreter is the caller's too (``python``: the one the side was captured with, else this one).

    An op TensorFlow refuses to replay gets a failure record from the child, which goes on; a
    child that crashes leaves one for each op it had not answered. Either way the comparison
    keeps its report, and those origins are judged ``not_replayed`` (:func:`evaluate`). A user
    error the child reports (a refused unsafe model, a report made from another model) and a
    timeout stay errors: they have a fix.
    """
    side = job_run_side(job, allow_unsafe_ops=allow_unsafe_ops, max_memory=max_memory, artifact_path=artifact_path,
                        python=python)
    job = {**job, "side": side.to_json()}
    try:
        run_child(job, side, label=f"isolate {count(len(job['ops']), 'op')} [{side.label()}]", console=console,
                  child=child)
    except ChildCrashed as exc:  # a replay is an extra: its crash costs its ops' verdicts, never the report
        _mark_unanswered(job, exc.reason)


def _mark_unanswered(job: dict[str, Any], reason: str) -> None:
    """Record ``reason`` as the failure of every op of ``job`` its child left without an answer."""
    os.makedirs(job["out_dir"], exist_ok=True)
    for op in job["ops"]:
        if not os.path.exists(replay_path(job["out_dir"], op["id"])) and failure(job["out_dir"], op["id"]) is None:
            record_failure(job["out_dir"], op["id"], reason)


def read_plan(workdir: str) -> IsolationPlan:
    """The plan a compare wrote in ``workdir`` (perhaps received from elsewhere: checked field by field)."""
    path = Path(workdir, INDEX)
    try:
        doc = loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TftraceError(f"cannot read {path}: {exc}", RECEIVED_FIX) from exc
    return IsolationPlan.from_json(doc, str(path))


def evaluate(workdir: str, plan: IsolationPlan | None = None, capture_b: Capture | None = None
             ) -> dict[str, IsolationResult]:
    """Judge every planned origin from the replays present in ``workdir``; ``plan``: the one this
    process made (None: read the one written there); ``capture_b``: B's capture, where this process
    has it open (else opened again: 2 s for the 35,000-op RetinaNet stand-in's manifest)."""
    plan = plan if plan is not None else read_plan(workdir)
    capture_a = Capture.open(_capture_a_path(workdir, plan))
    capture_b = capture_b if capture_b is not None else _open_optional(_capture_path(workdir, plan.capture_b, "b"))
    results = {}
    for op in plan.origins:
        out_dirs = {k: os.path.join(workdir, f"isolation_{k}") for k in ("a", "b")}
        failed = {k: reason for k, out in out_dirs.items() if (reason := failure(out, op.id)) is not None}
        if failed:
            results[op.node] = IsolationResult(
                "not_replayed", detail="; ".join(f"side {k.upper()}'s replay failed: {why}" for k, why in failed.items()))
            continue
        replays = {k: Path(replay_path(out, op.id)) for k, out in out_dirs.items()}
        missing = [k for k, path in replays.items() if not path.exists()]
        if missing:
            report_dir = os.path.dirname(os.path.abspath(workdir.rstrip("/")))
            results[op.node] = IsolationResult(
                "not_run",
                detail=(f"side {', '.join(m.upper() for m in missing)} was captured from a model that is not on this "
                        "machine; run the command where it is, then `tftrace report` shows the result"),
                command=" ".join(["tftrace", "isolate", "MODEL", "--from", shlex.quote(report_dir),
                                  "--side", missing[0]]),
            )
            continue
        ra, rb = np.load(replays["a"]), np.load(replays["b"])
        results[op.node] = judge(ra, rb, op, capture_a, capture_b, _lists_replayed(op, out_dirs))
    return results


def judge_again(workdir: str, repeated: Mapping[str, tuple[str, ...]], capture_b: Capture | None = None
                ) -> dict[str, IsolationResult]:
    """Judge the replays already made in ``workdir`` again, now that further whole runs of some
    sides repeated some origins bit for bit (``repeated``: A's op -> those sides; judging's further
    runs, which moved nothing). The plan written there is updated with them, so a later
    ``tftrace report`` or ``isolate --from`` judges the same way."""
    plan = read_plan(workdir)
    plan = replace(plan, origins=tuple(replace(op, repeated=tuple(repeated.get(op.node, ()))) for op in plan.origins))
    _write_json(os.path.join(workdir, INDEX), plan.to_json())
    return evaluate(workdir, plan, capture_b)


def _lists_replayed(op: PlannedOrigin, out_dirs: dict[str, str]) -> dict[str, tuple[np.ndarray, np.ndarray]] | None:
    """Role -> A's and B's replays of the lists fetched with an origin that holds them; None where it
    holds none, or one of them was not replayed (a job from an older release): then index by index."""
    if not op.detections:
        return None
    found = {}
    for role, entry in op.detections["roles"].items():
        paths = [Path(replay_path(out_dirs[k], entry["id"])) for k in ("a", "b")]
        if not all(path.is_file() for path in paths):
            return None
        found[role] = (np.load(paths[0]), np.load(paths[1]))
    return found


def load_state_variables(isolation: dict[str, IsolationResult], graph: OpGraph) -> set[str]:
    """The variables whose value isolation found to change from load to load (and their reads):
    a difference there is the model's loading, never an export's ``const_changed``."""
    return _set_at_load(graph, [name for name, result in isolation.items() if result.load_state and name in graph])


def weights_set_at_load(per_tensor: dict[str, float], graph: OpGraph) -> set[str]:
    """The variables (and their reads) whose value moved between fresh processes of one side, by
    the noise measured: no kernel computes a weight, so a weight that moves is set anew at each
    load (an initializer that runs instead of a restore). On a GPU the noise is measured before
    any replay, and the weight was then never replayed: it was called ``const_changed`` between
    a SavedModel and itself (TF Serving's half_plus_two_mkl, the H200, 2026-12-04)."""
    moved = [tensor_op(t) for t, size in per_tensor.items() if size and tensor_op(t) in graph]
    return _set_at_load(graph, [op for op in moved if weight_of(graph, op) is not None])


def _set_at_load(graph: OpGraph, ops: list[str]) -> set[str]:
    """``ops``, and for each that is or reads a weight, the weight and every read of it, as its
    ``const_changed`` names them."""
    found = set(ops)
    for name in ops:
        weight = weight_of(graph, name)
        if weight is not None:
            found.update([weight, *weight_reads(graph, weight)])
    return found


def same_run_settings(capture_a: Capture, capture_b: Capture, *, build: bool = True) -> bool:
    """Whether the two captures ran with the same device, batch size, knobs and build, so that the
    same op on the same inputs can only differ from run to run (the artifacts may differ).
    ``build=False`` leaves the TensorFlow build out: sides that differ in it alone (``--python``)."""
    def settings(capture: Capture) -> Any:
        spec, env = capture.spec, capture.environment
        gpus = [g.get("device_name") for g in env.get("gpus") or [] if isinstance(g, dict)]
        release = (env.get("tensorflow"), env.get("tf_git_version"), dumps(env.get("build"), sort_keys=True))
        return (spec.get("device"), dumps(spec.get("knobs"), sort_keys=True), release if build else None,
                gpus, (env.get("cpu") or {}).get("model"), dumps(env.get("onednn", {}).get("enabled")),
                env.get("tf32_enabled"), env.get("op_determinism"))
    return settings(capture_a) == settings(capture_b) and batched_alike(capture_a.manifest, capture_b.manifest)


def _write_json(path: str, doc: dict[str, Any]) -> None:
    write_file(path, dumps(doc))  # strict JSON, non-finite numbers as strings (tracer.jsonvalues)


def _local_side(view: CaptureView) -> Side | None:
    side = Side.from_json(view.capture.spec)
    path = side.artifact.path
    if "://" in path or exists_here(path):
        return side
    return None


def _capture_a_path(workdir: str, plan: IsolationPlan) -> str:
    """Where the replays' A tensors are: the report's own copy of them (``work/feeds``, found
    relative to wherever the report directory was copied), or, for a report made before it
    carried them, A's capture where it was recorded or inside the report directory."""
    if plan.feeds == FEEDS:  # never a path taken from the file: it may come from anyone
        return os.path.join(workdir, FEEDS)
    recorded = plan.capture_a
    moved = os.path.join(os.path.dirname(os.path.abspath(workdir.rstrip("/"))), "captures", "a")
    return recorded if recorded and os.path.isdir(recorded) else moved


def _capture_path(workdir: str, recorded: str | None, side: str) -> str | None:
    """B's capture, for its noise: where it was recorded, or inside the report directory after a
    copy (``--keep-captures``); None when it is not here (isolation still judges without it)."""
    if recorded and os.path.isdir(recorded):
        return recorded
    moved = os.path.join(os.path.dirname(os.path.abspath(workdir.rstrip("/"))), "captures", side)
    return moved if os.path.isdir(moved) else None


def _open_optional(path: str | None) -> Capture | None:
    """B's capture only adds a noise measurement: when it is gone, isolation still judges."""
    if path is None:
        return None
    try:
        return Capture.open(path)
    except TftraceError:
        return None


def isolate_remote(model: str, report_dir: str, side_key: str | None = None, console: Any = None, *,
                   allow_unsafe_ops: bool = False, max_memory: int | None = None,
                   python: str | None = None) -> dict[str, IsolationResult]:
    """``tftrace isolate``: replay the pending side of a report on this machine, against MODEL
    (in ``python``, the interpreter of the TensorFlow that side was captured with; default this one)."""
    workdir = os.path.join(report_dir, "work")
    refuse_links_within(Path(workdir))  # received: its job, index and feeds are read, its replays written there
    jobs = {k: Path(workdir, f"isolation_{k}.job.json") for k in ("a", "b")}
    if not any(p.exists() for p in jobs.values()):
        raise TftraceError(f"{report_dir} has no isolation jobs", "run tftrace compare with --isolate N > 0 first")
    if side_key is None:
        pending = [k for k, p in jobs.items() if p.exists() and not Path(workdir, f"isolation_{k}").is_dir()]
        side_key = pending[0] if pending else "b"
    if not jobs[side_key].exists():
        raise TftraceError(f"{report_dir} has no isolation job for side {side_key.upper()}", "choose --side a or b")
    job = loads(jobs[side_key].read_text(encoding="utf-8"))
    plan = read_plan(workdir)
    job["feeds_from"] = _capture_a_path(workdir, plan)
    if not os.path.isdir(job["feeds_from"]):
        raise TftraceError(
            f"{report_dir} does not hold the A tensors its replays are fed (no {job['feeds_from']})",
            "copy the whole report directory written by tftrace compare, its work/ folder included",
        )
    job["out_dir"] = os.path.join(workdir, f"isolation_{side_key}")
    run_job(job, console=console, artifact_path=model, allow_unsafe_ops=allow_unsafe_ops, max_memory=max_memory,
            python=python)
    return evaluate(workdir, plan)
