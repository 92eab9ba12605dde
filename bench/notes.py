"""The prose of BENCHMARKS.md: how each figure was measured and, from this run's numbers, what
limits the figures that miss their targets."""

from __future__ import annotations

from typing import Any

from .procs import median
from .results import COMPARE_TARGET, FORMAT_TARGET, IDENTICAL_TARGET, MARGINAL_TARGET, RSS_MULTIPLE, naive_target

__all__ = ["notes"]

MB = 1e6


def _med(runs: list[dict[str, Any]], key: str) -> float:
    return median([r[key] for r in runs])


def _capture_notes(c: dict[str, Any]) -> str:
    raw, s = c["raw"], c["seconds"]
    tf_fixed = _med(raw["tfdbg"], "import_s") + _med(raw["tfdbg"], "build_s") + _med(raw["tfdbg"], "load_s")
    naive_fixed = _med(raw["naive"], "import_s") + _med(raw["naive"], "load_s")
    child = c["capture_child_s"]
    written = c["capture_disk_bytes"] / MB
    return f"""### Capturing one side ({c['model']}, batch {c['batch']}, {c['rounds']} round(s), medians)

- **tftrace** `tftrace capture CKPT --inputs X.npy --out DIR`: {s['capture']:.2f} s from process start to
  `manifest.json` written ({c['capture_process_s']:.2f} s to exit). Inside its child: model loaded
  {child['load_s']:.2f} s after the child started (TensorFlow import included), the instrumented run
  (fetch, hand every tensor to the background writers) {child['instrumented_s']:.2f} s, then {child['sync_s']:.2f} s
  waiting for the last writes, statistics and fsyncs (background threads, while it goes on); {child['total_s']:.2f} s
  before writing the manifest. It writes {c['tensors_captured']} tensors in {written:.0f} MB: activations
  {c['activation_bytes'] / MB:.0f} MB, the rest weights; {c.get('aliased_bytes', 0) / MB:.0f} MB of tensors repeat
  another's bytes (a `VariableV2` and its `/read` Identity...) and are stored once (`alias_of`, a hard link).
- **tfdbg v2**: {s['tfdbg']:.2f} s to a complete dump of one run, of which TF import + building the
  instrumented graph + loading the weights take {tf_fixed:.2f} s and the dumped `session.run`
  {c['tfdbg_first_run_s']:.2f} s (the next call {c['tfdbg_next_run_s']:.2f} s); {c['tfdbg_disk_bytes'] / MB:.0f} MB.
  tfdbg never dumps `Identity` outputs (they are in its `OP_CALLBACK_SKIP_OPS`), so in a TF1
  graph, where weights are read through `<variable>/read` Identities, its dump holds the
  activations only.
- **naive script**: {s['naive']:.2f} s until every tensor of the same fetch set is in memory
  (TF import + load {naive_fixed:.2f} s, the fetch {c['naive_first_run_s']:.2f} s); nothing written.
""" + (f"""- **plain run**: {s['plain']:.2f} s until the outputs are in memory (a warm run: {c['plain_next_run_s'] * 1000:.0f} ms).
""" if "plain" in s else "")


