"""On a real GPU, artifacts made the way their users make them (tests/fixtures/*.py), not the
sample detector: a TF1 training checkpoint saved by ``tf.compat.v1.train.Saver`` and its
inference export.

Run where TensorFlow sees a GPU only (skipped elsewhere, so CI is unchanged); what they printed
is kept in GPU_RESULTS.md and ``bench/gpu/``. On a GPU without op determinism each side differs
from itself between processes, so every claim below is what tftrace said after measuring that
noise in the same run; the assertions hold the answer to what cannot move with it (the training
graph's batch norms normalise with each run's batch whatever the kernels do).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import build_fixture, require_packages, run_cli
from test_noise_only_differences import NOTHING_MEASURED
from test_gpu import _record, _tensorflow_sees_a_gpu

pytestmark = [
    pytest.mark.gpu, pytest.mark.slow,
    pytest.mark.skipif(not _tensorflow_sees_a_gpu(), reason="TensorFlow sees no GPU on this machine"),
]

NAMED = ("--outputs", "probs:0", "--input-names", "images:0")  # the training checkpoint has no signature
BATCH_NORM = "bn1/FusedBatchNormV3"


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture("tf1_training_bn.py", tmp_path_factory.mktemp("training_bn"))


def _compare(out: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = run_cli("compare", *args, "--device", "gpu", "--out", str(out), timeout=900)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads((out / "report.json").read_text(encoding="utf-8")), proc.stdout


def _summary(report: dict[str, Any]) -> dict[str, Any]:
    first = report.get("first_divergence") or {}
    iso = first.get("isolation") or {}
    return {"verdict": report["verdict"], "first": first.get("node"), "isolation": iso.get("verdict"),
            "detail": iso.get("detail"), "causes": report["answers"].get("causes"),
            "why": report["answers"].get("why"), "noise": report.get("noise"),
            "outputs": {k: o.get("max_abs") for k, o in report["outputs"].items()},
            "rewrites": sorted({r["kind"] for r in report["rewrites"]})}


def test_training_checkpoint_against_its_export_on_gpu_is_the_training_graph(trained: Path, tmp_path: Path) -> None:
    """Run o (2026-12-04): the conv before the batch norm came out of the two processes with other
    cuDNN algorithms (1.06e-3) and was the first divergence; run n's were alike there. Either way the
    batch norm is replayed on identical rows and the training graph weighs most."""
    code, report, _ = _compare(tmp_path / "r", str(trained / "ckpt"), str(trained / "savedmodel"))
    _record("gpu_users_training_ckpt_vs_export", **_summary(report),
            norm=report["nodes"][BATCH_NORM].get("isolation"), shares=report["answers"].get("shares"))
    assert code == 1 and report["verdict"] == "diverged"
    # which op comes first moves with the noise: run o `conv1/Conv2D` (autotuned apart), run p
    # `bn1/ReadVariableOp_2` (the moving mean the runs write), run q none bitwise (every op before the
    # batch norm within the noise) and the batch norm first beyond tolerance
    first = report.get("first_divergence") or report.get("first_divergence_beyond_tolerance") or {}
    assert first.get("node") in ("conv1/Conv2D", "bn1/ReadVariableOp_2", BATCH_NORM)
    assert report["nodes"][BATCH_NORM]["isolation"]["verdict"] == "batch_statistics"
    assert report["answers"]["causes"][0] == "training_graph"
    assert "const_changed" not in {r["kind"] for r in report["rewrites"]}


def test_training_checkpoint_at_batch_1_vs_8_on_gpu_is_the_training_graph_not_kernel_choice(
        trained: Path, tmp_path: Path) -> None:
    """Run n (2026-12-04) said autotuning, atomics and the batch: the conv before the batch norm
    differed first (another cuDNN algorithm in another process), so the batch norm was no origin and
    was never replayed. It is replayed now (tracer.comparison.replay_choice), and weighs most."""
    ckpt = str(trained / "ckpt")
    code, report, _ = _compare(tmp_path / "r", ckpt, ckpt, *NAMED, "--a-batch-size", "1", "--b-batch-size", "8")
    _record("gpu_users_training_ckpt_batch_1_vs_8", **_summary(report),
            norm=report["nodes"][BATCH_NORM].get("isolation"), shares=report["answers"].get("shares"))
    # run t (2026-12-05): A's two runs moved conv1/Conv2D by 1.06e-3, so no op differed bitwise with its inputs
    # equal beyond the noise (no bitwise first divergence); the first beyond tolerance was the batch norm
    first = report["first_divergence"] or report["first_divergence_beyond_tolerance"]
    assert code == 1 and first["node"] in ("conv1/Conv2D", BATCH_NORM)
    assert report["nodes"][BATCH_NORM]["isolation"]["verdict"] == "batch_statistics"
    assert report["answers"]["causes"][0] == "training_graph"
    assert "both sides' graphs are training graphs" in report["answers"]["why"][0]


def test_inference_export_at_batch_1_vs_8_with_determinism_is_never_the_training_graph(
        trained: Path, tmp_path: Path) -> None:
    """The export normalises with the moving averages: whatever differs between its batch sizes on
    the GPU is a kernel's doing (with op determinism on both sides, not autotuning or atomics)."""
    sm = str(trained / "savedmodel")
    code, report, _ = _compare(tmp_path / "r", sm, sm, "--a-batch-size", "1", "--b-batch-size", "8", "--determinism")
    _record("gpu_users_export_batch_1_vs_8_determinism", **_summary(report))
    causes = report["answers"].get("causes") or []
    assert "training_graph" not in causes
    assert not {"autotune", "atomics", "nondeterminism"} & set(causes), causes
    if report["verdict"] in ("identical", "within_tolerance"):
        assert code == 0
        return  # the same algorithms at both shapes: nothing to attribute
    first = report["first_divergence"]
    assert first["op"] in ("Conv2D", "MatMul") and causes[0] == "batch", (first, causes)
    assert first["isolation"]["verdict"] == "own_error"


