"""Model text never reaches a terminal, report.md or report.html with its control characters
(issue 15, item 5): a signature key or node name holding an OSC 52 clipboard write, a screen
clear, a carriage return or a C1 CSI is shown escaped (``\\x1b``), everywhere it is shown."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from rich.console import Console

from tracer.errors import TftraceError
from tracer.report.render import render_report
from tracer.report.terminal import print_comparison
from tracer.text import printable, printable_tree

FIXTURES = Path(__file__).parent / "fixtures"
OSC52, CLEAR, CR, C1_CSI = "\x1b]52;c;cHduZWQ=\x07", "\x1b[2J", "\r", "\x9b31m"
KEY = f"k{OSC52}{CLEAR}{CR}{C1_CSI}"
NODE = f"scope{OSC52}{CLEAR}{CR}{C1_CSI}<1>"
RAW = ("\x1b", "\x07", "\r", "\x9b")
SHOWN_KEY = "k\\x1b]52;c;cHduZWQ=\\x07\\x1b[2J\\r\\x9b31m"


def test_printable_escapes_c0_c1_and_bidi_but_keeps_text() -> None:
    assert printable(KEY) == SHOWN_KEY
    assert printable("a\u202eb\u2066c\x7f") == "a\\u202eb\\u2066c\\x7f"
    assert printable("ünïcødé/层 <b> a\tb\nc") == "ünïcødé/层 <b> a\tb\nc"  # layout kept, nothing else touched
    assert printable("a\tb\nc", newlines=False) == "a\\tb\\nc"
    assert printable_tree({KEY: [NODE, 1.5, None]}) == {SHOWN_KEY: [printable(NODE), 1.5, None]}


def test_error_messages_escape_model_text() -> None:
    error = TftraceError(f"no signature 'serving_default' (available: {KEY})", f"choose {KEY}")
    assert str(error) == f"no signature 'serving_default' (available: {SHOWN_KEY}). Choose {SHOWN_KEY}."


def _hostile_report() -> dict[str, Any]:
    """The hostile fixture report with a control-character signature key and node name."""
    def swap(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace("<sig>&key", KEY).replace("scope<1>", NODE)
        if isinstance(value, dict):
            return {swap(k): swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        return value

    report = swap(json.loads((FIXTURES / "report_hostile.json").read_text(encoding="utf-8")))
    assert KEY in report["outputs"] and report["first_divergence"]["node"].startswith(NODE)
    return report


def test_terminal_tables_show_escapes_not_control_characters() -> None:
    out = io.StringIO()
    print_comparison(Console(file=out, width=400, color_system=None, force_terminal=False), _hostile_report())
    text = out.getvalue()
    for raw in RAW:
        assert raw not in text, repr(raw)
    assert SHOWN_KEY in text and "scope\\x1b]52;c;cHduZWQ=\\x07" in text


def test_report_md_and_html_carry_no_control_characters(tmp_path: Path) -> None:
    report = _hostile_report()
    result = render_report(report, tmp_path)
    for name in ("md", "html"):
        text = result[name].read_text(encoding="utf-8")
        for raw in RAW:
            assert raw not in text, (name, repr(raw))
    md = result["md"].read_text(encoding="utf-8")
    assert "k\\\\x1b\\]52;c;cHduZWQ=\\\\x07" in md  # the escape shown as text (backslashes escaped for Markdown)
    assert "k\\\\x1b]52;c;cHduZWQ=\\\\x07" in result["html"].read_text(encoding="utf-8")  # inside the JSON data
    assert KEY in report["outputs"]  # the caller's report (report.json's data) keeps the exact key


def test_top_origins_show_a_long_node_name_whole_on_narrow_and_wide_terminals() -> None:
    """A Keras export's nodes all start with 'StatefulPartitionedCall/functional_1/…': an 80-column terminal
    once showed them as 'Statefu…', which names nothing."""
    report = json.loads((FIXTURES / "report_detector_planted.json").read_text(encoding="utf-8"))
    long_name = "StatefulPartitionedCall/functional_1/block2/bn/FusedBatchNormV3"
    report["origins"][0]["node"] = long_name
    for width in (80, 130):
        out = io.StringIO()
        print_comparison(Console(file=out, width=width, color_system=None, force_terminal=False), report)
        lines = out.getvalue().splitlines()
        assert all(len(line) <= width for line in lines)
        start = next(i for i, line in enumerate(lines) if line.startswith("Top origins"))
        end = next(i for i, line in enumerate(lines) if line.startswith("Outputs"))
        block = lines[start + 1:end]
        if width == 80:  # one line per origin (and per output), wrapped by the terminal only
            text = " ".join(line.strip() for line in block)
            assert text == (f"1. {long_name} (FusedBatchNormV3): max abs 0.0123, max rel 0.0093, rel to peak —; "
                            "isolation own error; rewrite attr_changed")
            outputs = " ".join(line.strip() for line in lines[end + 1:end + 10])
            assert outputs.startswith("scores: beyond tolerance, max abs 0.0061, max rel 0.0288, rel to peak — "
                                      "boxes: beyond tolerance, max abs 0.0049, max rel 0.004, rel to peak — ")
            assert "detection_classes: identical num_detections: identical" in outputs
        else:  # the table folds the name in its column
            cells = [line.split("│") for line in block if line.startswith("│")]
            assert "".join(cell[2].strip() for cell in cells) == long_name
            assert [c.strip() for c in cells[0][3:9]] == ["FusedBatchNormV3", "0.0123", "0.0093", "—", "own error",
                                                        "attr_changed"]


def test_outputs_moved_by_are_said_as_figures_not_a_python_dict() -> None:
    """'Observer effect on A: outputs moved by {'boxes': 1.1920928955078125e-07, …}' on every compare."""
    from tracer.report.numbers import per_key

    assert per_key({"boxes": 1.1920928955078125e-07, "scores": 0.0, "classes": "nan"}) == \
        "boxes 1.19e-07, scores 0, classes NaN"
    assert per_key({}) == "nothing" and per_key(None) == "—"


def test_the_wide_outputs_table_says_yes_and_no_not_true_and_false() -> None:
    import json

    from rich.console import Console

    from conftest import REPO
    from tracer.report.terminal import print_comparison

    report = json.loads((REPO / "tests" / "fixtures" / "report_detector_planted.json").read_text(encoding="utf-8"))
    console = Console(record=True, width=160)
    print_comparison(console, report)
    table = console.export_text()
    assert "detection_scores" in table and "│ no " in table
    assert "True" not in table and "False" not in table


def test_a_count_says_its_noun_as_a_sentence_does() -> None:
    from tracer.text import count

    assert (count(1, "op"), count(6, "op"), count(2, "origin"), count(1200, "tensor")) == (
        "1 op", "6 ops", "2 origins", "1,200 tensors")
    assert count(0, "entry", "entries") == "0 entries"


def test_every_character_printable_escapes_is_one_python_calls_unprintable() -> None:
    """printable() returns a string for which str.isprintable() holds as it is: sound only while
    every character its patterns escape is unprintable to Python (checked over all of Unicode)."""
    from tracer.text import _CONTROL, _CONTROL_AND_LAYOUT

    escaped = [c for c in map(chr, range(0x110000)) if _CONTROL_AND_LAYOUT.match(c) or _CONTROL.match(c)]
    assert len(escaped) > 64 and not [c for c in escaped if c.isprintable()]
