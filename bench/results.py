"""From measurements to the table: rows, ``results.json`` and ``BENCHMARKS.md``.

A row is one figure of issue 7: what tftrace measured, what its peer measured in the same
run, their ratio, the target and whether it is met. Measured and peer values are medians over
the rounds; a time ratio is the median of the per-round ratios (contenders of one round ran
back to back, under the same load), so it need not equal the quotient of the two medians. Ratios are oriented as the targets are
written (time and disk: tftrace / peer, lower is better; throughput: tftrace / peer, higher is
better), so every row reads the same way against its target.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from .diagnose_bench import diagnose_row

__all__ = ["COMPARE_TARGET", "FORMAT_TARGET", "IDENTICAL_TARGET", "MARGINAL_TARGET", "NAIVE_TARGET",
           "NAIVE_TARGET_BATCHED", "naive_target", "README_MARKERS", "RSS_MULTIPLE", "Row", "build_rows", "format_table",
           "headline", "readme_summary", "with_readme_summary", "write_markdown", "write_results"]

RSS_MULTIPLE = 4.0  # "a small multiple of the largest tensor": both sides of the largest pair, twice over
COMPARE_TARGET = 1.0  # all metrics on differing tensors, against np.abs(a - b).max()
IDENTICAL_TARGET = 0.5  # identical tensors, against numpy's a - b
NAIVE_TARGET = 1.5  # capture against the naive fetch-all script (issue 7)
NAIVE_TARGET_BATCHED = 1.25  # the same from batch 8 on, where the writes can overlap the fetch (issue 29, item 2)
MARGINAL_TARGET = 0.5  # what capturing adds to a plain run, against what tfdbg2 adds (issue 29, item 1)
FORMAT_TARGET = 1.0  # compare over capture format 2 against format 1, end to end (issue 29, item 3)
MB = 1e6


@dataclass
class Row:
    figure: str
    measured: str
    peer: str
    ratio: float | None
    target: str
    passed: bool | None  # None: no target (context only) or not measured

    def cells(self) -> list[str]:
        ratio = "—" if self.ratio is None else f"{self.ratio:.2f}×"
        verdict = {True: "pass", False: "FAIL", None: "—"}[self.passed]
        return [self.figure, self.measured, self.peer, ratio, self.target, verdict]


def naive_target(batch: int) -> float:
    """The capture's target against the naive fetch-all script at ``batch``."""
    return NAIVE_TARGET_BATCHED if batch >= 8 else NAIVE_TARGET


def _failed(c: dict[str, Any], peer: str) -> str:
    """The peer's error in one line (a GPU run goes on without a peer that fails)."""
    lines = str(c.get("failed", {}).get(peer, "did not run")).strip().splitlines()
    return f"{peer} failed: {lines[-1][:160] if lines else '?'}"


