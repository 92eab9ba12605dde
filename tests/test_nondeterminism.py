"""Run-to-run nondeterminism is recognised, not blamed on a kernel, an export or the observer.

On a GPU the usual source is cuDNN autotuning (per process) and atomics; `tests/test_gpu.py`
asserts that on real hardware. Here, on CPU, the same mechanism is driven by a model whose
result really changes from run to run: an unseeded random op (a stateful `RandomUniform`),
the way a model with dropout left on at inference behaves. Nothing is simulated: every
difference below is one TensorFlow computed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracer.comparison.statuses import ISOLATION, isolation_words

from conftest import Captured, build_model, run_cli
from tracer.causes import explain_comparison
from tracer.captures.reader import Capture
from tracer.comparison.isolate import same_run_settings
from tracer.comparison.isolation_plan import PlannedOrigin
from tracer.comparison.judge import judge as judge_planned


def judge(ra: Any, rb: Any, entry: dict[str, Any], *captures: Any) -> Any:
    """The judge on an origin given as its entry of isolation_index.json reads (missing fields at
    the defaults a report made before them gets), checked as a received index is."""
    planned = PlannedOrigin.from_json({"id": 0, "node": entry["a_tensor"].split(":")[0], **entry}, "the index")
    return judge_planned(ra, rb, planned, *captures)


NOISY_MODEL = """
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "2"
import tensorflow as tf

tf1 = tf.compat.v1
tf1.disable_v2_behavior()
with tf.Graph().as_default():
    x = tf1.placeholder(tf.float32, [None, 8], name="x")
    w = tf1.get_variable("w", [8, 4], initializer=tf1.random_normal_initializer(seed=1))
    logits = tf.matmul(x, w, name="logits")
    # no seed: new every run. Integers 0/1, then +-2**-10 exactly: two runs differ by 0 or 1 (then
    # 0 or 2**-9) per element, so every pair of runs that differs at all differs by exactly that
    # much at every op: a noise floor the test can rely on (continuous noise would make the
    # largest of K samples a random lower bound)
    jitter = tf.random.uniform(tf.shape(logits), maxval=2, dtype=tf.int32, name="jitter")
    y = tf.identity((tf.cast(jitter, tf.float32) - 0.5) * 2.0 ** -9, name="y")
    probs = tf.nn.softmax(logits, name="probs")  # deterministic
    with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        builder = tf1.saved_model.Builder(sys.argv[1])
        signature = tf1.saved_model.predict_signature_def({"x": x}, {"y": y, "probs": probs})
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={"serving_default": signature})
        builder.save()