def _capture_limits(c: dict[str, Any]) -> str:
    """What keeps the capture figures from their targets, in this run's own numbers."""
    raw, s = c["raw"], c["seconds"]
    fixed = _med(raw["tfdbg"], "import_s") + _med(raw["tfdbg"], "build_s") + _med(raw["tfdbg"], "load_s")
    own_fixed = c["capture_child_s"]["load_s"]
    plain_cost = f" A warm plain run costs {c['plain_next_run_s'] * 1000:.0f} ms here." if c.get("plain_next_run_s") else ""
    child = c["capture_child_s"]
    work = child["instrumented_s"] + child["sync_s"]  # run the graph, write every tensor durably
    plain = _plain_runs_s(c, work)
    run = c["tfdbg_first_run_s"]
    imports = _med(raw["naive"], "import_s")
    return f"""### What limits the capture figures ({c['model']}, batch {c['batch']})

- **Time against tfdbg.** Of tfdbg's {s['tfdbg']:.1f} s, {fixed:.1f} s are TensorFlow's import, building the
  instrumented graph and loading the weights, and {run:.2f} s its dumped run. Of tftrace's {s['capture']:.1f} s,
  {own_fixed:.1f} s are its own import and load (in its child), {plain:.2f} s the plain runs that measure the
  latency and the observer effect (tfdbg measures neither), and {work:.2f} s the instrumented run with every
  tensor written and made durable: {work / run:.2f}x tfdbg's dumped run. 0.5x would mean finishing in
  {s['tfdbg'] / 2:.1f} s, and every contender pays TensorFlow's import before its first tensor ({imports:.1f} s in
  the naive script, which does nothing else until it loads the model).
- **Disk against tfdbg.** tfdbg writes raw tensor bytes (`TensorProto`s in one file); tftrace (capture
  format 2) packs each tensor as byte-shuffled zstd chunks, and stores a BiasAdd, Relu, Add or inference
  batch norm output as the XOR of its bits with numpy's value of that op on its captured inputs (zero where
  exact: {c.get('predicted_bytes', 0) / MB:.0f} MB of tensors stored so), lossless either way. Of the weights,
  which tfdbg does not dump in a TF1 graph at all, the large variables the checkpoint restored keep only a
  sha256 ({c.get('digest_kept_bytes', 0) / MB:.0f} MB not written; read back from the checkpoint when two
  sides' digests differ, or stored with `--keep-weights`); each `/read` Identity is an alias of its `VariableV2`.
- **Time against the naive script.** The naive script keeps everything in memory and writes nothing; tftrace
  writes {c['capture_disk_bytes'] / MB:.0f} MB and makes them durable before the manifest (an `fsync` per file, in a
  background thread while it writes), computes each tensor's statistics as it writes them, and runs the plain
  graph first to measure the observer effect and the latency (a traced warm-up, on one example where its trace
  tells every tensor's size at the whole batch, then `--timing-runs` timed runs,
  1 by default, the last doubling as the first batch's plain run, then one run per further batch).{plain_cost} The instrumented run
  also keeps Grappler from fusing what it fetches.
""" + _floors(c, work)


def _floors(c: dict[str, Any], work: float) -> str:
    """The physical floors measured in the same run, and the marginal figure, as prose."""
    out = ""
    f = c.get("floors")
    if f:
        probe = f"{f['probe_bytes'] / MB:.0f}"
        out += f"""- **Physical floors, measured in this run** (a {probe} MB write `fsync`ed to the same file system, and a
  {probe} MB copy in memory, once per round, medians): the disk took {f['disk_write_bytes_per_s'] / MB:.0f} MB/s durably and
  memory copies ran at {f['memory_copy_bytes_per_s'] / 1e9:.1f} GB/s, so the capture's {c['capture_disk_bytes'] / MB:.0f} MB need at least
  {f['disk_s']:.2f} s to reach the disk and {f['memory_s']:.2f} s to be copied once. Its instrumented run and the
  wait for its writes took {work:.2f} s, {work / f['disk_s']:.2f}x the disk's floor.
"""
    m = c.get("marginal_vs_tfdbg")
    if m is not None:
        s = c["seconds"]
        out += f"""- **Marginal figure.** What capturing adds to a plain run ({s['capture']:.2f} - {s['plain']:.2f} s) against what
  tfdbg adds ({s['tfdbg']:.2f} - {s['plain']:.2f} s): {m:.2f}x (the median of the rounds' own values); the
  TensorFlow import and model load every contender pays are out of it.{_marginal_limit(c, work)}{_import_removed(c)}
"""
    out += _naive_limit(c, work)
    return out


def per_round(values: list[float | None]) -> str:
    """Each round's value, "—" for a round that has none."""
    return ", ".join("—" if v is None else f"{v:.2f}" for v in values)


def _import_removed(c: dict[str, Any]) -> str:
    """The marginal figure again with each process's own ``import tensorflow`` taken out, and
    every round's value of both, so that the reader sees how far the rounds agree."""
    m = c.get("marginal_import_removed")
    if m is None:
        return ""
    a = c["seconds_import_removed"]
    rounds = c["marginal_rounds"]
    shown = {k: per_round(rounds[k]) for k in ("process", "import_removed")}
    return (f" With each process's own `import tensorflow` taken out of its time (the capture's child writes"
            f" its import to the manifest, the peers time theirs), the capture adds"
            f" {a['capture'] - a['plain']:+.2f} s and tfdbg2 {a['tfdbg'] - a['plain']:+.2f} s: {m:.2f}x. Per round:"
            f" {shown['process']} with the import, {shown['import_removed']} without.")


def _plain_runs_s(c: dict[str, Any], work: float) -> float:
    """The capture child's seconds between the model loaded and the manifest, less the
    instrumented run and its writes (``work``): the plain runs, the inputs and the fetch plan."""
    child = c["capture_child_s"]
    return max(0.0, child["total_s"] - child["load_s"] - work)


