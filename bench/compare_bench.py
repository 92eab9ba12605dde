"""Comparing two captures: tftrace's metrics against what a user would write, and memory.

Throughput: every pair of same-named float tensors of two real captures, read into memory once
before the rounds (format 2 decodes its packed chunks; what decoding costs is in the end-to-end
``tftrace compare`` figure, not here; pairs kept by digest are never read), is put through
:func:`tracer.metrics.compare_arrays` (every metric, the tolerance excess at the default
rtol), through the naive ``np.abs(a - b).max()``, and through numpy's bare ``a - b`` (the
memory-bandwidth floor: read both, write one). The same arrays, page cache warm (one untimed
pass first), rounds interleaved, medians. GB/s counts the bytes of both sides.

- tensors that differ: A = the checkpoint with oneDNN off, B = the SavedModel with oneDNN on
  (every convolution after the first differs), only the pairs that really differ;
- identical tensors: A against the SavedModel with oneDNN off (bitwise the same on this CPU),
  only the pairs that really are identical.

``compare_arrays`` also runs on one worker thread (``workers=1``), not a target: the time per
element of one core, against which the two-worker figure shows how much the second core adds.

The physical floor, measured in the same run: the machine's read bandwidth (a buffer far larger
than the caches, summed as integers by one thread and by two, before and after the rounds; the
best figure), and the bytes of both sides divided by it: no comparison that reads every element
once can take less (``floor_s``; ``over_floor``: how many times the floor each contender takes).

Peak memory: ``tftrace compare A B`` (isolation off, report included) in its own process,
which reads its own high-water mark (``VmHWM``) before and after; against the captured bytes.
"""

from __future__ import annotations

import functools
import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tracer.captures.reader import Capture
from tracer.metrics import compare_arrays

from .procs import child_env, median, run_child
from .workspace import Model, Workspace

__all__ = ["make_captures", "measure_bandwidth", "measure_peak_rss", "measure_throughput",
           "measure_throughput_in_child", "has_avx512", "AVX2_ENV"]

FLOATS = ("float16", "float32", "float64")
Pair = tuple[str, np.ndarray, np.ndarray]


def make_captures(ws: Workspace, model: Model, batch: int, log: Callable[[str], None],
                  reuse: dict[str, Path] | None = None) -> dict[str, Path]:
    """Capture A (checkpoint, oneDNN off), B (SavedModel, oneDNN on), C (SavedModel, oneDNN off).

    ``reuse`` maps keys to captures made already with the same inputs (the end-to-end run's two
    sides are exactly A and C at batch 1), which are then not captured again.
    """
    inputs = ws.inputs(model, batch)
    out: dict[str, Path] = dict(reuse or {})
    for key, artifact, onednn in (("a", model.ckpt, "off"), ("b", model.savedmodel, "on"), ("c", model.savedmodel, "off")):
        if key in out:
            continue
        path = ws.fresh("compare", f"{model.name}_b{batch}", key)
        run = run_child([sys.executable, "-m", "tracer.cli", "capture", str(artifact), "--inputs", str(inputs),
                         "--out", str(path), "--onednn", onednn, "--force"])
        log(f"  capture {key} ({artifact.name}, oneDNN {onednn}): {run.wall_s:.1f} s")
        out[key] = path
    return out


def _pairs(a: Capture, b: Capture) -> list[Pair]:
    pairs = []
    for name in a.tensor_names:
        if not b.has(name):
            continue
        ra, rb = a.record(name), b.record(name)
        if a.digest(name) is not None or b.digest(name) is not None:
            continue  # format 2 kept only a digest (the checkpoint holds the values): compare never reads it
        if ra["dtype"] in FLOATS and ra["dtype"] == rb["dtype"] and ra["shape"] == rb["shape"] and ra["size_bytes"] > 0:
            pairs.append((name, a.tensor(name), b.tensor(name)))
    return pairs


def _metrics(pairs: Sequence[Pair], workers: int | None = None) -> None:
    for _name, x, y in pairs:
        compare_arrays(x, y, rtols=(1e-5,), workers=workers)


def _naive(pairs: Sequence[Pair]) -> None:
    for _name, x, y in pairs:
        float(np.abs(x - y).max())


def _floor(pairs: Sequence[Pair]) -> None:
    for _name, x, y in pairs:
        np.subtract(x, y)


def _race(contenders: dict[str, Callable[[Sequence[Pair]], None]], pairs: Sequence[Pair], rounds: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in contenders}
    names = list(contenders)
    for name in names:  # warm the page cache and numpy's allocator
        contenders[name](pairs)
    for r in range(rounds):
        for name in names[r % len(names):] + names[: r % len(names)]:
            t0 = time.perf_counter()
            contenders[name](pairs)
            times[name].append(time.perf_counter() - t0)
    return times


def measure_bandwidth(mib: int = 512, rounds: int = 5) -> dict[str, float]:
    """Read bandwidth in GB/s (best of ``rounds``): ``mib`` MiB summed as int64 by one thread,
    and by two threads each summing half (numpy releases the GIL inside the sum)."""
    buf = np.ones(mib << 17, np.int64)  # written once: every page is backed before the timing
    halves = np.array_split(buf, 2)
    best = {"one_thread": 0.0, "two_threads": 0.0}
    with ThreadPoolExecutor(2) as pool:
        for _ in range(rounds):
            t0 = time.perf_counter()
            np.add.reduce(buf)
            best["one_thread"] = max(best["one_thread"], buf.nbytes / (time.perf_counter() - t0) / 1e9)
            t0 = time.perf_counter()
            list(pool.map(np.add.reduce, halves))
            best["two_threads"] = max(best["two_threads"], buf.nbytes / (time.perf_counter() - t0) / 1e9)
    return best


