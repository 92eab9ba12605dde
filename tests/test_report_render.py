"""The report renderer: DOT colours and views, escaping, size bounds, and life without Graphviz.

Fast and browser-free: these read the files ``render_report`` writes. The browser checks
(clicks, search, no network) are in ``test_report_browser.py``. ``synthetic_report`` builds a
report of any size with exactly the fields compare writes; the browser test reuses it.
"""

from __future__ import annotations

import io
import json
import math
import re
import shutil
import stat
import time
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tracer.report.dot import (
    PROPAGATED_SHADES,
    REWRITE_BORDER,
    STYLES,
    OpIndex,
    neighbourhood,
    node_style,
    ops_dot,
    overview_dot,
    scope_groups,
)
from tracer.comparison.statuses import isolation_clause, isolation_words
from tracer.report.html import script_json
from tracer.report.markdown import MD_LIMIT, md_code, md_text, render_markdown
from tracer.report.render import inline_svg, render_report
from tracer.report.numbers import fmt, num
from tracer.report.summary import environment_rows, flatten, json_safe, rewrite_detail, side_facts
from tracer.report.terminal import print_comparison

FIXTURES = Path(__file__).parent / "fixtures"
OUTPUT = Path(__file__).parent / "_output"
ORIGIN = "block2/bn/FusedBatchNormV3"
needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not installed (apt-get install graphviz)")

HOSTILE = ["<script>alert(1)</script>", "</script><script>alert(2)</script>", "<img src=x onerror=alert(3)>",
           "<b>reason</b>", "<script>alert(5)</script>", "<script>alert(6)</script>", "<script>alert(7)</script>",
           "<script>alert(8)</script>", "<sig>&key"]


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"report_{name}.json").read_text(encoding="utf-8"))


# --------------------------------------------------------------------------- a report of any size
def _metrics(status: str, rel: float, k: int) -> dict[str, Any]:
    if status not in ("origin", "propagated", "within_tolerance", "identical", "rewritten"):
        return {key: None for key in ("max_abs", "max_rel", "mean_abs", "ulp_max", "cosine", "sqnr_db", "rel_l2")} | {
            "worst": [], "diff_histogram": None}
    if status == "identical":
        return {"max_abs": 0.0, "max_rel": 0.0, "mean_abs": 0.0, "ulp_max": 0, "cosine": 1.0, "sqnr_db": "inf",
                "rel_l2": 0.0, "mismatch_count": 0, "nan_mismatch": 0, "inf_mismatch": 0, "worst": [],
                "diff_histogram": None}
    decade = max(-12, min(2, math.floor(math.log10(rel))))
    counts = [0] * 15
    counts[decade + 12] = 900 + k % 100
    counts[max(decade + 11, 0)] = 300
    return {"max_abs": rel * 2.5, "max_rel": rel, "mean_abs": rel / 4, "ulp_max": int(rel / 1.19e-7), "cosine": 1 - rel * rel,
            "sqnr_db": -20 * math.log10(rel), "rel_l2": rel / 3, "mismatch_count": 1200, "nan_mismatch": 0,
            "inf_mismatch": 0, "worst": [[[0, k % 7, k % 5, 1], 0.5 + j, 0.5 + j + rel] for j in range(5)],
            "diff_histogram": {"log10_edges": list(range(-12, 4)), "counts": counts, "zero": 17}}