def _marginal_limit(c: dict[str, Any], work: float) -> str:
    """Where the marginal figure misses its target: the seconds the target allows, and what fills them."""
    m, s = c["marginal_vs_tfdbg"], c["seconds"]
    if m <= MARGINAL_TARGET:
        return ""
    allowed = MARGINAL_TARGET * (s["tfdbg"] - s["plain"])
    plain_runs = _plain_runs_s(c, work)
    return (f" The target, {MARGINAL_TARGET:g}x, allows +{allowed:.2f} s; the plain runs that time the model and"
            f" measure the observer effect take {plain_runs:.2f} s of tftrace's, and the instrumented run with"
            f" every tensor written, fsynced and summarised {work:.2f} s, where the naive script's fetch of the"
            f" same tensors took {c['naive_first_run_s']:.2f} s.")


def _naive_limit(c: dict[str, Any], work: float) -> str:
    """Where the capture misses its target against the naive script: what the target leaves for
    writing, against what the writing took (issue 29, item 2)."""
    target = naive_target(c["batch"])
    s = c["seconds"]
    if "naive" not in s or c["ratios"]["naive"] <= target:
        return ""
    fetch = c["naive_first_run_s"]
    plain_runs = _plain_runs_s(c, work)
    return f"""- **Against the naive script, {target:g}x.** That is {target * s['naive']:.2f} s, {(target - 1) * s['naive']:.2f} s more than
  the naive script, for the plain runs ({plain_runs:.2f} s here) and for writing what it fetched. tftrace's
  instrumented run and the wait for its writes took {work:.2f} s against the naive fetch's {fetch:.2f} s: the
  writers (byte shuffle, zstd, the residuals of predicted ops, statistics, digests) and the fsyncs need the
  cores TensorFlow's own threads use, so on a machine with few cores the writes cannot hide behind the fetch.
"""



def _compare_limits(d: dict[str, Any], i: dict[str, Any]) -> str:
    """Per element, from this run: one core's cost, what the second core adds, the peers' cost."""
    lines = []
    for label, fig, target in (("Differing", d, COMPARE_TARGET), ("Identical", i, IDENTICAL_TARGET)):
        ns = fig.get("ns_per_element")
        if not ns or fig["ratio"] >= target:
            continue
        one, two, peer = ns["tftrace_one_worker"], ns["tftrace"], ns[fig["peer"]]
        lines.append(
            f"- **{label}** (ratio {fig['ratio']:.2f}x, target {target:g}x): per element pair, `compare_arrays` "
            f"costs {one:.2f} ns on one worker thread and {two:.2f} ns on two ({one / two:.2f}x faster, not 2x); "
            f"the peer costs {peer:.2f} ns on one. To reach the target, one core's work per element would have to "
            f"be at most {2 / target:g}x the peer's, and the two workers would have to scale perfectly."
        )
    if "floor_s" in d:  # runs before the floor was recorded have none
        lines += [f"- **Floor** ({label.lower()}): reading both sides once at the {fig['read_gb_per_s']:.1f} GB/s "
                  f"measured in this run takes {fig['floor_s']:.2f} s; `compare_arrays` takes "
                  f"{fig['over_floor']['tftrace']:.1f}x that, the peer {fig['over_floor'][fig['peer']]:.1f}x."
                  for label, fig in (("Differing", d), ("Identical", i))]
    if not lines:
        return ""
    return "\n".join(["What limits the compare figures, measured in this run:", "", *lines, ""])


def _avx2_note(avx2: dict[str, Any] | None) -> list[str]:
    """The same race with the code an AVX2 CPU runs, on this AVX-512 one (``bench.compare_bench.AVX2_ENV``)."""
    if not avx2:
        return []
    d = avx2["differing"]
    return [
        "**The code of the other kind of CPU.** No AVX2-only machine was at hand, so the same race ran "
        "again in a child process where numba compiles the kernel for Haswell (`NUMBA_CPU_NAME=haswell`) and "
        "numpy's dispatch stops below AVX-512 (`NPY_DISABLE_CPU_FEATURES=\"X86_V4 AVX512_ICL AVX512_SPR\"`; "
        f"numpy then saw AVX-512: {avx2.get('numpy_avx512')}, numba compiled for: {avx2.get('numba_cpu_name')}): "
        f"differing tensors {d['gb_per_s']['tftrace']:.2f} GB/s against `np.abs(a - b).max()` "
        f"{d['gb_per_s']['naive_abs_max']:.2f} GB/s, {d['ratio']:.2f}x; one worker "
        f"{d['gb_per_s']['tftrace_one_worker']:.2f} GB/s. This is AVX2 code on this machine's memory system, "
        "not an AVX2 machine: where memory bandwidth limits both contenders, it says as much as one would.",
        "",
    ]