"""


@pytest.fixture(scope="module")
def noisy_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("noisy") / "savedmodel"
    build_model(NOISY_MODEL, path)
    return path


def _compare(out: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = run_cli("compare", *args, "--out", str(out), "--onednn", "off", "--examples", "4")
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads((out / "report.json").read_text(encoding="utf-8")), proc.stdout


@pytest.mark.slow
def test_an_op_that_changes_run_to_run_is_nondeterministic_not_its_own_kernel(noisy_model: Path,
                                                                               tmp_path: Path) -> None:
    # --repeat 1: the isolation alone, whose replays moved (by default that side's noise is then
    # measured: tests/test_verdict.py); the headline says it was not measured
    code, report, stdout = _compare(tmp_path / "r", str(noisy_model), str(noisy_model), "--repeat", "1")
    assert code == 1 and report["verdict"] == "diverged"
    assert report["noise"] is None and {u["side"] for u in report["noise_not_measured"]} == {"a", "b"}
    assert report["headline"][0]["key"] == "noise_not_measured"
    first = report["first_divergence"]
    assert first["node"] == "jitter"  # RandomUniformInt: no seed, new every run
    iso = first["isolation"]
    assert iso["verdict"] == "nondeterministic", iso
    assert iso["noise_max_abs"] > 0  # A's replay did not reproduce A's capture
    assert isolation_words("nondeterministic", sep=": ") in " ".join(stdout.split())  # the registry's words
    causes = report["answers"]["causes"]
    assert causes[0] == "nondeterminism" and "export" not in causes
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert "Nondeterministic: on identical inputs its result changes from run to run" in md


@pytest.mark.slow
def test_repeat_gives_a_within_noise_verdict_with_the_real_magnitudes(noisy_model: Path, tmp_path: Path) -> None:
    code, report, stdout = _compare(tmp_path / "r", str(noisy_model), str(noisy_model), "--repeat", "3")
    assert report["verdict"] == "within_noise"
    assert code == 0  # documented: as equal as each side is to itself
    # each side ran 3 times because the user asked, and says so (the plan's reason, noise.plan_repeats)
    assert {side: (report["noise"][side]["runs"], report["noise"][side]["why"]) for side in "ab"} == {
        "a": (3, "`--repeat`"), "b": (3, "`--repeat`")}
    y = report["outputs"]["y"]
    assert y["identical"] is False and y["max_abs"] == 2.0 ** -9  # never "identical, 0"
    assert y["noise_max_abs"] == 2.0 ** -9
    assert report["outputs"]["probs"]["identical"] is True and report["outputs"]["probs"]["noise_max_abs"] == 0.0
    line = next(line for line in " ".join(stdout.split()).split("noise: ")[1:] if line.startswith("y: A vs B up to"))
    assert "over 9 pairs of runs" in line and "within the run-to-run noise of 0.00195" in line
    assert stdout.startswith("WITHIN NOISE")
    assert report["answers"]["causes"] == ["nondeterminism"]  # not the observer: its shift is noise too
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert "## tftrace: WITHIN NOISE" in md and "y: A vs B up to 0.00195 over 9 pairs of runs" in md
    html = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "agree between A and B within what each side differs from itself from run to run" in html


OP = {"a_tensor": "conv:0", "b_tensor": "conv:0", "a_op": "Conv2D", "b_op": "Conv2D"}
VALUE = np.array([1.0, 2.0, 3.0], dtype=np.float32)
MOVED = VALUE + np.float32(1e-3)


def test_judge_a_replay_that_moved_on_a_gpu_without_determinism_is_nondeterministic() -> None:
    op = {**OP, "inputs_identical": True, "per_process": ["a"]}
    result = judge(VALUE, VALUE, op, Captured({"conv:0": MOVED}), None)
    assert result.verdict == "nondeterministic"
    assert result.noise_max_abs == pytest.approx(1e-3, rel=1e-3)
    assert "A's replay differs from A's captured value by up to 0.001" in result.detail
    assert "from one process to the next on the GPU" in result.detail


def test_judge_a_replay_that_moved_where_repeat_saw_noise_is_nondeterministic() -> None:
    op = {**OP, "inputs_identical": True, "repeat_noise": 2e-3}
    result = judge(VALUE, VALUE, op, Captured({"conv:0": MOVED}), None)
    assert result.verdict == "nondeterministic" and "`--repeat` measured up to 0.002 on this tensor" in result.detail


def test_judge_a_replay_that_moved_on_a_cpu_with_nothing_measured_is_not_called_nondeterminism() -> None:
    """A replay alone differing from the side's own capture is also what a rewrite inside the
    whole graph produces: without a measurement of noise, neither cause is claimed."""
    result = judge(VALUE, VALUE, {**OP, "inputs_identical": True}, Captured({"conv:0": MOVED}), None)
    assert result.verdict == "not_reproduced"
    assert "either the op computed differently inside its whole graph" in result.detail
    assert "`--repeat 2` tells which" in result.detail
    measured_zero = judge(VALUE, VALUE, {**OP, "inputs_identical": True, "repeat_noise": 0.0},
                          Captured({"conv:0": MOVED}), None)
    assert measured_zero.verdict == "not_reproduced"
    assert "`--repeat` measured no run-to-run noise on this tensor" in measured_zero.detail


def test_judge_runs_that_executed_the_op_as_different_kernels_are_a_run_time_rewrite() -> None:
    executed = {"a": ["_MklNativeFusedBatchNormV3"], "b": ["Add", "Mul"]}
    op = {**OP, "a_op": "FusedBatchNormV3", "b_op": "FusedBatchNormV3", "inputs_identical": True,
          "executed": executed, "same_settings": True}
    result = judge(VALUE, VALUE, op, Captured({"conv:0": VALUE}), Captured({"conv:0": MOVED}))
    assert result.verdict == "run_time_rewrite" and result.executed == executed
    assert "A as _MklNativeFusedBatchNormV3, B as Add + Mul" in result.detail
    assert "B's replay differs from B's captured value by up to 0.001" in result.detail
    # with different settings (oneDNN on one side only), different kernels are the settings' doing
    other = judge(VALUE, VALUE, {**op, "same_settings": False, "same_settings_but_build": False},
                  Captured({"conv:0": VALUE}), Captured({"conv:0": MOVED}))
    assert other.verdict == "not_reproduced"
    # another TensorFlow build alone (--python): each build's replay computes the same, so the kernels
    # the runs executed are a rewrite at run time (of the builds' Grappler or of the graphs: causes says)
    builds = judge(VALUE, VALUE, {**op, "same_settings": False, "same_settings_but_build": True},
                   Captured({"conv:0": VALUE}), Captured({"conv:0": MOVED}))
    assert builds.verdict == "run_time_rewrite" and builds.executed == executed
    # the replays differing is the kernel's own error, whatever ran in the graph
    own = judge(VALUE, VALUE + np.float32(0.5), op, Captured({"conv:0": VALUE}), Captured({"conv:0": MOVED}))
    assert own.verdict == "own_error"


def test_judge_replays_that_agree_with_identical_inputs_and_no_noise_are_not_reproduced() -> None:
    result = judge(VALUE, VALUE, {**OP, "inputs_identical": True}, Captured({"conv:0": VALUE}), None)
    assert result.verdict == "not_reproduced" and result.noise_max_abs == 0.0


def test_judge_replays_that_agree_after_inputs_that_differed_are_inherited() -> None:
    result = judge(VALUE, VALUE, {**OP, "inputs_identical": False}, Captured({"conv:0": VALUE}), None)
    assert result.verdict == "inherited"


def test_judge_the_same_op_with_the_same_settings_can_only_differ_by_nondeterminism() -> None:
    result = judge(VALUE, MOVED, {**OP, "inputs_identical": True, "same_op_same_settings": True},
                    Captured({"conv:0": VALUE}), Captured({"conv:0": MOVED}))
    assert result.verdict == "nondeterministic"
    assert "the same Conv2D with the same settings on identical inputs" in result.detail


def test_judge_a_difference_within_a_sides_own_noise_is_nondeterministic_beyond_it_own_error() -> None:
    noisy_b = Captured({"conv:0": VALUE + np.float32(2e-3)})
    on_gpu = {**OP, "inputs_identical": True, "per_process": ["b"]}
    within = judge(VALUE, MOVED, on_gpu, Captured({"conv:0": VALUE}), noisy_b)
    assert within.verdict == "nondeterministic"
    beyond = judge(VALUE, VALUE + np.float32(0.5), on_gpu, Captured({"conv:0": VALUE}), noisy_b)
    assert beyond.verdict == "own_error" and "beyond its run-to-run noise" in beyond.detail
    # on a CPU, with no noise measured, a replay that moved is no noise floor: the kernels differ
    unbacked = judge(VALUE, MOVED, {**OP, "inputs_identical": True}, Captured({"conv:0": VALUE}), noisy_b)
    assert unbacked.verdict == "own_error" and "its replay also differs from its own capture" in unbacked.detail


def test_same_run_settings_compares_device_batch_knobs_and_build_not_the_artifact() -> None:
    def manifest(device: str, batch: int, path: str, autotune: str = "default") -> dict[str, Any]:
        return {"spec": {"device": device, "artifact": {"path": path}, "knobs": {"autotune": autotune}},
                "batch_size": batch, "environment": {"tensorflow": "2.21.0", "gpus": [{"device_name": "H200"}]}}

    def alike(a: dict[str, Any], b: dict[str, Any], build: bool = True) -> bool:
        return same_run_settings(Capture(Path("a"), a, {}), Capture(Path("b"), b, {}), build=build)

    base = manifest("gpu", 8, "ckpt/")
    assert alike(base, manifest("gpu", 8, "savedmodel/"))
    assert not alike(base, manifest("gpu", 1, "ckpt/"))
    assert not alike(base, manifest("cpu", 8, "ckpt/"))
    assert not alike(base, manifest("gpu", 8, "ckpt/", autotune="off"))
    other_release = {**base, "environment": {**base["environment"], "tensorflow": "2.12.1"}}
    assert not alike(base, other_release)
    assert alike(base, other_release, build=False)  # alike but for the build (--python)
    assert not alike(base, {**other_release, "batch_size": 1}, build=False)


def _report(device: str, verdict: str, determinism: bool = False, batch_b: int = 8) -> dict[str, Any]:
    first = {"node": "block1/conv/Conv2D", "op": "Conv2D", "isolation": {"verdict": verdict}}
    side = {"device": device, "batch_size": 8, "knobs": {"determinism": True} if determinism else {}}
    return {"verdict": "diverged", "sides": {"a": side, "b": {**side, "batch_size": batch_b}},
            "origins": [first], "first_divergence": first, "first_divergence_beyond_tolerance": first}


def test_on_a_gpu_nondeterminism_names_autotuning_and_atomics_not_the_export() -> None:
    answers = explain_comparison(_report("gpu", "nondeterministic"))
    assert answers["causes"] == ["autotune", "atomics"]
    assert ISOLATION["nondeterministic"].evidence.format(first="`block1/conv/Conv2D` (Conv2D)") in answers["why"][0]
    assert "--autotune off" in answers["why"][0]


def test_on_a_gpu_an_origin_whose_further_runs_repeated_it_names_autotuning_alone() -> None:
    """Run t: B's further whole runs repeated `conv1/Conv2D` while its replay alone did not
    (`isolation.repeated`): atomics would have moved the whole runs too, so autotuning alone is named,
    with the experiment that tells, and the evidence says the runs repeated."""
    report = _report("gpu", "not_reproduced")
    report["first_divergence"]["isolation"]["repeated"] = True
    answers = explain_comparison(report)
    assert answers["causes"] == ["autotune"]
    assert ("`block1/conv/Conv2D` (Conv2D) agrees on both sides when replayed alone on identical inputs, and the side "
            "whose replay moved repeated it bit for bit over further whole runs: it computes otherwise alone than "
            "inside the whole model, not from one run to the next") in answers["why"][0]
    assert "--autotune off" in answers["why"][0]
    on_cpu = _report("cpu", "not_reproduced")  # no autotuning there: a rewrite when the graph ran
    on_cpu["first_divergence"]["isolation"]["repeated"] = True
    assert explain_comparison(on_cpu)["causes"] == ["grappler"]


def test_determinism_is_said_to_give_repeatability_not_batch_invariance() -> None:
    answers = explain_comparison(_report("gpu", "own_error", determinism=True, batch_b=1))
    assert answers["causes"][0] == "batch"
    assert "determinism makes a run repeatable, not batch-size invariant" in answers["why"][0]


def test_within_noise_names_nondeterminism_not_the_observer_when_the_shift_is_noise_too() -> None:
    report = _report("cpu", "own_error")
    report.update(verdict="within_noise", noise={"repeats": 3},
                  outputs={"y": {"noise_max_abs": 2.0 ** -9, "identical": False, "max_abs": 2.0 ** -9}},
                  observer_effect={"a": {"outputs_identical": False, "outputs_max_abs_diff": {"y": 2.0 ** -9}}})
    answers = explain_comparison(report)
    assert answers["causes"][0] == "nondeterminism" and "observation" not in answers["causes"]
    assert "within what each side differs from itself over 3 runs" in answers["why"][0]
    report["observer_effect"]["a"]["outputs_max_abs_diff"] = {"y": 0.5}  # beyond the noise: observation stays
    assert "observation" in explain_comparison(report)["causes"]


def test_a_resize_fused_into_a_conv_is_said_beside_the_batch_norm_fold() -> None:
    """optimize_for_inference's fuse_resize_and_conv: a detector export differed by 5.3 at its first
    conv because the fused op cannot do half_pixel_centers, and the why named only the fold."""
    first = {"node": "conv1_bn/FusedBatchNormV3", "op": "FusedBatchNormV3", "rewrite": "batchnorm_folded",
             "isolation": {"verdict": "own_error"}}
    side = {"device": "cpu", "batch_size": 8, "knobs": {}}
    report = {"verdict": "diverged", "sides": {"a": side, "b": side}, "origins": [first], "first_divergence": first,
              "nodes": {"resize/ResizeBilinear": {"op": "ResizeBilinear", "attrs_a": {"half_pixel_centers": True}},
                        first["node"]: {"rewrite": "batchnorm_folded"}},
              "rewrites": [{"kind": "fused", "a_nodes": ["resize/ResizeBilinear", "conv1/Conv2D"],
                            "b_nodes": ["conv1/Conv2D"], "detail": {"fused_op": "FusedResizeAndPadConv2D"}}]}
    why = explain_comparison(report)["why"][0]
    assert why.endswith("e.g. `conv1_bn/FusedBatchNormV3`. The export also fused `resize/ResizeBilinear` into the "
                        "convolution after it (FusedResizeAndPadConv2D, optimize_for_inference's fuse_resize_and_conv; "
                        "`toco_compatible=True` leaves it out). A's resize used half_pixel_centers, which the fused op "
                        "cannot: it resizes differently.")


def test_the_batch_sentence_ends_where_its_evidence_does() -> None:
    """Without an own-error isolation the batch sentence once ended in a dangling ';'."""
    assert ("the sides run batch 8 vs 1; the difference starts at `block1/conv/Conv2D` (Conv2D), whose own "
            "kernel differs given identical inputs.") in \
        explain_comparison(_report("cpu", "own_error", batch_b=1))["why"][0]
    assert explain_comparison(_report("cpu", None, batch_b=1))["why"][0].endswith("the sides run batch 8 vs 1.")


def test_an_observer_shift_far_below_the_sides_difference_is_not_a_cause() -> None:
    """Fetching every tensor moved A's outputs by 1e-7 while A and B differ by 0.9: observation
    explains none of it, and was once listed among the causes."""
    report = _report("cpu", "own_error")
    report.update(outputs={"y": {"identical": False, "max_abs": 0.9}},
                  observer_effect={"a": {"outputs_identical": False, "outputs_max_abs_diff": {"y": 1e-7}}})
    assert "observation" not in explain_comparison(report)["causes"]
    report["observer_effect"]["a"]["outputs_max_abs_diff"] = {"y": 0.2}  # a fifth of it: a cause
    assert "observation" in explain_comparison(report)["causes"]


@pytest.mark.slow
def test_a_variable_initialised_at_every_load_is_load_state_not_a_kernel_or_a_rewrite(real_models: dict[str, Path],
                                                                                      tmp_path: Path) -> None:
    """TF Serving's half_plus_two (TF 1.12) initialises `conv2d/kernel` from a random initializer
    at every load: the model compared with itself differs there, in no kernel and no export."""
    model = real_models["half_plus_two"] / "00000123"
    proc = run_cli("compare", str(model), str(model), "--out", str(tmp_path / "r"))
    # its output `y` does not read the kernel: the outputs decide, and they agree (exit 0)
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text(encoding="utf-8"))
    assert report["outputs"]["y"]["identical"] is True
    # the kernel's replay moved, so each side's noise was measured by default: two loads of one side
    # differ there as much as A and B do, and the headline says so first
    assert report["verdict"] == "within_tolerance" and report["verdict_ops"] == "within_noise"
    assert report["headline"][0]["key"] == "noise"
    for side in ("a", "b"):
        assert report["noise"][side]["repeats_itself"] is False
        assert "conv2d/Conv2D/ReadVariableOp" in report["noise"][side]["why"]
    # its first replay's finding is kept: the value changes from one load to the next, in no kernel
    read = report["nodes"]["conv2d/Conv2D/ReadVariableOp"]
    assert read["isolation"]["verdict"] == "nondeterministic" and read["isolation"]["load_state"] is True
    # and that finding, not which of four random draws landed closest (1 in 15 by chance), makes it noise
    assert read["reason"] == "its value is drawn anew at every load of the model"
    assert report["rewrites"] == []  # the same weights loaded twice: no const_changed


def test_noise_that_left_the_outputs_unmoved_ranks_below_the_export_that_moved_them() -> None:
    """The H200, 2026-12-02 evening (bench/gpu/test_gpu_2026-12-02_e.jsonl): MobileNet's checkpoint
    vs its folded export; side A's second process moved its intermediates by up to 5.25e-4, its
    outputs not at all, while the outputs differ by 0.009 from the folded batch norms on. The noise
    accounts for none of the outputs' difference: the export comes first, the noise after it."""
    first = {"node": "stem/bn/FusedBatchNormV3", "op": "FusedBatchNormV3", "max_abs": 5.2e-4,
             "isolation": {"verdict": "nondeterministic"}}
    beyond = {"node": "block0/depthwise/bn/FusedBatchNormV3", "op": "FusedBatchNormV3", "max_abs": 2.1457672e-06,
              "rewrite": "batchnorm_folded", "isolation": {"verdict": "inherited"}}
    side = {"device": "gpu", "batch_size": 8, "knobs": {}, "environment": {}}
    report = {"verdict": "diverged", "sides": {"a": side, "b": dict(side)}, "first_divergence": first,
              "first_divergence_beyond_tolerance": beyond, "origins": [beyond], "rewrites": [], "nodes": {},
              "outputs": {"logits": {"max_abs": 0.00901}, "scores": {"max_abs": 3e-5}},
              "noise": {"a": {"max_abs": 0.0005247593, "outputs_max_abs": {"logits": 0.0, "scores": 0.0}},
                        "b": {"max_abs": 0.0, "outputs_max_abs": {"logits": 0.0, "scores": 0.0}}}}
    said = explain_comparison(report)
    assert said["causes"] == ["export", "autotune", "atomics"]
    assert said["shares"][1] == {"cause": "autotune", "max_abs": 0.0, "measured": "between two runs of one side, at "
                                 "the outputs (inside the model up to 0.000525)"}
    assert said["shares"][0]["first_divergence"] is True


