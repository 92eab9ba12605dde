"""``python -m bench --scale``: a model whose activations do not fit in this machine's memory,
captured and compared (issue 29, item 4).

ResNet-152 (:mod:`bench.workloads.resnet`, 60 M parameters, about 404 MB of float activations
per 224x224 example) at a batch whose raw intermediate tensors total more than the machine's
RAM (75 examples: about 30 GB, on a 23.5 GB machine). Each side is captured as a user types
it, with ``--max-process-memory 4000000000`` (the capture process's whole peak, TensorFlow
included; the fetch is split into parts under what TensorFlow's measured peak leaves of it) and
``--max-memory`` at its default (2 GiB: the most one ``session.run`` may fetch), then the two
captures are compared. Measured:

- peak memory: the resident set of the whole process tree (the ``tftrace`` command and its
  capture child), sampled every 0.1 s; the capture child's own peaks, as its manifest's
  ``memory`` records them (the kernel's ``VmHWM``); a compare's own high-water mark (``VmHWM``,
  read by :mod:`bench.rss_probe` in its process);
- disk: the capture directories' bytes, against tfdbg2's dump of the same run, projected from
  two small batches (a dump of 30 GB of tensors does not fit beside the captures; the projection
  is the dump's bytes at batch 1 plus the growth per example, which is linear here: every
  activation's first axis is the batch);
- time: each step's wall seconds;
- the progress the command printed (its stderr is a pipe here: one line per stage, with the
  bytes stored and the share of the run's planned bytes): the last figure it printed against the
  bytes the capture holds, and whether the figures ever went backwards.

Long (about nine minutes on 2 cores, once the model is generated), so not part of ``make bench``'s default run:
``make bench-scale`` writes ``bench/results_scale.json``, and the page's section is written from it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .capture_bench import tfdbg_dump_bytes
from .procs import REPO, child_env, dir_bytes, machine, run_child
from .workspace import Workspace

__all__ = ["SCALE_NAME", "measure_scale", "scale_section", "load_scale", "progress_lines", "progress_figures",
           "project_linear", "main"]

SCALE_NAME = "results_scale.json"  # in bench/
MODEL = "resnet152"
BATCH = 75
PROCESS_LIMIT = 4_000_000_000  # --max-process-memory of each capture
_MB = re.compile(r"(\d[\d,]*\.\d) MB \((?:(\d+) min )?(\d+) s\)$")


def progress_lines(stderr: str) -> list[str]:
    """The progress lines the command printed (those that end in "MB (elapsed)"), in order."""
    return [line.strip() for line in stderr.splitlines() if _MB.search(line.strip())]


def progress_figures(lines: list[str]) -> list[tuple[float, float]]:
    """(seconds, MB stored) of each progress line."""
    figures = []
    for line in lines:
        found = _MB.search(line)
        if found:
            seconds = int(found.group(2) or 0) * 60 + int(found.group(3))
            figures.append((float(seconds), float(found.group(1).replace(",", ""))))
    return figures


def project_linear(small: dict[int, int], batch: int) -> int:
    """Bytes at ``batch`` from bytes measured at two smaller batches, on the line through them."""
    (b1, d1), (b2, d2) = sorted(small.items())[:2]
    return int(d1 + (d2 - d1) * (batch - b1) / (b2 - b1))


def _capture(ws: Workspace, side: str, model_path: Path, inputs: Path, log: Callable[[str], None]) -> dict[str, Any]:
    out = ws.fresh("scale", side)
    argv = [sys.executable, "-m", "tracer.cli", "capture", str(model_path), "--inputs", str(inputs), "--out", str(out),
            "--max-process-memory", str(PROCESS_LIMIT)]
    run = run_child(argv, env=child_env(), timeout_s=3600, sample_rss=True)  # raises BenchError on a failure
    manifest = json.loads((out / "manifest.json").read_text())
    records = manifest["tensors"].values()
    held_mb = sum(r["size_bytes"] for r in records) / 1e6
    lines = progress_lines(run.stderr)
    figures = progress_figures(lines)
    log(f"  capture {side}: {run.wall_s:.0f} s, peak {run.peak_tree_rss_bytes / 1e9:.2f} GB (tree), "
        f"{manifest['memory']['run_peak_bytes'] / 1e9:.2f} GB (child), "
        f"{dir_bytes(out)['apparent'] / 1e9:.2f} GB on disk, {manifest.get('fetch_chunks')} parts")
    return {
        "side": side, "path": str(out), "wall_s": round(run.wall_s, 1), "peak_rss_bytes": run.peak_tree_rss_bytes,
        "memory": manifest["memory"],
        "disk": dir_bytes(out), "fetch_chunks": manifest.get("fetch_chunks"), "timings": manifest["timings"],
        "tensors": len(manifest["tensors"]),
        "activation_bytes": sum(r["size_bytes"] for n, r in manifest["tensors"].items()
                                if manifest["tensor_layout"].get(n) == "rows"),
        "held_mb": round(held_mb, 1),
        "progress": {"lines": len(figures), "last_mb": figures[-1][1] if figures else None,
                     "never_backwards": all(b[1] >= a[1] for a, b in zip(figures, figures[1:])),
                     "figures": figures, "printed": lines},
    }


def measure_scale(ws: Workspace, log: Callable[[str], None], batch: int = BATCH) -> dict[str, Any]:
    """Capture both sides of ResNet-152 at ``batch``, compare them, and project tfdbg2's dump."""
    model = ws.model(MODEL, log)
    inputs = ws.inputs(model, batch)
    load = [round(x, 2) for x in os.getloadavg()]  # other work on the machine moves the wall times
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    sides = [_capture(ws, "ckpt", model.ckpt, inputs, log), _capture(ws, "savedmodel", model.savedmodel, inputs, log)]
    report = ws.fresh("scale", "report")
    run = run_child([sys.executable, "-m", "bench.rss_probe", sides[0]["path"], sides[1]["path"], str(report)],
                    timeout_s=3600)
    compare = {"wall_s": round(run.wall_s, 1), **run.result}
    log(f"  compare: {run.wall_s:.0f} s, peak {compare['peak_mb']:.0f} MB, {compare['verdict']}")
    dumps = {b: tfdbg_dump_bytes(ws, model, b) for b in (1, 2)}
    projected = project_linear(dumps, batch)
    log(f"  tfdbg2 dump: {dumps[1] / 1e6:.0f} MB at batch 1, {dumps[2] / 1e6:.0f} MB at 2; projected "
        f"{projected / 1e9:.1f} GB at {batch}")
    for side in sides:
        shutil.rmtree(side["path"], ignore_errors=True)
    return {"model": MODEL, "batch": batch, "machine_memory_bytes": memory, "max_memory_bytes": 2 << 30,
            "max_process_memory_bytes": PROCESS_LIMIT, "load_average_at_start": load,
            "sides": sides, "compare": compare, "tfdbg_dump_bytes": {str(k): v for k, v in dumps.items()},
            "tfdbg_projected_bytes": projected}


