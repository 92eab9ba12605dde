"""``tftrace diagnose`` wall time: in total, per experiment, and where the child processes' seconds go.

Issue 29 asks where a diagnosis spends its minutes: each experiment's wall time, and the share
spent starting processes, importing TensorFlow and loading the model (the fixed price of every
child) against the work itself. diagnose measures all of it as it runs (``timings`` in
``diagnosis.json``, :mod:`tracer.children`); this module runs it as a user types it, on the
sample detector's checkpoint and SavedModel (the full matrix; ``--quick``'s with ``quick``),
and keeps those figures.

On the GPU machine, where ``make bench`` does not run whole: ``python -m bench.diagnose_bench
--device gpu --out DIR`` writes ``DIR/results_diagnose.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .procs import REPO, child_env, machine, run_child
from .workspace import Model, Workspace

__all__ = ["measure_diagnose", "shares", "diagnose_row", "diagnose_section", "load_diagnose", "main",
           "GPU_DIAGNOSE_NAME"]

GPU_DIAGNOSE_NAME = "results_diagnose_gpu.json"  # in bench/: the run on the lent GPU, kept
NOTES = REPO / "bench" / "diagnose_notes.md"  # hand-written: side-by-side runs of two builds, kept with the figures

PARTS = {"start_s": "starting processes", "import_s": "importing TensorFlow", "model_s": "loading the model",
         "idle_s": "loaded ahead, waiting for their job"}


def measure_diagnose(ws: Workspace, model: Model, log: Callable[[str], None], *, device: str = "cpu",
                     quick: bool = False, stderr_log: Path | None = None) -> dict[str, Any]:
    """One ``tftrace diagnose`` of ``model`` (checkpoint, with its SavedModel), as typed."""
    out = ws.fresh("diagnose", f"{model.name}_{device}{'_quick' if quick else ''}")
    argv = [sys.executable, "-m", "tracer.cli", "diagnose", str(model.ckpt), "--savedmodel", str(model.savedmodel),
            "--device", device, "--out", str(out), *(["--quick"] if quick else [])]
    run = run_child(argv, env=child_env(device=device), ok_codes=(0, 1), timeout_s=3600,
                    stderr_log=stderr_log)
    doc = json.loads((out / "diagnosis.json").read_text())
    timings = doc["timings"]
    experiments = [{"name": e["name"], "verdict": e["verdict"], "wall_s": timings["experiment_s"].get(e["name"])}
                   for e in doc["experiments"] if e.get("skipped") is None]
    log(f"  diagnose {model.name} on {device}: {run.wall_s:.0f} s, {len(experiments)} experiments, "
        f"{timings['children']['count']} child processes")
    return {"model": model.name, "device": device, "quick": quick, "wall_s": round(run.wall_s, 2),
            "exit_code": run.returncode, "timings": timings, "experiments": experiments,
            "shares": shares(timings["children"]), "environment": doc["environment"]}


def shares(children: dict[str, Any]) -> dict[str, float]:
    """Each fixed price's share of the children's summed wall seconds, and the rest (``work``:
    running the model, writing, replaying, timing). Shares of process-seconds, not of diagnose's
    wall time: two children run at once."""
    wall = float(children.get("wall_s") or 0.0)
    if wall <= 0:
        return {}
    parts = {key: float(children.get(key) or 0.0) / wall for key in PARTS}
    return {**{k: round(v, 3) for k, v in parts.items()}, "work": round(max(0.0, 1.0 - sum(parts.values())), 3)}


def load_diagnose(path: Path) -> dict[str, Any] | None:
    """A kept figure (``results_diagnose.json`` of a run elsewhere), or None where there is none."""
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _where(d: dict[str, Any]) -> str:
    gpus = [g.get("device_name") or g.get("name") for g in (d.get("environment") or {}).get("gpus") or []
            if isinstance(g, dict)]
    return f"{d['device'].upper()}{' (' + ', '.join(map(str, gpus)) + ')' if gpus and d['device'] != 'cpu' else ''}"


def diagnose_row(d: dict[str, Any]) -> tuple[str, str]:
    """(figure, measured) of the benchmark table's row for one diagnose run."""
    s = d["shares"]
    return (f"tftrace diagnose, sample detector, {'--quick' if d['quick'] else 'full'} matrix, {_where(d)}",
            f"{d['wall_s']:.0f} s, {len(d['experiments'])} experiments, {d['timings']['children']['count']} processes; "
            f"TF import {s.get('import_s', 0):.0%} of their time")


