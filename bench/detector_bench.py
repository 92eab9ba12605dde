"""Real-size detectors, as typed (issue 25 item 5): does ``tftrace compare`` finish, and what
does it cost against the least any fetch-all script can spend on the same model?

``python -m bench.detector_bench [--workload standin|model-garden] [--out DIR]``:

* ``standin`` (``make bench-detector``, ~15 min on 2 cores): :mod:`bench.workloads.retinanet_tf2`,
  built once into ``DIR/models``, 4 images of 160x160;
* ``model-garden`` (``make bench-retinanet``): the Model Garden's own RetinaNet, built by
  ``bench/workloads/retinanet.py`` under tf-models-official (which the Makefile installs beside
  the venv), read from ``--models``, 2 images of 256x256.

For either:

1. the models: two exports of the same weights and a ``mixed_float16`` twin, with seeded uint8
   images;
2. captures one export with ``tftrace capture`` (its manifest lists the tensors a capture
   fetches);
3. the **floor**: one process that imports TensorFlow, loads the same inlined graph tftrace's
   loader builds (a TF2 signature's internal tensors cannot be fetched otherwise), runs the
   outputs once, then fetches every tensor the capture fetched in one ``session.run`` and holds
   them in memory, writing nothing: what a naive fetch-all script spends at the least;
4. ``tftrace compare`` of the two exports of the same weights (two sides, each its own process,
   the graph diff, every tensor compared, the report);
5. ``tftrace diff-graph`` of the export against its ``mixed_float16`` twin;
6. ``tftrace compare`` of one export at batch 1 against batch N (the images), ``--repeat 2``: what
   a GPU side without op determinism gets by default, each side captured once more to measure
   its noise (four captures in all).

Every figure of a workload comes from one run, side by side; ``bench/results_detector.json``
keeps each workload's last run and the section of BENCHMARKS.md between its markers shows them all.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .procs import REPO, child_env, dir_bytes, machine, run_child
from .results import DETECTOR_MARKERS

__all__ = ["main", "floor"]

NOTES = REPO / "bench" / "detector_notes.md"  # hand-written notes the section carries under its tables
MARK_BEGIN, MARK_END = DETECTOR_MARKERS  # bench.results keeps the section when make bench rewrites the page
@dataclass(frozen=True)
class Workload:
    """One detector the harness measures: where its exports come from and what it is fed."""

    key: str
    title: str
    images: int
    image_size: int
    models: str  # the default models directory, under the repository


WORKLOADS = {
    "standin": Workload("standin", "`bench/workloads/retinanet_tf2.py` (ResNet-50 + FPN levels 3-7, per-class "
                        "top-k, combined NMS)", 4, 160, "out/bench-standin/models"),
    "model-garden": Workload("model-garden", "the Model Garden's RetinaNet (`bench/workloads/retinanet.py`: "
                             "tf-models-official 2.20, `retinanet_resnetfpn_coco`, ResNet-50 + FPN, exported with "
                             "`input_type='image_tensor'`)", 2, 256, "out/bench/models/retinanet"),
}


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


def _build(workload: Workload, models: Path) -> dict[str, Any]:
    if not (models / "workload.json").is_file():
        if workload.key != "standin":
            raise SystemExit(f"{models} holds no workload.json: build it first (make bench-retinanet does)")
        run_child([sys.executable, "-m", "bench.workloads.retinanet_tf2", "--out", str(models)], timeout_s=3600)
    images = models / "images.npz"
    if not images.is_file():
        import numpy as np  # noqa: PLC0415

        rng = np.random.RandomState(25)
        shape = (workload.images, workload.image_size, workload.image_size, 3)
        np.savez(images, inputs=rng.randint(0, 256, shape).astype(np.uint8))
    return json.loads((models / "workload.json").read_text(encoding="utf-8"))


def measure(workload: Workload, out: Path, models: Path) -> dict[str, Any]:
    built = _build(workload, models)
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
    batch = _images_shape(models / "images.npz")[0]
    apart = run_child([*tftrace, "compare", str(models / "fp32"), str(models / "fp32"), *inputs, "--a-batch-size", "1",
                       "--b-batch-size", str(batch), "--repeat", "2", "--out", str(out / "report_batches"), "--force"],
                      env=env, timeout_s=3600, ok_codes=(0, 1))
    batches = json.loads((out / "report_batches" / "report.json").read_text(encoding="utf-8"))
    diff = run_child([*tftrace, "diff-graph", str(models / "fp32"), str(models / "mixed_float16"), "--json"],
                     env=env, timeout_s=3600)
    rewrites: dict[str, int] = {}
    for rewrite in json.loads(diff.stdout)["rewrites"]:
        rewrites[rewrite["kind"]] = rewrites.get(rewrite["kind"], 0) + 1
    shape = _images_shape(models / "images.npz")
    images = {"count": shape[0], "size": f"{shape[1]}x{shape[2]}"}
    return {
        "workload": {**built, "key": workload.key, "title": workload.title,
                     "traced_ops": len(manifest["graph"]["nodes"])},
        "images": images, "machine": machine(),
        "capture": {"wall_s": round(capture.wall_s, 2), "timings": manifest["timings"],
                    "disk": dir_bytes(out / "capture"), "tensors": len(manifest["tensor_layout"]),
                    "uncaptured": len(manifest.get("uncaptured") or {})},
        "floor": {"wall_s": round(floor_run.wall_s, 2), **floor_run.result},
        "compare": {"wall_s": round(compare.wall_s, 2), "verdict": report["verdict"],
                    "first_divergence": (report.get("first_divergence") or {}).get("node"),
                    "progress_lines": sum(1 for line in compare.stderr.splitlines() if line.startswith(("capture ", "compare:")))},
        "diff_graph": {"wall_s": round(diff.wall_s, 2), "rewrites": rewrites},
        "compare_batches": {"wall_s": round(apart.wall_s, 2), "batch_sizes": [1, batch], "repeat": 2,
                            "verdict": batches["verdict"],
                            "first_divergence": (batches.get("first_divergence") or {}).get("node"),
                            "noise_s": batches["noise"].get("seconds"), "noise_processes": batches["noise"].get("processes")},
    }


def _images_shape(path: Path) -> tuple[int, ...]:
    import numpy as np  # noqa: PLC0415

    with np.load(path) as data:
        return tuple(data[data.files[0]].shape)


def markdown(runs: dict[str, dict[str, Any]]) -> str:
    """The section of BENCHMARKS.md: one table per workload measured, each from its own run."""
    out = [MARK_BEGIN]
    for key in [k for k in WORKLOADS if k in runs]:
        out += ["", *_table(runs[key])]
    out += ["", "A compare runs two sides, each a capture: two floors is what two fetch-all scripts would spend. "
            "What the capture adds to its floor is writing and making durable what it fetched (the sync) and "
            "the plain run's own timing; both sides' loads dominate diff-graph."]
    if NOTES.is_file():  # what was measured by hand and what the figures do not show, kept with them
        out += ["", NOTES.read_text(encoding="utf-8").strip()]
    out.append(MARK_END)
    return "\n".join(out)


def _table(figs: dict[str, Any]) -> list[str]:
    cap, flo, cmp_, diff = figs["capture"], figs["floor"], figs["compare"], figs["diff_graph"]
    t, w, m = cap["timings"], figs["workload"], figs["machine"]
    return [
        f"### {w['traced_ops']:,} ops traced: {w['title']}",
        "",
        f"`make {'bench-detector' if w['key'] == 'standin' else 'bench-retinanet'}`, one run, "
        f"{figs['images']['count']} images of {figs['images']['size']}; {m.get('cores', '?')} cores, load average at "
        f"start {m.get('load_average_at_start')}; figures from `bench/results_detector.json`.",
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
        *_batches_row(figs.get("compare_batches"), flo["wall_s"]),
    ]


def _batches_row(apart: dict[str, Any] | None, floor_s: float) -> list[str]:
    """The compare users run on a GPU (batch 1 against a batch, each side's noise measured in one more
    process): four captures, the first side's in one run per image; absent from runs made before it."""
    if not apart:
        return []
    a, b = apart["batch_sizes"]
    return [f"| `tftrace compare` of one export at batch {a} against batch {b}, `--repeat 2` (each side once more in "
            f"a fresh process, {apart['noise_s']:.0f} s of it): **{apart['verdict']}**, first divergence "
            f"`{apart['first_divergence']}` | {apart['wall_s']:.0f} s | {apart['wall_s'] / (4 * floor_s):.2f}× four |"]


