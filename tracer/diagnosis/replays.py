"""Fetch-alone replays: run a captured side again, fetching one tensor per ``session.run``.

A capture observes a side by fetching every tensor at once, and observing changes what
Grappler may do: a fetched tensor is kept as it is, so nothing that produces it is fused, and
the bfloat16 mixed-precision rewrite converts nothing (every op is "preserved"). Three
questions of ``tftrace diagnose`` need runs that are *not* observed that way:

* **repeat in the same process** — the same fetches twice in one session: each signature
  output fetched alone, then all of them again, in one child process;
* **plain outputs** — when a side's plain run differs from its instrumented run (the capture's
  observer effect) and its capture predates the stored plain outputs, its outputs as the plain
  run computes them: each output fetched alone;
* **localising an unobserved difference** — when two sides agree while observed but not when
  plain, each tensor fetched alone on both sides: the tensor is then kept as it is, but
  everything above it is free to be rewritten, so the first tensor that differs sits right
  below the first rewritten op.

The replays run in the isolation child (:mod:`tracer.captures.isolate_worker`), which feeds
tensors from a capture and fetches one tensor per run; here the feeds are the signature
inputs, taken from the reference capture so both sides see the same examples.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..captures.reader import Capture
from ..errors import TftraceError
from ..comparison.isolate import run_job
from ..pythons import made_with
from ..opgraph import tensor_op
from ..optypes import changes_state, draws_random

__all__ = ["Replay", "replay_alone", "signature_feeds", "state_changing_ops"]

@dataclass
class Replay:
    """The values of each fetched tensor, per repeat: ``values[repeat][tensor]``."""

    values: list[dict[str, np.ndarray]]
    rows: int  # examples covered (all runs, or the first run only)


def signature_feeds(side: Capture, source: Capture) -> dict[str, str]:
    """This side's signature input tensors -> the source capture's tensors for the same keys."""
    ours, theirs = side.inputs, source.inputs
    missing = sorted(set(ours) - set(theirs))
    if missing:
        raise TftraceError(f"cannot feed {'input' if len(missing) == 1 else 'inputs'} {missing} from {source.path}: its signature lacks them",
                           "diagnose needs both sides to take the same signature inputs")
    return {tensor: theirs[key] for key, tensor in ours.items()}


def replay_alone(
    side: Capture,
    source: Capture,
    fetches: dict[str, str],
    workdir: str | os.PathLike[str],
    *,
    repeats: int = 1,
    first_run_only: bool = False,
    console: Any = None,
    allow_unsafe_ops: bool,
) -> Replay:
    """Fetch each tensor alone, ``repeats`` times over, in one child process of ``side``.

    ``fetches`` maps this side's tensor -> the source capture's tensor that stands for it (its
    layout says whether the value is per example). Inputs are fed from ``source``.
    ``allow_unsafe_ops`` is the caller's decision; the one ``side``'s manifest records is not trusted.
    """
    if repeats < 1 or not fetches:
        raise ValueError(f"need at least one repeat and one fetch, got {repeats} and {len(fetches)}")
    runs = [list(r) for r in side.runs]
    if first_run_only:
        runs = runs[:1]
    rows = sum(stop - start for start, stop in runs)
    feeds = signature_feeds(side, source)
    names = list(fetches)
    ops = [{"id": r * len(names) + j, "a_tensor": fetches[name], "fetch": name, "feeds": feeds}
           for r in range(repeats) for j, name in enumerate(names)]
    out_dir = Path(workdir).absolute()
    out_dir.mkdir(parents=True, exist_ok=True)
    job = {"mode": "isolate", "side": side.spec, "feeds_from": str(source.path), "ops": ops,
           "runs": runs, "count": rows, "out_dir": str(out_dir),
           "tensorflow": side.environment.get("tensorflow")}
    run_job(job, console=console, allow_unsafe_ops=allow_unsafe_ops, python=made_with(side.path))
    values = [{name: np.load(out_dir / f"{r * len(names) + j}.npy") for j, name in enumerate(names)}
              for r in range(repeats)]
    return Replay(values, rows)


def state_changing_ops(graph: dict[str, Any]) -> dict[str, list[str]]:
    """``{"state": [...], "random": [...]}``: ops of a manifest's op graph that make two runs of
    the same feed differ by design. A fed op never runs (a queue whose dequeued batch is the input)."""
    nodes = graph.get("nodes", [])
    items = nodes.values() if isinstance(nodes, dict) else nodes
    inputs = graph.get("inputs")
    fed = {tensor_op(str(t)) for t in inputs.values()} if isinstance(inputs, dict) else set()
    found: dict[str, list[str]] = {"state": [], "random": []}
    for node in items:
        if node["name"] in fed:
            continue
        if changes_state(node["op"]):  # the state or the random draws of one run carry into the next
            found["state"].append(node["name"])
        elif draws_random(node["op"]):
            found["random"].append(node["name"])
    return found
