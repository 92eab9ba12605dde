"""``python -m bench --gpu --out DIR``: the capture figures on a GPU (issue 14, item 5).

The same contenders as the CPU benchmark (:mod:`bench.capture_bench`), each its own process,
side by side in rotating rounds, with the device set: ``tftrace capture --device gpu``, tfdbg
v2 FULL_TENSOR and the naive fetch-all script with their graphs on ``/GPU:0``
(:mod:`bench.peers`), CUDA visible to all three. Workloads: ResNet-50 at batch 1, then batch 8, then
the SSD300 detector at batch 1 (issue 29's marginal cost names all three).

Before the timed rounds, one untimed round of every contender at batch 1 pays what only the
first process on a fresh machine pays (the GPU code compiled from PTX and cached on disk,
cuDNN's first loads); it is kept in the results as ``first_use``, never in a figure.

Made for one call on a lent machine with a time limit: it refuses at once (exit 2) where
TensorFlow sees no GPU, prints its progress, writes ``results_gpu.json`` after every round
(atomically, ``complete: false`` until the end) and a log beside it, and stops starting rounds
that would end past ``--budget-s``. ``--device cpu`` runs the very same code on the CPU (a
check of the harness, labelled so in the file and on the page); ``--quick`` uses the sample
detector and one round.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import procs
from .capture_bench import measure_capture
from .gpu_report import GPU_RESULTS_NAME, build_gpu_rows, write_gpu_results
from .procs import REPO, BenchError, child_env, machine, run_child
from .results import format_table
from .workspace import Workspace

__all__ = ["GPU_FULL", "GPU_QUICK", "GpuPlan", "NoGpu", "main_gpu", "probe_device"]

CONTENDERS = ("capture", "tfdbg", "naive", "plain")  # plain: what tracing adds to a plain run (issue 29)
LOG_NAME = "bench_gpu.log"


@dataclass(frozen=True)
class GpuPlan:
    """Which workloads, how many rounds at most (the time budget may allow fewer)."""

    name: str
    workloads: tuple[tuple[str, int, int], ...]  # (model, batch, rounds); the first is the headline
    first_use_batch: int = 1  # the untimed round of every contender, on the first workload's model


GPU_FULL = GpuPlan("gpu", (("resnet50", 1, 5), ("resnet50", 8, 4), ("ssd300", 1, 3)))  # rounds at most: --budget-s decides
GPU_QUICK = GpuPlan("gpu-quick", (("detector", 1, 1), ("detector", 8, 1)))

PROBE = r"""
import json, tensorflow as tf
gpus = tf.config.list_physical_devices("GPU")
def details(d):
    try:
        return {k: (".".join(map(str, v)) if isinstance(v, tuple) else v)
                for k, v in tf.config.experimental.get_device_details(d).items()}
    except Exception:
        return {}
build = dict(tf.sysconfig.get_build_info())
print(json.dumps({"tensorflow": tf.__version__, "tf_git_version": tf.version.GIT_VERSION,
                  "build": {k: build.get(k) for k in ("is_cuda_build", "cuda_version", "cudnn_version",
                                                     "cuda_compute_capabilities") if k in build},
                  "gpus": [{"name": d.name, **details(d)} for d in gpus]}, default=str))
