"""Stage 8 — does an origin op's own kernel differ, given identical inputs?

For each origin, both sides replay the op alone with **A's captured inputs** fed to both
(:mod:`tracer.capture.isolate_worker`, one child per side, in that side's environment). If the
two replays still differ, the kernel itself computes differently (``own_error``: a different
algorithm, precision, or batch-dependent blocking); if they agree, the op only inherited a
difference too small to judge at its inputs (``inherited``).

B's inputs are found by walking up from B's tensor to the nearest B tensors paired with A
tensors, so a rewritten region (a cast-wrapped MatMul, a folded conv) is replayed whole.
An origin that stands for a rewrite *group* (a folded batch norm: A's conv + batch norm against
B's conv with rescaled weights + bias; a fused chain against its fused op) is replayed from the
group's own data inputs on both sides: its members are paired only to be shown, never to be
fed, because a fold legitimately changes them (A's unscaled conv output fed to B's bias add
would compare a scaled convolution with an unscaled one).
When a side's model is not on this machine (captured on the GPU server), its replay is not run
here; the report carries the ``tftrace isolate`` command that runs it there.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from .align import ROLE_REWRITTEN, Alignment, CaptureView
from .capture.launcher import run_child
from .capture.reader import Capture
from .divergence import NodeResult
from .errors import TftraceError
from .metrics import compare_arrays
from .opgraph import EXIT_OPS, OpGraph, tensor_op
from .runspec import Side

__all__ = ["IsolationResult", "isolate_origins", "replay_plan", "group_members", "origin_feeds", "run_job",
           "evaluate", "isolate_remote"]

GROUP_REWRITES = ("batchnorm_folded", "fused")  # an origin that stands for several A ops (and B ops)


@dataclass
class IsolationResult:
    verdict: str  # own_error | inherited | not_run
    max_abs: float | None = None
    max_rel: float | None = None
    detail: str = ""
    command: str | None = None
    rel_l2: float | None = None  # ||a-b|| / ||a||: max rel is inflated by near-zero elements

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "max_abs": self.max_abs, "max_rel": self.max_rel, "rel_l2": self.rel_l2,
                "detail": self.detail, "command": self.command}


def replay_plan(graph: OpGraph, tensor: str, to_a: dict[str, str]) -> dict[str, str]:
    """Tensors of ``graph`` to feed (-> the A tensor whose captured value feeds it) to recompute
    ``tensor`` alone: the nearest ancestors that have an A counterpart.

    Control edges are followed too, and they need more than a value: an op that something waits
    on must *run*, so its own inputs are needed even when its output is fed. An inlined TF2
    function is the common case: its body waits on a NoOp that waits on the Identity of each
    input, so the placeholder behind it must be fed though no data path reaches it.
    """
    feeds: dict[str, str] = {}
    seen: set[tuple[bool, str]] = set()
    stack: list[tuple[bool, str]] = [(True, tensor_op(tensor))]  # (must run, op) or (False, tensor)
    while stack:
        item = stack.pop()
        if item in seen:
            continue
        seen.add(item)
        must_run, name = item
        if not must_run:
            if name in to_a:
                feeds[name] = to_a[name]
            else:
                stack.append((True, tensor_op(name)))
            continue
        if name not in graph:
            continue
        if graph.op_type(name) in ("Placeholder", "PlaceholderWithDefault"):
            stack.append((False, f"{name}:0"))
            continue
        node = graph.node(name)
        stack.extend((False, t) for t in node["inputs"])
        stack.extend((True, tensor_op(c)) for c in node["control_inputs"])
    return feeds


def group_members(alignment: Alignment, graph_a: OpGraph, op: str) -> list[str]:
    """The A ops of the rewrite group that origin ``op`` stands for, upstream of it: the conv,
    weights and batch-norm parameters of a folded batch norm, the earlier ops of a fused chain.

    They are found by walking up A's data inputs through ops the alignment marked as rewritten
    members of the same kind; where the walk stops are the group's own data inputs (the conv's
    input). Empty for an origin that is not a group.
    """
    node = alignment.nodes.get(op)
    if node is None or node.rewrite not in GROUP_REWRITES:
        return []
    members: list[str] = []
    stack = [op]
    while stack:
        name = stack.pop()
        for tensor in graph_a.data_inputs(name) if name in graph_a else []:
            source = tensor_op(tensor)
            member = alignment.nodes.get(source)
            if (source not in members and member is not None and member.role == ROLE_REWRITTEN
                    and member.rewrite == node.rewrite):
                members.append(source)
                stack.append(source)
    return members


def origin_feeds(alignment: Alignment, graphs: dict[str, OpGraph], node: str, fetches: dict[str, str],
                 to_a: dict[str, dict[str, str]]) -> tuple[dict[str, dict[str, str]], dict[str, Any] | None]:
    """Each side's feeds (its tensor -> the A tensor whose captured value feeds it) to replay
    origin ``node`` (fetching ``fetches[side]``), and its rewrite group (None if not a group).

    ``to_a[side]`` lists the tensors of that side that may be fed. A group's members are never
    fed, on either side: both replay the whole group from its own data inputs.
    """
    members = group_members(alignment, graphs["a"], node)
    held = {t for m in members for p in alignment.nodes[m].tensors for t in (p.a, p.b) if t}
    feeds = {key: replay_plan(graphs[key], fetches[key],
                              {t: s for t, s in to_a[key].items() if t not in held and s not in held})
             for key in ("a", "b")}
    if not members:
        return feeds, None
    group = {"kind": alignment.nodes[node].rewrite, "a_members": members,
             "a_inputs": sorted(feeds["a"]), "b_inputs": sorted(feeds["b"])}
    return feeds, group


def isolate_origins(
    origins: list[NodeResult],
    alignment: Alignment,
    view_a: CaptureView,
    view_b: CaptureView,
    workdir: str,
    console: Any = None,
    *,
    allow_unsafe_ops: dict[str, bool],
) -> dict[str, IsolationResult]:
    """Plan the replays of both sides, run those whose model is on this machine, evaluate.

    Every job is also written to ``workdir/isolation_<side>.job.json``: a side whose model is
    elsewhere is replayed there by ``tftrace isolate MODEL --from REPORT_DIR``. Whether a side's
    replay may run unsafe ops is ``allow_unsafe_ops[side]``, decided by this command: a capture
    (perhaps made elsewhere) records its own flag, and that record is never trusted.
    """
    if not origins:
        return {}
    os.makedirs(workdir, exist_ok=True)
    to_a = {"a": {p.a: p.a for n in alignment.nodes.values() for p in n.tensors if p.comparable},
            "b": alignment.b_to_a()}
    index, ops = [], {"a": [], "b": []}
    for i, result in enumerate(origins):
        pair = next(p for p in alignment.nodes[result.name].tensors if p.a == result.tensor)
        assert pair.b is not None
        index.append({"id": i, "node": result.name, "a_tensor": result.tensor, "b_tensor": pair.b,
                      "a_op": view_a.graph.op_type(result.name), "b_op": view_b.graph.op_type(tensor_op(pair.b))})
        feeds, group = origin_feeds(alignment, {"a": view_a.graph, "b": view_b.graph}, result.name,
                                    {"a": result.tensor, "b": pair.b}, to_a)
        if group:
            index[-1]["group"] = group
        for key, fetch in (("a", result.tensor), ("b", pair.b)):
            ops[key].append({"id": i, "a_tensor": result.tensor, "fetch": fetch, "feeds": feeds[key]})
    _write_json(os.path.join(workdir, "isolation_index.json"), {"capture_a": str(view_a.capture.path), "ops": index})
    for key, view in (("a", view_a), ("b", view_b)):
        spec = {**view.capture.manifest["spec"], "allow_unsafe_ops": False}  # decided by whoever runs the job
        job = {"mode": "isolate", "side": spec, "feeds_from": str(view_a.capture.path),
               "ops": ops[key], "runs": view.capture.manifest["runs"],
               "count": view.capture.manifest["examples"]["count"], "out_dir": os.path.join(workdir, f"isolation_{key}")}
        _write_json(os.path.join(workdir, f"isolation_{key}.job.json"), job)
        if _local_side(view) is not None:
            run_job(job, console=console, allow_unsafe_ops=allow_unsafe_ops[key])
    return evaluate(workdir)


def run_job(job: dict[str, Any], *, allow_unsafe_ops: bool, console: Any = None,
            artifact_path: str | None = None) -> None:
    """Replay one side's ops in a child process (optionally against a local copy of the model).

    A job file may come from anyone (a report attached to an issue), so whether unsafe ops may
    run is this caller's ``allow_unsafe_ops``, whatever the job's side says.
    """
    side = Side.from_json(job["side"]).with_(allow_unsafe_ops=allow_unsafe_ops)
    if artifact_path is not None:
        side = side.with_(artifact=replace(side.artifact, path=artifact_path))
    job = {**job, "side": side.to_json()}
    run_child(job, side, label=f"isolate {len(job['ops'])} op(s) [{side.label()}]", console=console)


def evaluate(workdir: str) -> dict[str, IsolationResult]:
    """Judge every planned origin from the replays present in ``workdir``."""
    index = json.loads(Path(workdir, "isolation_index.json").read_text(encoding="utf-8"))
    capture_a = Capture.open(_capture_a_path(workdir, index["capture_a"]))
    results = {}
    for op in index["ops"]:
        replays = {k: Path(workdir, f"isolation_{k}", f"{op['id']}.npy") for k in ("a", "b")}
        missing = [k for k, path in replays.items() if not path.exists()]
        if missing:
            report_dir = os.path.dirname(os.path.abspath(workdir.rstrip("/")))
            results[op["node"]] = IsolationResult(
                "not_run",
                detail=(f"side {', '.join(m.upper() for m in missing)} was captured from a model that is not on this "
                        "machine; run the command where it is, then `tftrace report` shows the result"),
                command=" ".join(["tftrace", "isolate", "MODEL", "--from", shlex.quote(report_dir),
                                  "--side", missing[0]]),
            )
            continue
        ra, rb = np.load(replays["a"]), np.load(replays["b"])
        results[op["node"]] = _judge(ra, rb, op, capture_a)
    return results


def _judge(ra: np.ndarray, rb: np.ndarray, op: dict[str, Any], capture_a: Capture | None) -> IsolationResult:
    if ra.shape != rb.shape:
        return IsolationResult("own_error", detail=f"replayed shapes differ: {ra.shape} vs {rb.shape}")
    m = compare_arrays(ra, rb)
    if m.identical:
        verdict = "inherited"
        detail = "given A's inputs, B's kernel computes A's result bit for bit: the difference is inherited"
    else:
        verdict = "own_error"
        detail = (f"given identical inputs, {_b_computation(op)} by up to {m.max_abs:.3g} (rel {m.max_rel:.3g}, "
                  f"rel L2 {m.rel_l2:.3g})")
    if capture_a is not None and capture_a.has(op["a_tensor"]):
        if not compare_arrays(np.asarray(capture_a.tensor(op["a_tensor"])), ra).identical:
            detail += "; replaying A did not reproduce A's captured value bit for bit (A is not deterministic)"
    return IsolationResult(verdict, m.max_abs, m.max_rel, detail, rel_l2=m.rel_l2)


def _b_computation(op: dict[str, Any]) -> str:
    """What differs: B's kernel for the same op, or what an export rewrite put in its place
    (e.g. A's MatMul is B's Cast back from a bfloat16 MatMul: B's replay runs all of it)."""
    a_op = op.get("a_op")  # (absent from the index of a report made before it was recorded)
    group = op.get("group")
    if group:
        what = "folded batch norm" if group["kind"] == "batchnorm_folded" else "fused op"
        inputs = ", ".join(f"`{t}`" for t in group.get("a_inputs", [])) or "the same inputs"
        return (f"B's {what} (`{tensor_op(op['b_tensor'])}`, {op['b_op']}, with the ops between it and its inputs) "
                f"differs from A's {a_op} and the {len(group['a_members'])} op(s) {what.split()[0]} into it "
                f"(from `{group['a_members'][0]}`), both replayed whole from the group's inputs ({inputs})")
    if a_op in EXIT_OPS and op["b_op"] == a_op:
        return ("B's while loop that ends here (replayed whole: a session cannot fetch the ops inside a loop) "
                "differs from A's")
    if a_op in (None, op["b_op"]):
        return f"B's {op['b_op']} kernel differs from A's"
    return (f"B's replacement for it (`{tensor_op(op['b_tensor'])}`, {op['b_op']}, with the ops between it and "
            f"those inputs) differs from A's {a_op}")


def _write_json(path: str, doc: dict[str, Any]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    os.replace(tmp, path)


def _local_side(view: CaptureView) -> Side | None:
    side = Side.from_json(view.capture.manifest["spec"])
    path = side.artifact.path
    if "://" in path or os.path.exists(path):
        return side
    return None


def _capture_a_path(workdir: str, recorded: str) -> str:
    """A's capture: where it was recorded, or inside the report directory after a copy."""
    moved = os.path.join(os.path.dirname(os.path.abspath(workdir.rstrip("/"))), "captures", "a")
    return recorded if os.path.isdir(recorded) else moved


def isolate_remote(model: str, report_dir: str, side_key: str | None = None, console: Any = None, *,
                   allow_unsafe_ops: bool = False) -> dict[str, IsolationResult]:
    """``tftrace isolate``: replay the pending side of a report on this machine, against MODEL."""
    workdir = os.path.join(report_dir, "work")
    jobs = {k: Path(workdir, f"isolation_{k}.job.json") for k in ("a", "b")}
    if not any(p.exists() for p in jobs.values()):
        raise TftraceError(f"{report_dir} has no isolation jobs", "run tftrace compare with --isolate N > 0 first")
    if side_key is None:
        pending = [k for k, p in jobs.items() if p.exists() and not Path(workdir, f"isolation_{k}").is_dir()]
        side_key = pending[0] if pending else "b"
    if not jobs[side_key].exists():
        raise TftraceError(f"{report_dir} has no isolation job for side {side_key.upper()}", "choose --side a or b")
    job = json.loads(jobs[side_key].read_text(encoding="utf-8"))
    index = json.loads(Path(workdir, "isolation_index.json").read_text(encoding="utf-8"))
    job["feeds_from"] = _capture_a_path(workdir, index["capture_a"])
    job["out_dir"] = os.path.join(workdir, f"isolation_{side_key}")
    run_job(job, console=console, artifact_path=model, allow_unsafe_ops=allow_unsafe_ops)
    return evaluate(workdir)
