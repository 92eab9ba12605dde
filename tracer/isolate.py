"""Stage 8 — does an origin op's own kernel differ, given identical inputs?

For each origin, both sides replay the op alone with **A's captured inputs** fed to both
(:mod:`tracer.capture.isolate_worker`, one child per side, in that side's environment). If the
two replays still differ, the kernel itself computes differently (``own_error``: a different
algorithm, precision, or batch-dependent blocking); if they agree, the op only inherited a
difference too small to judge at its inputs (``inherited``).

B's inputs are found by walking up from B's tensor to the nearest B tensors paired with A
tensors, so a rewritten region (a cast-wrapped MatMul, a folded conv) is replayed whole.
When a side's model is not on this machine (captured on the GPU server), its replay is not run
here; the report carries the ``tftrace isolate`` command that runs it there.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass
from typing import Any

import numpy as np

from .align import Alignment, CaptureView
from .capture.launcher import run_child
from .divergence import NodeResult
from .metrics import compare_arrays
from .opgraph import OpGraph, tensor_op
from .runspec import Side

__all__ = ["IsolationResult", "isolate_origins", "replay_plan"]


@dataclass
class IsolationResult:
    verdict: str  # own_error | inherited | not_run
    max_abs: float | None = None
    max_rel: float | None = None
    detail: str = ""
    command: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict, "max_abs": self.max_abs, "max_rel": self.max_rel, "detail": self.detail,
                "command": self.command}


def replay_plan(graph: OpGraph, tensor: str, to_a: dict[str, str]) -> dict[str, str]:
    """Tensors of ``graph`` to feed (-> the A tensor whose captured value feeds it) to recompute
    ``tensor`` alone: the nearest ancestors that have an A counterpart."""
    feeds: dict[str, str] = {}
    seen: set[str] = set()
    stack = list(graph.data_inputs(tensor_op(tensor)))
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in to_a:
            feeds[t] = to_a[t]
            continue
        op = tensor_op(t)
        if op in graph:
            stack.extend(graph.data_inputs(op))
    return feeds


def isolate_origins(
    origins: list[NodeResult],
    alignment: Alignment,
    view_a: CaptureView,
    view_b: CaptureView,
    workdir: str,
    console: Any = None,
) -> dict[str, IsolationResult]:
    if not origins:
        return {}
    sides = {"a": _local_side(view_a), "b": _local_side(view_b)}
    to_a_b = alignment.b_to_a()
    to_a_a = {p.a: p.a for n in alignment.nodes.values() for p in n.tensors if p.comparable}
    jobs: dict[str, list[dict[str, Any]]] = {"a": [], "b": []}
    fetch_b: dict[str, str] = {}
    for index, result in enumerate(origins):
        pair = next(p for p in alignment.nodes[result.name].tensors if p.a == result.tensor)
        assert pair.b is not None
        fetch_b[result.name] = pair.b
        common = {"id": index, "a_tensor": result.tensor}
        jobs["a"].append({**common, "fetch": result.tensor, "feeds": replay_plan(view_a.graph, result.tensor, to_a_a)})
        jobs["b"].append({**common, "fetch": pair.b, "feeds": replay_plan(view_b.graph, pair.b, to_a_b)})
    missing = [k for k, s in sides.items() if s is None]
    if missing:
        command = _remote_command(view_a if "a" in missing else view_b, workdir)
        note = (f"side {', '.join(m.upper() for m in missing)} was captured from a model that is not on this machine; "
                "run the command on the machine that has it, then `tftrace report` to merge")
        return {r.name: IsolationResult("not_run", detail=note, command=command) for r in origins}
    replays: dict[str, dict[int, np.ndarray]] = {}
    for key, view in (("a", view_a), ("b", view_b)):
        side = sides[key]
        assert side is not None
        out_dir = os.path.join(workdir, f"isolation_{key}")
        job = {"mode": "isolate", "side": side.to_json(), "feeds_from": str(view_a.capture.path), "ops": jobs[key],
               "runs": view.capture.manifest["runs"], "count": view.capture.manifest["examples"]["count"],
               "out_dir": out_dir}
        run_child(job, side, label=f"isolate {len(origins)} op(s) on side {key.upper()}", console=console)
        replays[key] = {op["id"]: np.load(os.path.join(out_dir, f"{op['id']}.npy")) for op in jobs[key]}
    results = {}
    for index, origin in enumerate(origins):
        ra, rb = replays["a"][index], replays["b"][index]
        if ra.shape != rb.shape:
            results[origin.name] = IsolationResult("own_error", detail=f"replayed shapes differ: {ra.shape} vs {rb.shape}")
            continue
        m = compare_arrays(ra, rb)
        reproduced = compare_arrays(np.asarray(view_a.capture.tensor(origin.tensor)), ra).identical
        if m.identical:
            detail = "given A's inputs, B's kernel computes A's result bit for bit: the difference is inherited"
            verdict = "inherited"
        else:
            detail = (f"given identical inputs, B's {view_b.graph.op_type(tensor_op(fetch_b[origin.name]))} "
                      f"differs from A's by up to {m.max_abs:.3g} (rel {m.max_rel:.3g}): the kernel itself differs")
            verdict = "own_error"
        if not reproduced:
            detail += "; note: replaying A did not reproduce A's captured value bit for bit (A is not deterministic)"
        results[origin.name] = IsolationResult(verdict, m.max_abs, m.max_rel, detail)
    return results


def _local_side(view: CaptureView) -> Side | None:
    side = Side.from_json(view.capture.manifest["spec"])
    path = side.artifact.path
    if "://" in path or os.path.exists(path):
        return side
    return None


def _remote_command(view: CaptureView, workdir: str) -> str:
    spec = view.capture.manifest["spec"]
    report_dir = os.path.dirname(os.path.abspath(workdir.rstrip("/")))
    return " ".join(["tftrace", "isolate", shlex.quote(spec["artifact"]["path"]), "--from", shlex.quote(report_dir)])