def load_scale(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def scale_section(d: dict[str, Any] | None) -> str:
    """BENCHMARKS.md's section on the scale workload, from ``results_scale.json``."""
    if not d:
        return ""
    gb = 1e9
    sides, compare = d["sides"], d["compare"]
    disk = max(s["disk"]["apparent"] for s in sides)
    out = ["### Bigger than memory: ResNet-152 at batch " f"{d['batch']} (`make bench-scale`)", "",
           (f"Measured {d.get('finished', '?')} on this machine ({d['machine_memory_bytes'] / gb:.1f} GB of RAM"
            + (f"; load average at start {d['load_average_at_start']}" if d.get("load_average_at_start") else "")
            + "). "
            f"Each side's raw intermediate tensors total {sides[0]['activation_bytes'] / gb:.1f} GB "
            f"({sides[0]['held_mb'] / 1e3:.1f} GB with the weights), "
            f"{'more' if sides[0]['activation_bytes'] > d['machine_memory_bytes'] else 'less'} than the machine's "
            "memory. Each capture ran with `--max-process-memory "
            f"{d['max_process_memory_bytes']:,}`: the capture process's whole peak, TensorFlow's own memory "
            "included. Its plain runs measured what TensorFlow and the model hold at this batch; the fetch got "
            f"what that and the writer's share left (`--max-memory` stayed at its default, "
            f"{d['max_memory_bytes'] / 2**30:.0f} GiB, the larger), split into parts under it, each written before "
            "the next was fetched."), "",
           "| step | wall | peak memory | disk | parts | progress printed |", "|---|---|---|---|---|---|"]
    for s in sides:
        p = s["progress"]
        said = (f"{p['lines']} lines, last {p['last_mb']:,.1f} MB of {s['held_mb']:,.1f} MB held, "
                f"{'never backwards' if p['never_backwards'] else 'WENT BACKWARDS'}") if p["lines"] else "none"
        out.append(f"| capture {s['side']} | {s['wall_s']:.0f} s | {s['memory']['run_peak_bytes'] / gb:.2f} GB "
                   f"(with the `tftrace` command: {s['peak_rss_bytes'] / gb:.2f} GB) | "
                   f"{s['disk']['apparent'] / gb:.2f} GB | {s['fetch_chunks']} | {said} |")
    out.append(f"| compare the two captures | {compare['wall_s']:.0f} s | {compare['peak_mb'] / 1e3:.2f} GB "
               f"({compare['peak_mb'] - compare['baseline_mb']:.0f} MB above its imports) | — | — | "
               f"verdict {compare['verdict']} |")
    peaks = [s["memory"]["run_peak_bytes"] for s in sides]
    plain = [s["memory"]["plain_peak_bytes"] for s in sides]
    budgets = [s["memory"]["fetch_budget_bytes"] for s in sides]
    limit = d["max_process_memory_bytes"]
    out += ["", (f"Memory: the capture processes peaked at {min(peaks) / gb:.2f}–{max(peaks) / gb:.2f} GB "
                 f"(their manifests' `run_peak_bytes`, the kernel's `VmHWM` from the plain runs on), "
                 f"{'under' if max(peaks) <= limit else 'ABOVE'} the {limit / gb:.1f} GB limit: "
                 f"{max(peaks) / limit:.2f}× it, and {max(peaks) / sides[0]['activation_bytes']:.2f}× the "
                 f"{sides[0]['activation_bytes'] / gb:.1f} GB of activations a fetch of everything at once would "
                 f"hold. TensorFlow and the model held {min(plain) / gb:.2f}–{max(plain) / gb:.2f} GB over the "
                 f"plain runs, which left {min(budgets) / gb:.2f}–{max(budgets) / gb:.2f} GB for one fetch. The "
                 "`tftrace` command that started each capture holds its own memory beside it (the column's second "
                 "figure is the two together, sampled every 0.1 s)."),
            "", (f"Disk: {disk / gb:.2f} GB per capture against tfdbg2's dump of the same run, projected to "
                 f"{d['tfdbg_projected_bytes'] / gb:.1f} GB from {int(d['tfdbg_dump_bytes']['1']) / 1e6:.0f} MB at "
                 f"batch 1 and {int(d['tfdbg_dump_bytes']['2']) / 1e6:.0f} MB at batch 2: "
                 f"**{disk / d['tfdbg_projected_bytes']:.2f}×** (target ≤ 0.3×)."), ""]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse  # noqa: PLC0415

    parser = argparse.ArgumentParser(prog="python -m bench.scale_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=BATCH)
    parser.add_argument("--work", type=Path, default=REPO / "out" / "bench")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / SCALE_NAME)
    args = parser.parse_args(argv)
    started = time.time()

    def log(message: str) -> None:
        print(f"[{time.time() - started:6.0f} s] {message}", flush=True)

    figure = measure_scale(Workspace(args.work), log, args.batch)
    figure.update({"machine": machine(), "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                   "duration_s": round(time.time() - started, 1)})
    args.out.write_text(json.dumps(figure, indent=1) + "\n")
    print(scale_section(figure))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
