"""Capturing one side against its peers: tfdbg v2, a naive fetch-everything script, the plain run.

Each contender is a fresh process fed the same ``.npy`` and the same checkpoint, run in
rounds whose order rotates (so no contender always runs on a cache warmed by another), and
timed from process start to the moment its result exists:

- ``tftrace capture`` (the CLI, as a user runs it): until it exits, the manifest written;
- tfdbg: until its first ``session.run`` is dumped and both writers are flushed;
- the naive script: until every tensor of the same fetch set is in memory;
- the plain run: until the signature outputs are in memory.

Disk: the capture directory against tfdbg's dump directory after that one run. Every round
also times a small write to the same file system (``fsync``ed, as the capture's files are) and
a copy in memory, so the page can set the capture's bytes against the machine's physical
floors measured under the same load (:func:`bandwidths`); and the *marginal* figure, what
capturing adds to a plain run against what tfdbg adds to it: ``(capture - plain) / (tfdbg -
plain)``, the median of the per-round values. One untimed
capture first warms the page cache for the model files and gives the naive script its fetch
list (the tensors tftrace captured).

``device`` runs every contender there (``bench.gpu_bench``: ``tftrace capture --device gpu``, the
peers' graphs on ``/GPU:0``). ``on_round`` receives the summary after every round (so a run cut
short still leaves its rounds), ``deadline`` (``time.time()``) stops starting rounds that would
end after it, and ``tolerate_failures`` records a failing peer and goes on without it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from time import perf_counter  # the probes' own clock (``time`` is replaced by a fake one in the harness's tests)
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .procs import BenchError, ChildRun, child_env, dir_bytes, median, run_child
from .workspace import Model, Workspace

__all__ = ["after_import", "measure_capture", "bandwidths", "marginal", "tfdbg_dump_bytes"]

CONTENDERS = ("capture", "tfdbg", "naive", "plain")
PART_BYTES = 512 << 20  # tftrace capture's default --part-bytes: a fetch above it is cut into fed parts
# the captures a bench can time: as typed, and with the fetch cut into parts (issue 29 item 2)
# tftrace capture as typed (fed parts of --part-bytes' default), and the same in one fetch (bench.parts_bench)
CAPTURE_FLAGS: dict[str, tuple[str, ...]] = {"capture": (), "capture_one_fetch": ("--part-bytes", "0")}
PROBE_BYTES = 256 << 20  # the timed write and copy: long enough to get past write caches, short beside a round


def bandwidths(directory: Path, nbytes: int = PROBE_BYTES) -> dict[str, float]:
    """Bytes per second this machine writes durably to ``directory``'s file system (one file,
    written in 4 MiB pieces, then ``fsync``: what a capture's files go through) and copies in
    memory (``np.copyto`` between two fresh arrays), each timed once, now."""
    import numpy as np  # noqa: PLC0415 - the harness's parent needs numpy only here

    piece = np.ones(4 << 20, np.uint8)
    path = directory / "bandwidth_probe.bin"
    started = perf_counter()
    with open(path, "wb") as fh:
        for _ in range(max(1, nbytes // piece.nbytes)):
            fh.write(piece.data)
        fh.flush()
        os.fsync(fh.fileno())
    disk_s = perf_counter() - started
    path.unlink()
    src = np.ones(nbytes, np.uint8)
    dst = np.empty_like(src)
    dst.fill(0)  # its pages exist before the timed copy, as a fetched tensor's do
    started = perf_counter()
    np.copyto(dst, src)
    copy_s = perf_counter() - started
    written = max(1, nbytes // piece.nbytes) * piece.nbytes
    return {"disk_write_bytes_per_s": written / disk_s, "memory_copy_bytes_per_s": nbytes / copy_s,
            "probe_bytes": written}


def marginal(capture_s: float, tfdbg_s: float, plain_s: float) -> float | None:
    """What capturing adds to a plain run against what tfdbg adds to it (None when tfdbg adds nothing)."""
    added = tfdbg_s - plain_s
    return (capture_s - plain_s) / added if added > 0 else None


def after_import(run: dict[str, Any]) -> float | None:
    """A contender's seconds less its own ``import tensorflow`` (None where it did not say).

    Every contender imports TensorFlow once, and that import alone varies by seconds from one
    process to the next on a loaded or cold machine (8.6-13.1 s on the H200's host on
    2026-12-03), more than tracing adds there. Taking each process's own import out of its time
    leaves what it did after it: the marginal figure over these is the same quantity with that
    noise removed. The peers time the import themselves; the capture's child writes it to the
    manifest (``timings.import_s``, the window around its ``import tensorflow``)."""
    imported = run.get("import_s", (run.get("child_timings") or {}).get("import_s"))
    return run["seconds"] - imported if isinstance(imported, (int, float)) else None


def _capture(ckpt: Path, inputs: Path, out: Path, device: str | None = None, extra: tuple[str, ...] = ()) -> ChildRun:
    """``tftrace capture`` as a user types it (``--device`` only when a device is asked for)."""
    flags = ["--device", device] if device else []
    return run_child([sys.executable, "-m", "tracer.cli", "capture", str(ckpt), "--inputs", str(inputs),
                      "--out", str(out), "--force", *flags, *extra], env=child_env(device=device or "cpu"))


def _capture_record(out: Path, run: ChildRun) -> dict[str, Any]:
    """The capture is complete when its manifest is written (last, atomically): its mtime is the
    moment, as the peers' own clocks mark theirs; ``process_s`` adds the exit (TF's teardown)."""
    manifest = json.loads((out / "manifest.json").read_text())
    done = run.since_start((out / "manifest.json").stat().st_mtime)
    return {"seconds": done, "process_s": run.wall_s, "disk": dir_bytes(out), "child_timings": manifest["timings"],
            "fetch_parts": manifest.get("fetch_parts"), "run_peak_bytes": (manifest.get("memory") or {}).get("run_peak_bytes")}


def _peer(mode: str, job: dict[str, Any], job_path: Path) -> ChildRun:
    job_path.write_text(json.dumps(job))
    return run_child([sys.executable, "-m", "bench.peers", mode, str(job_path)],
                     env=child_env(device=job.get("device") or "cpu"))


def _run_one(name: str, model: Model, inputs: Path, work: Path, job: dict[str, Any],
             device: str | None) -> dict[str, Any]:
    """One contender's timed run and what it reports."""
    if name in CAPTURE_FLAGS:
        out = work / name
        record = _capture_record(out, _capture(model.ckpt, inputs, out, device, CAPTURE_FLAGS[name]))
        shutil.rmtree(out)
        return record
    if name == "tfdbg":
        dump = work / "tfdbg_dump"
        try:
            run = _peer("tfdbg", {**job, "dump": str(dump)}, work / "tfdbg.json")
        finally:
            shutil.rmtree(dump, ignore_errors=True)
        res = run.result
        return {"seconds": run.since_start(res["done_at"]), "process_s": run.wall_s,
                "disk_one_run": res["dump_bytes_one_run"],
                **{k: res[k] for k in ("import_s", "build_s", "load_s", "first_run_s", "next_runs_s",
                                       "graph_ops", "debug_ops", "dump_bytes_before_run", "gpus_seen") if k in res}}
    run = _peer(name, job, work / f"{name}.json")
    res = run.result
    return {"seconds": run.since_start(res["done_at"]), "process_s": run.wall_s,
            **{k: v for k, v in res.items() if k not in ("mode", "done_at")}}


