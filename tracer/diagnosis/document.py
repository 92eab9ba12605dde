"""What ``tftrace diagnose`` writes: ``diagnosis.json`` (:func:`diagnosis_document`, its fields
listed in docs/contracts.md), its ``timings`` breakdown, and the report of the most informative
experiment with the answers on top (:func:`write_report`)."""

from __future__ import annotations

import datetime as _dt
from pathlib import Path
from typing import Any

from .._version import __version__
from .. import children
from ..captures.reader import Capture
from ..comparison.statuses import BORN_HERE
from ..jsonvalues import jsonable
from ..report.build import write_reports
from .options import DiagnoseOptions

__all__ = ["SCHEMA_VERSION", "diagnosis_document", "where_the_time_went", "write_report"]

SCHEMA_VERSION = 2  # 2: a cost rests on two pairs of processes (`timing.pairs`); 1 had one pair's `timing.a_ms`, `b_ms`


def where_the_time_went(walls: dict[str, float], spawned: list[children.ChildTime]) -> dict[str, Any]:
    """``timings``' breakdown: each experiment's wall seconds (two run at once, so they add up to
    more than ``experiments_s``), and the child processes' seconds, in all and per step (``base
    side``, ``captures``, an experiment's name, ``recipe``, ``costs``): how many were started and
    how long they took to come up, to import TensorFlow and to load the model."""
    steps = dict.fromkeys(c.tag or "(no step)" for c in spawned)
    return {"experiment_s": dict(sorted(walls.items())), "children": children.summary(spawned),
            "children_by_step": {step: children.summary([c for c in spawned if (c.tag or "(no step)") == step]) for step in steps}}


def diagnosis_document(options: DiagnoseOptions, base: Capture, results: list[dict[str, Any]], answers: dict[str, Any],
              noise: dict[str, Any] | None, timings: dict[str, float]) -> dict[str, Any]:
    env = base.environment
    public = [{k: v for k, v in r.items() if not k.startswith("_")} for r in results]
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "tftrace", "version": __version__},
        "command": options.command,
        "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "model": options.model.to_json(),
        "savedmodel": options.savedmodel.to_json() if options.savedmodel else None,
        "batch_sizes": sorted(set(options.batch_sizes)),
        "device": options.device,
        "quick": options.quick,
        "examples": base.manifest["examples"],
        "tolerance": options.tolerance.to_json(),
        "environment": {"tensorflow": env.get("tensorflow"), "cpu": env.get("cpu"), "onednn": env.get("onednn"),
                        "gpus": env.get("gpus"), "build": env.get("build")},
        "remedy_side": "b",
        "cost_formula": "cost_pct = (latency_b - latency_a) / latency_a * 100, per example when the sides run "
                        "different batch sizes; B is the remedy where the factor has one. Where an experiment has "
                        "`timing`, cost_pct is the ratio of medians of interleaved timings of both sides and "
                        "`timing.significant` says whether it is a cost (tracer.diagnosis.timing); elsewhere it is "
                        "the two captures' medians, which claim nothing",
        "noise": noise,
        "experiments": public,
        "answers": answers,
        "timings": timings,
    }


def write_report(doc: dict[str, Any], results: list[dict[str, Any]], out: Path) -> str | None:
    """DIR/report.* from the most informative comparison, with the diagnosis on top."""
    candidates = [r for r in results if r.get("_report")]
    if not candidates:
        return None

    def rank(r: dict[str, Any]) -> tuple:
        first = r.get("first_divergence") or {}
        diff = r.get("max_abs_output_diff")
        return (r["verdict"] == "diverged", bool(first), first.get("isolation") in BORN_HERE,
                float("inf") if diff is None else float(diff))

    chosen = max(candidates, key=rank)
    report = dict(chosen["_report"])
    report["answers"] = doc["answers"]
    report["diagnosis"] = {"experiments": doc["experiments"], "answers": doc["answers"], "shown": chosen["name"],
                           "command": doc["command"], "environment": doc["environment"]}
    report["command"] = doc["command"] or report.get("command", "")
    write_reports(jsonable(report), out)
    return chosen["name"]
