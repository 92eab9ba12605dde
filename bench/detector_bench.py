"""A 35,000-op TF2 detector, as typed (issue 25 item 5): does ``tftrace compare`` finish, and
what does it cost against the least any fetch-all script can spend on the same model?

``python -m bench.detector_bench [--out DIR]`` (``make bench-detector``, ~15 min on 2 cores):

1. builds :mod:`bench.workloads.retinanet_tf2` once into ``DIR/models`` (two exports of the same
   weights and a ``mixed_float16`` twin), with seeded uint8 images;
2. captures one export with ``tftrace capture`` (its manifest lists the tensors a capture
   fetches);
3. the **floor**: one process that imports TensorFlow, loads the same inlined graph tftrace's
   loader builds (a TF2 signature's internal tensors cannot be fetched otherwise), runs the
   outputs once, then fetches every tensor the capture fetched in one ``session.run`` and holds
   them in memory, writing nothing: what a naive fetch-all script spends at the least;
4. ``tftrace compare`` of the two exports of the same weights (two sides, each its own process,
   the graph diff, every tensor compared, the report);
5. ``tftrace diff-graph`` of the export against its ``mixed_float16`` twin.

Every figure comes from this one run, side by side; ``bench/results_detector.json`` keeps them
and the section of BENCHMARKS.md between its markers is rewritten.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from .procs import REPO, child_env, dir_bytes, machine, run_child
from .results import DETECTOR_MARKERS

__all__ = ["main", "floor"]

MARK_BEGIN, MARK_END = DETECTOR_MARKERS  # bench.results keeps the section when make bench rewrites the page
IMAGES = 4
IMAGE_SIZE = 160


def floor(manifest_path: str) -> dict[str, Any]:
    """The fetch-all floor, in this process (run as a child: ``--floor MANIFEST``)."""
    started = time.perf_counter()
    import numpy as np  # noqa: PLC0415

    from tracer.captures.inputs import make_examples  # noqa: PLC0415
    from tracer.captures.runtime import open_runtime  # noqa: PLC0415
    from tracer.captures.session_runs import feed_for  # noqa: PLC0415
    from tracer.runspec import Side  # noqa: PLC0415

    manifest = json.loads(Path(manifest_path).read_text(encoding="utf-8"))
    side = Side.from_json(manifest["spec"])
    runtime = open_runtime(side)
    loaded = time.perf_counter()
    examples = make_examples(runtime.signature.inputs, side.inputs.examples, side.inputs.seed, side.inputs.inputs_file)
    feed = feed_for(runtime, examples, 0, examples.count)
    outputs = [runtime.graph.get_tensor_by_name(s.name) for s in runtime.signature.outputs.values()]
    runtime.session.run(outputs, feed_dict=feed)
    ran = time.perf_counter()
    names = list(manifest["tensor_layout"])
    values = runtime.session.run([runtime.graph.get_tensor_by_name(n) for n in names], feed_dict=feed)
    fetched = time.perf_counter()
    return {"tensors": len(names), "bytes_in_memory": int(sum(np.asarray(v).nbytes for v in values)),
            "import_and_load_s": round(loaded - started, 2), "plain_run_s": round(ran - loaded, 2),
            "fetch_all_s": round(fetched - ran, 2)}


def _build(models: Path) -> dict[str, Any]:
    if not (models / "workload.json").is_file():
        run_child([sys.executable, "-m", "bench.workloads.retinanet_tf2", "--out", str(models)], timeout_s=3600)
    images = models / "images.npz"
    if not images.is_file():
        import numpy as np  # noqa: PLC0415

        rng = np.random.RandomState(25)
        np.savez(images, inputs=rng.randint(0, 256, (IMAGES, IMAGE_SIZE, IMAGE_SIZE, 3)).astype(np.uint8))
    return json.loads((models / "workload.json").read_text(encoding="utf-8"))


def measure(out: Path) -> dict[str, Any]:
    models = out / "models"
    workload = _build(models)
    tftrace = [sys.executable, "-m", "tracer.cli"]
    inputs = ["--inputs", str(models / "images.npz")]
    env = child_env()
    capture = run_child([*tftrace, "capture", str(models / "fp32"), *inputs, "--out", str(out / "capture"), "--force"],
                        env=env, timeout_s=3600)
    manifest = json.loads((out / "capture" / "manifest.json").read_text(encoding="utf-8"))
    floor_run = run_child([sys.executable, "-m", "bench.detector_bench", "--floor", str(out / "capture" / "manifest.json")],
                          env=env, timeout_s=3600)
    compare = run_child([*tftrace, "compare", str(models / "fp32"), str(models / "fp32_again"), *inputs,
                         "--out", str(out / "report"), "--force"], env=env, timeout_s=3600, ok_codes=(0, 1))
    report = json.loads((out / "report" / "report.json").read_text(encoding="utf-8"))
    diff = run_child([*tftrace, "diff-graph", str(models / "fp32"), str(models / "mixed_float16"), "--json"],
                     env=env, timeout_s=3600)
    rewrites: dict[str, int] = {}
    for rewrite in json.loads(diff.stdout)["rewrites"]:
        rewrites[rewrite["kind"]] = rewrites.get(rewrite["kind"], 0) + 1
    return {
        "workload": workload, "images": IMAGES, "machine": machine(),
        "capture": {"wall_s": round(capture.wall_s, 2), "timings": manifest["timings"],
                    "disk": dir_bytes(out / "capture"), "tensors": len(manifest["tensor_layout"])},
        "floor": {"wall_s": round(floor_run.wall_s, 2), **floor_run.result},
        "compare": {"wall_s": round(compare.wall_s, 2), "verdict": report["verdict"],
                    "first_divergence": (report.get("first_divergence") or {}).get("node"),
                    "progress_lines": sum(1 for line in compare.stderr.splitlines() if line.startswith(("capture ", "compare:")))},
        "diff_graph": {"wall_s": round(diff.wall_s, 2), "rewrites": rewrites},
    }


def markdown(figs: dict[str, Any]) -> str:
    cap, flo, cmp_, diff = figs["capture"], figs["floor"], figs["compare"], figs["diff_graph"]
    t = cap["timings"]
    return "\n".join([
        MARK_BEGIN,
        f"### A {figs['workload']['inlined_ops']:,}-op TF2 detector (`make bench-detector`, one run, {figs['images']} images)",
        "",
        "`bench/workloads/retinanet_tf2.py` (ResNet-50 + FPN levels 3-7, per-class top-k, combined NMS, "
        f"{figs['workload']['classes']} classes); figures from `bench/results_detector.json`, "
        f"{figs['machine'].get('cores', '?')} cores, load average at start {figs['machine'].get('load_average_at_start')}.",
        "",
        "| what | wall | against the floor |",
        "|---|---|---|",
        f"| floor: import + load the inlined graph, one plain run, every tensor in one `session.run`, nothing written "
        f"({flo['tensors']:,} tensors, {flo['bytes_in_memory'] / 1e6:.0f} MB) | {flo['wall_s']:.0f} s "
        f"(load {flo['import_and_load_s']:.0f} s, plain {flo['plain_run_s']:.0f} s, fetch {flo['fetch_all_s']:.0f} s) | 1.00× |",
        f"| `tftrace capture` of one export ({cap['tensors']:,} tensors, {cap['disk']['allocated'] / 1e6:.0f} MB on disk) "
        f"| {cap['wall_s']:.0f} s (load {t['load_s']:.0f} s, instrumented {t['instrumented_s']:.0f} s, "
        f"sync {t['sync_s']:.0f} s) | {cap['wall_s'] / flo['wall_s']:.2f}× |",
        f"| `tftrace compare` of two exports of the same weights: **{cmp_['verdict']}** | {cmp_['wall_s']:.0f} s "
        f"| {cmp_['wall_s'] / flo['wall_s']:.2f}× one floor, {cmp_['wall_s'] / (2 * flo['wall_s']):.2f}× two |",
        f"| `tftrace diff-graph` against its `mixed_float16` twin "
        f"({', '.join(f'{n} {k}' for k, n in sorted(diff['rewrites'].items()))}) | {diff['wall_s']:.0f} s | |",
        "",
        "A compare runs two sides, each a capture: two floors is what two fetch-all scripts would spend. "
        "What the capture adds to its floor is writing and making durable what it fetched (the sync) and "
        "the plain run's own timing; both sides' loads dominate diff-graph.",
        MARK_END,
    ])


def _write(figs: dict[str, Any]) -> None:
    (REPO / "bench" / "results_detector.json").write_text(json.dumps(figs, indent=1) + "\n", encoding="utf-8")
    page = REPO / "BENCHMARKS.md"
    text = page.read_text(encoding="utf-8")
    section = markdown(figs)
    if MARK_BEGIN in text and MARK_END in text:
        text = text[:text.index(MARK_BEGIN)] + section + text[text.index(MARK_END) + len(MARK_END):]
    else:
        text = text.replace("\n## On a GPU", f"\n{section}\n\n## On a GPU", 1)
    page.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.detector_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=str(REPO / "out" / "bench-detector"))
    parser.add_argument("--floor", metavar="MANIFEST", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor:
        print(json.dumps(floor(args.floor)), flush=True)
        return 0
    figs = measure(Path(args.out))
    _write(figs)
    print(markdown(figs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