def _peer_job(model: Model, inputs: Path, **extra: Any) -> dict[str, Any]:
    """What a peer process (:mod:`bench.peers`) is told: the model, its checkpoint, the inputs."""
    return {"model": model.builder, "ckpt_prefix": str(model.ckpt_prefix), "inputs": str(inputs), **extra}


def tfdbg_dump_bytes(ws: Workspace, model: Model, batch: int) -> int:
    """The bytes tfdbg2's FULL_TENSOR dump of one run of ``model`` at ``batch`` takes."""
    work = ws.fresh("capture", f"{model.name}_tfdbg_b{batch}")
    work.mkdir(parents=True)
    inputs = ws.inputs(model, batch)
    try:
        return int(_run_one("tfdbg", model, inputs, work, _peer_job(model, inputs, repeats=0), None)["disk_one_run"])
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure_capture(ws: Workspace, model: Model, batch: int, rounds: int, log: Callable[[str], None],
                    warmup: bool = True, contenders: tuple[str, ...] = CONTENDERS, *, device: str | None = None,
                    on_round: Callable[[dict[str, Any]], None] | None = None, deadline: float | None = None,
                    tolerate_failures: bool = False) -> dict[str, Any]:
    """Median seconds and bytes of every contender on ``model`` at ``batch``, plus the raw runs.

    Without ``warmup`` the first round's capture (which always runs first) gives the fetch list.
    With a ``deadline``, the first round always runs; a later one only if the previous round's
    duration still fits before it.
    """
    inputs = ws.inputs(model, batch)
    tag = f"{model.name}_b{batch}"
    work = ws.fresh("capture", tag)
    work.mkdir(parents=True)
    first = work / ("warmup" if warmup else "capture")
    warm = _capture(model.ckpt, inputs, first, device)
    manifest = json.loads((first / "manifest.json").read_text())
    tensors = work / "tensors.json"
    tensors.write_text(json.dumps(list(manifest["tensors"])))
    raw: dict[str, list[dict[str, Any]]] = {name: [] for name in contenders}
    probes: list[dict[str, float]] = []  # the bandwidths, once per round, under that round's load
    failed: dict[str, str] = {}
    if not warmup:
        raw["capture"].append(_capture_record(first, warm))
        shutil.rmtree(first)
    job = _peer_job(model, inputs, tensors=str(tensors), repeats=1, **({"device": device} if device else {}))
    done = 0
    last_round_s = 0.0
    for r in range(rounds):
        if r and deadline is not None and time.time() + last_round_s > deadline:
            log(f"  {tag}: stopping after {done} round(s): another would end past the time budget")
            break
        started = time.time()
        probes.append(bandwidths(work))
        order = contenders[r % len(contenders):] + contenders[: r % len(contenders)]
        for name in order:
            if name in failed or (name == "capture" and r == 0 and not warmup):
                continue  # failed before, or ran above
            try:
                raw[name].append(_run_one(name, model, inputs, work, job, device))
            except BenchError as exc:
                if not tolerate_failures or name == "capture":
                    raise
                failed[name] = str(exc)
                log(f"  {tag}: {name} failed, going on without it: {str(exc).splitlines()[-1][:200]}")
        done = r + 1
        last_round_s = time.time() - started
        log(f"  {tag} round {done}/{rounds}: " + ", ".join(f"{n} {raw[n][-1]['seconds']:.2f} s"
                                                           for n in contenders if n not in failed))
        if on_round is not None:
            on_round(_summary(model, batch, done, raw, failed, manifest, warm if warmup else None, probes))
    return _summary(model, batch, done, raw, failed, manifest, warm if warmup else None, probes)