def _write(figs: dict[str, Any]) -> dict[str, dict[str, Any]]:
    path = REPO / "bench" / "results_detector.json"
    runs = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    runs = {k: v for k, v in runs.items() if k in WORKLOADS}  # one run per workload, the last
    runs[figs["workload"]["key"]] = figs
    path.write_text(json.dumps(runs, indent=1) + "\n", encoding="utf-8")
    page = REPO / "BENCHMARKS.md"
    text = page.read_text(encoding="utf-8")
    section = markdown(runs)
    if MARK_BEGIN in text and MARK_END in text:
        text = text[:text.index(MARK_BEGIN)] + section + text[text.index(MARK_END) + len(MARK_END):]
    else:
        text = text.replace("\n## On a GPU", f"\n{section}\n\n## On a GPU", 1)
    page.write_text(text, encoding="utf-8")
    return runs


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.detector_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="standin")
    parser.add_argument("--models", help="the workload's models directory (default: its own under out/)")
    parser.add_argument("--out", help="where the capture and the report go (default: out/bench-<workload>)")
    parser.add_argument("--floor", metavar="MANIFEST", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.floor:
        print(json.dumps(floor(args.floor)), flush=True)
        return 0
    workload = WORKLOADS[args.workload]
    out = Path(args.out or REPO / "out" / f"bench-{workload.key}")
    figs = measure(workload, out, Path(args.models or REPO / workload.models))
    print(markdown(_write(figs)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