def test_the_observer_effect_is_listed_last_it_never_explains_the_plain_runs() -> None:
    """The H200, 2026-12-02 (bench/gpu/test_gpu_2026-12-02_f.jsonl): the detector's checkpoint vs
    its SavedModel on the GPU, isolated as nondeterministic (its replay moved by 7.65e-4), with a
    side whose outputs fetching every tensor moved by more than that. The plain runs fetch
    nothing: the observer effect is a caveat after the causes, not the first of them."""
    first = {"node": "block1/conv/Conv2D", "op": "Conv2D", "max_abs": 1.5e-3,
             "isolation": {"verdict": "nondeterministic", "noise_max_abs": 7.653e-4}}
    side = {"device": "gpu", "batch_size": 8, "knobs": {}, "environment": {}}
    report = {"verdict": "diverged", "sides": {"a": side, "b": dict(side)}, "first_divergence": first,
              "origins": [first], "rewrites": [], "nodes": {}, "tolerance": {"atol": 1e-6, "rtol": 1e-5},
              "outputs": {"scores": {"max_abs": 2.02e-4}},
              "observer_effect": {"a": {"outputs_identical": False, "outputs_max_abs_diff": {"scores": 1.1e-3}},
                                  "b": {"outputs_identical": True, "outputs_max_abs_diff": {}}}}
    said = explain_comparison(report)
    assert said["causes"] == ["autotune", "atomics", "observation"]
    assert said["shares"][-1] == {"cause": "observation", "max_abs": 1.1e-3,
                                  "measured": "the outputs' shift when every tensor is fetched"}