def diagnose_section(runs: list[dict[str, Any]]) -> str:
    """BENCHMARKS.md's section on diagnose: per run, where the time went, step by step."""
    if not runs:
        return ""
    out = ["### `tftrace diagnose`: where its time goes", "",
           ("`tftrace diagnose CKPT --savedmodel SAVEDMODEL` on the sample detector, as typed, timed from `Popen` to "
            "exit. diagnose times itself as it goes (`timings` in `diagnosis.json`): each step's wall seconds, "
            "and every child process it started, each of which says how long it took to come up (interpreter "
            "and tftrace's imports), to import TensorFlow and to load the model. Two experiments run at once, "
            "so the experiments' seconds add up to more than their stage's, and the children's shares are of "
            "process-seconds, not of the wall time."), ""]
    for d in runs:
        t, c, s = d["timings"], d["timings"]["children"], d["shares"]
        recipe = f"the verified recipe {t['recipe_s']:.1f} s and " if t.get("recipe_s") else ""
        out += [f"**{_where(d)}**, {d['wall_s']:.0f} s in all: the base side {t['base_s']:.0f} s, the other captures "
                f"{t['captures_s']:.0f} s, then {t['experiments_s']:.0f} s for the experiments, of which "
                f"{recipe}timing the costs {t.get('costs_s', 0):.0f} s. "
                f"{c['count']} child processes, {c['wall_s']:.0f} process-seconds: starting them "
                f"{s.get('start_s', 0):.0%}, importing TensorFlow {s.get('import_s', 0):.0%}, loading the model "
                f"{s.get('model_s', 0):.0%}, "
                + (f"loaded ahead and waiting for their job {s['idle_s']:.0%}, " if s.get("idle_s") else "")
                + f"the work itself {s.get('work', 0):.0%}.", "",
                "| step | wall s | processes | process-s | of which TF import |", "|---|---|---|---|---|"]
        walls = {"base side": t["base_s"], "captures": t["captures_s"], **t["experiment_s"],
                 **({"recipe": t["recipe_s"]} if t.get("recipe_s") else {}), "costs": t.get("costs_s")}
        steps = t["children_by_step"]
        for step in [*walls, *(s for s in steps if s not in walls)]:
            wall, kids = walls.get(step), steps.get(step, {"count": 0, "wall_s": 0.0, "import_s": 0.0})
            out.append(f"| {step} | {'—' if wall is None else f'{wall:.1f}'} | {kids['count']} | {kids['wall_s']:.1f} | "
                       f"{kids['import_s']:.1f} |")
        out.append("")
    if NOTES.is_file():
        out += [NOTES.read_text(encoding="utf-8").strip(), ""]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.diagnose_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", help="cpu (default) or gpu")
    parser.add_argument("--quick", action="store_true", help="diagnose --quick's matrix")
    parser.add_argument("--work", type=Path, default=REPO / "out" / "bench")
    parser.add_argument("--out", type=Path, default=REPO / "out" / "bench",
                        help="where results_diagnose.json goes (default out/bench)")
    parser.add_argument("--log", type=Path, help="write diagnose's stderr (its progress) to this file as it runs")
    args = parser.parse_args(argv)
    ws = Workspace(args.work)
    figure = measure_diagnose(ws, ws.model("detector"), print, device=args.device, quick=args.quick,
                              stderr_log=args.log)
    figure["machine"] = machine()
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / "results_diagnose.json"
    path.write_text(json.dumps(figure, indent=1) + "\n")
    print(json.dumps({"wall_s": figure["wall_s"], "shares": figure["shares"]}))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