def _format_section(f: dict[str, Any] | None) -> list[str]:
    """Compare over capture format 2 against format 1 (issue 29, item 3), when it was measured."""
    if not f:
        return []
    t = {fmt: ", ".join(f"{x:.1f}" for x in f["seconds"][fmt]) for fmt in ("packed", "npy")}
    disk = f.get("disk_bytes", {})
    sizes = (f" The two sides take {disk['packed'] / MB:.0f} MB on disk in format 2 and {disk['npy'] / MB:.0f} MB in"
             f" format 1." if disk else "")
    limit = "" if f["packed_over_npy"] <= FORMAT_TARGET else (
        " What limits it: captures named on the command line are received ones, so every digest they claim is"
        " checked against what it names before an equal pair may decide \"identical\": all of a format-2 side is"
        " decoded (zstd, the byte unshuffle, the predictions of BiasAdd, Relu, Add and batch norm outputs from"
        " their inputs), while format 1 is memory-mapped and claims nothing. Consecutive pairs whose chunks"
        " cover the same rows are read in step, each chunk decoded once (`Capture.in_step`); an input that lies"
        " before such a run (a residual Add's shortcut) is decoded again for its reader, so the compare"
        " decodes about 1.2x what both sides hold (2.6x when every pair was read alone). Decoding B on the"
        " second core meanwhile was faster still and held more than the compare's memory target;"
        " `bench/format_notes.md` has the profiles and what was tried.")
    return [
        "### Compare over capture format 2 against format 1",
        "",
        (f"The same {f['model']} batch-{f['batch']} run (A: checkpoint, oneDNN off; B: SavedModel, oneDNN on), "
         f"captured by this build in each format and compared end to end as a user types it (`tftrace compare "
         f"capA capB --isolate 0`), the formats interleaved round by round: format 2 {t['packed']} s, format 1 "
         f"{t['npy']} s; medians {f['median_s']['packed']:.1f} s against {f['median_s']['npy']:.1f} s, "
         f"{f['packed_over_npy']:.2f}x (target: at most {FORMAT_TARGET:g}x).{sizes}{limit}"),
        "",
    ]