def _h200_report(name: str) -> dict:
    """A report.json the H200 wrote as typed (bench/gpu/astyped_2026-12-04_n.md), with the answers
    it gave then; explain_comparison answers it again here from the report alone."""
    import gzip  # noqa: PLC0415

    path = Path(__file__).resolve().parents[1] / "bench" / "gpu" / f"astyped_2026-12-04_n_{name}.report.json.gz"
    return json.loads(gzip.decompress(path.read_bytes()))


@pytest.mark.parametrize("control_flow", ["cf1", "cf2"])
def test_an_export_whose_heads_run_in_float16_is_mixed_precision_when_the_noise_hides_every_op(
        control_flow: str) -> None:
    """The H200, 2026-12-04 (run n): the fp32 detector against its export whose box and score heads
    compute in float16 (tests/fixtures/nms_fp16_detector.py). The plain outputs repeated themselves
    bit for bit and differed by 2.85e-05 in every pair of runs, while autotuning moved the convs
    inside from run to run: TF2 control flow left every op within that noise, TF1's first divergence
    was a conv that changed between processes. The causes were autotuning, atomics and the observer
    effect, or the observer effect alone: never the two cast_inserted rewrites, the one thing that
    told the graphs apart."""
    report = _h200_report(f"fp16_{control_flow}")
    said_then = report["answers"]["causes"]
    assert "mixed_precision" not in said_then
    said = explain_comparison(report)
    assert said["causes"][0] == "mixed_precision"
    assert said["shares"][0] == {
        "cause": "mixed_precision", "max_abs": 2.849102020263672e-05,
        "measured": "between the plain outputs (`detection_scores`), beyond their run-to-run noise in every pair of runs"}
    assert ("B's graph differs from A's by 2 rewrites (cast_inserted, e.g. `heads/einsum/Einsum`), and the plain "
            "outputs differ beyond tolerance and beyond their run-to-run noise in every pair of runs") in said["why"][0]
    assert said["causes"][-1] == "observation"
    for noise in ("autotune", "atomics"):  # the noise did not reach the outputs: it weighs what it moved there, 0
        if noise in said["causes"]:
            assert said["shares"][said["causes"].index(noise)]["max_abs"] == 0.0