def measure_throughput(captures: dict[str, Path], rounds: int) -> dict[str, Any]:
    a, b, c = (Capture.open(captures[k]) for k in "abc")
    ab, ac = _pairs(a, b), _pairs(a, c)
    differing = [p for p in ab if not compare_arrays(p[1], p[2]).identical]
    identical = [p for p in ac if compare_arrays(p[1], p[2]).identical]
    out: dict[str, Any] = {"bandwidth_before": measure_bandwidth()}
    for label, pairs, peer_name, peer in (("differing", differing, "naive_abs_max", _naive),
                                          ("identical", identical, "numpy_subtract", _floor)):
        nbytes = sum(x.nbytes + y.nbytes for _n, x, y in pairs)
        times = _race({"tftrace": _metrics, "tftrace_one_worker": functools.partial(_metrics, workers=1), peer_name: peer}, pairs, rounds)
        med = {k: median(v) for k, v in times.items()}
        elements = sum(x.size for _n, x, _y in pairs)
        out[label] = {
            "pairs": len(pairs), "bytes": nbytes, "elements": elements,
            "largest_pair_bytes": max((x.nbytes + y.nbytes for _n, x, y in pairs), default=0),
            "seconds": med, "gb_per_s": {k: nbytes / v / 1e9 for k, v in med.items()},
            "ns_per_element": {k: v / max(elements, 1) * 1e9 for k, v in med.items()},
            "ratio": med[peer_name] / med["tftrace"], "peer": peer_name, "raw_seconds": times,
        }
    out["pairs_total"] = {"a_vs_b": len(ab), "a_vs_c": len(ac)}
    out["bandwidth_after"] = measure_bandwidth()
    best = max(*out["bandwidth_before"].values(), *out["bandwidth_after"].values())
    out["read_gb_per_s"] = best
    for label in ("differing", "identical"):
        fig = out[label]
        fig["read_gb_per_s"], fig["floor_s"] = best, fig["bytes"] / best / 1e9
        fig["over_floor"] = {k: v / fig["floor_s"] for k, v in fig["seconds"].items()} if fig["floor_s"] else {}
    return out


# Code for the other kind of x86 CPU, on this one: numba compiles the kernel for Haswell (AVX2) and
# numpy's dispatch stops below AVX-512. The memory system stays this machine's, so this measures
# the code each kind of CPU runs, not that CPU.
AVX2_ENV = {"NUMBA_CPU_NAME": "haswell", "NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}


def has_avx512() -> bool:
    from numpy._core._multiarray_umath import __cpu_features__  # noqa: PLC0415 - numpy's own probe

    return bool(__cpu_features__.get("AVX512F"))


def measure_throughput_in_child(captures: dict[str, Path], rounds: int, env: dict[str, str], out: Path) -> dict[str, Any]:
    """:func:`measure_throughput` in a child process started with ``env`` added (code paths are
    chosen when numpy and numba load); its figures plus what both libraries saw."""
    out.parent.mkdir(parents=True, exist_ok=True)
    spec = out.with_suffix(".job.json")
    spec.write_text(json.dumps({"captures": {k: str(v) for k, v in captures.items()}, "rounds": rounds}))
    run_child([sys.executable, "-m", "bench.compare_bench", str(spec), str(out)], env=child_env(env))
    return {**json.loads(out.read_text()), "env": env}


def _child(spec_path: str, out_path: str) -> None:
    from numpy._core._multiarray_umath import __cpu_features__  # noqa: PLC0415
    import numba  # noqa: PLC0415

    spec = json.loads(Path(spec_path).read_text())
    result = measure_throughput({k: Path(v) for k, v in spec["captures"].items()}, int(spec["rounds"]))
    result["numpy_avx512"] = bool(__cpu_features__.get("AVX512F") and __cpu_features__.get("X86_V4"))
    result["numba_cpu_name"] = numba.config.CPU_NAME or "host"
    Path(out_path).write_text(json.dumps(result))


def measure_peak_rss(a: Path, b: Path, out: Path) -> dict[str, Any]:
    """Run the compare in its own process (bench.rss_probe) and relate its peak to the data."""
    run = run_child([sys.executable, "-m", "bench.rss_probe", str(a), str(b), str(out)])
    res = run.result
    sizes = []
    for path in (a, b):
        manifest = json.loads((path / "manifest.json").read_text())
        sizes += [rec["size_bytes"] for rec in manifest["tensors"].values()]
    return {
        "peak_rss_mb": res["peak_mb"],
        "baseline_rss_mb": res["baseline_mb"],
        "above_baseline_mb": res["peak_mb"] - res["baseline_mb"],
        "compare_s": res["compare_s"],
        "verdict": res["verdict"],
        "captured_total_mb": sum(sizes) / 1e6,
        "largest_tensor_mb": max(sizes) / 1e6,
        "tensors": len(sizes),
    }


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
