"""What the terminal and report.md say, read as the user reads them (issue 27): lines wrapped at
80 columns under their text, the first divergence named once, the Reproduce block with what
decided the numbers, the progress bar before it knows how many runs. TF-free: report dicts and
rich consoles in this process (tests/test_terminal_compare.py runs the CLI)."""

from __future__ import annotations

import io
import shlex
import time
from typing import Any

import pytest
from rich.console import Console

from tracer.causes import why_shown
from tracer.report.headline import reproduce_command, reproduce_facts
from tracer.report.markdown import render_markdown
from tracer.text import wrapped


def test_a_wrapped_line_continues_under_its_text_without_trailing_spaces() -> None:
    """Left to rich, the continuation started at column 0 and the broken line ended in a space."""
    why = ("why: Mixed precision computes parts of the model in float16/bfloat16 [up to 0.0344 at `dense/MatMul`, "
           "replayed alone on identical inputs]: 1 origin sits in export rewrites (cast_inserted), e.g. `dense/MatMul`.")
    assert wrapped(why, 80).splitlines() == [
        "why: Mixed precision computes parts of the model in float16/bfloat16 [up to",
        "     0.0344 at `dense/MatMul`, replayed alone on identical inputs]: 1 origin",
        "     sits in export rewrites (cast_inserted), e.g. `dense/MatMul`."]
    origin = ("  1. dense/MatMul (MatMul): max abs 0.0344, max rel 1.26, rel to peak 0.0047; isolation own error; "
              "rewrite cast_inserted")
    assert wrapped(origin, 80).splitlines() == [
        "  1. dense/MatMul (MatMul): max abs 0.0344, max rel 1.26, rel to peak 0.0047;",
        "     isolation own error; rewrite cast_inserted"]
    output = "  boxes: beyond tolerance, max abs 9.73e-05, max rel 0.00129, rel to peak 9.02e-05"
    assert wrapped(output, 80).splitlines() == [
        "  boxes: beyond tolerance, max abs 9.73e-05, max rel 0.00129, rel to peak",
        "    9.02e-05"]


def test_a_name_is_never_split_even_where_it_is_longer_than_the_line() -> None:
    name = "StatefulPartitionedCall/functional_1/block-1/conv_with_a_long_name/BiasAdd_and_more_of_it"
    assert wrapped(f"First divergence, bitwise and beyond tolerance: {name} (BiasAdd), max abs 0.1", 80).splitlines() \
        == ["First divergence, bitwise and beyond tolerance:", f"  {name}", "  (BiasAdd), max abs 0.1"]


FIRST = {"node": "dense/MatMul", "op": "MatMul"}


def test_why_leaves_out_the_sentence_that_names_the_first_divergence_again() -> None:
    """report.json keeps it (an API reader has no first-divergence line); the renderers show it once."""
    report = {"first_divergence": FIRST}
    why = ["Mixed precision computes parts of the model in float16/bfloat16 [up to 0.0344]: 1 origin sits in "
           "export rewrites (cast_inserted), e.g. `dense/MatMul`.", "The first divergence is `dense/MatMul` (MatMul)."]
    assert why_shown(report, why) == why[:1]
    inline = ["No setting, batch size, graph rewrite or environment difference explains it: the origins are MatMul "
              "ops. The first divergence is `dense/MatMul` (MatMul). Run `tftrace diagnose` to test each factor on its "
              "own."]
    assert why_shown(report, inline) == [
        "No setting, batch size, graph rewrite or environment difference explains it: the origins are MatMul ops. "
        "Run `tftrace diagnose` to test each factor on its own."]


def test_among_several_weights_what_the_sentence_added_stays_without_repeating_it() -> None:
    report = {"first_divergence": {"node": "w1", "op": "VariableV2", "rewrite": "const_changed"},
              "rewrites": [{"kind": "const_changed", "a_nodes": [n]} for n in ("w1", "w2", "w3")]}
    why = ["The two artifacts hold different weights: 3 weights differ.",
           "The first divergence is `w1` (VariableV2): of the 3 weights that differ, the one the examples meet first."]
    assert why_shown(report, why) == [why[0], "Of the 3 weights that differ, the examples meet `w1` first."]


def _side(knob: str | None, variable: str | None, enabled: bool, source: str = "generated (seed 0, N(0,1) floats)",
          capture_dir: str = "") -> dict[str, Any]:
    return {"knobs": {"onednn": knob} if knob else {}, "capture_dir": capture_dir,
            "environment": {"onednn": {"TF_ENABLE_ONEDNN_OPTS": variable, "default_on_this_cpu": True,
                                       "enabled": enabled}},
            "examples": {"count": 8, "source": source, "digest": "b4f7c0f9120925dfa0574c5b" + "0" * 40}}


