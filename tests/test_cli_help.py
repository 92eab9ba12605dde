"""The CLI a newcomer meets (issue 27, "README and CLI"): what ``compare --help`` prints at 80
columns, saved_model_cli's spellings, a typo in a path caught at once and said with its side,
TensorFlow's banners once, and docs/commands.md's ``tracer.options`` after ``import tracer``.
Each test reads what the user sees: the help text, the stderr line, the Python session."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO, assert_user_error, run_cli

from tracer.cli import build_parser, side_from_args
from tracer.options import OPTIONS


def _help(*command: str, columns: int = 80) -> str:
    proc = subprocess.run([sys.executable, "-m", "tracer.cli", *command, "--help"], cwd=REPO, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "COLUMNS": str(columns)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_compare_help_has_a_description_examples_and_exit_codes_at_80_columns() -> None:
    text = _help("compare")
    lines = text.splitlines()
    assert lines[0] == "usage: tftrace compare A B [options]"
    assert [line for line in lines if len(line) > 80] == []
    prose = " ".join(text.split())
    assert ("Run side A and side B (each an artifact or a capture directory) on the same examples, each in its own "
            "process, capturing every intermediate tensor; find the op where their numbers first diverge") in prose
    examples = text.split("\nexamples:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert examples[0].startswith("  tftrace compare ckpt/ savedmodel/ ") and len(examples) == 4
    codes = text.split("\nexit codes:\n", 1)[1].splitlines()
    assert [c.split()[0] for c in codes if re.match(r"^  \d ", c)] == ["0", "1", "2"]
    assert "1  the sides diverge beyond tolerance" in text


def test_compare_help_lists_each_option_once() -> None:
    """It was ~130 lines with every side option again as --a-… and as --b-…."""
    text = _help("compare")
    listing = text.split("\nside A or B only:\n", 1)[0]  # usage, description, every group of options
    assert "--a-" not in listing and "--b-" not in listing
    assert len(re.findall(r"^  --batch-size\b", text, re.MULTILINE)) == 1
    per_side = [o.name for o in OPTIONS if "compare" in o.per_side]
    assert per_side and text.count("[A/B]") == len(per_side) + 1  # each marked once, and the paragraph
    for name in per_side:
        assert len(re.findall(rf"^  --{name}\b", text, re.MULTILINE)) == 1, name
    assert ("Every option marked [A/B] also takes the form --a-NAME or --b-NAME, which sets it for side A or B only, "
            "in place of --NAME (e.g. --a-batch-size 1 --b-batch-size 8).") in " ".join(text.split())


def test_saved_model_cli_spellings_are_accepted() -> None:
    """saved_model_cli run --dir DIR --tag_set serve --signature_def NAME: the same words here."""
    parser = build_parser()
    args = parser.parse_args(["compare", "a/", "b/", "--tag_set", "serve,gpu", "--signature_def", "predict",
                              "--b-signature", "regress"])
    assert side_from_args(args, args.a, "a").artifact.tag == "serve,gpu"
    assert side_from_args(args, args.a, "a").artifact.signature == "predict"
    assert side_from_args(args, args.b, "b").artifact.signature == "regress"
    capture = parser.parse_args(["capture", "--dir", "sm/", "--tag_set", "serve", "--out", "cap"])
    assert (capture.model, capture.model_dir, capture.tag) == (None, "sm/", "serve")
    assert "--tag TAG, --tag_set TAG" in _help("capture")


def test_capture_takes_one_model_by_position_or_by_dir(tmp_path: Path) -> None:
    proc = run_cli("capture", "a/", "--dir", "b/", "--out", str(tmp_path / "cap"))
    assert_user_error(proc, "tftrace capture takes one model: MODEL or --dir MODEL")
    proc = run_cli("capture", "--dir", str(tmp_path / "nope"), "--out", str(tmp_path / "cap"))
    assert_user_error(proc, f"{tmp_path / 'nope'} does not exist")


def test_a_typo_in_bs_path_is_said_at_once_with_its_side(real_models: dict[str, Path], tmp_path: Path) -> None:
    """It cost ~10 s (A's child importing TensorFlow) and did not say which side."""
    typo = str(real_models["half_plus_two"]).replace("half_plus_two_mkl", "half_plus_two_mlk")
    # No child and no TensorFlow: a `tensorflow` placed first on the path notes any import of it (in this
    # process or a child, which inherits PYTHONPATH) and fails it. A wall-clock bound would flake on a busy CI.
    shadow, marker = tmp_path / "shadow" / "tensorflow", tmp_path / "tensorflow_imported"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\nraise ImportError('shadowed')\n")
    proc = run_cli("compare", str(real_models["half_plus_two"]), typo, "--out", str(tmp_path / "out"),
                   env={"PYTHONPATH": str(shadow.parent)})
    assert_user_error(proc, f"side B's path {typo} does not exist (did you mean {real_models['half_plus_two']}?)")
    assert not marker.exists(), "TensorFlow was imported before the typo was said"
    assert not (tmp_path / "out").exists()
    proc = run_cli("diff-graph", typo, str(real_models["half_plus_two"]))
    assert_user_error(proc, f"side A's path {typo} does not exist")


@pytest.mark.slow
def test_diff_graph_prints_tensorflows_banners_once(real_models: dict[str, Path]) -> None:
    """TensorFlow 2.21's import logs "All log messages before absl::InitializeLog()" and, where
    oneDNN is on by the CPU's default, "oneDNN custom operations are on" from two libraries."""
    env = {k: v for k, v in os.environ.items() if k not in ("TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL")}
    proc = subprocess.run([sys.executable, "-m", "tracer.cli", "diff-graph", str(real_models["half_plus_two"]),
                           str(real_models["half_plus_two"])], cwd=REPO, capture_output=True, text=True, timeout=300,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    # whether TensorFlow logs before absl is set up depends on the machine (this CPU's oneDNN default,
    # CUDA libraries present or not): one plain import at tftrace's log level says what it prints
    plain = subprocess.run([sys.executable, "-c", "import tensorflow as tf; tf.constant(1)"], capture_output=True,
                           text=True, timeout=300, env={**env, "TF_CPP_MIN_LOG_LEVEL": "2"}).stderr
    for banner in ("All log messages before absl::InitializeLog() is called", "oneDNN custom operations are on"):
        assert proc.stderr.count(banner) == min(1, plain.count(banner)), (banner, proc.stderr, plain)


def test_the_documented_api_names_work_after_import_tracer() -> None:
    script = ("import sys, tracer; print(tracer.options.api_keywords('capture')[:2], tracer.captures.Capture.__name__, "
              "'tensorflow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "['tag', 'signature'] Capture False", proc.stderr