def _capture_rows(c: dict[str, Any], label: str) -> list[Row]:
    s, q = c["seconds"], c["ratios"]
    if "tfdbg" in s:
        rows = [
            Row(f"capture all intermediates, time ({label})", f"{s['capture']:.2f} s",
                f"tfdbg2 FULL_TENSOR {s['tfdbg']:.2f} s", q["tfdbg"], "≤ 0.5×", q["tfdbg"] <= 0.5),
            Row(f"capture all intermediates, disk ({label})", f"{c['capture_disk_bytes'] / MB:.0f} MB",
                f"tfdbg2 dump {c['tfdbg_disk_bytes'] / MB:.0f} MB", c["capture_disk_bytes"] / c["tfdbg_disk_bytes"],
                "≤ 0.5×", c["capture_disk_bytes"] / c["tfdbg_disk_bytes"] <= 0.5),
        ]
    else:
        rows = [Row(f"capture all intermediates, time ({label})", f"{s['capture']:.2f} s", _failed(c, "tfdbg"), None,
                    "≤ 0.5×", None),
                Row(f"capture all intermediates, disk ({label})", f"{c['capture_disk_bytes'] / MB:.0f} MB",
                    _failed(c, "tfdbg"), None, "≤ 0.5×", None)]
    target = naive_target(c["batch"])
    if "naive" in s:
        rows.append(Row(f"capture overhead ({label})", f"{s['capture']:.2f} s", f"naive fetch-all script {s['naive']:.2f} s",
                        q["naive"], f"≤ {target:g}×", q["naive"] <= target))
    else:
        rows.append(Row(f"capture overhead ({label})", f"{s['capture']:.2f} s", _failed(c, "naive"), None,
                        f"≤ {target:g}×", None))
    if "plain" in s:
        rows.append(Row(f"capture vs plain run ({label})", f"{s['capture']:.2f} s", f"plain run {s['plain']:.2f} s",
                        q["plain"], "— (context)", None))
    if c.get("marginal_vs_tfdbg") is not None:  # what each adds to a plain run: (capture - plain) / (tfdbg - plain)
        rows.append(Row(f"capture marginal, added to a plain run ({label})",
                        f"{s['capture'] - s['plain']:+.2f} s", f"tfdbg2 {s['tfdbg'] - s['plain']:+.2f} s",
                        c["marginal_vs_tfdbg"], f"≤ {MARGINAL_TARGET:g}×", c["marginal_vs_tfdbg"] <= MARGINAL_TARGET))
    if c.get("marginal_import_removed") is not None:  # the same, each process's own `import tensorflow` taken out
        a = c["seconds_import_removed"]
        rows.append(Row(f"capture marginal, each process's TensorFlow import taken out ({label})",
                        f"{a['capture'] - a['plain']:+.2f} s", f"tfdbg2 {a['tfdbg'] - a['plain']:+.2f} s",
                        c["marginal_import_removed"], f"≤ {MARGINAL_TARGET:g}×",
                        c["marginal_import_removed"] <= MARGINAL_TARGET))
    return rows


