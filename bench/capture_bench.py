"""Capturing one side against its peers: tfdbg v2, a naive fetch-everything script, the plain run.

Each contender is a fresh process fed the same ``.npy`` and the same checkpoint, run in
rounds whose order rotates (so no contender always runs on a cache warmed by another), and
timed from process start to the moment its result exists:

- ``tftrace capture`` (the CLI, as a user runs it): until it exits, the manifest written;
- tfdbg: until its first ``session.run`` is dumped and both writers are flushed;
- the naive script: until every tensor of the same fetch set is in memory;
- the plain run: until the signature outputs are in memory.

Disk: the capture directory against tfdbg's dump directory after that one run. One untimed
capture first warms the page cache for the model files and gives the naive script its fetch
list (the tensors tftrace captured).
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .procs import ChildRun, dir_bytes, median, run_child
from .workspace import Model, Workspace

__all__ = ["measure_capture"]

CONTENDERS = ("capture", "tfdbg", "naive", "plain")


def _capture(ckpt: Path, inputs: Path, out: Path) -> ChildRun:
    return run_child([sys.executable, "-m", "tracer.cli", "capture", str(ckpt), "--inputs", str(inputs),
                      "--out", str(out), "--force"])


def _capture_record(out: Path, run: ChildRun) -> dict[str, Any]:
    """The capture is complete when its manifest is written (last, atomically): its mtime is the
    moment, as the peers' own clocks mark theirs; ``process_s`` adds the exit (TF's teardown)."""
    manifest = json.loads((out / "manifest.json").read_text())
    done = run.since_start((out / "manifest.json").stat().st_mtime)
    return {"seconds": done, "process_s": run.wall_s, "disk": dir_bytes(out), "child_timings": manifest["timings"]}


def _peer(mode: str, job: dict[str, Any], job_path: Path) -> ChildRun:
    job_path.write_text(json.dumps(job))
    return run_child([sys.executable, "-m", "bench.peers", mode, str(job_path)])


def measure_capture(ws: Workspace, model: Model, batch: int, rounds: int, log: Callable[[str], None],
                    warmup: bool = True, contenders: tuple[str, ...] = CONTENDERS) -> dict[str, Any]:
    """Median seconds and bytes of every contender on ``model`` at ``batch``, plus the raw runs.

    Without ``warmup`` the first round's capture (which always runs first) gives the fetch list.
    """
    inputs = ws.inputs(model, batch)
    tag = f"{model.name}_b{batch}"
    work = ws.fresh("capture", tag)
    work.mkdir(parents=True)
    first = work / ("warmup" if warmup else "capture")
    warm = _capture(model.ckpt, inputs, first)
    manifest = json.loads((first / "manifest.json").read_text())
    tensors = work / "tensors.json"
    tensors.write_text(json.dumps(list(manifest["tensors"])))
    raw: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    if not warmup:
        raw["capture"].append(_capture_record(first, warm))
        shutil.rmtree(first)
    job = {"model": model.builder, "ckpt_prefix": str(model.ckpt_prefix), "inputs": str(inputs),
           "tensors": str(tensors), "repeats": 1}
    for r in range(rounds):
        order = contenders[r % len(contenders):] + contenders[: r % len(contenders)]
        for name in order:
            if name == "capture":
                if r == 0 and not warmup:
                    continue  # ran above
                out = work / "capture"
                raw[name].append(_capture_record(out, _capture(model.ckpt, inputs, out)))
                shutil.rmtree(out)
            elif name == "tfdbg":
                dump = work / "tfdbg_dump"
                run = _peer("tfdbg", {**job, "dump": str(dump)}, work / "tfdbg.json")
                res = run.result
                raw[name].append({"seconds": run.since_start(res["done_at"]), "process_s": run.wall_s,
                                  "disk_one_run": res["dump_bytes_one_run"],
                                  **{k: res[k] for k in ("import_s", "build_s", "load_s", "first_run_s", "next_runs_s",
                                                         "graph_ops", "debug_ops", "dump_bytes_before_run")}})
                shutil.rmtree(dump, ignore_errors=True)
            else:
                run = _peer(name, job, work / f"{name}.json")
                res = run.result
                raw[name].append({"seconds": run.since_start(res["done_at"]), "process_s": run.wall_s,
                                  **{k: v for k, v in res.items() if k not in ("mode", "done_at")}})
        log(f"  {tag} round {r + 1}/{rounds}: " + ", ".join(f"{n} {raw[n][-1]['seconds']:.2f} s" for n in contenders))
    captured = sum(rec["size_bytes"] for rec in manifest["tensors"].values())
    op_types = {node["name"]: node["op"] for node in manifest["graph"]["nodes"]}
    ref_variables = sum(rec["size_bytes"] for n, rec in manifest["tensors"].items()
                        if op_types.get(n.rsplit(":", 1)[0]) in ("VariableV2", "VariableV1", "Variable"))
    return {
        "model": model.name,
        "batch": batch,
        "rounds": rounds,
        "seconds": {name: median([x["seconds"] for x in raw[name]]) for name in contenders},
        # each round's contenders ran minutes apart at most; the median of per-round ratios
        # follows the machine's load better than the ratio of medians
        "ratios": {peer: median([c["seconds"] / p["seconds"] for c, p in zip(raw["capture"], raw[peer])])
                   for peer in contenders if peer != "capture"},
        "capture_disk_bytes": median([x["disk"]["apparent"] for x in raw["capture"]]),
        "tfdbg_disk_bytes": median([x["disk_one_run"] for x in raw["tfdbg"]]),
        "tfdbg_first_run_s": median([x["first_run_s"] for x in raw["tfdbg"]]),
        "tfdbg_next_run_s": median([x["next_runs_s"][0] for x in raw["tfdbg"]]),
        "naive_first_run_s": median([x["first_run_s"] for x in raw["naive"]]),
        "naive_next_run_s": median([x["next_runs_s"][0] for x in raw["naive"]]),
        "plain_next_run_s": median([min(x["next_runs_s"]) for x in raw["plain"]]) if raw.get("plain") else None,
        "tensors_captured": len(manifest["tensors"]),
        "tensor_bytes": captured,
        "activation_bytes": sum(rec["size_bytes"] for n, rec in manifest["tensors"].items()
                                if manifest["tensor_layout"].get(n) == "rows"),
        "ref_variable_bytes": ref_variables,  # VariableV2 outputs: the same values as their /read
        # tensors whose bytes are another's (alias_of: a hard link to its file), stored once
        "aliased_bytes": sum(rec["size_bytes"] for rec in manifest["tensors"].values() if "alias_of" in rec),
        "capture_child_s": {k: median([x["child_timings"].get(k, 0.0) for x in raw["capture"]])
                            for k in ("load_s", "instrumented_s", "sync_s", "total_s")},
        "capture_process_s": median([x["process_s"] for x in raw["capture"]]),
        "warmup_capture_s": warm.wall_s if warmup else None,
        "raw": raw,
    }