def _summary(model: Model, batch: int, rounds: int, raw: dict[str, list[dict[str, Any]]], failed: dict[str, str],
             manifest: dict[str, Any], warm: ChildRun | None, probes: list[dict[str, float]] | None = None
             ) -> dict[str, Any]:
    """The figures of the rounds so far: medians over the contenders that ran (``failed``: those
    that did not, with their error)."""
    ran = {name: runs for name, runs in raw.items() if runs}
    captured = sum(rec["size_bytes"] for rec in manifest["tensors"].values())
    op_types = {node["name"]: node["op"] for node in manifest["graph"]["nodes"]}
    ref_variables = sum(rec["size_bytes"] for n, rec in manifest["tensors"].items()
                        if op_types.get(n.rsplit(":", 1)[0]) in ("VariableV2", "VariableV1", "Variable"))
    out: dict[str, Any] = {
        "model": model.name,
        "batch": batch,
        "rounds": rounds,
        "seconds": {name: median([x["seconds"] for x in runs]) for name, runs in ran.items()},
        # each round's contenders ran minutes apart at most; the median of per-round ratios
        # follows the machine's load better than the ratio of medians
        "ratios": {peer: median([c["seconds"] / p["seconds"] for c, p in zip(raw["capture"], runs)])
                   for peer, runs in ran.items() if peer != "capture"},
        "capture_disk_bytes": median([x["disk"]["apparent"] for x in raw["capture"]]),
    }
    if "tfdbg" in ran and "plain" in ran:
        rounds_of = list(zip(raw["capture"], raw["tfdbg"], raw["plain"]))
        per_round = [marginal(c["seconds"], t["seconds"], p["seconds"]) for c, t, p in rounds_of]
        known = [m for m in per_round if m is not None]
        out["marginal_vs_tfdbg"] = median(known) if known else None
        # the same per round, each process's own TensorFlow import taken out (rounds whose
        # processes all said how long it took)
        after = [(a, b, c) for a, b, c in ([after_import(x) for x in runs] for runs in rounds_of)
                 if a is not None and b is not None and c is not None]
        removed = [marginal(*times) for times in after]
        out["marginal_rounds"] = {"process": per_round, "import_removed": removed}
        if any(m is not None for m in removed):
            out["marginal_import_removed"] = median([m for m in removed if m is not None])
            out["seconds_import_removed"] = {name: median([times[i] for times in after])
                                             for i, name in enumerate(("capture", "tfdbg", "plain"))}
    if probes:
        disk_bw = median([b["disk_write_bytes_per_s"] for b in probes])
        memory_bw = median([b["memory_copy_bytes_per_s"] for b in probes])
        out["floors"] = {
            "probe_bytes": probes[0]["probe_bytes"],
            "probes": probes,
            "disk_write_bytes_per_s": disk_bw,
            "memory_copy_bytes_per_s": memory_bw,
            # the least time the capture's bytes (each stored once) take to reach the disk durably, and to
            # be copied once in memory, at this run's measured rates
            "disk_s": out["capture_disk_bytes"] / disk_bw,
            "memory_s": out["capture_disk_bytes"] / memory_bw,
        }
    if "tfdbg" in ran:
        out.update({"tfdbg_disk_bytes": median([x["disk_one_run"] for x in raw["tfdbg"]]),
                    "tfdbg_first_run_s": median([x["first_run_s"] for x in raw["tfdbg"]]),
                    "tfdbg_next_run_s": median([x["next_runs_s"][0] for x in raw["tfdbg"]])})
    if "naive" in ran:
        out.update({"naive_first_run_s": median([x["first_run_s"] for x in raw["naive"]]),
                    "naive_next_run_s": median([x["next_runs_s"][0] for x in raw["naive"]])})
    out.update({
        "plain_next_run_s": median([min(x["next_runs_s"]) for x in raw["plain"]]) if raw.get("plain") else None,
        "tensors_captured": len(manifest["tensors"]),
        "tensor_bytes": captured,
        "activation_bytes": sum(rec["size_bytes"] for n, rec in manifest["tensors"].items()
                                if manifest["tensor_layout"].get(n) == "rows"),
        "ref_variable_bytes": ref_variables,  # VariableV2 outputs: the same values as their /read
        # tensors whose bytes are another's (alias_of: a hard link to its file), stored once
        "aliased_bytes": sum(rec["size_bytes"] for rec in manifest["tensors"].values() if "alias_of" in rec),
        # format 2: values the checkpoint holds, kept as a digest only (no file), and tensors stored
        # as the residual of an elementwise prediction (the rest are zstd-packed); logical bytes
        "digest_kept_bytes": sum(rec["size_bytes"] for rec in manifest["tensors"].values()
                                 if rec.get("values") == "artifact" and "alias_of" not in rec),
        "predicted_bytes": sum(rec["size_bytes"] for rec in manifest["tensors"].values()
                               if (rec.get("encoding") or {}).get("predict")),
        "capture_child_s": {k: median([x["child_timings"].get(k, 0.0) for x in raw["capture"]])
                            for k in ("load_s", "instrumented_s", "sync_s", "total_s")},
        "capture_process_s": median([x["process_s"] for x in raw["capture"]]),
        "warmup_capture_s": warm.wall_s if warm is not None else None,
        # the devices tftrace's session had (a GPU run shows its GPU here)
        "capture_session_devices": [d.get("name") for d in manifest.get("environment", {}).get("session_devices", [])],
        **({"failed": failed} if failed else {}),
        "raw": raw,
    })
    return out