def build_rows(figs: dict[str, Any], kept_diagnose: Sequence[dict[str, Any]] = ()) -> list[Row]:
    """The benchmark table. ``kept_diagnose``: diagnose figures measured elsewhere (the lent GPU)
    and kept in bench/, shown after this run's own."""
    rows: list[Row] = []
    primary = figs["capture"][0]
    rows += _capture_rows(primary, f"{primary['model']}, batch {primary['batch']}")
    t = figs["throughput"]
    d, i = t["differing"], t["identical"]
    rows.append(Row("compare two captures, all metrics, differing tensors",
                    f"{d['gb_per_s']['tftrace']:.2f} GB/s", f"np.abs(a - b).max() {d['gb_per_s']['naive_abs_max']:.2f} GB/s",
                    d["ratio"], f"≥ {COMPARE_TARGET:g}×", d["ratio"] >= COMPARE_TARGET))
    avx2 = figs.get("throughput_avx2")
    if avx2:
        a2 = avx2["differing"]
        rows.append(Row("compare, differing tensors, AVX2 code (numba for Haswell, numpy without AVX-512) on this CPU",
                        f"{a2['gb_per_s']['tftrace']:.2f} GB/s",
                        f"np.abs(a - b).max() {a2['gb_per_s']['naive_abs_max']:.2f} GB/s",
                        a2["ratio"], f"≥ {COMPARE_TARGET:g}×", a2["ratio"] >= COMPARE_TARGET))
    rows.append(Row("compare two captures, identical tensors",
                    f"{i['gb_per_s']['tftrace']:.2f} GB/s", f"numpy a - b {i['gb_per_s']['numpy_subtract']:.2f} GB/s",
                    i["ratio"], f"≥ {IDENTICAL_TARGET:g}×", i["ratio"] >= IDENTICAL_TARGET))
    e = figs["end_to_end"]
    rows.append(Row(f"end-to-end tftrace compare ckpt/ savedmodel/ ({e['model']}, batch 1, HTML)", f"{e['seconds']:.1f} s",
                    "—", None, "≤ 60 s", e["seconds"] <= 60 and e["html"]))
    m = figs["peak_rss"]
    multiple = m["above_baseline_mb"] / m["largest_tensor_mb"]
    rows.append(Row("peak memory of compare (above its import baseline)",
                    f"{m['above_baseline_mb']:.0f} MB (peak {m['peak_rss_mb']:.0f} MB)",
                    f"largest tensor {m['largest_tensor_mb']:.1f} MB; all tensors {m['captured_total_mb']:.0f} MB",
                    multiple, f"≤ {RSS_MULTIPLE:g}× largest", multiple <= RSS_MULTIPLE))
    r = figs["render"]
    rows.append(Row(f"render the {r['ops']:,}-op report", f"{r['seconds']:.1f} s", "—", None, "≤ 30 s", r["seconds"] <= 30))
    rows.append(Row(f"{r['ops']:,}-op report size", f"{r['html_bytes'] / MB:.2f} MB", "—", None, "≤ 10 MB",
                    r["html_bytes"] <= 10 * MB))
    b = r["browser"]
    if "skipped" in b:
        rows.append(Row(f"{r['ops']:,}-op page interactive", "not checked", b["skipped"], None, "interactive", None))
    else:
        rows.append(Row(f"{r['ops']:,}-op page interactive", f"ready in {b['ready_s']:.1f} s, search works"
                        if b["interactive"] else f"not interactive: {b['console_errors'][:1]}", "—", None, "interactive",
                        bool(b["interactive"])))
    for extra in figs["capture"][1:]:
        rows += _capture_rows(extra, f"{extra['model']}, batch {extra['batch']}")
    f = figs.get("formats")
    if f:  # issue 29, item 3
        rows.append(Row(f"compare over capture format 2, end to end ({f['model']}, batch {f['batch']})",
                        f"{f['median_s']['packed']:.1f} s", f"the same over format 1 (npy) {f['median_s']['npy']:.1f} s",
                        f["packed_over_npy"], f"≤ {FORMAT_TARGET:g}×", f["packed_over_npy"] <= FORMAT_TARGET))
    for run in [figs.get("diagnose"), *kept_diagnose]:  # issue 29: reported; BENCHMARKS.md says where the time goes
        if run:
            figure, measured = diagnose_row(run)
            rows.append(Row(figure, measured, "—", None, "reported", None))
    return rows


def headline(figs: dict[str, Any]) -> dict[str, Any]:
    """The keys issue 7 names, from the primary workload of each figure."""
    c = figs["capture"][0]
    t = figs["throughput"]
    floors = c.get("floors") or {}
    return {
        **({"capture_marginal_vs_tfdbg_ratio": c["marginal_vs_tfdbg"]} if c.get("marginal_vs_tfdbg") is not None else {}),
        **({"capture_marginal_import_removed_ratio": c["marginal_import_removed"]}
           if c.get("marginal_import_removed") is not None else {}),
        **({"capture_disk_floor_s": floors["disk_s"], "capture_memory_floor_s": floors["memory_s"]} if floors else {}),
        "capture_vs_tfdbg_ratio": c["ratios"]["tfdbg"],
        "capture_disk_vs_tfdbg_ratio": c["capture_disk_bytes"] / c["tfdbg_disk_bytes"],
        "capture_vs_naive_ratio": c["ratios"]["naive"],
        "compare_vs_naive_ratio": t["differing"]["ratio"],
        **({"compare_vs_naive_ratio_avx2_code": figs["throughput_avx2"]["differing"]["ratio"]}
           if figs.get("throughput_avx2") else {}),
        "identical_check_vs_bandwidth_ratio": t["identical"]["ratio"],
        "end_to_end_s": figs["end_to_end"]["seconds"],
        "render_5k_s": figs["render"]["seconds"],
        "render_5k_html_mb": figs["render"]["html_bytes"] / MB,
        "peak_rss_compare_mb": figs["peak_rss"]["peak_rss_mb"],
    }


