"""Batch statistics a graph takes and then does not use (tests/fixtures/tf1_layers_bn.py).

``tf.compat.v1.layers.batch_normalization(h, training=is_training)`` on a rank-2 input takes
``tf.nn.moments`` over the batch on every run, and a ``tf.cond`` on ``is_training`` picks them or
the moving averages. Fed ``is_training=False``, as an inference script feeds it, the statistics
at batch 1 and at batch 4 differ beyond tolerance (by 2.4), and the difference heals at the cond's
Merge: the outputs agree within tolerance. tftrace named the training graph as the first cause,
"so each example's output depends on which examples share its run ... so the outputs differ", and
told the user to rebuild the model with is_training=False, which it already was. A cause is now
claimed for the batch statistics only where their difference reaches an output that differs
(:func:`tracer.training.reaches_an_output`); where it does not, the answers say why those ops
differ and that it needs no remedy. Fed True, the same graph is still the training graph's case.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, build_fixture, run_cli
from test_other_tf import OTHER, needs_other
from tracer import training
from tracer.causes import explain_comparison
from tracer.training import _heals_in_a_cond, reaches_an_output

NAMED = ("--outputs", "probs", "--input-names", "seq")
UNUSED = ("`bn/moments/SquaredDifference` differs beyond tolerance because it is computed from statistics over the "
          "batch (`bn/moments/mean` (Mean) reduces over the batch axis (axis 0)) and the sides run batch 1 vs 4; that "
          "difference heals before it reaches an output that differs: it stops at a `tf.cond` whose branch that ran "
          "does not use those statistics")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture("tf1_layers_bn.py", tmp_path_factory.mktemp("layers_bn"))


def _compare(built: Path, which: str, out: Path) -> dict:
    ckpt = str(built / which)
    proc = run_cli("compare", ckpt, ckpt, *NAMED, "--inputs", str(built / "seq_b4.npz"), "--a-batch-size", "1",
                   "--b-batch-size", "4", "--onednn", "off", "--out", str(out))
    assert proc.returncode in (0, 1), proc.stderr
    return json.loads((out / "report.json").read_text())


@pytest.mark.slow
def test_statistics_taken_and_not_used_are_no_cause_of_the_outputs(built: Path, tmp_path: Path) -> None:
    report = _compare(built, "ckpt_infer", tmp_path / "infer")
    assert report["verdict"] == "within_tolerance"
    beyond = report["first_divergence_beyond_tolerance"]
    assert beyond["node"] == "bn/moments/SquaredDifference" and beyond["isolation"]["verdict"] == "batch_statistics"
    assert report["intermediates"]["heals_at_op"] == "Merge"  # the cond that picks the moving averages
    answers = report["answers"]
    assert answers["causes"] == ["batch"]  # the while loop's GEMMs at batch 1 against 4, within tolerance
    why, prevent = " ".join(answers["why"]), " ".join(answers["prevent"])
    assert UNUSED in why and "It is no cause of what the outputs differ by, and needs no remedy." in why
    assert "so the outputs differ" not in why and "is_training=False (Keras" not in prevent
    assert not any(s.get("cause") == "batch" and s.get("max_abs") for s in answers["shares"])  # 2.4 is not GEMM's


@pytest.mark.slow
def test_the_same_graph_fed_is_training_true_is_the_training_graph(built: Path, tmp_path: Path) -> None:
    report = _compare(built, "ckpt_train", tmp_path / "train")
    assert report["verdict"] == "diverged"
    answers = report["answers"]
    assert answers["causes"][0] == "training_graph"
    assert ("their `bn/moments/mean` (Mean) reduces over the batch axis (axis 0), so each example's output depends on "
            "which examples share its run; the sides run different batch sizes, so the outputs differ") in answers["why"][0]
    assert UNUSED not in " ".join(answers["why"])


@pytest.mark.slow
@needs_other
@pytest.mark.parametrize("which", ["ckpt_infer", "ckpt_train"])
def test_the_era_s_own_layers_and_dynamic_rnn_saved_by_tensorflow_2_12(tmp_path: Path, which: str) -> None:
    """The same net built by an older TensorFlow with the calls of the era itself
    (``tf.compat.v1.layers.batch_normalization``, ``dynamic_rnn`` over a ``GRUCell``: Keras 2, gone
    from 2.21), saved by ``Saver``, compared by this TensorFlow: the answers are the same."""
    built = tmp_path / "made"
    subprocess.run([str(OTHER), str(REPO / "tests" / "fixtures" / "tf1_layers_bn.py"), str(built), "--layers"],
                   cwd=REPO, check=True, capture_output=True, timeout=300,
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_ENABLE_ONEDNN_OPTS": "0"})
    report = _compare(built, which, tmp_path / "r")
    answers = report["answers"]
    why = " ".join(answers["why"])
    beyond = report["first_divergence_beyond_tolerance"]
    assert beyond["node"] == "batch_normalization/moments/SquaredDifference"
    assert beyond["isolation"]["verdict"] == "batch_statistics"
    if which == "ckpt_train":
        assert report["verdict"] == "diverged" and answers["causes"][0] == "training_graph"
        return
    assert report["verdict"] == "within_tolerance" and answers["causes"] == ["batch"]
    assert report["intermediates"]["heals_at_op"] == "Merge"
    assert ("`batch_normalization/moments/SquaredDifference` differs beyond tolerance because it is computed from "
            "statistics over the batch (`batch_normalization/moments/mean` (Mean) reduces over the batch axis "
            "(axis 0)) and the sides run batch 1 vs 4") in why
    assert "It is no cause of what the outputs differ by, and needs no remedy." in why
    assert "so the outputs differ" not in why


def _report(outputs: dict, statuses: dict[str, str], edges: list[list[str]], ops: dict[str, str] | None = None) -> dict:
    return {"outputs": outputs, "nodes": {n: {"status": s, "op": (ops or {}).get(n, "Identity")}
                                          for n, s in statuses.items()}, "edges": edges}


def test_a_difference_reaches_an_output_only_through_ops_beyond_tolerance_or_not_compared() -> None:
    chain = {"stat": "origin", "sel": "not_captured", "merge": "within_tolerance", "out": "propagated"}
    edges = [["stat", "sel"], ["sel", "merge"], ["merge", "out"]]
    beyond = {"out": {"a_tensor": "out:0", "within_tolerance": False}}
    assert not reaches_an_output(_report(beyond, chain, edges), "stat")  # healed at the Merge
    assert reaches_an_output(_report(beyond, {**chain, "merge": "propagated"}, edges), "stat")
    assert not reaches_an_output(_report({"out": {"a_tensor": "out:0", "within_tolerance": True}}, chain, edges), "stat")
    # cannot tell: no output compared, or one whose comparison says neither
    assert reaches_an_output(_report({}, chain, edges), "stat")
    assert reaches_an_output(_report({"out": {"a_tensor": "out:0", "within_tolerance": None}}, chain, edges), "stat")


def test_where_the_difference_stops_says_whether_a_cond_left_it_unused() -> None:
    """At a Merge the branch that ran did not use it; at a softmax that saturates it was used, and
    healed: the words differ (training.unused_statistics)."""
    chain = {"stat": "origin", "sel": "not_captured", "merge": "within_tolerance", "out": "within_tolerance"}
    edges = [["stat", "sel"], ["sel", "merge"], ["merge", "out"]]
    within = {"out": {"a_tensor": "out:0", "within_tolerance": True}}
    assert _heals_in_a_cond(_report(within, chain, edges, {"merge": "Merge"}), "stat")
    assert not _heals_in_a_cond(_report(within, chain, edges, {"merge": "Softmax"}), "stat")


def test_one_compare_walks_the_edges_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The training graph, the isolation cause, the shares and the unused-statistics words all ask
    whether a difference reaches an output: explain_comparison walks A's edges once for all of them."""
    chain = {"stat": "origin", "sel": "not_captured", "merge": "within_tolerance", "out": "propagated"}
    report = {**_report({"out": {"a_tensor": "out:0", "within_tolerance": False}}, chain,
                        [["stat", "sel"], ["sel", "merge"], ["merge", "out"]], {"merge": "Merge"}),
              "verdict": "diverged", "sides": {"a": {"batch_size": 1}, "b": {"batch_size": 4}}}
    first = {"node": "stat", "op": "Identity", "max_abs": 2.4, "isolation": {"verdict": "batch_statistics"}}
    report["nodes"]["stat"]["isolation"] = first["isolation"]
    report |= {"origins": [first], "first_divergence": first, "first_divergence_beyond_tolerance": first}
    walks = []
    real = training._edges
    monkeypatch.setattr(training, "_edges", lambda r: walks.append(1) or real(r))
    answers = explain_comparison(report)
    assert len(walks) == 1
    assert "training_graph" not in answers["causes"]  # healed at the Merge: no output's cause
    assert any("stops at a `tf.cond`" in line for line in answers["why"])
