"""Reports say only what is true: no cause for an identical result, examples compared by value,
one "first divergence" in every output format, and a relative figure near-zero elements cannot
inflate. Fast: these render report dicts (the detector fixture, edited) without TensorFlow.
"""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from rich.console import Console

from tracer.causes import explain_comparison
from tracer.metrics import compare_arrays
from tracer.comparison.pairing import examples_digest
from tracer.report.build import rel_to_peak
from tracer.report.markdown import render_markdown
from tracer.report.render import render_report
from tracer.report.summary import side_rows
from tracer.report.terminal import print_comparison

FIXTURES = Path(__file__).parent / "fixtures"


def _planted() -> dict[str, Any]:
    return json.loads((FIXTURES / "report_detector_planted.json").read_text(encoding="utf-8"))


def _terminal(report: dict[str, Any]) -> str:
    out = io.StringIO()
    print_comparison(Console(file=out, width=400, force_terminal=False), report)
    return out.getvalue()


def _identical_at_two_batch_sizes() -> dict[str, Any]:
    report = _planted()
    report["sides"]["a"]["batch_size"], report["sides"]["b"]["batch_size"] = 1, 4
    report |= {"verdict": "identical", "origins": [], "first_divergence": None,
               "first_divergence_beyond_tolerance": None}
    for node in report["nodes"].values():
        node["status"] = "identical"
    for out in report["outputs"].values():
        out |= {"identical": True, "within_tolerance": True, "max_abs": 0.0, "max_rel": 0.0}
    report["answers"] = explain_comparison(report)
    return report


def test_an_identical_result_has_no_cause_and_nothing_to_prevent(tmp_path: Path) -> None:
    report = _identical_at_two_batch_sizes()
    assert report["answers"] == {"why": ["The two sides compute bit-identical results for these examples."],
                                 "prevent": [], "cost": [], "source": "compare", "causes": []}
    md = render_markdown(report)
    assert "### Why it happens\n- The two sides compute bit-identical results for these examples." in md
    for absent in ("shape-dependent", "How to prevent it", "What preventing it costs", "tftrace diagnose` to measure"):
        assert absent not in md, absent
    html = render_report(report, tmp_path)["html"].read_text(encoding="utf-8")
    assert "Why it happens" in html
    for absent in ("shape-dependent", "How to prevent it", "What preventing it costs"):
        assert absent not in html, absent


def test_a_diverged_result_still_has_its_causes() -> None:
    report = _planted()
    report["answers"] = explain_comparison(report)
    md = render_markdown(report)
    assert "### How to prevent it\n- export-time rewrites: test the exported artifact itself" in md
    assert "### What preventing it costs" in md


def test_examples_are_compared_by_their_values_not_their_file_names() -> None:
    report = _planted()
    a, b = report["sides"]["a"], report["sides"]["b"]
    a["examples"] = {"count": 8, "source": "inputs.npz", "digest": "ab" * 32}
    b["examples"] = {"count": 8, "source": "inputs_from_a.npz", "digest": "ab" * 32}
    rows = {key: (va, vb, differs) for key, va, vb, differs in side_rows(report["sides"])}
    assert rows["examples"] == ("8 from inputs.npz (same values, values digest abababababab)",
                                "8 from inputs_from_a.npz (same values, values digest abababababab)", False)
    md = render_markdown(report)
    assert "| examples | 8 from inputs.npz (same values, values digest abababababab) |" in md
    b["examples"]["digest"] = "cd" * 32
    assert render_markdown(report).count("| examples **≠** | 8 from inputs.npz (different values, values digest abababababab) |") == 1
    del a["examples"]["digest"]  # an older report: the text is all there is to compare
    assert {k: d for k, _, _, d in side_rows(report["sides"])}["examples"] is True


def test_title_terminal_answers_and_json_name_one_first_divergence(tmp_path: Path) -> None:
    """The first divergence (bitwise) is another op than the first beyond tolerance: the
    Markdown title, the page's title and headline, the terminal and the "why" all name
    report.json's ``first_divergence``."""
    report = _planted()
    report["first_divergence"] = report["first_divergence"] | {"node": "block1/conv/Conv2D", "op": "Conv2D",
                                                               "max_abs": 1e-07, "level": "bitwise"}
    report["answers"] = explain_comparison(report)
    md = render_markdown(report)
    assert md.startswith("## tftrace: DIVERGED — first divergence at `block1/conv/Conv2D` (Conv2D)\n")
    shown = _terminal(report)
    assert "First divergence (bitwise): block1/conv/Conv2D (Conv2D), max abs 1e-07" in shown
    assert "First divergence beyond tolerance: block2/bn/FusedBatchNormV3 (FusedBatchNormV3)" in shown
    assert "- **First divergence (bitwise):** `block1/conv/Conv2D` (Conv2D)" in md
    assert "The first divergence is `block1/conv/Conv2D` (Conv2D)." in report["answers"]["why"]
    html = render_report(report, tmp_path)["html"].read_text(encoding="utf-8")
    assert "<title>tftrace · diverged · block1/conv/Conv2D</title>" in html
    assert "The difference starts at <code>block1/conv/Conv2D</code> (Conv2D)" in html


def test_a_relative_figure_near_zero_elements_cannot_inflate() -> None:
    a = np.array([2.0, -1.0, 1e-7, 0.5], np.float32)
    b = a + np.array([1e-6, 0.0, 1e-6, 0.0], np.float32)
    m = compare_arrays(a, b)
    assert m.max_rel > 0.5  # driven by the 1e-7 element

    class View:  # what rel_to_peak reads of a capture: its stats of A's tensor
        class capture:  # noqa: N801
            @staticmethod
            def has(name: str) -> bool:
                return name == "t:0"

            @staticmethod
            def record(name: str) -> dict[str, Any]:
                return {"stats": {"min": float(a.min()), "max": float(a.max())}}

    peak = rel_to_peak(View, "t:0", m)
    assert peak == pytest.approx(m.max_abs / 2.0, rel=1e-12)
    assert rel_to_peak(View, "other:0", m) is None
    report = _planted()
    report["first_divergence"] |= {"max_abs": m.max_abs, "max_rel": m.max_rel, "rel_to_peak": peak, "rel_l2": m.rel_l2}
    report["first_divergence_beyond_tolerance"] = copy.deepcopy(report["first_divergence"])
    expected = f"max rel {m.max_rel:.3g} (rel to peak {peak:.3g}, rel L2 {m.rel_l2:.3g})"
    assert expected in _terminal(report)
    assert expected in render_markdown(report)


def test_examples_digest_is_over_values_in_key_order() -> None:
    arrays = {"x:0": np.arange(6, dtype=np.float32).reshape(2, 3), "y:0": np.ones((2,), np.int32)}

    def view(values: dict[str, np.ndarray]) -> Any:
        class Capture:
            manifest = {"graph": {"inputs": {"y": "y:0", "x": "x:0"}}}

            @staticmethod
            def has(name: str) -> bool:
                return name in values

            @staticmethod
            def tensor(name: str) -> np.ndarray:
                return values[name]

        graph = type("Graph", (), {"inputs": Capture.manifest["graph"]["inputs"]})
        return type("View", (), {"capture": Capture, "graph": graph})

    same = examples_digest(view(dict(arrays)))
    assert same == examples_digest(view({k: v.copy() for k, v in arrays.items()})) and len(same) == 64
    changed = dict(arrays, **{"x:0": arrays["x:0"] + np.float32(1e-6)})
    assert examples_digest(view(changed)) != same
    assert examples_digest(view({"x:0": arrays["x:0"]})) is None  # an input not captured: nothing to vouch for