def format_table(rows: list[Row]) -> str:
    header = ["figure", "measured", "peer", "ratio", "target", "result"]
    cells = [header] + [row.cells() for row in rows]
    widths = [max(len(line[k]) for line in cells) for k in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_results(path: Path, figs: dict[str, Any], rows: list[Row], meta: dict[str, Any]) -> None:
    data = {**headline(figs), "passed": {r.figure: r.passed for r in rows}, "table": [asdict(r) for r in rows],
            **meta, "raw": figs}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, default=str) + "\n")


def markdown_table(rows: list[Row]) -> str:
    out = ["| figure | measured | peer | ratio | target | result |", "|---|---|---|---|---|---|"]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in row.cells()) + " |" for row in rows]
    return "\n".join(out)


def write_markdown(path: Path, rows: list[Row], meta: dict[str, Any], notes: str) -> None:
    m = meta["machine"]
    text = f"""# Benchmarks

Measured by `make bench` (`python -m bench`) on {meta['finished']} in {meta['duration_s'] / 60:.1f} min;
the raw timings, every round and the machine are in [`bench/results.json`](bench/results.json).
Every figure is a ratio against a peer measured in the same run, side by side, in rotating
order, as the median of several rounds: the machine is shared and noisy, so only ratios count.

**Machine:** {m['cpu']}, {m['cores']} cores, {m['memory_gb']} GB RAM, {m['os']}, AVX2 {'yes' if m['avx2'] else 'no'},
AVX-512 {'yes' if m['avx512'] else 'no'}; Python {m['python']}, numpy {m['numpy']}, TensorFlow {meta.get('tensorflow', '?')}
(CPU, oneDNN off for every contender). Load average (1, 5, 15 min) {m['load_average_at_start']} at the start and
{meta.get('load_average_at_end')} at the end: other jobs shared the machine, which is why every figure is a
ratio of contenders run side by side.

{markdown_table(rows)}

{notes}
"""
    kept = _kept_section(path)
    if kept and "\n## On a GPU" in text:
        text = text.replace("\n## On a GPU", f"\n{kept}\n\n## On a GPU", 1)
    path.write_text(text)


# A section another harness writes into the page (bench/detector_bench.py): a rewrite keeps it.
DETECTOR_MARKERS = ("<!-- detector-bench:begin -->", "<!-- detector-bench:end -->")


def _kept_section(path: Path) -> str:
    begin, end = DETECTOR_MARKERS
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if begin not in old or end not in old:
        return ""
    return old[old.index(begin):old.index(end) + len(end)]


README_MARKERS = ("<!-- speed summary: generated -->", "<!-- /speed summary -->")


def readme_summary(figs: dict[str, Any], meta: dict[str, Any]) -> str:
    """The README's short form of the last run: the rows of the primary capture workload and
    every other figure (the other capture workloads are in BENCHMARKS.md), and when and where."""
    m = meta["machine"]
    out = [markdown_table(build_rows({**figs, "capture": figs["capture"][:1]})), ""]
    out.append(f"Measured by `make bench` on {meta['finished']} ({m['cpu']}, {m['cores']} cores, "
               f"TensorFlow {meta.get('tensorflow', '?')}, CPU).")
    return "\n".join(out)


def with_readme_summary(readme: str, summary: str) -> str:
    """``readme`` with the text between the speed-summary markers replaced by ``summary``."""
    start, end = README_MARKERS
    head, found, rest = readme.partition(start)
    _old, found_end, tail = rest.partition(end)
    if not found or not found_end:
        raise ValueError(f"README.md has no {start} ... {end} block")
    return f"{head}{start}\n{summary}\n{end}{tail}"