def synthetic_report(n_ops: int = 5000, origin_every: int = 0) -> dict[str, Any]:
    """A ResNet-like chain of units (conv + batch norm with variable reads + relu + residual add),
    14 ops per unit under ``model/stage<s>/unit<u>``, with one planted origin a fifth of the way in
    (another at the middle, inherited) and everything downstream propagated with a growing error.
    ``origin_every`` > 0 makes every such unit's batch norm an origin (for size bounds)."""
    nodes: dict[str, dict[str, Any]] = {}
    edges: list[list[str]] = []
    units = max(1, (n_ops - 1) // 14)
    planted = {units // 5, units // 2}
    origins: list[dict[str, Any]] = []
    rewrites: list[dict[str, Any]] = []

    def add(name: str, op: str, status: str, inputs: list[str], rel: float, **extra: Any) -> str:
        k = len(nodes)
        nodes[name] = {"status": status, "op": op, "scope": name.rsplit("/", 1)[0] if "/" in name else "",
                       "device": "/job:localhost/replica:0/task:0/device:CPU:0", "topo_index": k,
                       "b_node": None if status == "unmatched" else name, "b_op": None if status == "unmatched" else op,
                       "alignment": None if status == "unmatched" else "name", "tensor": f"{name}:0",
                       "b_tensor": None if status == "unmatched" else f"{name}:0", "shape": [8, 16, 16, 64],
                       "dtype": "float32", "dtype_b": "float32", "amplification": 1.07 if status == "propagated" else None,
                       "inputs": inputs, "reason": "no B op with this name or signature" if status == "unmatched" else None,
                       "rewrite": extra.get("rewrite"), "isolation": extra.get("isolation"),
                       "attrs_a": {"T": "float32", "data_format": "NHWC", "padding": "SAME", "strides": [1, 1, 1, 1],
                                   "epsilon": 0.001},
                       "attrs_b": {"T": "float32", "data_format": "NHWC", "padding": "SAME", "strides": [1, 1, 1, 1],
                                   "epsilon": 0.01 if status == "origin" else 0.001},
                       "frontier": None, "bitwise_origin": status == "origin"} | _metrics(status, rel, k)
        edges.extend([src, name] for src in inputs)
        return name

    x = add("images", "Placeholder", "identical", [], 0.0)
    rel = 0.0
    for u in range(units):
        scope = f"model/stage{u // 8}/unit{u % 8}"
        diverged = rel > 0
        st = "propagated" if diverged else "identical"
        w = add(f"{scope}/conv/weights", "VariableV2", "identical", [], 0.0)
        wr = add(f"{scope}/conv/weights/read", "Identity", "identical", [w], 0.0)
        conv = add(f"{scope}/conv/Conv2D", "Conv2D", st, [x, wr], rel * 1.05 if diverged else 0.0)
        params = []
        for p in ("gamma", "beta", "moving_mean", "moving_variance"):
            v = add(f"{scope}/bn/{p}", "VariableV2", "identical", [], 0.0)
            params.append(add(f"{scope}/bn/{p}/read", "Identity", "identical", [v], 0.0))
        bn_name = f"{scope}/bn/FusedBatchNormV3"
        if u in planted or (origin_every and u % origin_every == 0):
            rel = max(rel * 1.1, 3e-7) if rel else 3e-7
            own = u == min(planted)
            iso = {"verdict": "own_error" if own else "inherited", "max_abs": rel * 2.5 if own else 0.0,
                   "max_rel": rel if own else 0.0, "detail": "replayed alone on A's captured inputs", "command": None}
            bn = add(bn_name, "FusedBatchNormV3", "origin", [conv, *params], rel, isolation=iso, rewrite="attr_changed")
            origins.append({"node": bn, "op": "FusedBatchNormV3", "tensor": f"{bn}:0", "b_node": bn, "max_abs": rel * 2.5,
                            "max_rel": rel, "rel_l2": rel / 3, "level": "tolerance", "status": "origin",
                            "rewrite": "attr_changed", "isolation": iso, "rank": len(origins) + 1})
            rewrites.append({"kind": "attr_changed", "a_nodes": [bn], "b_nodes": [bn],
                             "detail": {"attrs": {"epsilon": {"a": 0.001, "b": 0.01}}}})
        else:
            rel = rel * 1.04 if rel else 0.0
            bn = add(bn_name, "FusedBatchNormV3", "propagated" if rel else "identical", [conv, *params], rel)
        relu = add(f"{scope}/relu", "Relu", "propagated" if rel else "identical", [bn], rel)
        x = add(f"{scope}/add", "AddV2", "propagated" if rel else "identical", [relu, x], rel)
    while len(nodes) < n_ops:
        x = add(f"head/op{len(nodes)}", "Identity", "not_captured" if len(nodes) % 2 else "unmatched", [x], 0.0)
    first = origins[0] if origins else None
    environment = {"tensorflow": "2.21.0", "python": "3.11.2", "numpy": "2.4.0", "hostname": "ci-1",
                   "cpu": {"model": "Xeon", "vector_flags": ["avx2", "avx512f"]}, "onednn": {"enabled": True},
                   "gpus": [], "tf_env": {}, "time_utc": "2026-11-30T02:00:00+00:00"}
    side = {"label": "cpu, batch 8", "artifact": {"path": "model/ckpt", "kind": "tf1_checkpoint", "location": "local"},
            "device": "cpu", "batch_size": 8, "knobs": {}, "capture_dir": "out/a", "environment": environment,
            "timings": {"load_s": 1.0, "plain_latency_ms": {"median": 12.0, "min": 11.0, "max": 13.0, "runs": 10},
                        "instrumented_s": 9.0}, "examples": {"count": 8, "source": "seeded"}}
    side_b = json.loads(json.dumps(side)) | {"label": "cpu, batch 8, onednn=off", "knobs": {"onednn": False}}
    side_b["environment"]["onednn"] = {"enabled": False}
    return {
        "schema_version": 1, "tool": {"name": "tftrace", "version": "0.1.0"},
        "command": "tftrace compare model/ckpt model/ckpt --b-onednn off --out out/synthetic",
        "created_utc": "2026-11-30T03:00:00+00:00", "verdict": "diverged" if origins else "identical",
        "tolerance": {"atol": 1e-6, "rtol": 1e-5, "overrides": {}}, "sides": {"a": side, "b": side_b},
        "first_divergence": first, "first_divergence_beyond_tolerance": first, "origins": origins,
        "nodes": nodes, "edges": edges,
        "outputs": {"logits": {"a_tensor": f"{x}:0", "b_tensor": f"{x}:0", "identical": not origins,
                               "within_tolerance": not origins, "max_abs": rel * 2.5, "max_rel": rel, "cosine": 1 - rel}},
        "rewrites": rewrites, "graph_diff": {"matched": len(nodes), "only_in_a": [], "only_in_b": [], "renamed": {}},
        "observer_effect": {"a": {"outputs_identical": True, "outputs_max_abs_diff": {"logits": 0.0},
                                  "only_in_plain": [], "only_in_instrumented": []}, "b": {}},
        "first_nonfinite": {"a": None, "b": None}, "answers": None, "diagnosis": None,
    }


def embedded(html: str, element_id: str) -> Any:
    match = re.search(rf'<script type="application/json" id="{element_id}">(.*?)</script>', html, re.S)
    assert match, element_id
    return json.loads(match.group(1))


# --------------------------------------------------------------------------- numbers and colours
def test_report_floats_read_back_including_non_finite_strings() -> None:
    assert num("inf") == math.inf and num("-inf") == -math.inf and math.isnan(num("nan"))
    assert num(True) is None and num("0.5") is None and num(3) == 3.0
    assert [fmt(x) for x in (None, "nan", "inf", "-inf", 0.0, 0.0123456, 1.5e-7, 78151)] == [
        "—", "NaN", "∞", "−∞", "0", "0.0123", "1.5e-07", "78151"]
    assert json_safe({"a": [math.inf, -math.inf, 1.0], "b": math.nan}) == {"a": ["inf", "-inf", 1.0], "b": "nan"}


def test_status_colours_and_borders() -> None:
    origin = node_style("origin", 0.3)
    assert (origin["fillcolor"], origin["color"], origin["penwidth"], origin["class"]) == (
        "#c8102e", "#3b0008", "4", "st-origin")
    assert node_style("identical")["fillcolor"] == "#e3f1e4"
    assert node_style("within_tolerance")["fillcolor"] == "#dbeafe"
    assert node_style("unmatched")["style"] == "filled,rounded,dashed"
    assert node_style("not_captured")["style"] == "filled,rounded,dotted"
    # Propagated: one shade per band of log10(max_rel), darkest with white text.
    shades = [node_style("propagated", rel)["fillcolor"] for rel in (1e-9, 1e-7, 1e-5, 1e-3, 0.5, "inf")]
    assert shades == ["#feedde", "#fdd0a2", "#fdae6b", "#fd8d3c", "#e6550d", "#e6550d"]
    assert node_style("propagated", 0.5)["fontcolor"] == "#ffffff"
    assert node_style("propagated", "nan")["fillcolor"] == PROPAGATED_SHADES[2][1]
    # A rewrite draws its border over any status but the origin's.
    folded = node_style("propagated", 1e-3, "batchnorm_folded")
    assert (folded["color"], folded["penwidth"], folded["class"]) == (REWRITE_BORDER, "2.5", "st-propagated rewritten")
    assert "dashed" in folded["style"]
    assert node_style("origin", 1e-3, "attr_changed")["color"] == STYLES["origin"].border
    assert node_style("something_new")["class"] == "st-not_compared"


def test_ops_dot_names_nodes_by_position_and_escapes_labels() -> None:
    report = load("hostile")
    index = OpIndex.from_report(report)
    source = ops_dot(index, range(len(index.names)), "full")
    for name in index.names:
        assert name not in source  # only positions and escaped, shortened labels reach DOT
    assert "id=full_n1 " in source and 'class="st-origin"' in source
    assert "Op&lt;0&gt;&amp;&quot;" in source and "new⏎line" in source
    assert "xxxxxxxxxxxxxxxxxxxxxxxxxxx…" in source and "x" * 29 not in source


def test_overview_collapses_scopes_and_colours_by_the_worst_op() -> None:
    report = load("detector_planted")
    index = OpIndex.from_report(report)
    groups, depth = scope_groups(index)
    assert depth == 1
    by_key = {g.key: g for g in groups}
    assert [g.key for g in groups][:3] == ["images", "block1", "block2"]
    assert (by_key["block2"].worst, len(by_key["block2"].members), by_key["block2"].counts["origin"]) == ("origin", 13, 1)
    assert by_key["block1"].worst == "identical" and by_key["images"].is_op
    source = overview_dot(index, groups, "overview")
    block2 = next(line for line in source.splitlines() if "id=overview_s2 " in line)
    assert 'fillcolor="#c8102e"' in block2 and "13 ops" in block2


def test_scope_depth_for_a_large_model_and_neighbourhood() -> None:
    index = OpIndex.from_report(synthetic_report(5000))
    groups, depth = scope_groups(index)
    assert (depth, len(groups)) == (2, 47)  # model/stage0..44, head, and the unscoped input
    detector = load("detector_planted")
    index = OpIndex.from_report(detector)
    near = {index.names[i] for i in neighbourhood(index, index.seeds(detector))}
    assert {"block2/bn/gamma/read", "block2/bn/gamma", "block2/relu", "block3/conv/Conv2D",
            "block2/conv/Conv2D", "block2/conv/weights/read"} <= near
    assert "block1/relu" in near and "block1/bn/FusedBatchNormV3" not in near  # 2 hops, not 3
    assert len(neighbourhood(index, index.seeds(detector), hops=5, cap=10)) == 10


def test_rewrite_detail_reads_like_the_terminal() -> None:
    assert rewrite_detail({"attrs": {"epsilon": {"a": 0.001, "b": 0.01}, "T": {"a": "float", "b": "half"}}}) == (
        "epsilon: 0.001 → 0.01; T: float → half")
    assert rewrite_detail({"folded_into": "conv/Conv2D", "max_abs": 2e-8, "empty": []}) == (
        "folded_into: conv/Conv2D; max_abs: 2e-08")


def test_environment_rows_flatten_and_mark_differences() -> None:
    flat = flatten({"cpu": {"model": "x", "vector_flags": ["avx2", "fma"]}, "gpus": [], "ok": True, "n": None})
    assert flat == {"cpu.model": "x", "cpu.vector_flags": "avx2, fma", "gpus": "(none)", "ok": "yes", "n": "—"}
    rows = environment_rows({"tf": "2.21", "time_utc": "t1", "onednn": {"on": True}},
                            {"tf": "2.21", "time_utc": "t2", "onednn": {"on": False}, "extra": 1})
    assert [(r.key, r.differs, r.volatile) for r in rows] == [
        ("tf", False, False), ("time_utc", False, True), ("onednn.on", True, False), ("extra", True, False)]


# --------------------------------------------------------------------------- escaping
@pytest.mark.parametrize(("runs", "shown"), [(10, "12 ms (median of 10 timed runs; "), (1, "12 ms (one timed run; "),
                                              (None, "12 ms (one timed run; ")])
def test_plain_latency_says_how_many_runs_it_is_the_median_of(runs: int | None, shown: str) -> None:
    timed = {"median": 12.0, "min": 11.0, "max": 13.0} | ({"runs": runs} if runs else {})
    facts = dict(side_facts({"timings": {"plain_latency_ms": timed}}))
    assert facts["plain latency"] == shown + "tftrace diagnose measures costs)"


def test_script_json_cannot_close_its_element() -> None:
    text = str(script_json({"k": "</script><!-- & \u2028\u2029"}))
    assert "<" not in text and ">" not in text and "&" not in text and "\u2028" not in text
    assert json.loads(text) == {"k": "</script><!-- & \u2028\u2029"}


@needs_dot
def test_hostile_strings_never_reach_html_svg_or_markdown_raw(tmp_path: Path) -> None:
    report = load("hostile")
    report["outputs"]["<sig>&key"] |= {"identical": None, "within_tolerance": None, "not_compared": HOSTILE[2]}
    result = render_report(report, tmp_path)
    html = result["html"].read_text(encoding="utf-8")
    svg = result["svg"].read_text(encoding="utf-8")
    for hostile in HOSTILE:
        assert hostile not in html, hostile
        assert hostile not in svg, hostile
    assert html.count("<script") == 3  # the two JSON blocks and the page's own script
    assert "onerror" not in svg and "&lt;script&gt;" in html
    assert embedded(html, "report-data") == json_safe(report)  # all the data, intact after escaping
    # The only URL is a node's name, and only inside the data: the page itself links nowhere.
    page_only = re.sub(r'<script type="application/json" id="report-data">.*?</script>', "", html, flags=re.S)
    assert "http://evil.example/x" in html and "http://" not in page_only and "https://" not in page_only
    md = result["md"].read_text(encoding="utf-8")
    outside_fences = re.sub(r"```sh\n.*?\n```", "", md, flags=re.S)
    assert "<" not in outside_fences.replace("<details>", "").replace("<summary>", "").replace("</summary>", "") \
        .replace("</details>", "")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in md and "cpu \\| b\\*" in md


def test_markdown_escaping_helpers() -> None:
    assert md_text("a|b*c_d`e<f>&[g]\nh") == "a\\|b\\*c\\_d\\`e&lt;f&gt;&amp;\\[g\\] ⏎ h"
    assert md_code("block2/bn/FusedBatchNormV3") == "`block2/bn/FusedBatchNormV3`"
    assert md_code("a|b") == "a\\|b" and md_code("x`y") == "x\\`y"
    assert md_text("x" * 500, 20) == "x" * 19 + "…"


def test_inline_svg_rewrites_dot_output_for_the_page() -> None:
    raw = ('<?xml version="1.0"?>\n<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"\n "http://www.w3.org/Graphics/SVG/1.1/DTD/'
           'svg11.dtd">\n<!-- n1 -->\n<svg width="62pt" height="44pt"\n viewBox="0.00 0.00 62.00 44.00" '
           'xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">\n'
           '<g id="page0,1_scope3" class="graph" transform="translate(4 40)">\n<title>scope3</title>\n'
           '<g id="scope3_n1" class="node st&#45;origin">\n<title>n1</title>\n'
           '<path fill="#c8102e" stroke="#3b0008" stroke-width="4" d="M46,-36C46,-36 12,-36 12,-36 6,-36 0,-30 0,-24 '
           '0,-24 0,-12 0,-12 0,-6 6,0 12,0 12,0 46,0 46,0 52,0 58,-6 58,-12 58,-12 58,-24 58,-24 58,-30 52,-36 46,-36"/>\n'
           '<text x="29" y="-14" font-family="Helvetica,Arial,sans-serif" font-size="10.00">&lt;b&gt;</text>\n</g>\n</g>\n</svg>')
    assert inline_svg(raw) == (
        '<svg data-width="62" data-height="44"\n viewBox="0.00 0.00 62.00 44.00">\n'
        '<g id="scope3" class="graph" transform="translate(4 40)">\n'
        '<g id="scope3_n1" class="node st&#45;origin">\n'
        '<rect fill="#c8102e" stroke="#3b0008" stroke-width="4" x="0" y="-36" width="58" height="36" rx="4"/>\n'
        '<text x="29" y="-14" font-size="10.00">&lt;b&gt;</text>\n</g>\n</g>\n</svg>')


@needs_dot
def test_inline_svg_has_no_urls_prolog_or_titles(tmp_path: Path) -> None:
    result = render_report(load("detector_planted"), tmp_path)
    html = result["html"].read_text(encoding="utf-8")
    assert "http://" not in html and "https://" not in html
    assert "<!DOCTYPE svg" not in html and "<?xml" not in html and "<title>n" not in html
    standalone = result["svg"].read_text(encoding="utf-8")
    assert standalone.startswith("<?xml") and 'id="near_n25"' in standalone  # a valid file on its own


# --------------------------------------------------------------------------- the detector report
@needs_dot
def test_detector_report_files_and_page_content(tmp_path: Path) -> None:
    report = load("detector_planted")
    result = render_report(report, tmp_path)
    assert set(result) == {"html", "md", "svg", "png", "notices", "seconds"} and result["notices"] == []
    assert result["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = result["html"].read_text(encoding="utf-8")
    page = embedded(html, "page-data")
    # the neighbourhood first (the page opens on it, fitted), then the whole graph and the scopes
    assert [v["id"] for v in page["views"]] == ["near", "full", "overview"]
    assert page["views"][0]["focus"] == page["views"][1]["focus"] == [25]
    # dot writes "-" in attributes as "&#45;"; its rounded-box paths are inlined as rects.
    origin_node = re.search(r'<g id="full_n25" class="node st&#45;origin[^"]*">\s*<rect fill="#c8102e" stroke="#3b0008" '
                            r'stroke-width="4" x="[\d.-]+" y="[\d.-]+" width="108" height="24" rx="4"/>', html)
    assert origin_node, "the planted origin is drawn in the origin colour with a thick border"
    assert ("The difference starts at <code>block2/bn/FusedBatchNormV3</code> (FusedBatchNormV3), "
            f"{isolation_clause('own_error')}.") in html
    assert "4 of 6 outputs differ beyond tolerance." in html
    for section in ("summary", "graph", "growth", "ops", "origins", "rewrites", "environment", "observer", "reproduce"):
        assert f'<section id="{section}">' in html
    assert 'id="growth-plot"' in html and 'class="origin-mark" data-idx="25"' in html
    md = result["md"].read_text(encoding="utf-8")
    assert md.startswith("## tftrace: DIVERGED — first divergence at `block2/bn/FusedBatchNormV3` (FusedBatchNormV3)")
    assert "| 1 | `block2/bn/FusedBatchNormV3` | FusedBatchNormV3 | 0.0123 | 0.0093 | — | own error | attr\\_changed |" in md
    assert "| attr\\_changed | `block2/bn/FusedBatchNormV3` | `block2/bn/FusedBatchNormV3` | epsilon: 0.001 → 0.01 |" in md
    assert report["command"] in md
    # The first difference is also the first beyond tolerance: one line says both.
    assert md.count("`block2/bn/FusedBatchNormV3` (FusedBatchNormV3), max abs 0.0123") == 1
    assert "- **First divergence, bitwise and beyond tolerance:** `block2/bn/FusedBatchNormV3`" in md


def test_markdown_gives_the_first_difference_beyond_tolerance_its_own_line_when_it_is_another_op() -> None:
    report = load("detector_planted")
    first = report["first_divergence"] | {"node": "block1/conv/Conv2D", "op": "Conv2D", "max_abs": 1e-07}
    md = render_markdown(report | {"first_divergence": first})
    assert "- **First divergence (bitwise):** `block1/conv/Conv2D` (Conv2D), max abs 1e-07" in md
    assert "- **First divergence beyond tolerance:** `block2/bn/FusedBatchNormV3` (FusedBatchNormV3)" in md


def test_an_output_that_could_not_be_compared_is_said_everywhere(tmp_path: Path) -> None:
    """Terminal, Markdown and page name the output and why; the verdict line carries the caveat."""
    report = load("detector_planted")
    why = "its value depends on which examples share a run (a shape, or a reduction over the batch), and A and B batch them differently"
    report["outputs"]["num_detections"] |= {"identical": None, "within_tolerance": None, "max_abs": None,
                                            "max_rel": None, "cosine": None, "not_compared": why}
    md = render_markdown(report)
    assert f"| `num_detections` | **not compared**: {md_text(why, 200)} |" in md
    out = io.StringIO()
    print_comparison(Console(file=out, width=400, force_terminal=False), report)
    shown = out.getvalue()
    assert shown.splitlines()[0] == "DIVERGED (but 1 of 6 outputs not compared)"
    assert f"not compared: num_detections: {why}" in shown
    html = render_report(report, tmp_path)["html"].read_text(encoding="utf-8")
    assert "4 of 6 outputs differ beyond tolerance." in html and "1 of 6 outputs could not be compared (see Outputs)." in html
    assert f'<span class="chip st-not_compared">not compared</span> <span class="muted small">{why}</span>' in html

def test_markdown_answers_fall_back_to_the_origins() -> None:
    report = load("detector_planted") | {"answers": None}
    md = render_markdown(report)
    assert "- The difference starts at 1 op: 1 FusedBatchNormV3." in md
    assert "- The first is `block2/bn/FusedBatchNormV3` (FusedBatchNormV3), max rel 0.0093 (rel L2 0.003)." in md
    assert ("- Own error: fed identical inputs, the op alone still differs (max abs 0.0123, max rel 0.0093). Replayed "
            "block2/bn/FusedBatchNormV3 with A's captured inputs on both sides: outputs still differ.") in md


def _origin_as(report: dict[str, Any], op: str, isolation: dict[str, Any]) -> dict[str, Any]:
    """The planted report with its one origin re-typed as ``op`` and isolated as ``isolation``."""
    for origin in (report["first_divergence"], report["first_divergence_beyond_tolerance"], report["origins"][0]):
        origin |= {"op": op, "rewrite": None, "isolation": isolation}
    report["nodes"][ORIGIN] |= {"op": op, "rewrite": None, "isolation": isolation}
    return report


def _terminal(report: dict[str, Any]) -> str:
    out = io.StringIO()
    print_comparison(Console(file=out, width=400, force_terminal=False), report)
    return out.getvalue()


def test_a_tensor_array_readers_own_error_names_the_loop_that_filled_it(tmp_path: Path) -> None:
    """Its replay ran the whole loop (a session cannot fetch the ops inside one): what differs
    given identical inputs is that loop, as for a loop's Exit, not one kernel."""
    isolation = {"verdict": "own_error", "max_abs": 0.0123, "max_rel": 0.0093, "detail": "", "command": None}
    report = _origin_as(load("detector_planted"), "TensorArrayGatherV3", isolation)
    words = isolation_words("own_error", loop="that filled its TensorArray", sep=": ")  # the registry's, filled in
    assert words == "own error: fed identical inputs, the while loop that filled its TensorArray (replayed whole) still differs"
    assert (f"First divergence, bitwise and beyond tolerance: {ORIGIN} (TensorArrayGatherV3), max abs 0.0123, "
            f"max rel 0.0093 (rel L2 0.003) — {words}") in _terminal(report)
    assert ("Own error: fed identical inputs, the while loop that filled its TensorArray (replayed whole) still "
            "differs (max abs 0.0123, max rel 0.0093)") in render_markdown(report)
    html = render_report(report, tmp_path)["html"].read_text(encoding="utf-8")
    assert (f"The difference starts at <code>{ORIGIN}</code> (TensorArrayGatherV3), where the while loop that "
            "filled its TensorArray differs given identical inputs.") in html
    position = list(report["nodes"]).index(ORIGIN)
    assert f'"loop_results":{{"{position}":"that filled its TensorArray"}}' in html
    exit_report = _origin_as(load("detector_planted"), "Exit", isolation)
    assert "— own error: fed identical inputs, the while loop ending here (replayed whole) still differs" \
        in _terminal(exit_report)


def test_an_origin_that_could_not_be_replayed_says_why_everywhere(tmp_path: Path) -> None:
    why = ("side B's replay failed: InvalidArgumentError: TensorArray map/TensorArray_1_0: Could not read from "
           "TensorArray index 0")
    report = _origin_as(load("detector_planted"), "TensorArrayGatherV3",
                        {"verdict": "not_replayed", "max_abs": None, "max_rel": None, "detail": why, "command": None})
    assert f"— {isolation_words('not_replayed', sep=': ')} ({why})" in _terminal(report)
    assert md_text("Not replayed: TensorFlow could not run it alone on identical inputs, so own error vs inherited "
                   f"is unknown. {why[:1].upper()}{why[1:]}", 300) in render_markdown(report)
    html = render_report(report, tmp_path)["html"].read_text(encoding="utf-8")
    assert f"(TensorArrayGatherV3), {isolation_clause('not_replayed')}." in html


# --------------------------------------------------------------------------- without Graphviz
def test_missing_dot_still_writes_the_page_with_a_notice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "divergence.svg").write_text("<svg>stale picture from an earlier render</svg>")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    result = render_report(load("detector_planted"), tmp_path)
    assert "svg" not in result and "png" not in result and not (tmp_path / "divergence.svg").exists()
    assert len(result["notices"]) == 1 and "apt-get install graphviz" in result["notices"][0]
    html = result["html"].read_text(encoding="utf-8")
    assert "Missing from this page:" in html and "<code>brew install graphviz</code>" in html
    assert "<template id=" not in html and 'id="op-table"' in html and ORIGIN in html
    assert "tftrace: DIVERGED" in result["md"].read_text(encoding="utf-8")


def test_a_hanging_dot_is_cut_off_by_the_time_budget(tmp_path: Path) -> None:
    slow = tmp_path / "slow-dot"
    slow.write_text("#!/bin/sh\nsleep 30\n")
    slow.chmod(slow.stat().st_mode | stat.S_IEXEC)
    started = time.monotonic()
    result = render_report(load("detector_planted"), tmp_path / "out", render_timeout_s=1.5, dot_command=str(slow))
    assert time.monotonic() - started < 10
    assert "svg" not in result and result["html"].exists()
    notice = result["notices"][0]
    assert notice.startswith("Graphviz ran out of the 1.5 s render time budget before drawing: graph around the first divergence, "
                             "full op graph, "
                             "scope overview, divergence.svg/.png. The rest of the report is complete")
    assert "--render-timeout" in notice


# --------------------------------------------------------------------------- size and time bounds
@needs_dot
def test_a_5000_op_report_renders_within_bounds(tmp_path: Path) -> None:
    report = synthetic_report(5000)
    started = time.monotonic()
    result = render_report(report, tmp_path)
    seconds = time.monotonic() - started
    size = result["html"].stat().st_size
    OUTPUT.mkdir(exist_ok=True)
    (OUTPUT / "render_5000.json").write_text(json.dumps({"ops": 5000, "seconds": round(seconds, 2), "html_bytes": size,
                                                         "report_json_bytes": len(json.dumps(report))}))
    assert result["notices"] == []
    assert seconds < 60 and size <= 10 * 1024 * 1024
    page = embedded(result["html"].read_text(encoding="utf-8"), "page-data")
    ids = [v["id"] for v in page["views"]]
    assert ids[:2] == ["near", "overview"] and "full" not in ids and any(i.startswith("scope") for i in ids)
    assert sum(len(v["members"]) for v in page["views"] if v["id"].startswith("scope")) <= 2500
    assert len(result["md"].read_text(encoding="utf-8")) < MD_LIMIT


def test_markdown_stays_under_the_issue_limit_for_any_model() -> None:
    report = synthetic_report(5000, origin_every=1)
    long = "scope/" * 300 + "op|*_`<x>"
    report["origins"] = [o | {"node": f"{long}{k}"} for k, o in enumerate(report["origins"])]
    report["rewrites"] = report["rewrites"] * 20
    report["sides"]["a"]["environment"] = {f"key{k}": "a" * 300 for k in range(2000)}
    report["outputs"] = {f"out{k}": report["outputs"]["logits"] for k in range(3000)}
    md = render_markdown(report)
    assert len(md) < MD_LIMIT
    assert f"… {len(report['origins']) - 25} more origins in report.json / report.html" in md
    assert "<x>" not in md


@needs_dot
def test_the_picture_to_attach_is_the_ops_around_the_first_divergence_at_issue_width(tmp_path: Path) -> None:
    """divergence.png was the whole 130-op graph at 3916x2613, which no issue shows legibly; report.md
    suggested attaching the SVG, which GitHub issues refuse."""
    import struct

    report = json.loads((Path(__file__).parent / "fixtures" / "report_detector_planted.json").read_text(encoding="utf-8"))
    result = render_report(report, tmp_path)
    assert "png" in result
    png = (tmp_path / "divergence.png").read_bytes()
    width, height = struct.unpack(">II", png[16:24])
    assert width <= 1600 and height <= 1600, (width, height)
    svg = (tmp_path / "divergence.svg").read_text(encoding="utf-8")
    drawn = len(re.findall(r'<g id="near_n\d+" class="node', svg))
    assert 'id="near_n25" class="node st&#45;origin' in svg  # block2/bn/FusedBatchNormV3, the first divergence
    assert 0 < drawn <= 60 < len(report["nodes"])
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Attach `divergence.png`" in md and "Attach `divergence.svg`" not in md
    # the page still draws every op
    assert f"All {len(report['nodes'])} ops" in (tmp_path / "report.html").read_text(encoding="utf-8")


def test_names_get_break_opportunities_and_sentences_stay_verbatim() -> None:
    """A name breaks after its separators in a narrow column; a side's note (running text) keeps
    the report's words as they are, so the page says what report.json says."""
    from tracer.report.html import breakable

    assert str(breakable("block1/bn/FusedBatchNormV3")) == "block1/<wbr>bn/<wbr>FusedBatchNormV3"
    assert str(breakable("signature 'serving_default' declares <x>")) == (
        "signature &#39;serving_default&#39; declares &lt;x&gt;")
    assert str(breakable("<script>_a")) == "&lt;script&gt;_<wbr>a"


class _RenderedMarkdown(HTMLParser):
    """What GitHub shows of a report.md, as markdown-it (CommonMark + GFM tables, raw HTML off)
    renders it: the text outside code, the headings, and each table's rows of cells."""

    def __init__(self) -> None:
        super().__init__()
        self.text: list[str] = []
        self.headings: list[str] = []
        self.tables: list[list[int]] = []
        self.tags: set[str] = set()
        self._code = self._heading = 0
        self._cells = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        if tag == "code":
            self._code += 1
        elif tag in ("h1", "h2", "h3"):
            self._heading, _ = 1, self.headings.append("")
        elif tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self._cells = 0
        elif tag in ("td", "th"):
            self._cells += 1

    def handle_endtag(self, tag: str) -> None:
        if tag == "code":
            self._code -= 1
        elif tag in ("h1", "h2", "h3"):
            self._heading = 0
        elif tag == "tr":
            self.tables[-1].append(self._cells)

    def handle_data(self, data: str) -> None:
        if self._heading:
            self.headings[-1] += data
        if not self._code:
            self.text.append(data)


@pytest.mark.parametrize("fixture", ["report_detector_planted.json", "report_hostile.json"])
def test_report_md_reads_right_as_github_renders_it(fixture: str) -> None:
    """report.md through a CommonMark + GFM-tables renderer: every backticked name is code (no
    literal backtick left in the text), no escape shows, every table row has its header's cells,
    and nothing from the model becomes a tag."""
    from markdown_it import MarkdownIt

    report = json.loads((Path(__file__).parent / "fixtures" / fixture).read_text(encoding="utf-8"))
    page = _RenderedMarkdown()
    page.feed(MarkdownIt("commonmark", {"html": False}).enable("table").render(render_markdown(report)))
    text = "".join(page.text)
    assert "\\_" not in text and "\\*" not in text and "\\`" not in text  # no escape shows
    assert page.tables and all(len(set(rows)) == 1 for rows in page.tables), page.tables
    assert page.tags <= {"h2", "h3", "p", "strong", "em", "code", "pre", "ul", "ol", "li", "table", "thead", "tbody",
                         "tr", "th", "td", "a", "details", "summary", "br", "hr", "blockquote"}, page.tags
    if fixture == "report_hostile.json":  # a model's backticks are its text, shown as typed
        assert "/tmp/b`x`" in text and "/tmp/<a>&b" in text
    else:
        assert "`" not in text  # every backticked name became code
        assert page.headings[0] == "tftrace: DIVERGED — first divergence at block2/bn/FusedBatchNormV3 (FusedBatchNormV3)"


def test_a_long_isolation_verdict_reaches_report_md_whole() -> None:
    """A training batch norm's verdict with its evidence runs to ~620 characters (the H200's a4
    checkpoint against its export); report.md cut it at 300, before the figures."""
    detail = ("A's FusedBatchNormV3 normalises each row with the statistics of the batch it runs in (is_training=True), "
              "B's with its moving averages (is_training=False): fed the same rows, the replays differ by up to 1.04 "
              "(rel 2, rel L2 0.199), as each row's output depends on the rows that share its batch (the training "
              "graph's batch statistics); beyond its run-to-run noise (B's replay differs from B's captured value by "
              "up to 0.228)")
    report = _origin_as(load("detector_planted"), "FusedBatchNormV3",
                        {"verdict": "batch_statistics", "max_abs": 1.04, "max_rel": 2.0, "detail": detail, "command": None})
    assert md_text("by up to 0.228)", 100) in render_markdown(report)