def test_autotuning_stays_first_where_turning_it_off_took_the_first_convs_difference_away() -> None:
    """The H200, 2026-12-04 (run n): a tf-slim inference export at batch 1 vs 8. With autotuning its
    first conv differed (8.07e-04); with `--autotune off` the conv was identical and the first
    divergence was the logits' MatMul (cuBLAS per shape). Autotuning is ranked first, as measured."""
    said = explain_comparison(_h200_report("slim_sm_b1b8"))
    assert said["causes"] == ["autotune", "atomics", "batch"]
    off = _h200_report("slim_sm_b1b8_autotune_off")
    assert off["first_divergence_beyond_tolerance"]["node"] == "net/logits/MatMul"
    assert off["nodes"]["net/conv1/Conv2D"]["status"] == "identical"
    assert explain_comparison(off)["causes"] == ["batch"]


def test_a_detectors_observer_shift_is_held_against_what_its_matched_detections_moved() -> None:
    """The fp16 detector's pair: A and B differ by 0.359 on ``detection_boxes`` index by index (NMS re-listed
    near-tied detections), by 3.46e-05 between matched detections. A shift of 1e-3 between A's matched plain and
    instrumented detections was held against the 0.359 and dropped as negligible; against what the sides'
    matched detections moved it is 29 times that difference, and observation is named."""
    report = _report("cpu", "own_error")
    group = {"keys": {"boxes": "detection_boxes", "scores": "detection_scores"}, "compared": True,
             "verdict": "diverged", "per_detection_max_abs": {},
             "total": {"appeared": 0, "disappeared": 0, "changed_class": 0, "max_box_diff": 3.463e-05,
                       "max_score_diff": 1.2487e-04}}
    report.update(outputs={"detection_boxes": {"identical": False, "max_abs": 0.35944},
                           "detection_scores": {"identical": False, "max_abs": 1.2487e-04}},
                  observer_effect={"a": {"outputs_identical": False, "outputs_as_detections": ["detection_boxes"],
                                         "outputs_max_abs_diff": {"detection_boxes": 1e-3, "detection_scores": 0.0}}},
                  detections=[group])
    assert "observation" in explain_comparison(report)["causes"]
    report["detections"] = []  # no group: index by index, as before
    assert "observation" not in explain_comparison(report)["causes"]


def test_under_map_sides_b_observer_shift_is_held_against_the_output_it_maps_to() -> None:
    """--map detection_boxes=boxes: B's observer effect is keyed by B's own keys (``boxes``), the
    report's outputs by A's. A 1e-9 shift on B's ``boxes`` next to sides 0.5 apart explains none of it;
    looked up under ``boxes`` it found no difference to be held against, and observation was named."""
    report = _report("cpu", "own_error")
    report.update(outputs={"detection_boxes": {"identical": False, "max_abs": 0.5}},
                  observer_effect={"b": {"outputs_identical": False, "outputs_max_abs_diff": {"boxes": 1e-9},
                                         "a_keys": {"boxes": "detection_boxes"}}})
    assert "observation" not in explain_comparison(report)["causes"]
    del report["observer_effect"]["b"]["a_keys"]  # what the causes read before: B's key among A's
    assert "observation" in explain_comparison(report)["causes"]