@pytest.fixture(scope="module")
def slim_trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    require_packages("tf_slim", "tf_keras")
    return build_fixture("slim_training.py", tmp_path_factory.mktemp("slim_training"))


@pytest.mark.parametrize("net", ["fused", "unfused"])
def test_slim_training_checkpoint_at_batch_1_vs_8_on_gpu_is_the_training_graph(
        slim_trained: Path, tmp_path: Path, net: str) -> None:
    """tf-slim's batch norm, fused or written with tf.nn.moments (``fused=False``), in a training
    checkpoint: at batch 1 vs 8 on the GPU the convs before it may differ first; the batch norm is
    replayed all the same, and the training graph weighs most."""
    ckpt = str(slim_trained / net / "ckpt")
    code, report, _ = _compare(tmp_path / "r", ckpt, ckpt, "--outputs", "predictions/Reshape_1",
                               "--input-names", "images", "--a-batch-size", "1", "--b-batch-size", "8")
    batch_statistics = sorted(n for n, node in report["nodes"].items()
                              if ((node or {}).get("isolation") or {}).get("verdict") == "batch_statistics")
    _record(f"gpu_users_slim_{net}_batch_1_vs_8", **_summary(report), batch_statistics=batch_statistics,
            shares=report["answers"].get("shares"))
    assert code == 1 and batch_statistics
    assert report["answers"]["causes"][0] == "training_graph"


def test_an_export_with_float16_heads_on_gpu_is_mixed_precision(tmp_path_factory: pytest.TempPathFactory,
                                                                  tmp_path: Path) -> None:
    """Run n (2026-12-04): the detector against its export whose heads compute in float16 was put
    on autotuning, atomics and the observer effect, never on its two cast_inserted rewrites, while
    the plain outputs differed beyond their run-to-run noise in every pair of runs."""
    models = build_fixture("nms_fp16_detector.py", tmp_path_factory.mktemp("nms_fp16"))
    code, report, _ = _compare(tmp_path / "r", str(models / "cf2" / "savedmodel"),
                               str(models / "cf2" / "savedmodel_fp16"), "--inputs", str(models / "images.npz"))
    _record("gpu_users_fp16_heads", **_summary(report), shares=report["answers"].get("shares"))
    assert "cast_inserted" in {r["kind"] for r in report["rewrites"]}
    if report["verdict"] != "diverged":
        assert code == 0
        return  # the float16 heads changed nothing beyond the noise this time: nothing to attribute
    assert report["answers"]["causes"][0] == "mixed_precision", report["answers"]["causes"]


