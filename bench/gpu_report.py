"""``results_gpu.json`` and the GPU section of BENCHMARKS.md (no TensorFlow needed).

The file has the shape of ``results.json``: the headline ratios (of the first workload), every
row with its target and pass/fail, the machine (its GPU, driver and TensorFlow build included),
and the raw rounds. ``complete`` is false while the run is going on or when it was cut short;
``device`` says where the contenders ran (``cpu``: a check of the harness, not GPU figures).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tracer.safewrite import write_file

from .notes import _capture_limits, _capture_notes, per_round
from .results import Row, _capture_rows, markdown_table

__all__ = ["GPU_RESULTS_NAME", "build_gpu_rows", "gpu_headline", "gpu_section", "load_gpu_results", "write_gpu_results"]

GPU_RESULTS_NAME = "results_gpu.json"


def _label(c: dict[str, Any], device: str) -> str:
    return f"{c['model']}, batch {c['batch']}, {device.upper()}"


def build_gpu_rows(figs: dict[str, Any]) -> list[Row]:
    """Every workload's capture rows (time and disk against tfdbg, time against the naive
    script), labelled with the device; a workload that could not run is a row saying why."""
    device = figs.get("device", "gpu")
    rows: list[Row] = []
    for c in figs["capture"]:
        rows += _capture_rows(c, _label(c, device))
    for f in figs.get("failed_workloads", []):
        lines = str(f["error"]).strip().splitlines() or ["?"]
        rows.append(Row(f"capture all intermediates ({f['model']}, batch {f['batch']}, {device.upper()})",
                        "not measured", lines[-1][:160], None, "—", None))
    return rows


def gpu_headline(figs: dict[str, Any]) -> dict[str, Any]:
    """The CPU file's headline keys, from the first workload measured (None where a peer failed)."""
    if not figs["capture"]:
        return {}
    c = figs["capture"][0]
    q = c["ratios"]
    disk = c["capture_disk_bytes"] / c["tfdbg_disk_bytes"] if "tfdbg_disk_bytes" in c else None
    return {"capture_vs_tfdbg_ratio": q.get("tfdbg"), "capture_disk_vs_tfdbg_ratio": disk,
            "capture_vs_naive_ratio": q.get("naive")}


def write_gpu_results(path: Path, figs: dict[str, Any], meta: dict[str, Any]) -> None:
    """Write atomically: a run killed while writing leaves the previous round's complete file."""
    rows = build_gpu_rows(figs)
    data = {**gpu_headline(figs), "passed": {r.figure: r.passed for r in rows}, "table": [asdict(r) for r in rows],
            **{k: v for k, v in meta.items() if k != "started_epoch"}, "raw": figs}
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, json.dumps(data, indent=1, default=str) + "\n")


def load_gpu_results(path: Path) -> dict[str, Any] | None:
    """The GPU results at ``path``, or None when there are none."""
    return json.loads(path.read_text()) if path.is_file() else None


def _gpu_line(data: dict[str, Any]) -> str:
    m = data["machine"]
    probe = m.get("gpu") or {}
    gpus = probe.get("gpus") or []
    names = ", ".join(f"{g.get('device_name', g.get('name'))}"
                      + (f" (compute capability {g['compute_capability']})" if g.get("compute_capability") else "")
                      for g in gpus) or "none"
    smi = probe.get("nvidia_smi")
    driver = f"; `nvidia-smi`: {'; '.join(smi) if isinstance(smi, list) else smi}" if smi else ""
    build = probe.get("build") or {}
    built = (f", built for CUDA {build.get('cuda_version')} / cuDNN {build.get('cudnn_version')}"
             if build.get("is_cuda_build") else ", a CPU-only build")
    return (f"**GPU:** {names}{driver}. TensorFlow {probe.get('tensorflow', data.get('tensorflow', '?'))} "
            f"(`{probe.get('tf_git_version', '?')}`){built}. Host: {m['cpu']}, {m['cores']} cores, "
            f"{m['memory_gb']} GB RAM, {m['os']}; Python {m['python']}, numpy {m['numpy']}.")


def _how(data: dict[str, Any], device: str) -> str:
    gpu = device.startswith("gpu")
    scope = f'`tf.device("/{"GPU" if gpu else "CPU"}:0")`'
    first = data["raw"].get("first_use") or {}
    if "seconds" in first:
        used = ", ".join(f"{k} {v:.1f} s" for k, v in first["seconds"].items())
        ran = "failed for: " + ", ".join(first["failed"]) if first.get("failed") else "every contender ran"
        first_text = f" Here that round took {used} (the figures below are of the later rounds); {ran}."
    elif "error" in first:
        first_text = f" That round failed: {str(first['error']).strip().splitlines()[-1][:200]}."
    else:
        first_text = ""
    return (
        f"Each contender is its own process{' with CUDA visible' if gpu else ''}, fed the same `.npy` examples "
        "and checkpoint, timed from `Popen` to the moment its result exists, in rounds of rotating order, `sync` "
        f"before each: `tftrace capture CKPT --inputs X.npy --device {device}`; tfdbg v2 FULL_TENSOR rebuilding "
        f"the graph under {scope} (as on the CPU: an imported graph would dump nothing); the naive script "
        f"importing the checkpoint under {scope} and fetching every tensor tftrace captured. The peers' sessions "
        "use soft placement" + (" and GPU memory grown on demand, as tftrace's own `--device gpu` session does. "
                                "Every process pays CUDA's start-up and cuDNN's autotuning for itself." if gpu else ".")
        + " Before the rounds, one untimed round of every contender at batch 1 pays what only the first process "
        "on a fresh machine pays (GPU code compiled from PTX and cached on disk); it is in the raw results as "
        "`first_use`, in no figure." + first_text
    )


