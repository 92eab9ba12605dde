"""``python -m bench``: every figure of issue 7 in one run; ``--quick`` for the smoke test.

The full run generates (once) ResNet-50, the SSD300 detector and the 5,000-op graph, then
measures, in this order: capture against tfdbg / the naive script / the plain run (ResNet-50
batch 1, then SSD300 batch 1 and ResNet-50 batch 8), the throughput of comparing captures
(ResNet-50 batch 8), the peak memory of a compare, ``tftrace compare ckpt/ savedmodel/`` end to
end, the 5,000-op report, compare over capture format 2 against format 1 and diagnose. It prints the table, writes ``bench/results.json`` and
``BENCHMARKS.md``. ``--quick`` runs the same code on the sample detector, one round each, and
renders the detector's report instead of the 5,000-op one: it checks the harness, not the
numbers. ``--gpu`` measures the capture figures on a GPU instead (:mod:`bench.gpu_bench`); the
page includes them from ``bench/results_gpu.json`` when it exists.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import procs
from .capture_bench import measure_capture
from .compare_bench import (AVX2_ENV, has_avx512, make_captures, measure_peak_rss, measure_throughput,
                            measure_throughput_in_child)
from .diagnose_bench import GPU_DIAGNOSE_NAME, diagnose_section, load_diagnose, measure_diagnose
from .e2e_bench import measure_end_to_end
from .format_bench import measure_formats
from .gpu_report import GPU_RESULTS_NAME, gpu_section, load_gpu_results
from .notes import notes
from .procs import REPO, machine
from .render_bench import make_wide_report, measure_render
from .scale_bench import SCALE_NAME, load_scale, scale_section
from .results import build_rows, format_table, readme_summary, with_readme_summary, write_markdown, write_results
from .workspace import Workspace

__all__ = ["FULL", "QUICK", "Plan", "main", "run"]


@dataclass(frozen=True)
class Plan:
    """Which workloads, how many rounds."""

    name: str
    capture: tuple[tuple[str, int, int], ...]  # (model, batch, rounds); the first is the headline
    compare_model: str
    compare_batch: int
    throughput_rounds: int
    e2e_model: str
    e2e_rounds: int
    render_rounds: int
    wide: bool  # render the 5,000-op graph's report (else the end-to-end report)
    warmup: bool  # one untimed capture before the rounds (warms the page cache for the model files)
    settle: bool  # sync and wait before each contender (timings matter)
    reuse_e2e: bool  # the end-to-end run's two captures serve as A and C of the compare figures
    contenders: tuple[str, ...] = ("capture", "tfdbg", "naive", "plain")
    format_rounds: int = 0  # compare over format 2 against format 1 (issue 29, item 3); 0: not measured


FULL = Plan("full", (("resnet50", 1, 3), ("ssd300", 1, 2), ("resnet50", 8, 1)), "resnet50", 8, 5, "resnet50", 2, 3, True, True, True,
            False, format_rounds=3)
QUICK = Plan("quick", (("detector", 1, 1),), "detector", 1, 1, "detector", 1, 1, False, False, False, True,
             ("capture", "tfdbg", "naive"))


def run(plan: Plan, work: Path, log: Callable[[str], None] = print) -> dict[str, Any]:
    procs.SETTLE = plan.settle
    ws = Workspace(work)
    figs: dict[str, Any] = {"capture": []}
    for model_name, batch, rounds in plan.capture:
        model = ws.model(model_name, log)
        log(f"capture vs tfdbg / naive / plain: {model_name}, batch {batch}, {rounds} round(s)")
        figs["capture"].append(measure_capture(ws, model, batch, rounds, log, warmup=plan.warmup,
                                              contenders=plan.contenders))
    log(f"end to end: tftrace compare {plan.e2e_model} ckpt/ savedmodel/")
    figs["end_to_end"] = measure_end_to_end(ws, ws.model(plan.e2e_model, log), plan.e2e_rounds, log)
    model = ws.model(plan.compare_model, log)
    log(f"compare throughput: {model.name}, batch {plan.compare_batch}")
    reuse = None
    if plan.reuse_e2e:
        sides = Path(figs["end_to_end"]["report_dir"]) / "captures"
        reuse = {"a": sides / "a", "c": sides / "b"}
    captures = make_captures(ws, model, plan.compare_batch, log, reuse)
    figs["throughput"] = measure_throughput(captures, plan.throughput_rounds)
    if has_avx512():  # the other kind of CPU's code, on this one (an AVX2 CPU runs that already)
        log("compare throughput again, with the AVX2 code of numba and numpy")
        figs["throughput_avx2"] = measure_throughput_in_child(captures, plan.throughput_rounds, AVX2_ENV,
                                                             ws.fresh("compare", "avx2") / "throughput.json")
    log("peak memory of compare")
    figs["peak_rss"] = measure_peak_rss(captures["a"], captures["b"], ws.fresh("compare", "rss_report"))
    if plan.wide:
        log("report of the 5,000-op graph")
        report_dir = make_wide_report(ws, ws.model("wide", log), ws.model("wide_planted", log), log)
    else:
        report_dir = Path(figs["end_to_end"]["report_dir"])
    figs["render"] = measure_render(ws, report_dir, plan.render_rounds)
    if plan.format_rounds:
        log(f"compare over capture format 2 against format 1: {plan.compare_model}, batch {plan.compare_batch}")
        figs["formats"] = measure_formats(ws, plan.compare_batch, plan.format_rounds, fresh=True)
    log(f"tftrace diagnose of the sample detector{' --quick' if plan.name == 'quick' else ''}")
    figs["diagnose"] = measure_diagnose(ws, ws.model("detector", log), log, quick=plan.name == "quick")
    return figs


def _tf_version(work: Path) -> str:
    """TensorFlow's version as the capture children recorded it (this process never imports TF)."""
    for manifest in sorted((work / "runs").rglob("manifest.json")):
        version = json.loads(manifest.read_text()).get("environment", {}).get("tensorflow")
        if version:
            return str(version)
    return "?"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description="tftrace benchmarks (issue 7)")
    parser.add_argument("--quick", action="store_true", help="tiny workloads, one round: checks the harness, not the numbers")
    parser.add_argument("--work", type=Path, default=None, help="models, inputs and outputs (default out/bench[/quick])")
    parser.add_argument("--results", type=Path, default=None,
                        help="where to write results.json (default bench/results.json; --quick: under --work)")
    parser.add_argument("--markdown", type=Path, default=None,
                        help="where to write the BENCHMARKS.md page (default ./BENCHMARKS.md; --quick: none)")
    parser.add_argument("--rewrite-markdown", action="store_true",
                        help="measure nothing: rewrite the BENCHMARKS.md page (and, for bench/results.json, the README's "
                             "speed summary) from the results.json of the last run, after editing how they explain it")
    parser.add_argument("--gpu-results", type=Path, default=REPO / "bench" / GPU_RESULTS_NAME,
                        help="the GPU run the page includes (default bench/results_gpu.json; absent: 'not run on a GPU')")
    gpu = parser.add_argument_group("GPU mode (issue 14): capture vs tfdbg2 vs the naive script, ResNet-50 batch 1 and 8")
    gpu.add_argument("--gpu", action="store_true", help="measure the capture figures on a GPU (exit 2 where TensorFlow "
                     "sees none); writes results_gpu.json and bench_gpu.log to --out after every round")
    gpu.add_argument("--device", default="gpu", help="with --gpu: gpu (default), gpu:N, or cpu to check the harness here")
    gpu.add_argument("--out", type=Path, default=None,
                     help="with --gpu: where results_gpu.json and the log go (default bench/; --quick or --device cpu: "
                          "out/bench/gpu/results)")
    gpu.add_argument("--budget-s", type=float, default=420.0,
                     help="with --gpu: start no round that would end after this many seconds (default %(default)s)")
    args = parser.parse_args(argv)
    if args.gpu:
        from .gpu_bench import main_gpu  # noqa: PLC0415

        return main_gpu(args.device, args.quick, args.out, args.work, args.budget_s)
    if args.rewrite_markdown:
        return _rewrite_markdown(args.results or REPO / "bench" / "results.json", args.markdown or REPO / "BENCHMARKS.md",
                                 args.gpu_results)
    plan = QUICK if args.quick else FULL
    work = args.work or REPO / "out" / ("bench/quick" if args.quick else "bench")
    results = args.results or (work / "results.json" if args.quick else REPO / "bench" / "results.json")
    markdown = args.markdown or (None if args.quick else REPO / "BENCHMARKS.md")
    started = time.time()
    meta: dict[str, Any] = {"mode": plan.name, "machine": machine(),
                            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started))}

    def log(message: str) -> None:
        print(f"[{time.time() - started:6.0f} s] {message}", flush=True)

    figs = run(plan, work, log)
    meta.update({"finished": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "duration_s": round(time.time() - started, 1),
                 "tensorflow": _tf_version(work), "load_average_at_end": [round(x, 2) for x in os.getloadavg()]})
    rows = build_rows(figs)
    print()
    print(format_table(rows))
    write_results(results, figs, rows, meta)
    print(f"\nwrote {results}")
    if markdown is not None:
        page_notes = notes(figs, _gpu_section(args.gpu_results), _diagnose_section(figs),
                           scale_section(load_scale(REPO / "bench" / SCALE_NAME)))
        write_markdown(markdown, build_rows(figs, _kept_diagnose()), meta, page_notes)
        print(f"wrote {markdown}")
    if not args.quick and args.results is None:  # the repository's own results: the README summarises them
        _write_readme(figs, meta)
    return 0