@pytest.fixture(scope="module")
def layers_bn(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fixture("tf1_layers_bn.py", tmp_path_factory.mktemp("layers_bn"))


@pytest.mark.parametrize("which", ["ckpt_infer", "ckpt_train"])
def test_layers_batch_norm_fed_is_training_false_on_gpu_is_no_training_graph(
        layers_bn: Path, tmp_path: Path, which: str) -> None:
    """``layers.batch_normalization`` takes the batch's moments on every run and a ``tf.cond`` picks
    the moving averages when fed False (tests/test_unused_batch_statistics.py, on the CPU). On the
    GPU the while loop's GEMMs may also move the outputs between batch 1 and 4; the statistics,
    which differ by far more, still heal at the cond and are named as no cause. Fed True, the same
    graph is the training graph's case."""
    ckpt = str(layers_bn / which)
    code, report, _ = _compare(tmp_path / "r", ckpt, ckpt, "--outputs", "probs", "--input-names", "seq",
                               "--inputs", str(layers_bn / "seq_b4.npz"), "--a-batch-size", "1", "--b-batch-size", "4")
    _record(f"gpu_users_layers_bn_{which}_batch_1_vs_4", **_summary(report), shares=report["answers"].get("shares"))
    causes, why = report["answers"].get("causes") or [], " ".join(report["answers"].get("why") or [])
    if which == "ckpt_train":
        assert code == 1 and causes[0] == "training_graph"
        return
    assert "training_graph" not in causes
    assert "`bn/moments/SquaredDifference` differs beyond tolerance because it is computed from statistics over " \
           "the batch" in why
    assert "stops at a `tf.cond` whose branch that ran does not use those statistics" in why


def test_tf_serving_half_plus_two_mkl_at_batch_1_vs_4_on_gpu_names_no_cause(real_models: dict[str, Path],
                                                                            tmp_path: Path) -> None:
    """TF Serving's own model (TF 1.12) draws a conv kernel at every load and multiplies its output
    away (tests/test_noise_only_differences.py, on the CPU). On a GPU, with cuDNN choosing the conv's
    algorithm per process and per shape, the same holds or it does not: every op that differs must be
    within the sides' own noise, with the outputs bit-identical, before no cause is named."""
    model = str(real_models["half_plus_two"])
    code, report, _ = _compare(tmp_path / "r", model, model, "--a-batch-size", "1", "--b-batch-size", "4")
    _record("gpu_users_half_plus_two_mkl_batch_1_vs_4", **_summary(report), verdict_ops=report.get("verdict_ops"),
            verdict_outputs=report.get("verdict_outputs"))
    assert code == 0 and report["verdict_outputs"] == "identical" and report["verdict_ops"] == "within_noise"
    # run ad (2026-12-06): on the GPU the noise was measured first and nothing was isolated
    assert report["nodes"]["conv2d/Conv2D/ReadVariableOp"]["status"] == "within_tolerance"
    assert report["answers"]["causes"] == []
    assert len(report["answers"]["why"]) == 1 and report["answers"]["why"][0].startswith(NOTHING_MEASURED)


def test_a_keras2_lstm_captured_on_gpu_says_it_ran_the_generic_implementation(tmp_path: Path) -> None:
    """Keras 2's LSTM and GRU keep a cuDNN implementation that TensorFlow swaps in at run time on a
    GPU (tests/test_keras_rnn_models.py); the inlined signature runs the generic one, and a GPU
    capture must say so rather than pass its numbers off as what TensorFlow Serving computes."""
    import sys  # noqa: PLC0415

    from test_keras_rnn_models import _build  # noqa: PLC0415

    built = _build(sys.executable, tmp_path / "made")
    proc = run_cli("capture", str(built / "savedmodel"), "--device", "gpu", "--inputs", str(built / "tokens.npz"),
                   "--out", str(tmp_path / "c"), timeout=900)
    assert proc.returncode == 0, proc.stderr
    notes = json.loads((tmp_path / "c" / "manifest.json").read_text())["notes"]
    _record("gpu_users_keras2_lstm_capture", notes=notes)
    assert any(n.startswith("the model holds GPU implementations (`gru`, `lstm`") for n in notes), notes