def notes(figs: dict[str, Any], gpu: str = "", diagnose: str = "", scale: str = "") -> str:
    """The page's prose; ``gpu``: the GPU section (:func:`bench.gpu_report.gpu_section`), placed
    after the CPU figures' notes; ``diagnose``: :func:`bench.diagnose_bench.diagnose_section`;
    ``scale``: :func:`bench.scale_bench.scale_section` (its own run, kept in bench/)."""
    primary = figs["capture"][0]
    t, m, e, r = figs["throughput"], figs["peak_rss"], figs["end_to_end"], figs["render"]
    parts = [
        "## How each figure is measured",
        "",
        ("Every contender is its own process, started the same way (`TF_ENABLE_ONEDNN_OPTS=0`, CPU only), fed "
        "the same `.npy` examples and the same checkpoint, and timed from `Popen` to the moment its result "
        "exists. Before each one the harness runs `sync` and waits, so nobody pays for the previous "
        "contender's writeback. Rounds rotate the order of the contenders."),
        "",
        ("**tfdbg, precisely.** `tf.debugging.experimental.enable_dump_debug_info(dir, "
        "tensor_debug_mode=\"FULL_TENSOR\", circular_buffer_size=-1)` instruments ops through op callbacks, "
        "which TensorFlow calls when *Python* constructs an op (`op_def_library`); a graph imported from a "
        "`.meta` or GraphDef is built by the C++ importer and is not instrumented at all: `Session.run` of an "
        "imported checkpoint dumps no tensor. So the tfdbg contender rebuilds the same graph with the model's "
        "own builder *after* enabling the dump, in TF1 graph mode, loads the checkpoint's values by feeding "
        "each variable's initializer (not dumped), runs the signature outputs once and flushes both writers. "
        "`VariableV2` and `Assign` are excluded (`op_regex`): tfdbg replacing a ref variable's output with "
        "its `DebugIdentityV2` breaks the variable (`'SymbolicTensor' object has no attribute 'assign'`)."),
        "",
        _capture_notes(primary),
        _capture_limits(primary),
    ]
    parts += [_capture_notes(c) for c in figs["capture"][1:]]
    if len(figs["capture"]) > 1:
        parts.append(_capture_limits(figs["capture"][-1]))
    d, i = t["differing"], t["identical"]
    parts += [
        "### Comparing two captures",
        "",
        (f"ResNet-50 at batch 8 (capture format 2), each pair decoded into memory once before the rounds (what decoding costs is in the end-to-end figure; pairs kept by digest are never read), "
        f"{len(d['raw_seconds']['tftrace'])} rounds. Differing: {d['pairs']} tensor pairs ({d['bytes'] / 1e9:.2f} GB, "
        f"checkpoint with oneDNN off vs SavedModel with oneDNN on) through `compare_arrays(a, b, rtols=(1e-5,))` "
        f"(what `compare` runs: every metric plus the tolerance excess) against `np.abs(a - b).max()`. "
        f"Identical: {i['pairs']} pairs ({i['bytes'] / 1e9:.2f} GB) against numpy's `a - b`."),
        "",
        ("How `compare_arrays` gets there: one compiled kernel (numba, `tracer/metrics/kernel.py`) reads "
        "each element once from memory, in L1-sized pieces of a block, and re-reads the piece from the cache "
        "in a few vectorised loops (bits and ULPs; the float64 sums; the decade histogram with cheap bounds "
        "in float32, 8 per instruction); only the rare chunks whose bounds say an element could raise a "
        "maximum or enter the worst list are evaluated exactly in float64. Two threads share the blocks "
        "of tensors of 256 Ki elements and more (the kernel releases the GIL), so a busy second core lowers "
        "the ratio. The identical case stops after the integer pass and the norm of A."),
        "",
        _compare_limits(d, i),
        *_avx2_note(figs.get("throughput_avx2")),
        "### Memory of a compare",
        "",
        (f"`tftrace compare A B` of two ResNet-50 batch-8 captures ({m['tensors']} tensors, "
        f"{m['captured_total_mb']:.0f} MB in all, the largest {m['largest_tensor_mb']:.1f} MB), isolation off, "
        f"report included, in its own process reading its own `VmHWM` (the kernel's `ru_maxrss` of a child "
        f"counts the parent's memory at fork): {m['baseline_rss_mb']:.0f} MB after imports, peak "
        f"{m['peak_rss_mb']:.0f} MB, {m['compare_s']:.0f} s. Target: at most {RSS_MULTIPLE:g}x the largest "
        f"tensor above the baseline (both sides of the largest pair, twice over)."),
    ]
    if m["above_baseline_mb"] > RSS_MULTIPLE * m["largest_tensor_mb"]:
        parts += [
            "",
            ("What limits it: the pages of the pair being compared stay mapped while it is read (both sides "
            "of the largest pair: 2x), and loading the compiled kernel (LLVM) takes about 30 MB; numba's "
            "import itself (about 100 MB) is part of the baseline. The report no longer reads tensors: the "
            "per-node difference histograms come from the metrics scan."),
        ]
    parts += [
        "",
        "### End to end and the large report",
        "",
        (f"`tftrace compare ckpt/ savedmodel/` on ResNet-50, one example at batch 1, as typed by a user: "
        f"{e['seconds']:.1f} s (median of {len(e['runs'])}), verdict {e['runs'][-1]['verdict']}; each capture "
        f"runs in its own TensorFlow process, B's started once A's is up: it imports TensorFlow and loads its "
        f"model while A is captured, then runs on A's examples."),
        "",
        f"The large report comes from a real comparison of a {r['ops']:,}-op graph (residual units under "
        f"`stage/unit` scopes) against its twin with one changed constant; `render_report` on its "
        f"`report.json` (Graphviz included): {r['seconds']:.1f} s, HTML {r['html_bytes'] / MB:.2f} MB. "
        + ("The page was opened in headless Chromium: ready in "
           f"{r['browser']['ready_s']:.1f} s, a search for the first divergent op highlighted it."
           if "ready_s" in r["browser"] else f"The page was not opened in a browser: {r['browser'].get('skipped')}."),
        "",
        *_format_section(figs.get("formats")),
        *([diagnose] if diagnose else []),
        *([scale] if scale else []),
        *([gpu] if gpu else []),
        "## Reproduce",
        "",
        "```",
        "make bench          # everything above (installs nothing new; generates the models once into out/bench)",
        "make bench-quick    # the same harness on the sample detector, one round: checks it runs",
        "make bench-scale    # the bigger-than-memory section: ResNet-152 at batch 75 (~9 min, ~15 GB of disk)",
        "python -m bench --rewrite-markdown   # this page and the README summary again from bench/results.json",
        "python -m bench --gpu --out DIR     # on a machine with a GPU: the section above, in DIR/results_gpu.json",
        "python -m bench --help",
        "```",
    ]
    return "\n".join(parts)