def _write_readme(figs: dict[str, Any], meta: dict[str, Any]) -> None:
    readme = REPO / "README.md"
    readme.write_text(with_readme_summary(readme.read_text(encoding="utf-8"), readme_summary(figs, meta)), encoding="utf-8")
    print(f"wrote the speed summary of {readme}")


META_KEYS = ("mode", "machine", "started", "finished", "duration_s", "tensorflow", "load_average_at_end")


def _gpu_section(path: Path) -> str:
    """The page's GPU section from ``path`` (named as the repository's file when it is that one)."""
    try:
        source = path.resolve().relative_to(REPO).as_posix()
    except ValueError:
        source = str(path)
    return gpu_section(load_gpu_results(path), source)


def _kept_diagnose() -> list[dict[str, Any]]:
    """The GPU's diagnose figure where one is kept in bench/ (measured on the lent machine)."""
    kept = load_diagnose(REPO / "bench" / GPU_DIAGNOSE_NAME)
    return [kept] if kept else []


def _diagnose_section(figs: dict[str, Any]) -> str:
    """The diagnose section: this run's figure, and the GPU's where one is kept in bench/."""
    return diagnose_section([d for d in (figs.get("diagnose"), *_kept_diagnose()) if d])


def _rewrite_markdown(results: Path, markdown: Path, gpu_results: Path = REPO / "bench" / GPU_RESULTS_NAME) -> int:
    """The page from a results.json: the same rows and notes the run that wrote it would write,
    and the GPU section from ``gpu_results``."""
    data = json.loads(results.read_text())
    figs, meta = data["raw"], {k: data[k] for k in META_KEYS if k in data}
    page_notes = notes(figs, _gpu_section(gpu_results), _diagnose_section(figs),
                       scale_section(load_scale(REPO / "bench" / SCALE_NAME)))
    write_markdown(markdown, build_rows(figs, _kept_diagnose()), meta, page_notes)
    print(f"wrote {markdown} from {results} (measured {meta.get('finished')})")
    if results.resolve() == (REPO / "bench" / "results.json").resolve():
        _write_readme(figs, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