def _import_noise(figs: dict[str, Any]) -> list[str]:
    """How much ``import tensorflow`` alone varied between the peers' processes of this run, set
    against what the capture added to a plain run in each workload: the marginal figure is a
    difference of two process times that each carry that spread, so it is resolved only where
    what it measures stands above it."""
    imports = [r["import_s"] for c in figs["capture"] for peer in ("naive", "tfdbg", "plain")
               for r in c["raw"].get(peer, []) if isinstance(r.get("import_s"), (int, float))]
    added = [(f"{c['model']}, batch {c['batch']}", c["seconds"]["capture"] - c["seconds"]["plain"])
             for c in figs["capture"] if "plain" in c["seconds"]]
    if len(imports) < 2 or not added:
        return []
    spread = max(imports) - min(imports)
    clear = [f"{name} ({a:+.2f} s)" for name, a in added if abs(a) > spread]
    within = [f"{name} ({a:+.2f} s)" for name, a in added if abs(a) <= spread]
    removed = [f"{c['model']}, batch {c['batch']}: {per_round(c['marginal_rounds']['import_removed'])}"
               for c in figs["capture"] if c.get("marginal_import_removed") is not None]
    rounds = sorted({c["rounds"] for c in figs["capture"]})
    verdict = " and ".join(
        ([f"stands clear of it for {', '.join(clear)}"] if clear else [])
        + ([f"stays within it for {', '.join(within)}"] if within else []))
    return [(f"**Noise.** In this run `import tensorflow` alone took {min(imports):.1f}–{max(imports):.1f} s in the "
             f"peers' {len(imports)} processes, a spread of {spread:.1f} s, with {'/'.join(map(str, rounds))} round(s) "
             f"per workload. What the capture added to a plain run {verdict}. The marginal figure is a difference "
             "of two such process times: read it as resolved only where what it measures stands clear of that "
             "spread."
             + (" Each process's own import taken out of its time, the marginal figure per round was "
                + "; ".join(removed) + " (the rows \"each process's TensorFlow import taken out\")." if removed else "")),
            ""]


def gpu_section(data: dict[str, Any] | None, source: str = "bench/results_gpu.json") -> str:
    """The ``## On a GPU`` section of BENCHMARKS.md from ``results_gpu.json`` (None: not run)."""
    head = ["## On a GPU", ""]
    if data is None:
        return "\n".join(head + [
            f"Not run on a GPU: there is no `{source}`. On a machine where TensorFlow sees a GPU, "
            "`python -m bench --gpu --out DIR` measures capture against tfdbg2 FULL_TENSOR and the naive "
            "fetch-all script there (ResNet-50, batch 1 and 8) and writes `DIR/results_gpu.json`; copied to "
            f"`{source}`, it becomes this section.", ""])
    device = str(data.get("device", "?"))
    figs = data["raw"]
    rows = [Row(**r) for r in data["table"]]
    rounds = ", ".join(f"{c['model']} batch {c['batch']}: {c['rounds']} round(s)" for c in figs["capture"]) or "none"
    out = head + [
        f"Measured by `python -m bench --gpu` (device `{device}`, {data.get('mode')}) on {data.get('finished')} in "
        f"{data.get('duration_s', 0) / 60:.1f} min; the raw timings, every round and the machine are in "
        f"[`{source}`]({source}). Rounds measured: {rounds}.", ""]
    if not device.startswith("gpu"):
        out += [f"**Not GPU figures:** this file was written with `--device {device}`, a check that the GPU "
                "harness runs, on a machine without a GPU.", ""]
    if not data.get("complete"):
        out += [f"**Partial:** the run stopped before it finished (time limit or failure: "
                f"`{Path(source).with_name('bench_gpu.log').as_posix()}` says which); the figures are those of the rounds "
                "that completed.", ""]
    out += [_gpu_line(data), "", markdown_table(rows), "", _how(data, device), ""]
    for c in figs["capture"]:
        if "tfdbg" in c["seconds"] and "naive" in c["seconds"]:
            text = _capture_notes(c).replace("### Capturing one side (", f"### Capturing one side on {device.upper()} (", 1)
            out.append(text.replace("--out DIR`", f"--out DIR --device {device}`", 1))
        for peer, error in (c.get("failed") or {}).items():
            out += [f"- **{peer} failed** on {c['model']}, batch {c['batch']}: `{str(error).strip().splitlines()[-1][:300]}`", ""]
    out += _import_noise(figs)
    last = figs["capture"][-1] if figs["capture"] else None
    if last and "tfdbg" in last["seconds"] and "naive" in last["seconds"] and any(r.passed is False for r in rows):
        out.append(_capture_limits(last).replace("### What limits the capture figures (",
                                                f"### What limits the capture figures on {device.upper()} (", 1))
    return "\n".join(out).rstrip() + "\n"