def _report(command: str, a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    return {"command": command, "verdict": "diverged", "sides": {"a": a, "b": b}}


def _reproduce_section(report: dict[str, Any]) -> list[str]:
    md = render_markdown(report)
    return md[md.index("### Reproduce"):].splitlines()


def test_reproduce_pins_onednn_where_this_cpus_default_decided_it() -> None:
    report = _report("tftrace compare ckpt/ sm/ --out rep", _side(None, None, True), _side(None, None, True))
    assert _reproduce_section(report) == [
        "### Reproduce",
        "```sh",
        "tftrace compare ckpt/ sm/ --out rep --onednn on --force",
        "```",
        "- oneDNN: on on both sides (this CPU's default, TF\\_ENABLE\\_ONEDNN\\_OPTS unset); the command pins it with "
        "`--onednn on`, as oneDNN's default depends on the CPU.",
        "- Inputs: 8 examples generated (seed 0, N(0,1) floats); the command generates the same ones."]


def test_reproduce_says_a_setting_the_command_made_and_one_the_environment_made() -> None:
    report = _report("tftrace compare m/ m/ --b-onednn off --force", _side(None, "1", True), _side("off", "0", False))
    assert reproduce_command(report) == "tftrace compare m/ m/ --b-onednn off --force --a-onednn on"
    assert reproduce_facts(report)[0] == (
        "oneDNN: on on side A (set by TF_ENABLE_ONEDNN_OPTS=1 in the environment), off on side B (set by the "
        "command); the command pins it with `--a-onednn on`, as oneDNN's default depends on the CPU.")
    both = _report("tftrace compare m/ m/ --onednn off", _side("off", "0", False), _side("off", "0", False))
    assert reproduce_command(both) == "tftrace compare m/ m/ --onednn off --force"
    assert reproduce_facts(both)[0] == "oneDNN: off on both sides (set by the command)."


def test_reproduce_names_the_inputs_file_the_command_needs() -> None:
    report = _report("tftrace compare m/ m/ --inputs 'data/my images.npz'", _side("off", "0", False, "my images.npz"),
                     _side("off", "0", False, "inputs_from_a.npy"))
    assert reproduce_command(report) == "tftrace compare m/ m/ --inputs 'data/my images.npz' --force"
    assert _reproduce_section(report)[4:] == [
        "- oneDNN: off on both sides (set by the command).",
        "- Inputs: 8 examples from the file `data/my images.npz`, digest of their values b4f7c0f91209; the command "
        "needs that file (attach it, or say where it comes from)."]


def test_reproduce_gives_the_inputs_files_own_sha256_where_the_capture_recorded_it() -> None:
    """The fingerprint beside a file name is the one ``sha256sum FILE`` prints, not the digest of
    the values fed (which covers the signature's key names too and matches no tool's)."""
    side_a = _side("off", "0", False, "my images.npz")
    side_a["examples"]["file_sha256"] = "43625a27e17f" + "1" * 52
    report = _report("tftrace compare m/ m/ --inputs 'data/my images.npz'", side_a,
                     _side("off", "0", False, "inputs_from_a.npy"))
    assert _reproduce_section(report)[5] == (
        "- Inputs: 8 examples from the file `data/my images.npz`, sha256 43625a27e17f; the command needs that file "
        "(attach it, or say where it comes from).")


def test_a_capture_directory_side_is_not_pinned_its_settings_were_fixed_when_captured() -> None:
    report = _report("tftrace compare cap_gpu sm/", _side(None, None, True, capture_dir="cap_gpu/"),
                     _side(None, None, True))
    assert reproduce_command(report) == "tftrace compare cap_gpu sm/ --b-onednn on --force"


def test_the_terminal_breaks_the_reproduce_command_as_a_shell_continues_it() -> None:
    """Within 80 columns, between words (a quoted one whole, an option beside its value), each
    broken line ending in `` \\``: pasted into a shell it runs as printed."""
    from tracer.report.terminal import _print_reproduce

    command = ("tftrace compare sample_models/generated/detector/ckpt sample_models/generated/detector_bf16/savedmodel "
               "--inputs 'data/my images.npz'")
    report = _report(f"{command} --out /tmp/x", _side(None, None, True), _side(None, None, True))
    out = io.StringIO()
    _print_reproduce(Console(file=out, width=80), report)
    assert out.getvalue().splitlines()[:6] == [
        "Reproduce:",
        "  tftrace compare sample_models/generated/detector/ckpt \\",
        "    sample_models/generated/detector_bf16/savedmodel \\",
        "    --inputs 'data/my images.npz' --out /tmp/x --onednn on --force",
        "  oneDNN: on on both sides (this CPU's default, TF_ENABLE_ONEDNN_OPTS unset);",
        "    the command pins it with `--onednn on`, as oneDNN's default depends on the"]
    assert shlex.split(" ".join(out.getvalue().splitlines()[1:4]).replace(" \\ ", " ")) == shlex.split(
        reproduce_command(report))


def test_a_command_too_long_to_be_typed_is_shown_as_recorded_not_split() -> None:
    """shlex takes time growing with the square of a word's length: a hand-made report.json whose
    command is one 9 MB word held `tftrace report` for hours. Over the bound the command is
    neither split nor pinned; within it, it is."""
    from tracer.report.headline import LONGEST_PARSED_COMMAND, command_words

    long_word = "tftrace compare " + "<b>" * (LONGEST_PARSED_COMMAND // 3)
    assert command_words(long_word) is None and command_words("tftrace compare 'a b") is None
    report = _report(long_word, _side(None, None, True), _side(None, None, True))
    assert reproduce_command(report) == long_word
    short = _report("tftrace compare a/ b/", _side(None, None, True), _side(None, None, True))
    assert command_words("tftrace compare a/ b/") == ("tftrace", "compare", "a/", "b/")
    assert reproduce_command(short) == "tftrace compare a/ b/ --onednn on --force"


@pytest.mark.parametrize("terminal", [True, False])
def test_the_progress_bar_never_reads_none_runs(monkeypatch: pytest.MonkeyPatch, terminal: bool) -> None:
    """Before the child says how many runs it makes, the bar shows its stage alone."""
    from tracer.captures import progress_view

    monkeypatch.setattr(progress_view, "PLAIN_AFTER_S", 0.0)
    monkeypatch.setattr(progress_view, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(progress_view, "PLAIN_EVERY_S", 0.0)  # on a pipe: a line at each tick
    out = io.StringIO()
    view = progress_view.ProgressView(Console(file=out, force_terminal=terminal, width=80), "capture A [cpu]")
    view.stage("loading the model")
    time.sleep(0.2)  # the bar draws a frame
    view.tick()
    before = out.getvalue()
    view.progress({"done": 0, "total": 2, "bytes": 3_000_000, "stored": 10, "tensors": 40})
    time.sleep(0.2)
    view.tick()
    view.stop()
    shown = out.getvalue()
    assert "None" not in shown and "capture A [cpu]: loading the model" in before, repr(shown)
    if not terminal:
        assert shown.splitlines()[-1].startswith("capture A [cpu]: loading the model, run 1/2 · 10/40 tensors stored, "
                                                 "3.0 MB ("), shown
    else:
        assert "run 1/2 · 10/40 tensors stored" in shown, repr(shown)


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_the_progress_bar_moves_by_the_bytes_stored_not_the_tensors(monkeypatch: pytest.MonkeyPatch,
                                                                     terminal: bool) -> None:
    """A ResNet-152's first part at batch 16 (measured): 1,883 of 2,541 tensors, mostly weights,
    but 1,066.6 MB of the 6,953.5 MB planned. The bar says 15%, not 74%; an estimate too small
    never says 100% before the run is done."""
    from tracer.captures import progress_view

    monkeypatch.setattr(progress_view, "PLAIN_AFTER_S", 0.0)
    monkeypatch.setattr(progress_view, "PROGRESS_AFTER_S", 0.0)
    monkeypatch.setattr(progress_view, "PLAIN_EVERY_S", 0.0)
    out = io.StringIO()
    view = progress_view.ProgressView(Console(file=out, force_terminal=terminal, width=160), "capture A [cpu]")
    view.stage("instrumented run: storing 1,883 tensors")
    event = {"done": 0, "total": 1, "bytes": 1_066_600_000, "stored": 1883, "tensors": 2541,
             "run_bytes": 1_066_600_000, "planned": 6_953_500_000}
    view.progress(event)
    assert view._bar.tasks[0].completed == pytest.approx(0.1534, abs=1e-3)
    view.progress({**event, "run_bytes": 7_000_000_000, "bytes": 7_000_000_000})
    assert view._bar.tasks[0].completed == 0.99
    view.progress({"done": 1, "total": 1, "bytes": 7_000_000_000})
    assert view._bar.tasks[0].completed == 1
    view.stop()
    if not terminal:
        lines = out.getvalue().splitlines()
        assert lines[1] == ("capture A [cpu]: instrumented run: storing 1,883 tensors, run 1/1 · 1,883/2,541 tensors "
                            "stored · 15% of ~6,954 MB, 1066.6 MB (0 s)"), lines


def test_diagnose_prints_its_answers_wrapped_under_their_bullets_without_trailing_spaces() -> None:
    from tracer.diagnosis.cli import print_diagnosis

    doc = {"experiments": [{"name": "Batch size: cpu, batch 1 vs cpu, batch 8", "skipped": "needs a GPU"}],
           "answers": {"why": ["Shape-dependent kernel choice (GEMM blocking on CPU, cuDNN/cuBLAS algorithm per shape on "
                               "GPU) [up to 1.2e-06]: the sides run batch 1 vs 8."]}}
    out = io.StringIO()
    print_diagnosis(Console(file=out, width=80), doc, "/tmp/diag")
    lines = out.getvalue().splitlines()
    assert lines[0] == "tftrace diagnose"  # a table's title was padded with spaces to the table's width
    assert lines[-7:] == [
        "skipped (needs a GPU): Batch size: cpu, batch 1 vs cpu, batch 8", "", "Why",
        " • Shape-dependent kernel choice (GEMM blocking on CPU, cuDNN/cuBLAS algorithm",
        "   per shape on GPU) [up to 1.2e-06]: the sides run batch 1 vs 8.", "",
        "diagnosis.json in /tmp/diag (no comparison ran, so there is no report.html)"]
    assert all(line == line.rstrip() for line in lines)


def test_an_observer_shift_of_a_few_ulps_within_tolerance_is_said_but_not_a_cause() -> None:
    """The folded detector with oneDNN on: the export's folded batch norms differ by 4.3e-06 inside
    and the outputs by up to 6e-07; fetching every tensor moved them by 1.19e-07 to 5.96e-07 (float32
    ulps, all within atol), which was listed as a second cause."""
    from tracer.causes import explain_comparison
    from tracer.report.terminal import print_comparison

    first = {"node": "block2/bn/FusedBatchNormV3", "op": "FusedBatchNormV3", "rewrite": "batchnorm_folded",
             "max_abs": 4.29e-06, "max_rel": 0.0607, "isolation": {"verdict": "own_error", "max_abs": 4.29e-06}}
    side = {"device": "cpu", "batch_size": 8, "knobs": {"onednn": "on"}, "label": "cpu, batch 8, onednn=on",
            "artifact": {"path": "m"}}
    outputs = {"boxes": 1.19e-07, "scores": 5.96e-07}
    report = {"verdict": "within_tolerance", "tolerance": {"atol": 1e-06, "rtol": 1e-05},
              "sides": {"a": side, "b": side}, "origins": [first], "first_divergence": first,
              "outputs": {k: {"identical": False, "within_tolerance": True, "max_abs": v, "max_rel": v}
                          for k, v in outputs.items()},
              "observer_effect": {key: {"outputs_identical": False, "outputs_max_abs_diff": {"boxes": 1.19e-07,
                                                                                          "scores": 5.96e-07}}
                                  for key in ("a", "b")}}
    report["answers"] = explain_comparison(report)
    assert report["answers"]["causes"] == ["export"]
    out = io.StringIO()
    print_comparison(Console(file=out, width=80), report)
    lines = out.getvalue().splitlines()
    assert "Observer effect on A: outputs moved by boxes 1.19e-07, scores 5.96e-07" in lines
    assert [line for line in lines if line.startswith("why:")] == [
        "why: Export-time rewrites (batch-norm folding, optimize_for_inference, TF-TRT,"]
    report["observer_effect"]["a"]["outputs_max_abs_diff"] = {"boxes": 0.002, "scores": 0.002}  # beyond: a cause
    assert "observation" in explain_comparison(report)["causes"]


def test_a_diagnose_report_is_reproduced_by_its_own_command_unpinned() -> None:
    """diagnose varies oneDNN itself: its command is printed as it ran, and no pin is claimed."""
    report = _report("tftrace diagnose ckpt/ --savedmodel sm/", _side(None, None, True), _side(None, None, True))
    assert reproduce_command(report) == "tftrace diagnose ckpt/ --savedmodel sm/"
    assert reproduce_facts(report)[0] == "oneDNN: on on both sides (this CPU's default, TF_ENABLE_ONEDNN_OPTS unset)."


def test_diagnoses_terminal_table_states_the_cost_its_page_states() -> None:
    """One cost cell for the terminal and the page (tracer.report.numbers.cost_cell): the recipe's
    is its combined timing against the plain base side, not its own pair's capture medians."""
    from tracer.diagnosis.cli import print_diagnosis
    from tracer.report.numbers import cost_cell

    recipe = {"name": "recipe", "skipped": None, "verdict": "identical", "max_abs_output_diff": 0.0,
              "latency_ms": {"a": {"median": 10.0}, "b": {"median": 11.32}}, "cost_pct": 13.2,
              "combined_timing": {"ratio": 1.77, "cost_pct": 77.04, "interval_pct": [70.2, 85.1], "significant": True}}
    out = io.StringIO()
    print_diagnosis(Console(file=out, width=160), {"experiments": [recipe], "answers": {}}, "out/")
    row = next(line for line in out.getvalue().splitlines() if "recipe" in line)
    assert cost_cell(recipe) == "+77.0% [+70, +85]" and "+77.0% [+70, +85]" in row and "13.2" not in row


def test_diagnoses_experiments_are_one_line_each_where_the_table_does_not_fit() -> None:
    """Piped, diagnose prints 80 columns, where the table cut `ckpt_vs_savedmodel_batch_1` into
    `ckpt_vs_sa` / `vedmodel_b` / `atch_1` and op names alike: there each experiment is one wrapped
    line, names and figures with their units whole; where the table fits it is the table."""
    from tracer.diagnosis.cli import print_diagnosis

    batch = {"name": "batch_1_vs_4", "skipped": None, "verdict": "diverged", "max_abs_output_diff": 4.77e-07,
             "first_divergence": {"node": "block1/bn/FusedBatchNormV3", "op": "FusedBatchNormV3",
                                  "isolation": "own_error"},
             "latency_ms": {"a": {"median": 1.85}, "b": {"median": 1.07}}, "cost_pct": -42.2}
    export = {"name": "ckpt_vs_savedmodel_batch_1", "skipped": None, "verdict": "identical",
              "max_abs_output_diff": 0.0, "latency_ms": {"a": {"median": 1.85}, "b": {"median": 1.63}}}
    doc = {"experiments": [batch, export], "answers": {}}
    narrow = io.StringIO()
    print_diagnosis(Console(file=narrow, width=80), doc, "out/")
    assert narrow.getvalue().splitlines()[:5] == [
        "tftrace diagnose",
        "batch_1_vs_4: diverged, max |Δ| out 4.77e-07, first divergence",
        "  block1/bn/FusedBatchNormV3 (FusedBatchNormV3), own error; A 1.85 ms,",
        "  B 1.07 ms, B vs A untimed",
        "ckpt_vs_savedmodel_batch_1: identical, max |Δ| out 0; A 1.85 ms, B 1.63 ms,"]
    wide = io.StringIO()
    print_diagnosis(Console(file=wide, width=160), doc, "out/")
    rows = [line for line in wide.getvalue().splitlines() if line.startswith("│")]
    assert [row.split("│")[1].strip() for row in rows] == ["batch_1_vs_4", "ckpt_vs_savedmodel_batch_1"]


def test_a_latency_per_example_says_so_in_the_table_and_in_the_one_line_form() -> None:
    """Batch 1 against 8 is timed per example: B's 0.0289 beside A's 0.239 read as per run would say
    batch 8 runs eight times faster per run; the cell says /ex, the one-line form "per example"."""
    from tracer.diagnosis.cli import print_diagnosis

    batch = {"name": "batch_1_vs_8", "skipped": None, "verdict": "within_tolerance", "max_abs_output_diff": 5.96e-08,
             "latency_basis": "per example",
             "latency_ms": {"a": {"median": 0.239, "per_row_median": 0.239},
                            "b": {"median": 0.231, "per_row_median": 0.0289}}}
    wide = io.StringIO()
    print_diagnosis(Console(file=wide, width=160), {"experiments": [batch], "answers": {}}, "out/")
    row = next(line for line in wide.getvalue().splitlines() if "batch_1_vs_8" in line)
    assert [cell.strip() for cell in row.split("│")[5:7]] == ["0.239 /ex", "0.0289 /ex"]
    narrow = io.StringIO()
    print_diagnosis(Console(file=narrow, width=80), {"experiments": [batch], "answers": {}}, "out/")
    text = " ".join(narrow.getvalue().split())
    assert "A 0.239 ms per example, B 0.0289 ms per example, B vs A —" in text
