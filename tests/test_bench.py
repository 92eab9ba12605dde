"""``python -m bench --quick``: the benchmark harness runs end to end and writes its contract.

Timings are not asserted (they are ratios measured on a shared machine; ``make bench`` reports
them). What is asserted is what the harness must get right whatever the machine: every key
issue 7 names is in ``results.json``, every contender really ran on the same data (the same
fetch set, the same examples), and the workload-determined values are the exact ones.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
KEYS = ("capture_vs_tfdbg_ratio", "capture_vs_naive_ratio", "compare_vs_naive_ratio",
        "identical_check_vs_bandwidth_ratio", "capture_disk_vs_tfdbg_ratio", "end_to_end_s", "render_5k_s",
        "peak_rss_compare_mb")


@pytest.mark.slow
def test_quick_bench_runs_end_to_end(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--work", str(tmp_path / "work"), "--results", str(results)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    data = json.loads(results.read_text())
    for key in KEYS:
        assert isinstance(data[key], float) and math.isfinite(data[key]) and data[key] > 0, key
    assert data["mode"] == "quick"
    assert data["machine"]["cores"] == os.cpu_count()
    assert data["tensorflow"].startswith("2.")

    raw = data["raw"]
    cap = raw["capture"][0]
    assert (cap["model"], cap["batch"], cap["rounds"]) == ("detector", 1, 1)
    # the naive script fetched exactly what tftrace captured (the fed input aside) and held it all
    naive = cap["raw"]["naive"][0]
    assert naive["tensors"] == cap["tensors_captured"] - 1
    tfdbg = cap["raw"]["tfdbg"][0]
    assert tfdbg["debug_ops"] > 0 and cap["tfdbg_disk_bytes"] > tfdbg["dump_bytes_before_run"]

    t = raw["throughput"]
    assert t["differing"]["pairs"] > 0 and t["identical"]["pairs"] > 0
    # every contender raced on the same pairs; one worker is measured to say what the second core adds
    assert set(t["differing"]["ns_per_element"]) == {"tftrace", "tftrace_one_worker", "naive_abs_max"}
    assert set(t["identical"]["ns_per_element"]) == {"tftrace", "tftrace_one_worker", "numpy_subtract"}
    assert t["differing"]["elements"] * 8 == t["differing"]["bytes"]  # float32 pairs: 4 bytes a side
    # oneDNN on vs off: the first convolution agrees bitwise, every later one differs
    assert t["differing"]["pairs"] + t["identical"]["pairs"] <= t["pairs_total"]["a_vs_b"] + t["pairs_total"]["a_vs_c"]

    e2e = raw["end_to_end"]
    assert e2e["runs"][0]["verdict"] == "identical" and e2e["runs"][0]["exit_code"] == 0 and e2e["html"]
    assert raw["peak_rss"]["verdict"] == "diverged"
    assert raw["render"]["html_bytes"] > 0 and raw["render"]["ops"] > 0
    assert len(data["table"]) == 10  # --quick runs no plain-run contender: no context row
    assert "capture all intermediates, time (detector, batch 1)" in proc.stdout

    # the page again from results.json alone: every row of the run's table, measuring nothing
    page = tmp_path / "BENCHMARKS.md"
    proc = subprocess.run([sys.executable, "-m", "bench", "--rewrite-markdown", "--results", str(results), "--markdown",
                           str(page)], cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = page.read_text()
    for row in data["table"]:
        assert f"| {row['figure']} | {row['measured']} |" in text
    assert f"on {data['finished']} in" in text


def test_readme_speed_summary_is_the_committed_results() -> None:
    """README.md's speed table is generated from bench/results.json (``python -m bench`` and
    ``--rewrite-markdown`` write it): it must say what the committed run measured."""
    from bench.results import README_MARKERS, readme_summary
    from bench.run import META_KEYS

    data = json.loads((REPO / "bench" / "results.json").read_text())
    meta = {k: data[k] for k in META_KEYS if k in data}
    expected = readme_summary(data["raw"], meta)
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    start, end = README_MARKERS
    block = readme.split(start, 1)[1].split(end, 1)[0].strip("\n")
    assert block == expected, "README.md's speed summary is out of date: run python -m bench --rewrite-markdown"
    assert data["compare_vs_naive_ratio"] == data["raw"]["throughput"]["differing"]["ratio"]
