"""The report page as a reader sees it in headless Chromium (issue 27's page items).

Each test reads what is on screen: where the graph sits in its canvas, the ops table's first
rows, where a long name wraps at 800 px, the text of code spans, the numbers' digits, and
diagnose's summary. Screenshots go to ``tests/_output/`` (gitignored) to be looked at.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from test_report_browser import CHROMIUM, FIXTURES, OUTPUT, browser, open_report  # noqa: F401 (the fixture)
from tracer.report.numbers import fmt
from tracer.report.render import render_report

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="Debian's chromium is not installed at /usr/bin/chromium"),
]
ORIGIN = "block2/bn/FusedBatchNormV3"


def planted() -> dict[str, Any]:
    return json.loads((FIXTURES / "report_detector_planted.json").read_text(encoding="utf-8"))


def opened_page(browser: Any, report: dict[str, Any], out: Path, width: int = 1440) -> Any:
    """The rendered report open in a page ``width`` px wide, checked for errors and requests."""
    render_report(report, out)
    opened = open_report(browser, out / "report.html")
    page = opened.page
    page.set_viewport_size({"width": width, "height": 1000})
    assert opened.errors == [] and opened.dialogs == [] and opened.requests == [opened.url]
    return page


def drawn_box(page: Any) -> dict[str, float]:
    """The drawn graph and its canvas, in screen pixels."""
    return page.evaluate("""() => {
        const c = document.getElementById('canvas').getBoundingClientRect();
        const g = document.querySelector('#canvas svg g.graph').getBoundingClientRect();
        return {cl: c.left, ct: c.top, cr: c.right, cb: c.bottom, gl: g.left, gt: g.top, gr: g.right, gb: g.bottom};
    }""")


def test_the_graph_opens_fitted_and_readable(browser: Any, tmp_path: Path) -> None:
    page = opened_page(browser, planted(), tmp_path)
    assert page.get_attribute(".tab.active", "data-view") == "near"
    assert page.text_content(".tab.active") == "Around the first divergence"
    b = drawn_box(page)
    # whole (not clipped) ...
    assert b["gl"] >= b["cl"] - 1 and b["gr"] <= b["cr"] + 1 and b["gt"] >= b["ct"] - 1 and b["gb"] <= b["cb"] + 1
    # ... and not a small picture in a blank box: it fills the canvas's height or its width
    assert (b["gb"] - b["gt"]) / (b["cb"] - b["ct"]) > 0.85 or (b["gr"] - b["gl"]) / (b["cr"] - b["cl"]) > 0.85
    # top down: the first divergence is drawn above the op it feeds
    names = list(planted()["nodes"])
    origin, relu = names.index(ORIGIN), names.index("block2/relu")
    above = page.evaluate("([a, b]) => document.getElementById('near_n' + a).getBoundingClientRect().bottom"
                          " < document.getElementById('near_n' + b).getBoundingClientRect().top", [origin, relu])
    assert above
    # its labels read: the op names are drawn at least 10 px high
    height = page.evaluate("i => document.querySelector('#near_n' + i + ' text').getBoundingClientRect().height", origin)
    assert height >= 10
    page.locator("#graph").screenshot(path=str(OUTPUT / "page_graph_fitted.png"))
    page.click(".tab[data-view=full]")  # the whole graph opens fitted too
    b = drawn_box(page)
    assert b["gl"] >= b["cl"] - 1 and b["gr"] <= b["cr"] + 1 and b["gt"] >= b["ct"] - 1 and b["gb"] <= b["cb"] + 1
    page.locator("#graph").screenshot(path=str(OUTPUT / "page_graph_full_fitted.png"))
    page.close()


def table_rows(page: Any, n: int) -> list[list[str]]:
    return page.eval_on_selector_all("#op-table tbody tr", f"""trs => trs.slice(0, {n}).map(
        tr => Array.from(tr.children).map(td => td.innerText.trim()))""")


def test_the_ops_table_opens_on_the_divergence_then_runs_in_flow_order(browser: Any, tmp_path: Path) -> None:
    page = opened_page(browser, planted(), tmp_path)
    rows = table_rows(page, 4)
    assert [r[1] for r in rows] == [ORIGIN, "block2/relu", "block3/conv/Conv2D", "block3/bn/FusedBatchNormV3"]
    assert [r[3] for r in rows] == ["origin", "propagated", "propagated", "propagated"]
    steps = [int(r[0]) for r in table_rows(page, 200) if r[3] == "propagated"]
    assert steps == sorted(steps)  # the divergent ops in the order the examples meet them
    page.locator("#ops").screenshot(path=str(OUTPUT / "page_ops_table.png"))
    # "#" is the order the examples meet the ops: the input first, then a weight just before its reader
    page.click("#op-table th[data-key=step]")
    assert [r[1] for r in table_rows(page, 4)] == ["images", "block1/conv/weights", "block1/conv/weights/read",
                                                   "block1/conv/Conv2D"]
    assert [r[0] for r in table_rows(page, 4)] == ["0", "1", "2", "3"]
    page.click("#op-table th[data-key=name]")  # still sortable by every column
    assert table_rows(page, 1)[0][1] == "anchors/anchors"
    page.close()


LONG_SCOPE = "feature_extractor/resnet_v1_50/block3/unit_5/bottleneck_v1/"


def test_names_break_at_their_separators_at_800_px(browser: Any, tmp_path: Path) -> None:
    report = json.loads(json.dumps(planted()).replace('"block2/', f'"{LONG_SCOPE}block2/'))
    report["sides"]["b"]["artifact"]["path"] = "sample_models/generated/detector_bf16_exported_for_serving/savedmodel"
    page = opened_page(browser, report, tmp_path, width=800)
    page.wait_for_timeout(100)
    where = page.evaluate("""() => {
        // the characters each rendered line of an element starts with, and the one before
        const starts = el => {
            const out = [], text = el.textContent, walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
            let top = null, prev = '', node;
            while ((node = walker.nextNode())) {
                for (let k = 0; k < node.length; k++) {
                    const r = document.createRange(); r.setStart(node, k); r.setEnd(node, k + 1);
                    const rect = r.getClientRects()[0];
                    if (!rect) { prev = node.data[k]; continue; }
                    if (top !== null && rect.top > top + 4) out.push(prev + '|' + node.data[k]);
                    top = rect.top; prev = node.data[k];
                }
            }
            return {text, breaks: out};
        };
        const cells = [...document.querySelectorAll('#op-table tbody td:nth-child(2), #summary dd, #summary td.mono, '
                                                    + '#origins td.mono, #summary h1 code, .origin-name')];
        return cells.map(starts).filter(c => c.breaks.length);
    }""")
    wrapped = [c for c in where if LONG_SCOPE in c["text"] or "exported_for_serving" in c["text"]]
    assert wrapped, "at 800 px the long names wrap"
    for cell in where:
        for brk in cell["breaks"]:
            assert brk[0] in "/_ ", f"{cell['text']!r} breaks inside a word at {brk!r}"
    assert page.evaluate("document.documentElement.scrollWidth") == 800  # wide tables scroll in their own box
    page.screenshot(path=str(OUTPUT / "page_800_top.png"))
    page.locator("#ops").screenshot(path=str(OUTPUT / "page_800_ops.png"))
    page.close()


def test_code_spans_are_code_and_model_text_stays_text(browser: Any, tmp_path: Path) -> None:
    report = planted()
    detail = "given identical inputs, B's replacement for it (`<script>alert(1)</script>/to_fp32`, Cast) differs"
    for origin in (report["first_divergence"], report["first_divergence_beyond_tolerance"], report["nodes"][ORIGIN]):
        origin["isolation"] = dict(origin.get("isolation") or {}, detail=detail)
    page = opened_page(browser, report, tmp_path)
    assert "`" not in page.evaluate("document.body.innerText")
    assert page.text_content("#summary .iso code") == "<script>alert(1)</script>/to_fp32"
    assert page.eval_on_selector_all("#summary .answer code", "cs => cs.length") >= 1
    page.click(".origin-card .linkish")  # the drawer says the same, with the same code span
    assert page.text_content("#details .kv code") == "<script>alert(1)</script>/to_fp32"
    assert "`" not in page.text_content("#details")
    assert page.evaluate("document.querySelectorAll('script').length") == 3
    page.screenshot(path=str(OUTPUT / "page_code_spans.png"))
    page.close()


TRICKY = [6.24e-05, 7.7e-05, 0.000597, 1.99e9, 1e9, 0.0147499, 123456789.0, 1.255, 0.0, 1234.5678]


def test_one_number_reads_the_same_everywhere(browser: Any, tmp_path: Path) -> None:
    report = planted()
    names = list(report["nodes"])
    for k, value in enumerate(TRICKY):
        report["nodes"][names[k]]["max_abs"] = value
    page = opened_page(browser, copy.deepcopy(report), tmp_path)
    page.select_option("#status-filter", "")
    page.click("#op-table th[data-key=step]")
    shown = {r[1]: r for r in table_rows(page, len(names))}
    for name in names:  # the script's table writes each figure as the server's fmt does
        node = report["nodes"][name]
        assert shown[name][4:6] == [fmt(node.get("max_abs")), fmt(node.get("max_rel"))], name
    assert [shown[names[k]][4] for k in range(4)] == ["6.24e-05", "7.7e-05", "0.000597", "1.99e+09"]
    # the first divergence's max rel: the card, the graph's label and the ops table agree
    origin = report["nodes"][ORIGIN]
    card = page.eval_on_selector_all(".origin-card .metrics div", "ds => ds.map(d => d.innerText.replace('\\n', '='))")
    assert card[:2] == [f"MAX ABS={fmt(origin['max_abs'])}", f"MAX REL={fmt(origin['max_rel'])}"] == \
        ["MAX ABS=0.0123", "MAX REL=0.0093"]
    label = page.text_content(f"#near_n{names.index(ORIGIN)}")
    assert "rel 0.0093" in label
    assert shown[ORIGIN][5] == "0.0093"
    page.click(".origin-card .linkish")  # the drawer gives the op the table's "#"
    drawer = page.eval_on_selector_all("#details .kv > span", "ss => ss.map(s => s.textContent)")
    assert drawer[drawer.index("# (flow order)") + 1] == shown[ORIGIN][0] == "25"
    page.close()


def experiment(name: str, factor: str, verdict: str | None, **extra: Any) -> dict[str, Any]:
    """One experiment of diagnosis.json as the page reads it."""
    return {"name": name, "factor": factor, "verdict": verdict, "skipped": None, "max_abs_output_diff": 0.00375,
            "first_divergence": None, "latency_ms": {"a": {"median": 11.1}, "b": {"median": 22.9}},
            "cost_pct": None} | extra


def diagnosed() -> dict[str, Any]:
    """The planted report as ``diagnose`` writes it: three experiments run, the verified recipe among
    them (its capture medians 13.2% apart, its combination timed at +77.0% against the base side),
    three skipped for two reasons, and its answers."""
    report = planted()
    timing = {"ratio": 1.77, "cost_pct": 77.0, "interval_pct": [70.1, 85.3], "significant": True,
              "median_a_ms": 16.2, "median_b_ms": 28.674}
    experiments = [
        experiment("repeat_fresh_process", "repeat", "identical", max_abs_output_diff=0.0),
        experiment("ckpt_vs_savedmodel_batch_1", "export", "diverged", cost_pct=3.1,
                   timing={"ratio": 1.01, "cost_pct": 1.0, "interval_pct": [-3.2, 4.4], "significant": False,
                           "median_a_ms": 9.19, "median_b_ms": 9.28}),
        experiment("device", "device", None, skipped="no GPU on this machine"),
        experiment("autotune", "autotune", None, skipped="no GPU on this machine"),
        experiment("xla", "xla", None, skipped="`--quick`"),
        experiment("recipe", "recipe", "identical", cost_pct=13.2, combined_cost_pct=77.0, combined_timing=timing),
    ]
    answers = {"why": ["The export converted `dense/MatMul` to bfloat16."],
               "prevent": ["Export with float32 compute."],
               "cost": ["Verified recipe (measured): float32 export — the combination costs +77.0% (95% interval "
                        "+70.1% to +85.3%) (medians 16.2 ms without → 28.7 ms with)."],
               "source": "diagnosis"}
    report["answers"] = answers
    report["diagnosis"] = {"experiments": experiments, "answers": answers, "shown": "ckpt_vs_savedmodel_batch_1",
                           "command": "tftrace diagnose model", "environment": {}}
    return report


def test_diagnose_page_states_its_answers_once_and_counts_what_ran(browser: Any, tmp_path: Path) -> None:
    page = opened_page(browser, diagnosed(), tmp_path)
    assert page.text_content("#diagnosis h1") == "Diagnosis: 3 experiments run, 3 skipped, one factor changed in each"
    titles = page.eval_on_selector_all(".answer h3", "hs => hs.map(h => h.textContent)")
    assert titles == ["Why it happens", "How to prevent it", "What preventing it costs"]  # once, not twice
    rows = page.eval_on_selector_all("#diagnosis tbody tr", "trs => trs.map(tr => Array.from(tr.children).map("
                                     "td => td.innerText.trim()))")
    assert [r[0] for r in rows] == ["repeat_fresh_process", "ckpt_vs_savedmodel_batch_1 shown below", "recipe"]
    assert len(rows) == 3 and "device" not in [r[0] for r in rows]  # a skipped experiment is no row
    assert [r[6] for r in rows] == ["—", "noise [-3, +4]", "+77.0% [+70, +85]"]  # the recipe's cost as its text says
    # the latencies a cost rests on, as its sentence gives them (not the captures' medians, 11.1 → 22.9)
    assert [r[5] for r in rows] == ["11.1 → 22.9", "9.19 → 9.28", "16.2 → 28.7"]
    assert "+77.0%" in page.text_content("#diagnosis .answer:nth-child(3)")
    assert "16.2 ms without → 28.7 ms with" in page.text_content("#diagnosis .answer:nth-child(3)")
    assert page.eval_on_selector_all("#diagnosis p.skipped", "ps => ps.map(p => p.innerText)") == [
        "Skipped (no GPU on this machine): device, autotune", "Skipped (--quick): xla"]
    assert "`" not in page.evaluate("document.body.innerText")
    page.locator("#diagnosis").screenshot(path=str(OUTPUT / "page_diagnosis.png"))
    page.close()