"""


class NoGpu(Exception):
    """The device asked for is a GPU and TensorFlow sees none: nothing can be measured here."""


def probe_device(device: str) -> dict[str, Any]:
    """TensorFlow's version, build and GPUs as a contender's process sees them (same environment);
    ``nvidia_smi``: the driver's own line per GPU, where the tool exists. Raises NoGpu."""
    run = run_child([sys.executable, "-c", PROBE], env=child_env(device=device), timeout_s=300)
    info = run.result
    smi = shutil.which("nvidia-smi")
    if smi:
        proc = subprocess.run([smi, "--query-gpu=name,driver_version,memory.total,pci.bus_id", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=60, check=False)
        info["nvidia_smi"] = [line.strip() for line in proc.stdout.splitlines() if line.strip()] or proc.stderr.strip()
    if device.startswith("gpu") and not info.get("gpus"):
        build = info.get("build") or {}
        why = ("a CPU-only build" if not build.get("is_cuda_build") else
               f"a CUDA {build.get('cuda_version')} build that found no usable GPU")
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        raise NoGpu(f"TensorFlow {info.get('tensorflow', '?')} sees no GPU here ({why}"
                    + (f", CUDA_VISIBLE_DEVICES={visible!r}" if visible is not None else "") + ")")
    return info


def _deadlines(plan: GpuPlan, end: float) -> Callable[[int], float]:
    """Workload i may run rounds until its share of the time left (a batch-8 round costs more)."""
    weights = [1.0 + batch / 16 for _m, batch, _r in plan.workloads]

    def deadline(i: int) -> float:
        now = time.time()
        return now + max(0.0, end - now) * weights[i] / sum(weights[i:])

    return deadline


def run_gpu(plan: GpuPlan, device: str, work: Path, results: Path, meta: dict[str, Any], budget_s: float,
            log: Callable[[str], None]) -> dict[str, Any]:
    """Measure every workload; ``results`` is rewritten after every round (a partial file on a cut)."""
    procs.SETTLE = True
    ws = Workspace(work)
    end = time.time() + budget_s
    figs: dict[str, Any] = {"device": device, "capture": [], "failed_workloads": []}

    def save(partial: dict[str, Any] | None = None, complete: bool = False) -> None:
        shown = {**figs, "capture": figs["capture"] + ([partial] if partial else [])}
        write_gpu_results(results, shown, {**meta, "complete": complete, "finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
                                           "duration_s": round(time.time() - meta["started_epoch"], 1),
                                           "load_average_at_end": [round(x, 2) for x in os.getloadavg()]})

    save()  # the machine, before anything can fail or time out
    deadline = _deadlines(plan, end)
    first_model = plan.workloads[0][0]
    log(f"model {first_model} (generated once into {ws.models_dir})")
    model = ws.model(first_model, log)
    log(f"first use: every contender once at batch {plan.first_use_batch}, untimed for the figures")
    try:
        figs["first_use"] = measure_capture(ws, model, plan.first_use_batch, 1, log, warmup=False,
                                            contenders=CONTENDERS, device=device, tolerate_failures=True)
    except BenchError as exc:  # a capture that cannot run at all here: say so, measure the rest
        figs["first_use"] = {"error": str(exc)}
        log(f"first use failed: {exc}")
    save()
    for i, (name, batch, rounds) in enumerate(plan.workloads):
        if i and time.time() > end:
            log(f"time budget spent: {name} batch {batch} not measured")
            figs["failed_workloads"].append({"model": name, "batch": batch, "error": "not run: time budget spent"})
            continue
        model = ws.model(name, log)
        log(f"capture vs tfdbg / naive on {device}: {name}, batch {batch}, up to {rounds} round(s)")
        try:
            # the first-use round already warmed its own model and batch; any other needs the warm-up capture
            warm = (name, batch) != (first_model, plan.first_use_batch) or "error" in figs["first_use"]
            figs["capture"].append(measure_capture(ws, model, batch, rounds, log, warmup=warm, contenders=CONTENDERS,
                                                   device=device, on_round=save, deadline=deadline(i),
                                                   tolerate_failures=True))
        except BenchError as exc:
            log(f"{name} batch {batch} failed: {exc}")
            figs["failed_workloads"].append({"model": name, "batch": batch, "error": str(exc)})
        save()
    save(complete=True)
    return figs


def main_gpu(device: str, quick: bool, out: Path | None, work: Path | None, budget_s: float) -> int:
    """Run the GPU benchmark; 2 when the device is a GPU TensorFlow cannot see."""
    device = device.lower()
    if device != "cpu" and not device.startswith("gpu"):
        print(f"error: unknown device {device!r}\nfix: use --device gpu (the default), gpu:N, or cpu", file=sys.stderr)
        return 2
    plan = GPU_QUICK if quick else GPU_FULL
    real = device.startswith("gpu") and not quick
    out = (out or (REPO / "bench" if real else REPO / "out" / "bench" / "gpu" / "results")).resolve()
    work = (work or REPO / "out" / "bench" / ("gpu" if real else "gpu_check")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    results = out / GPU_RESULTS_NAME
    started = time.time()
    log_file = (out / LOG_NAME).open("w", encoding="utf-8")  # the log of the run that wrote results_gpu.json

    def log(message: str) -> None:
        line = f"[{time.time() - started:6.0f} s] {message}"
        print(line, flush=True)
        log_file.write(line + "\n")
        log_file.flush()

    try:
        log(f"python -m bench --gpu --device {device}{' --quick' if quick else ''}: {plan.name}, "
            f"budget {budget_s:.0f} s, results to {results}")
        try:
            probe = probe_device(device)
        except NoGpu as exc:
            log(f"refused: {exc}")
            print(f"error: {exc}\nfix: run python -m bench --gpu on the machine with the GPU (with its CUDA libraries on "
                  "LD_LIBRARY_PATH), or add --device cpu to check the harness on this CPU", file=sys.stderr)
            return 2
        log(f"TensorFlow {probe.get('tensorflow')}, GPUs {[g.get('device_name', g.get('name')) for g in probe.get('gpus', [])]}"
            f", nvidia-smi {probe.get('nvidia_smi', 'absent')}")
        meta: dict[str, Any] = {"mode": plan.name, "device": device, "machine": {**machine(), "gpu": probe},
                                "tensorflow": probe.get("tensorflow", "?"), "budget_s": budget_s,
                                "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
                                "started_epoch": started}
        figs = run_gpu(plan, device, work, results, meta, budget_s, log)
        print()
        print(format_table(build_gpu_rows(figs)))
        log(f"done in {time.time() - started:.0f} s; wrote {results}")
        return 0
    except BaseException as exc:  # keep the cause in the log that comes back, then fail as usual
        log(f"aborted: {type(exc).__name__}: {exc}\n{traceback.format_exc()}")
        raise
    finally:
        log_file.close()
