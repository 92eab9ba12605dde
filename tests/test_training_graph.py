"""A TF1 checkpoint whose meta graph is the training graph (tests/fixtures/tf1_training_bn.py).

Its batch norm runs with is_training=True (each run's batch statistics) and updates its moving
averages as it runs. tftrace once called batch 1 against 4 "shape-dependent kernel choice", the
checkpoint against its inference SavedModel an "export-time rewrite" to "fold in both or in
neither", and said "2 weights differ" although the export restored the very same variables
(the captured moving averages were what the runs before had left). The cause is the training
graph, and nothing else is claimed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import build_fixture, run_cli

pytestmark = pytest.mark.slow

TRAINING = "A's graph is a training graph: its batch norms (`bn1/FusedBatchNormV3`) run with is_training=True"
FALSE_CAUSES = ("Shape-dependent kernel choice", "hold different weights", "Export-time rewrites", "fold in both")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture("tf1_training_bn.py", tmp_path_factory.mktemp("training_bn"))


def _compare(out: Path, *args: str) -> tuple[dict, str]:
    proc = run_cli("compare", *args, "--onednn", "off", "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    return json.loads((out / "report.json").read_text()), proc.stdout


def _assert_training_graph(report: dict, stdout: str) -> None:
    answers = report["answers"]
    assert answers["causes"] == ["training_graph"]
    assert report["first_divergence"]["node"] == "bn1/FusedBatchNormV3"
    why = " ".join(answers["why"])
    assert TRAINING in why
    assert "depends on which examples share its run" in why
    assert "its runs write its variables (`bn1/AssignSubVariableOp`, `bn1/AssignSubVariableOp_1`)" in why
    assert "rebuild the model with is_training=False" in answers["prevent"][0]
    assert not [r for r in report["rewrites"] if r["kind"] == "const_changed"]
    text = " ".join(stdout.split())
    for false in FALSE_CAUSES:
        assert false not in why and false not in " ".join(answers["prevent"]) and false not in text


def test_checkpoint_against_its_inference_export_is_the_training_graph(trained: Path, tmp_path: Path) -> None:
    report, stdout = _compare(tmp_path / "out", str(trained / "ckpt"), str(trained / "savedmodel"))
    _assert_training_graph(report, stdout)
    assert "it differs from B's inference graph (is_training=False there: the moving averages)" in report["answers"]["why"][0]
    assert "weights differ" not in " ".join(stdout.split())


def test_batch_sizes_of_a_training_graph_are_not_kernel_choice(trained: Path, tmp_path: Path) -> None:
    ckpt = str(trained / "ckpt")
    report, stdout = _compare(tmp_path / "out", ckpt, ckpt, "--outputs", "probs:0", "--input-names", "images:0",
                              "--a-batch-size", "1", "--b-batch-size", "4")
    assert report["answers"]["why"][0].count("both sides' graphs are training graphs: their batch norms") == 1
    assert "the sides run different batch sizes, so the outputs differ" in report["answers"]["why"][0]
    assert report["answers"]["causes"] == ["training_graph"]
    assert not [r for r in report["rewrites"] if r["kind"] == "const_changed"]
    for false in FALSE_CAUSES:
        assert false not in " ".join(stdout.split())
