"""`tftrace diagnose` on the sample detector: each factor's verdict, where it starts, what it costs.

The slow tests run the real matrix (captures, replays and isolations in child processes), once
per module. Where the answer depends on the CPU (which op first differs between batch sizes),
the expected op comes from plain sessions run here (tests/plain_truth.py); conftest pins
TF_ENABLE_ONEDNN_OPTS=0 for the sides that do not set it.
The parsing of TF Serving's batching file and the answers' wording rules are fast tests.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_user_error, run_cli
from tracer.comparison.statuses import ISOLATION
from tracer.captures.reader import Capture
from tracer.diagnosis.answers import FACTOR_TITLES, build_answers
from tracer.diagnosis.timing import compare_pairs
from tracer.artifacts.loader import ArtifactRef
from tracer.errors import TftraceError
from tracer.diagnosis.experiments import FACTORS, GPU_FACTORS, QUICK_FACTORS, PlanContext, plan_experiments
from tracer.diagnosis.noise import plan_noise_free
from tracer.diagnosis.options import DiagnoseOptions
from tracer.diagnosis.run import _context_from_options
from tracer.runspec import InputSpec, Side
from tracer.diagnosis.serving import (batching_parameters_class, pad_requests, padding_groups, parse_batching_parameters,
                                      round_up_to_allowed)

REPEATED_STYLE = """# TF Serving --batching_parameters_file
max_batch_size { value: 8 }
batch_timeout_micros { value: 0 }
num_batch_threads { value: 4 }
allowed_batch_sizes: 2
allowed_batch_sizes: 8
pad_variable_length_inputs: true
"""
LIST_STYLE = "max_batch_size < value: 8 >; allowed_batch_sizes: [2, 8], num_batch_threads: { value: 4 }"
FULL_ONLY = ("repeat,batch,export,onednn,mixed_precision,serving_batching,"
             "device,autotune,determinism,tf32,layout_optimizer,atomics")


# ---- fast: TF Serving's batching file and padding ---------------------------------------------


def test_batching_file_in_both_repeated_field_styles():
    repeated = parse_batching_parameters(REPEATED_STYLE, "batching.txt")
    listed = parse_batching_parameters(LIST_STYLE, "batching.txt")
    assert repeated.allowed_batch_sizes == listed.allowed_batch_sizes == (2, 8)
    assert repeated.max_batch_size == listed.max_batch_size == 8
    assert repeated.num_batch_threads == listed.num_batch_threads == 4
    assert repeated.batch_timeout_micros == 0 and repeated.pad_variable_length_inputs is True
    assert repeated.emulated_sizes() == (2, 8)
    assert parse_batching_parameters("max_batch_size { value: 16 }").emulated_sizes() == (16,)


@pytest.mark.parametrize(
    ("text", "fragment", "fix"),
    [
        ("max_batch_size { value: 8 ", 'at line 1, column 25: does not parse: Expected "}"', "protobuf text format"),
        ("allowed_batch_sizes: [2, 8", 'at line 1, column 27: does not parse', 'Expected ","'),
        ("max_batch_size: 8\nallowed_batch_sizes: 8", 'at line 1, column 17: does not parse',
         "`max_batch_size { value: ... }`: max_batch_size is a google.protobuf.Int64Value message"),
        ("allowed_batch_sizes: 8, 2\nmax_batch_size { value: 8 }",
         'line 1, column 25: does not parse: Message type "tensorflow.serving.BatchingParameters" has no field named "2"',
         "allowed_batch_sizes: [2, 8]"),
        ("# batching\nallowed_batch_size: 8", 'line 2, column 1: does not parse: Message type '
         '"tensorflow.serving.BatchingParameters" has no field named "allowed_batch_size"',
         "its fields: max_batch_size, batch_timeout_micros"),
        ("max_batch_size { value: 8 }\nallowed_batch_sizes: [2, 4]",
         "last allowed_batch_sizes entry (4) must equal max_batch_size (8)", "TF Serving refuses it the same way"),
        ("max_batch_size { value: 8 }\nallowed_batch_sizes: [8, 2]", "must increase strictly", "TF Serving refuses it the same way"),
        ("max_batch_size { value: 8 value: 9 }", 'should not have multiple "value" fields', "protobuf text format"),
        ("max_batch_size { value: 8 }\nallowed_batch_sizes: [0, 8]",
         "at line 2: allowed_batch_sizes entry 0 is not a positive integer", "protobuf text format"),
        ("pad_variable_length_inputs: yes", "line 1, column 29", 'Expected "true" or "false"'),
    ],
)
def test_batching_files_the_server_would_refuse_are_refused(text, fragment, fix):
    with pytest.raises(TftraceError) as info:
        parse_batching_parameters(text, "b.txt")
    assert fragment in str(info.value), str(info.value)
    assert fix in str(info.value), str(info.value)
    assert "b.txt" in str(info.value)


def test_batching_file_is_read_with_tf_servings_message_type():
    """The message type holds every BatchingParameters field of TF Serving's proto, with its
    number and type, so fields the emulation does not use are read too (and kept)."""
    cls = batching_parameters_class()
    fields = {f.name: (f.number, f.message_type.full_name if f.message_type else f.type)
              for f in cls.DESCRIPTOR.fields}
    assert cls.DESCRIPTOR.full_name == "tensorflow.serving.BatchingParameters"
    assert fields["max_batch_size"] == (1, "google.protobuf.Int64Value")
    assert fields["allowed_batch_sizes"][0] == 6 and cls.DESCRIPTOR.fields_by_name["allowed_batch_sizes"].is_repeated
    assert fields["enable_large_batch_splitting"] == (8, "google.protobuf.BoolValue")
    params = parse_batching_parameters("max_batch_size { value: 8 }\nenable_large_batch_splitting { value: true }\n"
                                       "max_execution_batch_size { value: 4 }\nallowed_batch_sizes: [2, 4]\n"
                                       'thread_pool_name { value: "batch" }', "b.txt")
    assert params.allowed_batch_sizes == (2, 4) and params.emulated_sizes() == (2, 4)
    assert params.other == {"thread_pool_name": "batch", "enable_large_batch_splitting": True,
                            "max_execution_batch_size": 4}


def test_padding_repeats_each_request_row_as_the_server_pads():
    rows = np.arange(6, dtype=np.float32).reshape(2, 3)
    padded = pad_requests({"x": rows}, 4)["x"]
    assert padded.shape == (8, 3)
    assert np.array_equal(padded[:4], np.repeat(rows[:1], 4, axis=0))
    assert np.array_equal(padded[4:], np.repeat(rows[1:], 4, axis=0))
    assert padding_groups((2, 8)) == [(8, (2, 8))]  # batches of 2 over rows repeated 8 times: still self-padded
    assert padding_groups((3, 50)) == [(3, (3,)), (50, (50,))]
    assert [round_up_to_allowed(n, (2, 8)) for n in (1, 2, 3, 8)] == [2, 2, 8, 8]


def test_answers_name_only_the_factors_that_diverged():
    lat = {"median": 2.0, "min": 1.9, "max": 2.2, "runs": 5, "batch_rows": 1, "per_row_median": 2.0}
    slow = dict(lat, median=3.0, min=2.9, max=3.1, per_row_median=3.0)

    def exp(name, factor, verdict, diff, remedy=None):
        return {"name": name, "factor": factor, "verdict": verdict, "max_abs_output_diff": diff,
                "first_divergence": None, "a": {"describe": "A side"}, "b": {"describe": "B side"},
                "latency_ms": {"a": lat, "b": slow}, "latency_basis": "per run", "cost_pct": 50.0, "remedy": remedy,
                "skipped": None, "settings": None}

    answers = build_answers([
        exp("onednn", "onednn", "diverged", 1e-6, remedy="pin it"),
        exp("xla", "xla", "within_tolerance", 1e-7, remedy="no jit"),
        exp("threads", "threads", "identical", 0.0, remedy="one thread"),
        exp("batch_1_vs_8", "batch", "diverged", 4e-7),
    ], {"atol": 1e-6, "rtol": 1e-5})
    assert answers["factors"] == ["onednn", "batch"]  # ranked by effect
    text = " ".join(answers["why"] + answers["prevent"] + answers["cost"])
    assert answers["why"][0].startswith("oneDNN: A side vs B side changes the outputs by up to 1e-06.")
    assert answers["why"][1].startswith("Batch size: A side vs B side changes the outputs by up to 4e-07.")
    for other in ("xla", "threads"):
        assert FACTOR_TITLES[other] not in text
    # two captures' medians (2 ms vs 3 ms) without interleaved timings: no cost is claimed from them
    assert answers["cost"][0].endswith("Choosing B side was not timed interleaved with the other side (no interleaved "
                                       "timings), and two captures' medians are no evidence of a cost: none is "
                                       "claimed on this machine.")
    assert "50" not in answers["cost"][0]
    assert len(answers["why"]) == 2  # xla within tolerance is no question the user asked

    # the user's own question, answered when the difference is small: where it starts, and why
    bn = {"node": "net/conv1/BatchNorm/FusedBatchNormV3", "op": "FusedBatchNormV3", "isolation": "run_time_rewrite"}
    answers = build_answers([
        exp("threads", "threads", "identical", 0.0),
        {**exp("ckpt_vs_savedmodel_batch_8", "export", "within_tolerance", 4.47e-8), "first_divergence": bn},
    ], {"atol": 1e-6, "rtol": 1e-5})
    assert answers["factors"] == [] and answers["why"][0].startswith("None of the 2 experiments that ran changes")
    assert answers["why"][1] == (
        f"{FACTOR_TITLES['export']}: within tolerance, the outputs differ by up to 4.47e-08; it starts at "
        "`net/conv1/BatchNorm/FusedBatchNormV3` (FusedBatchNormV3), which the two runs executed as different "
        "kernels (a rewrite at run time).")


def _context(**changes):
    base = Side(ArtifactRef("model/ckpt"), batch_size=1, inputs=InputSpec(examples=8), timing_runs=5)
    ctx = PlanContext(base=base, model_kind="checkpoint", savedmodel=ArtifactRef("model/sm"), batch_sizes=(1, 8),
                      factors=tuple(FACTORS), quick=False, batch_major=True, onednn_on=False, xla_on=False, gpu=None)
    for key, value in changes.items():
        setattr(ctx, key, value)
    return ctx


def test_the_plan_shares_runs_and_puts_the_remedy_on_side_b():
    planned = {p.name: p for p in plan_experiments(_context())}
    base_key = planned["batch_1_vs_8"].a.key()
    assert planned["repeat_fresh_process"].a.key() == base_key != planned["repeat_fresh_process"].b.key()
    assert planned["onednn"].b.key() == base_key  # oneDNN is off here: the base side is the "off" side
    assert planned["onednn"].a.key() == planned["mixed_precision"].b.key()  # oneDNN on, captured once
    assert dict(planned["mixed_precision"].a.side.knobs.grappler) == {"auto_mixed_precision_onednn_bfloat16": "on"}
    assert planned["remapping"].a.key() == base_key and dict(planned["remapping"].b.side.knobs.grappler) == {
        "remapping": "off"}
    assert planned["xla"].b.key() == base_key and planned["xla"].a.side.knobs.xla == "on"
    assert planned["threads"].b.side.knobs.threads == (1, 0)
    assert planned["ckpt_vs_savedmodel_batch_8"].a.key() == planned["batch_1_vs_8"].b.key()
    assert {p.kind for n, p in planned.items() if n.startswith("serving")} == {"skipped"}
    # on a GPU machine: each GPU factor gets its pair of GPU sides
    gpu = {n: p for n, p in planned.items() if p.factor in GPU_FACTORS}
    assert sorted(gpu) == ["autotune", "cpu_vs_gpu", "determinism", "gpu_repeat", "layout_optimizer", "tf32"]
    assert gpu["cpu_vs_gpu"].a.key() == base_key and gpu["cpu_vs_gpu"].b.side.device == "gpu"
    # autotuning is on by default here: its "on" side is the GPU side as it is, captured once
    gpu_default = gpu["cpu_vs_gpu"].b.key()
    assert gpu["autotune"].a.key() == gpu_default == gpu["determinism"].a.key()
    assert gpu["autotune"].a.describe == "cuDNN autotune on (the default here)"
    assert gpu["autotune"].b.side.knobs.autotune == "off"
    # the base capture is not on a GPU: whether TF32 is on there is not known, so both sides set it
    assert (gpu["tf32"].a.side.knobs.tf32, gpu["tf32"].b.side.knobs.tf32) == ("on", "off")
    assert gpu["determinism"].b.side.knobs.determinism is True
    assert gpu["gpu_repeat"].kind == "repeat_process" and gpu["gpu_repeat"].repeats == 5
    onednn_on = {p.name: p for p in plan_experiments(_context(onednn_on=True, gpu="no GPU: a CPU-only build"))}
    assert onednn_on["onednn"].a.key() == base_key and onednn_on["onednn"].b.side.knobs.onednn == "off"
    assert onednn_on["mixed_precision"].b.key() == base_key and not onednn_on["mixed_precision"].notes
    assert onednn_on["tf32"].skipped == "no GPU: a CPU-only build"
    # TF_CUDNN_USE_AUTOTUNE=0 where diagnose runs: its "off" side is the GPU side as it is
    autotune_off = {p.name: p for p in plan_experiments(_context(autotune_on=False, tf32_on=True))}
    assert autotune_off["autotune"].a.side.knobs.autotune == "on"
    assert autotune_off["autotune"].b.key() == autotune_off["cpu_vs_gpu"].b.key()
    # a GPU base capture whose fingerprint says TF32 on: its "on" side is that side, "off" is set
    assert autotune_off["tf32"].a.key() == autotune_off["cpu_vs_gpu"].b.key()
    assert autotune_off["tf32"].b.side.knobs.tf32 == "off"
    # and with op determinism on both sides, TF32 on is the same capture as determinism's remedy
    twins = {p.name: p for p in plan_noise_free(list(autotune_off.values()))}
    assert twins["tf32_noise_removed"].a.key() == autotune_off["determinism"].b.key()


def _runnable_context(**changes):
    """A context in which every factor can run: a GPU, a batching file, a session config, another
    TensorFlow's interpreter."""
    return _context(serving_batching="batching.txt", serving_inputs={2: ("padded.npz", 4)},
                    session_config=("session.pbtxt", "intra_op_parallelism_threads: 1"),
                    other_python="/opt/tf2.12/bin/python", **changes)


def _diverged(p, diff=1e-3):
    lat = {"median": 2.0, "min": 1.9, "max": 2.2, "runs": 5, "batch_rows": 1, "per_row_median": 2.0}
    return {"name": p.name, "factor": p.factor, "verdict": "diverged", "max_abs_output_diff": diff,
            "first_divergence": None, "a": {"describe": p.a.describe}, "b": {"describe": p.b.describe},
            "latency_ms": {"a": lat, "b": dict(lat, median=3.0, per_row_median=3.0)},
            "latency_basis": "per example" if p.per_row else "per run", "cost_pct": 50.0, "remedy": p.remedy,
            "skipped": None, "settings": None,
            "timing": compare_pairs([([2.0 + 0.01 * (i % 5) for i in range(20)],
                                      [3.0 + 0.01 * (i % 5) for i in range(20)])] * 2).to_json()}


def test_every_registered_factor_has_its_texts_and_its_answers():
    from tracer.causes import CAUSES
    from tracer.diagnosis.plan import Factor

    ctx = _runnable_context()
    planned = plan_experiments(ctx)
    for key, factor in FACTORS.items():
        assert isinstance(factor, Factor) and factor.key == key
        assert {p.factor for p in factor.plan(ctx)} == {key}, key  # its experiments are filed under it
        assert factor.title and factor.description, key
        assert factor.cause is None or factor.cause in CAUSES, key
        assert factor.remedy != "setting" or factor.setting is not None, key  # "still leaves" reads it per side
        ran = [p for p in planned if p.factor == key and p.kind != "skipped"]
        assert ran, key
        for p in ran:  # a remedy to name: the experiment's own setting, the factor's text, or its cause's
            assert p.remedy or factor.prevent or factor.cause, p.name
        answers = build_answers([_diverged(p) for p in ran], {"atol": 1e-6, "rtol": 1e-5})
        assert answers["factors"] == [key]
        assert answers["why"][0].startswith(f"{factor.title}: ") and answers["prevent"][0].startswith(f"{factor.title}: ")
        assert answers["factor_descriptions"] == {key: factor.description}
        costs = [line for line in answers["cost"] if not line.startswith("Timing noise: ")]
        assert bool(costs) != factor.costless, key  # a cost line exactly when there is something to set
        if costs:
            assert costs[0].startswith(f"{factor.title}: ") and "costs +49.5% (95% interval" in costs[0], (key, costs)


def test_a_factor_declared_only_in_the_registry_appears_in_the_matrix(monkeypatch):
    """What a newcomer writes to add an experiment: one record. The plan, --only, the skipped rows,
    the settings read from a capture, the answers and the verified recipe all pick it up."""
    from tracer.diagnosis import experiments, run
    from tracer.diagnosis.outcomes import side_settings
    from tracer.diagnosis.plan import Factor, Planned, Run, with_knobs
    from tracer.diagnosis.recipe import plan_recipe

    def fp8(ctx):
        return [Planned("fp8", "fp8", "compare", Run(ctx.base, "fp32"), Run(with_knobs(ctx.base, tf32="off"), "fp8 off"),
                        remedy="no fp8 anywhere")]

    factor = Factor("fp8", "FP8 matmuls", "fp8 on vs off", fp8, cause="mixed_precision", remedy="setting",
                    setting=lambda c: c.spec["knobs"].get("tf32", "default"))
    monkeypatch.setitem(experiments.FACTORS, "fp8", factor)
    ctx = _context(factors=tuple(FACTORS))
    planned = {p.name: p for p in plan_experiments(ctx)}
    assert planned["fp8"].kind == "compare" and planned["fp8"].b.side.knobs.tf32 == "off"
    assert run.parse_factors("batch,fp8") == ("batch", "fp8")
    assert [p.name for p in run._not_selected(("batch",), None, "not selected by --only") if p.factor == "fp8"] == ["fp8"]

    cap = Capture(Path("cap"), {"spec": {"knobs": {"tf32": "off"}, "device": "cpu"}, "environment": {},
                                "batch_size": 1, "artifact": {"kind": "checkpoint"}}, {})
    assert side_settings(cap)["fp8"] == "off"
    answers = build_answers([_diverged(planned["fp8"])], {"atol": 1e-6, "rtol": 1e-5})
    assert answers["why"][0].startswith("FP8 matmuls: fp32 vs fp8 off changes the outputs by up to 0.001.")
    assert "Cause: mixed precision computes parts of the model" in answers["why"][0]
    assert answers["prevent"][0].startswith("FP8 matmuls: no fp8 anywhere.")
    assert answers["cost"][0].startswith("FP8 matmuls: fp32: 2.02 ms; fp8 off: 3.02 ms (medians of 20 interleaved runs "
                                         "of each in each of 2 pairs of fresh processes, per run)")
    assert ("Choosing fp8 off costs +49.5% (95% intervals +49.4% to +49.6% over 2 pairs of fresh processes, 20 "
            "interleaved runs of each)") in answers["cost"][0]
    recipe = plan_recipe(list(planned.values()), [{"name": "fp8", "factor": "fp8", "verdict": "diverged"}], ctx)
    assert recipe.applied == ("TF32 off",) and recipe.planned.a.side.knobs.tf32 == "off"  # the knob it sets, in words


def test_unparsable_batching_file_is_refused_before_anything_runs(tmp_path):
    bad = tmp_path / "batching.txt"
    bad.write_text("max_batch_size { value: 8\nallowed_batch_sizes: 2\n")
    proc = run_cli("diagnose", "any_model", "--serving-batching", str(bad), "--out", str(tmp_path / "d"))
    # the brace left open: protobuf reads the next line inside the wrapper message, as TF Serving would
    assert_user_error(proc, 'at line 2, column 1: does not parse: Message type "google.protobuf.Int64Value" has no '
                      'field named "allowed_batch_sizes"', "protobuf text format")
    assert not (tmp_path / "d").exists()


def test_unknown_factor_lists_the_known_ones(tmp_path):
    proc = run_cli("diagnose", "any_model", "--only", "batch,fp8", "--out", str(tmp_path / "d"))
    assert_user_error(proc, "unknown factor fp8", "repeat, batch, export, observation, onednn")


def test_a_selection_the_options_leave_empty_is_refused_before_any_capture(tmp_path):
    """What the options alone leave unrunnable is known before the base side's capture (minutes on a
    large model): refused at once, every reason named, nothing captured, no --out."""
    ckpt = tmp_path / "m"
    ckpt.mkdir()
    for end in (".index", ".meta"):  # a checkpoint prefix as the path check sees it; never loaded
        (ckpt / f"model.ckpt{end}").write_bytes(b"")
    out = tmp_path / "d"
    proc = run_cli("diagnose", str(ckpt / "model.ckpt"), "--only",
                   "batch,export,serving_batching,serving_session_config,tf_version", "--batch-sizes", "4",
                   "--out", str(out))
    assert_user_error(proc, "nothing to diagnose: every experiment selected is skipped here (batch: only one batch "
                      "size given: pass --batch-sizes 1,8; ckpt_vs_savedmodel: give the exported SavedModel with "
                      "--savedmodel; serving_batching: give TF Serving's batching parameters file with "
                      "--serving-batching FILE; serving_session_config: give TF Serving's session config with "
                      "--serving-session-config FILE; tf_version: give another environment's Python with "
                      "--other-python PATH")
    assert "capturing" not in proc.stderr
    assert not out.exists()


def test_a_selection_only_the_base_capture_can_rule_out_is_not_refused_from_the_options():
    """A GPU factor may run (a GPU may be visible) and a second batch size may (the signature may be
    batch-major): the options alone refuse neither; the base capture decides."""
    options = DiagnoseOptions(model=ArtifactRef("saved"), out_dir=Path("d"), only=("batch", "autotune"),
                              batch_sizes=(1, 4))
    kinds = {p.name: p.kind for p in plan_experiments(_context_from_options(options, None))}
    assert kinds == {"batch_1_vs_4": "compare", "autotune": "compare"}
    # a batching file given: its padded sizes may run (the padded inputs come after the base capture)
    served = DiagnoseOptions(model=ArtifactRef("saved"), out_dir=Path("d"), only=("serving_batching",),
                             batch_sizes=(1,), serving_batching="batching.txt")
    batching = parse_batching_parameters(REPEATED_STYLE, "batching.txt")
    kinds = {p.name: p.kind for p in plan_experiments(_context_from_options(served, batching))}
    assert kinds == {"serving_batching_2": "compare", "serving_batching_8": "compare"}


@pytest.mark.parametrize("device", ["cpu", "gpu"])
def test_every_factor_plans_from_the_options_alone(device):
    """The early refusal plans the whole matrix before any capture: no factor's plan may need what
    only the base capture gives (the padded inputs of TF Serving's batching were one)."""
    everything = DiagnoseOptions(model=ArtifactRef("m"), out_dir=Path("d"), savedmodel=ArtifactRef("sm"),
                                 only=tuple(FACTORS), batch_sizes=(1, 4, 8), serving_batching="batching.txt",
                                 serving_session_config="config.txt", other_python=sys.executable, device=device)
    planned = plan_experiments(_context_from_options(everything, parse_batching_parameters(REPEATED_STYLE, "b")))
    assert {p.factor for p in planned} == set(FACTORS) and not [p for p in planned if p.kind == "skipped"]


@pytest.mark.slow
def test_a_selection_that_leaves_nothing_to_run_is_refused(models, tmp_path):
    """--only batch with one batch size (and, on this CPU-only build, a GPU factor) tests nothing: a
    diagnosis of no experiments would read "none changes the outputs", a clean bill it never measured."""
    out = tmp_path / "d"
    proc = run_cli("diagnose", str(models["detector"]), "--only", "batch,autotune", "--batch-sizes", "4",
                   "--out", str(out), env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert_user_error(proc, "nothing to diagnose: every experiment selected is skipped here (batch: only one batch size "
                      "given: pass --batch-sizes 1,8; autotune: no GPU", "Select factors that can run here with --only")
    assert not out.exists()  # the base side it captured to plan the matrix is not left behind


# ---- slow: the matrix on the detector ---------------------------------------------------------


def _by_name(doc: dict) -> dict[str, dict]:
    return {e["name"]: e for e in doc["experiments"]}


@pytest.fixture(scope="module")
def full(models, tmp_path_factory):
    """detector checkpoint + its SavedModel, batch sizes 1 and 4, a TF Serving batching file.

    Which op first differs between batch sizes depends on the CPU: the tests ask plain sessions
    (:func:`_truth`) rather than expect one machine's answer.
    """
    tmp = tmp_path_factory.mktemp("diagnose")
    batching = tmp / "batching.txt"
    batching.write_text(REPEATED_STYLE)
    out = tmp / "out"
    proc = run_cli("diagnose", str(models["detector_ckpt"]), "--savedmodel", str(models["detector"]),
                   "--batch-sizes", "1,4", "--only", FULL_ONLY, "--serving-batching", str(batching), "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    return json.loads((out / "diagnosis.json").read_text()), out, proc


def _truth(models, doc: dict, exp: dict) -> dict:
    """The op plain sessions find first differing between an experiment's two sides (both run
    the detector on A's examples at their own batch size and oneDNN setting)."""
    from plain_truth import captured_inputs, first_row_divergence  # noqa: PLC0415

    settings = exp["settings"]
    assert settings["a"]["onednn"] == settings["b"]["onednn"], settings
    inputs = captured_inputs(exp["a"]["capture"])
    rows = len(next(iter(inputs.values())))
    tol = doc.get("tolerance") or {"atol": 1e-6, "rtol": 1e-5}
    truth = first_row_divergence(models["detector"], inputs, settings["a"]["batch"], inputs, settings["b"]["batch"],
                                 list(range(rows)), onednn=settings["a"]["onednn"], atol=tol["atol"], rtol=tol["rtol"])
    assert truth["bitwise"] is not None, f"{exp['name']}: plain sessions agree bitwise; nothing to trace"
    return truth


@pytest.mark.slow
def test_repeats_and_the_faithful_export_are_identical(full):
    doc, _, _ = full
    exps = _by_name(doc)
    for name in ("repeat_same_process", "repeat_fresh_process", "ckpt_vs_savedmodel_batch_1",
                 "ckpt_vs_savedmodel_batch_4"):
        assert exps[name]["verdict"] == "identical", exps[name]
        assert exps[name]["max_abs_output_diff"] == 0.0
        assert exps[name]["first_divergence"] is None


@pytest.mark.slow
def test_onednn_and_batch_diverge_batch_at_the_ops_own_kernel(full, models):
    exps = _by_name(full[0])
    assert exps["onednn"]["verdict"] == "diverged"
    assert exps["onednn"]["settings"]["a"]["onednn"] == "on" and exps["onednn"]["settings"]["b"]["onednn"] == "off"
    batch = exps["batch_1_vs_4"]
    assert batch["verdict"] == "diverged"
    assert batch["settings"]["a"]["onednn"] == batch["settings"]["b"]["onednn"] == "off"
    first = batch["first_divergence"]
    truth = _truth(models, full[0], batch)
    assert (first["node"], first["isolation"]) == (truth["bitwise"], "own_error"), (first, truth)
    assert (first.get("beyond_tolerance") or first)["node"] == truth["beyond_tolerance"], (first, truth)


@pytest.mark.slow
def test_bf16_amp_diverges_from_a_converted_op(full):
    """With oneDNN off TF does not run the bfloat16 rewrite at all, so the experiment turns
    oneDNN on for both sides; observed op by op, the first difference is the batch norm fed by
    the first converted convolution."""
    amp = _by_name(full[0])["mixed_precision"]
    assert amp["verdict"] == "diverged"
    assert amp["settings"]["a"]["onednn"] == amp["settings"]["b"]["onednn"] == "on"
    assert amp["settings"]["a"]["mixed_precision"] == "on" and amp["settings"]["b"]["mixed_precision"] == "off"
    assert max(amp["instrumented_outputs"].values()) == 0.0  # observing every tensor keeps them all in float32
    assert amp["plain_outputs"]["verdict"] == "diverged"
    # per output, the worse of the two, as the verdict is (the plain runs differ, so "outputs" is no 0.0)
    assert amp["outputs"] == amp["plain_outputs"]["max_abs"] and max(amp["outputs"].values()) > 0
    assert amp["converted_ops"][0] == "block1/conv/Conv2D"
    first = amp["first_divergence"]
    assert first["observed"] == "fetch-alone replays"
    assert first["node"] == "block1/bn/FusedBatchNormV3" and first["node"] in amp["converted_ops"]


@pytest.mark.slow
def test_gpu_experiments_are_listed_as_skipped_with_the_reason(full):
    exps = _by_name(full[0])
    for factor in GPU_FACTORS:
        matching = [e for e in exps.values() if e["factor"] == factor]
        assert len(matching) == 1, factor
        assert matching[0]["skipped"] == "no GPU: TensorFlow 2.21.0 here is a CPU-only build (is_cuda_build false)"
        assert matching[0]["verdict"] is None and matching[0]["latency_ms"] is None
    assert "no GPU: TensorFlow 2.21.0 here is a CPU-only build" in full[2].stdout


@pytest.mark.slow
def test_the_fresh_process_repeat_shows_its_latency_gap_as_noise_not_a_cost(full):
    """One configuration run twice costs nothing: its latency gap is the noise floor (it read
    "+183.1%" in the cost column of a tiny model)."""
    repeat = _by_name(full[0])["repeat_fresh_process"]
    row = next(line for line in full[2].stdout.splitlines() if line.startswith("│ repeat_fresh_process"))
    assert f"±{abs(repeat['cost_pct']):.1f}% (timing" in row and "+" not in row.split("│")[7]


@pytest.mark.slow
def test_serving_batching_file_is_honoured(full, models):
    doc, out, _ = full
    exps = _by_name(doc)
    serving = sorted(n for n in exps if n.startswith("serving_batching"))
    assert serving == ["serving_batching_2", "serving_batching_8"]
    # Where a request's copies first make the kernels differ depends on the CPU: plain sessions say.
    for size in (2, 8):
        exp = exps[f"serving_batching_{size}"]
        assert exp["settings"]["a"]["batch"] == 1 and exp["settings"]["b"]["batch"] == size
        first = exp["first_divergence"]
        truth = _truth(models, doc, exp)
        assert exp["verdict"] == "diverged" and (first["node"], first["isolation"]) == (truth["bitwise"], "own_error")
        assert (first.get("beyond_tolerance") or first)["node"] == truth["beyond_tolerance"], (first, truth)
    padded = np.load(out / "serving_inputs_x8.npz")["images"]
    assert padded.shape == (16, 64, 64, 3)  # 2 requests, each followed by 7 copies of itself
    assert all(np.array_equal(padded[i], padded[8 * (i // 8)]) for i in range(16))


@pytest.mark.slow
def test_answers_name_the_diverged_factors_and_only_those(full):
    doc, _, proc = full
    diverged = {e["factor"] for e in doc["experiments"] if e["verdict"] == "diverged"}
    assert diverged == {"batch", "onednn", "mixed_precision", "serving_batching"}
    answers = doc["answers"]
    assert set(answers["factors"]) == diverged and answers["source"] == "diagnosis"
    named = {factor for factor, title in FACTOR_TITLES.items()
             for line in answers["why"] if line.startswith(f"{title}: ")}
    assert named == diverged
    why = " ".join(answers["why"])
    first = _by_name(doc)["batch_1_vs_4"]["first_divergence"]  # the op is checked against plain sessions above
    assert f"`{first['node']}` ({first['op']}), {ISOLATION['own_error'].clause}" in why
    # one remedy per factor, then the verified recipe (all of them together, measured)
    assert len(answers["prevent"]) == 5 and len(answers["cost"]) == 4
    assert answers["prevent"][-1].startswith("Verified recipe (measured): ")
    # every cost by the one rule: interleaved timings, a stated interval, a cost only when significant
    exps = {e["factor"]: e for e in doc["experiments"] if e.get("timing")}
    for factor, line in zip(answers["factors"], answers["cost"]):
        assert exps[factor]["timing"]["words"] in line and "interleaved runs of each" in line, (factor, line)
    assert "Why" in proc.stdout and "How to prevent it" in proc.stdout and "What it costs" in proc.stdout


@pytest.mark.slow
def test_every_latency_is_positive_and_the_cost_comes_from_them(full):
    for exp in full[0]["experiments"]:
        if exp["skipped"]:
            continue
        lat = exp["latency_ms"]
        key = "per_row_median" if exp["latency_basis"] == "per example" else "median"
        assert lat["a"][key] > 0 and lat["b"][key] > 0, exp["name"]
        assert lat["a"]["runs"] >= 5 and lat["a"]["min"] <= lat["a"]["median"] <= lat["a"]["max"]
        timing = exp.get("timing") or {}
        if "ratio" in timing:  # a cost the answers state: the interleaved timings' ratio of medians
            scale = lat["a"]["batch_rows"] / lat["b"]["batch_rows"] if exp["latency_basis"] == "per example" else 1.0
            # pairs of fresh processes, each with its own samples, ratio of medians and interval; the
            # second only where the first showed a cost (beyond the 2% margin), which it must confirm
            pairs = timing["pairs"]
            first_shows_a_cost = pairs[0]["interval"][0] > 1.02 or pairs[0]["interval"][1] < 0.98
            assert timing["scale"] == scale and len(pairs) == (2 if first_shows_a_cost else 1), exp["name"]
            for pair in pairs:
                assert len(pair["a_ms"]) == len(pair["b_ms"]) == timing["runs"] >= 20
                ratio = float(np.median(pair["b_ms"]) / np.median(pair["a_ms"])) * scale
                assert pair["ratio"] == pytest.approx(ratio, rel=1e-4)
                assert pair["interval"][0] <= pair["ratio"] <= pair["interval"][1]
            # the stated ratio is their geometric mean; the interval spans both intervals
            ratio = float(np.prod([p["ratio"] for p in pairs]) ** (1 / len(pairs)))
            assert exp["cost_pct"] == timing["cost_pct"] == pytest.approx((ratio - 1) * 100, abs=0.02), exp["name"]
            assert timing["interval"] == [min(p["interval"][0] for p in pairs), max(p["interval"][1] for p in pairs)]
            assert timing["significant"] == (timing["interval"][0] > 1.02 or timing["interval"][1] < 0.98)
        else:
            assert exp["cost_pct"] == round((lat["b"][key] - lat["a"][key]) / lat["a"][key] * 100, 2), exp["name"]
    assert _by_name(full[0])["batch_1_vs_4"]["latency_basis"] == "per example"


@pytest.mark.slow
def test_diagnosis_contract_and_report_on_top(full):
    doc, out, _ = full
    for exp in doc["experiments"]:
        for key in ("name", "factor", "a", "b", "verdict", "max_abs_output_diff", "first_divergence", "latency_ms",
                    "cost_pct", "skipped"):
            assert key in exp, (exp["name"], key)
    assert set(doc["answers"]) >= {"why", "prevent", "cost"}
    report = json.loads((out / "report.json").read_text())
    assert report["answers"] == doc["answers"]
    assert report["diagnosis"]["experiments"] == doc["experiments"]
    # the report on top is the first experiment that differs; its verdict is its outputs' (they may
    # agree within tolerance while ops inside differ)
    assert doc["report_experiment"] in _by_name(doc)
    assert report["verdict"] in ("diverged", "within_tolerance", "within_noise") and report["verdict_ops"] != "identical"
    markdown = (out / "report.md").read_text()
    assert markdown.startswith(f"## tftrace diagnose: {len(doc['experiments'])} experiments")
    title = "## tftrace: " + report["verdict"].replace("_", " ").upper()
    assert markdown.index("### Why it happens") < markdown.index("### Experiments") < markdown.index(title)
    assert "batch\\_1\\_vs\\_4" in markdown
    html = (out / "report.html").read_text()
    assert html.index('id="diagnosis"') < html.index('id="summary"')
    shared = {e["a"]["capture"] for e in doc["experiments"] if e["name"] in ("repeat_fresh_process", "batch_1_vs_4",
                                                                              "ckpt_vs_savedmodel_batch_1")}
    assert len(shared) == 1  # the base side is captured once and shared
    assert (out / "experiments" / "batch_1_vs_4" / "report.json").exists()


@pytest.mark.slow
def test_diagnosis_says_where_its_time_went(full):
    """Issue 29: each experiment's wall seconds, and every child process diagnose started with the
    seconds it took to come up, import TensorFlow and load the model, step by step."""
    doc, out, _ = full
    t = doc["timings"]
    ran = {e["name"] for e in doc["experiments"] if e.get("skipped") is None and e["name"] != "recipe"}
    assert set(t["experiment_s"]) == ran and all(s > 0 for s in t["experiment_s"].values())
    assert t["total_s"] >= t["base_s"] + t["captures_s"] + t["experiments_s"] - 1  # the report is written last
    assert t["experiments_s"] >= t["recipe_s"] + t["costs_s"]
    children = t["children"]
    captures = len(list((out / "captures").iterdir()))
    assert children["by_purpose"]["capture"]["count"] == captures  # each run captured once, and counted once
    # the next captures' children load while one captures (one ahead on 2 cores): all but the
    # first capture of each stage (the base side, the captures, the recipe's) was loaded ahead
    manifests = [json.loads(m.read_text()) for m in (out / "captures").glob("*/manifest.json")]
    ahead = [m for m in manifests if m["timings"].get("loaded_ahead")]
    assert len(manifests) == captures and len(manifests) - 3 <= len(ahead) < len(manifests)
    # (B's isolation child loads while A's replays run, and may wait for its job or not, by the clock:
    # tests/test_isolation_ahead.py shows it is started ahead)
    assert children["by_purpose"]["capture"]["idle_s"] >= 0
    assert children["reported"] == children["count"]  # every child said how it came up
    for purpose, kids in children["by_purpose"].items():
        assert kids["import_s"] > 0 and kids["wall_s"] > kids["start_s"] + kids["import_s"] + kids["model_s"], purpose
    steps = t["children_by_step"]
    assert steps["base side"]["count"] == 1 and set(steps["captures"]["by_purpose"]) == {"capture"}
    assert set(steps) <= {"base side", "captures", "captures with the noise removed", "recipe", "costs", *ran}
    assert sum(s["count"] for s in steps.values()) == children["count"]
    # diagnose compares captures its own children wrote: their weights' digests are not read back
    # from the model again for each experiment (a TensorFlow child each, before)
    assert "weights" not in children["by_purpose"]
    # nor are the plain outputs replayed: each capture stored its plain run's outputs
    assert not list((out / "experiments").glob("*/plain")) and any(
        "as each capture's plain run returned them" in note for e in doc["experiments"] for note in e.get("notes", []))


@pytest.mark.slow
def test_quick_runs_its_subset_and_shows_progress(models, tmp_path):
    out = tmp_path / "quick"
    proc = run_cli("diagnose", str(models["detector_ckpt"]), "--savedmodel", str(models["detector"]), "--quick",
                   "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    doc = json.loads((out / "diagnosis.json").read_text())
    ran = {e["factor"] for e in doc["experiments"] if not e["skipped"]}
    assert ran == set(QUICK_FACTORS) | {"recipe"}  # something diverged: its remedies are run together
    assert {e["name"] for e in doc["experiments"] if e["factor"] == "export" and not e["skipped"]} == \
        {"ckpt_vs_savedmodel_batch_1"}
    assert f"[base side] capturing {models['detector_ckpt']}" in proc.stderr
    assert "Batch size: cpu, batch 1 vs cpu, batch 8: diverged" in proc.stderr  # words, not the id batch_1_vs_8
    # each stage counts to the total it announced, and no total grows under the reader
    counters = re.findall(r"^\[([a-z ]+?) (\d+)/(\d+)\]", proc.stderr, flags=re.M)
    stages: dict[str, list[tuple[int, int]]] = {}
    for stage, done, total in counters:
        stages.setdefault(stage, []).append((int(done), int(total)))
    assert {"captures", "experiments"} <= set(stages)
    for stage, steps in stages.items():
        assert [d for d, _ in steps] == list(range(1, len(steps) + 1)), stage
        assert {t for _, t in steps} == {len(steps)}, stage  # it ended at the total it started with
    print(f"--quick wall time: {doc['timings']['total_s']} s")  # measured: see the report of issue 6


@pytest.mark.slow
def test_a_stateful_graph_repeats_differently_because_of_its_state(real_models, tmp_path):
    out = tmp_path / "counter"
    proc = run_cli("diagnose", str(real_models["counter"]), "--signature", "incr_counter", "--only", "repeat",
                   "--out", str(out))
    assert proc.returncode == 1, proc.stderr
    exps = _by_name(json.loads((out / "diagnosis.json").read_text()))
    same = exps["repeat_same_process"]
    assert same["verdict"] == "diverged" and same["max_abs_output_diff"] == 1.0
    assert same["attribution"] == "state" and same["state_ops"] == ["incr_counter_op/AssignAdd"]
    assert exps["repeat_fresh_process"]["verdict"] == "identical"  # each process restores the same state
    why = json.loads((out / "diagnosis.json").read_text())["answers"]["why"]
    assert len(why) == 1 and why[0].startswith("State: the graph changes its variables when it runs "
                                               "(`incr_counter_op/AssignAdd`)")
    assert "not kernel nondeterminism" in why[0]


def test_export_is_not_blamed_when_there_is_no_rewrite_and_a_fresh_process_repeat_differs_too():
    """Issue 14 on the H200: ckpt vs SavedModel differed only because each process autotuned
    its own cuDNN algorithms; a detection changed class, which no tolerance may be offered for."""
    def exp(name, factor, diff, **extra):
        return {"name": name, "factor": factor, "verdict": "diverged", "max_abs_output_diff": diff,
                "first_divergence": {"node": "block1/conv/Conv2D", "op": "Conv2D", "isolation": "nondeterministic"},
                "a": {"describe": "A side"}, "b": {"describe": "B side"}, "latency_ms": None, "cost_pct": None,
                "remedy": None, "skipped": None, "settings": None, **extra}

    answers = build_answers([
        exp("repeat_fresh_process", "repeat", 3.7e-4, rewrite_count=0, discrete_changes={}),
        exp("ckpt_vs_savedmodel_batch_8", "export", 1.0, rewrite_count=0,
            discrete_changes={"detection_classes": {"changed": 1, "dtype": "int32"}}),
    ], {"atol": 1e-6, "rtol": 1e-5})
    export_why = next(w for w in answers["why"] if w.startswith(FACTOR_TITLES["export"]))
    assert "no rewrite" in export_why and "differs by up to 0.00037" in export_why
    assert "this is run-to-run nondeterminism, not the export" in export_why
    assert "`detection_classes` (int32): 1 value changed" in export_why
    assert "Cause: export-time rewrites" not in " ".join(answers["why"])
    text = " ".join(answers["prevent"])
    assert "nothing to change in the export (no rewrite)" in text
    assert "a tolerance above 1" not in text
    repeat_why = next(w for w in answers["why"] if w.startswith(FACTOR_TITLES["repeat"]))
    assert ISOLATION["nondeterministic"].clause in repeat_why


def test_a_pair_that_differs_only_inside_is_never_said_to_change_the_outputs_by_up_to_0():
    """The H200, 2026-12-02: a fresh process of a GPU side moved 28 intermediate tensors and no
    output; the checkpoint-vs-SavedModel pair diverged inside only, and was bit-identical with the
    noise removed. The answers said "changes the outputs by up to 0" and "the default runs differ by up to 0"."""
    first = {"node": "stem/Conv2D", "op": "Conv2D", "isolation": "nondeterministic"}
    common = {"a": {"describe": "gpu, batch 8"}, "b": {"describe": "gpu, batch 8"}, "latency_ms": None,
              "cost_pct": None, "remedy": None, "skipped": None, "settings": None, "rewrite_count": 0,
              "discrete_changes": {}}
    experiments = [
        {**common, "name": "repeat_fresh_process", "factor": "repeat", "verdict": "diverged",
         "max_abs_output_diff": 0.0, "first_divergence": first},
        {**common, "name": "ckpt_vs_savedmodel_batch_8", "factor": "export", "verdict": "diverged",
         "max_abs_output_diff": 0.0, "first_divergence": first,
         "noise_removed": {"experiment": "ckpt_vs_savedmodel_batch_8_noise_removed",
                           "how": "op determinism on both sides"}},
        {**common, "name": "ckpt_vs_savedmodel_batch_8_noise_removed", "factor": "export", "verdict": "identical",
         "max_abs_output_diff": 0.0, "first_divergence": None, "noise_removed_of": "ckpt_vs_savedmodel_batch_8"},
    ]
    answers = build_answers(experiments, {"atol": 1e-6, "rtol": 1e-5})
    assert answers["factors"] == ["repeat"]
    repeat_why, export_why = answers["why"][0], answers["why"][1]
    assert repeat_why.startswith("Run-to-run nondeterminism: gpu, batch 8 vs gpu, batch 8 changes no output, "
                                 "only intermediate tensors; it starts at `stem/Conv2D`"), repeat_why
    assert export_why == ("Checkpoint vs SavedModel export: bit-identical with the noise removed (op determinism on "
                          "both sides); the default runs differ only inside (no output moved), which is the "
                          "run-to-run noise, not this factor (see Run-to-run nondeterminism).")
    assert answers["noise"]["reason"] == "the same side run twice (in two fresh processes) changed intermediate " \
        "tensors, no output"
    assert "up to 0;" not in " ".join(answers["why"]) and "up to 0," not in " ".join(answers["why"])


def test_a_changed_class_gets_no_tolerance_offer_but_a_count():
    answers = build_answers([{
        "name": "batch_1_vs_8", "factor": "batch", "verdict": "diverged", "max_abs_output_diff": 1.0,
        "first_divergence": None, "a": {"describe": "batch 1"}, "b": {"describe": "batch 8"}, "latency_ms": None,
        "cost_pct": None, "remedy": None, "skipped": None, "settings": None, "rewrite_count": 0,
        "discrete_changes": {"num_detections": {"changed": 2, "dtype": "int32"}},
    }], {"atol": 1e-6, "rtol": 1e-5})
    assert "Or accept it" not in answers["prevent"][0]
    assert "A tolerance is no remedy here: discrete outputs changed (`num_detections` (int32): 2 values changed)" \
        in answers["prevent"][0]


def test_discrete_changes_counts_changed_values_of_integer_outputs_only():
    from tracer.diagnosis.outcomes import discrete_changes
    report = {"outputs": {
        "detection_classes": {"a_tensor": "classes:0", "identical": False, "mismatch_count": 3},
        "scores": {"a_tensor": "scores:0", "identical": False, "mismatch_count": 40},
        "num_detections": {"a_tensor": "count:0", "identical": True, "mismatch_count": 0},
    }, "nodes": {"classes": {"tensor": "classes:0", "dtype": "int32"}, "scores": {"tensor": "scores:0", "dtype": "float32"},
                 "count": {"tensor": "count:0", "dtype": "int32"}}}
    assert discrete_changes(report) == {"detection_classes": {"changed": 3, "dtype": "int32"}}


@pytest.mark.slow
def test_the_verified_recipe_applies_every_measured_remedy_together_and_costs_it(full):
    """Issue 14: one more pair with every remedy on both sides, shown to make the checkpoint and
    its SavedModel bit-identical, with the combined latency cost measured in the same run."""
    doc, out, _ = full
    recipe = _by_name(doc)["recipe"]
    assert recipe["factor"] == "recipe" and recipe["verdict"] == "identical"
    assert "one fixed batch shape (batch 4 on both sides)" in recipe["applied"]
    assert recipe["settings"]["a"]["batch"] == recipe["settings"]["b"]["batch"] == 4
    assert recipe["settings"]["a"]["onednn"] == recipe["settings"]["b"]["onednn"] == "off"
    assert recipe["settings"]["a"]["export"] != recipe["settings"]["b"]["export"]  # checkpoint vs SavedModel
    assert isinstance(recipe["combined_cost_pct"], float) and recipe["reference_latency_ms"]["median"] > 0
    last = doc["answers"]["prevent"][-1]
    assert last.startswith("Verified recipe (measured): ") and ": bit-identical." in last
    timing = recipe["combined_timing"]  # the recipe against the plain base side, timed interleaved, by the rule
    assert recipe["combined_cost_pct"] == timing["cost_pct"] and timing["runs"] >= 20
    assert f"Against the plain base side at the same batch size, the combination {timing['words']}" in last
    assert "Verified recipe (measured)" in (out / "report.md").read_text(encoding="utf-8")


def test_the_recipe_takes_each_remedy_from_side_b_and_one_fixed_shape():
    from tracer.diagnosis.recipe import plan_recipe
    ctx = _context()
    planned = plan_experiments(ctx)
    diverged = {"onednn", "batch_1_vs_8", "repeat_fresh_process"}
    results = [{"name": p.name, "factor": p.factor, "verdict": "diverged" if p.name in diverged else "identical"}
               for p in planned]
    recipe = plan_recipe(planned, results, ctx)
    a, b = recipe.planned.a.side, recipe.planned.b.side
    assert a.batch_size == b.batch_size == 8
    assert a.knobs.onednn == b.knobs.onednn == planned[[p.name for p in planned].index("onednn")].b.side.knobs.onednn
    assert a.knobs.determinism and b.knobs.determinism  # run-to-run nondeterminism: op determinism
    assert str(a.artifact.path) == "model/ckpt" and str(b.artifact.path) == "model/sm"
    assert recipe.reference.side.batch_size == 8 and not recipe.reference.side.knobs.determinism
    assert plan_recipe(planned, [dict(r, verdict="identical") for r in results], ctx) is None


def test_the_recipe_names_only_the_settings_it_applies():
    """The mixed-precision pair's B is described "no mixed precision, oneDNN on" (both its sides run
    oneDNN): the recipe once listed that whole description, claiming "oneDNN on" it never set."""
    from tracer.diagnosis.recipe import plan_recipe
    ctx = _context()
    planned = plan_experiments(ctx)
    diverged = {"mixed_precision", "remapping"}
    results = [{"name": p.name, "factor": p.factor, "verdict": "diverged" if p.name in diverged else "identical"}
               for p in planned]
    recipe = plan_recipe(planned, results, ctx)
    assert recipe.applied == ("Grappler remapping off",  # in the order the experiments are planned
                              "Grappler auto_mixed_precision_onednn_bfloat16 at its default (not on)")
    side = recipe.planned.a.side
    assert side.knobs.onednn == ctx.base.knobs.onednn and dict(side.knobs.grappler) == {"remapping": "off"}


@pytest.mark.slow
def test_a_noisy_model_is_measured_net_of_its_noise_and_its_export_not_blamed(dropout_models, tmp_path):
    """An exported TF1 graph that kept its unseeded dropout: each run draws a new mask. The base
    side is seen to be noisy, each factor's pair is tried with op determinism on both sides, which
    TensorFlow refuses for an unseeded random op, so the refusal is the recorded reason; the
    faithful export is not blamed (same graph, same kernels), and the noise is a cause of its own."""
    out = tmp_path / "out"
    proc = run_cli("diagnose", str(dropout_models / "ckpt"), "--savedmodel", str(dropout_models / "savedmodel"),
                   "--batch-sizes", "4", "--only", "repeat,export", "--out", str(out),
                   env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 1, proc.stderr
    doc = json.loads((out / "diagnosis.json").read_text())
    exps = _by_name(doc)
    noise = doc["noise"]
    repeats = [exps["repeat_same_process"], exps["repeat_fresh_process"]]
    assert all(r["verdict"] == "diverged" for r in repeats)
    assert noise["measured_by"] == ["repeat_same_process", "repeat_fresh_process"]
    assert noise["max_abs"] == max(r["max_abs_output_diff"] for r in repeats) > 0.1
    assert noise["random_ops"] == ["dropout/random_uniform/RandomUniform"]
    assert noise["gpu_without_determinism"] is False and noise["twins"] == []
    refused = noise["refused"]["ckpt_vs_savedmodel_batch_4"]
    assert "random ops must have a seed specified" in refused and "dropout/random_uniform/RandomUniform" in refused
    export = exps["ckpt_vs_savedmodel_batch_4"]
    assert export["verdict"] == "diverged" and export["rewrite_count"] == 0 and export["executed_ops_differ"] == []
    assert export["noise_removed"] == {"experiment": None, "refused": refused}
    why = doc["answers"]["why"]
    export_why = next(w for w in why if w.startswith(FACTOR_TITLES["export"]))
    assert "this is run-to-run nondeterminism, not the export" in export_why
    assert f"one side alone differs by up to {noise['max_abs']:.3g}" in export_why
    assert "the noise could not be removed" in export_why
    assert "Cause: export-time rewrites" not in " ".join(why)
    noise_why = next(w for w in why if w.startswith("Random ops: "))  # the noise, a cause with its own size
    assert "`dropout/random_uniform/RandomUniform`" in noise_why and "It could not be removed for" in noise_why
    assert not [c for c in doc["answers"]["cost"] if c.startswith(FACTOR_TITLES["export"])]  # not blamed: no cost
    recipe = exps["recipe"]
    assert "op determinism on" not in recipe["applied"] and "repeat_fresh_process" in recipe["not_removable"]


def test_progress_counts_each_stage_to_the_total_it_announced() -> None:
    """Issue 27: the counter ran [1], [2/10] ... [11/14] as the plan grew; each stage now counts on
    its own, and a capture found while another stage runs is said under its own stage."""
    import io

    from rich.console import Console

    from tracer.diagnosis.run import _Progress

    out = io.StringIO()
    progress = _Progress(Console(file=out, width=200))
    progress.begin("base side", 1)
    progress.step("capturing m/")
    progress.begin("experiments", 2)
    progress.step("Batch size: cpu, batch 1 vs cpu, batch 8: diverged")
    progress.step("capturing cpu, batch 8 [determinism]", stage="captures with the noise removed")
    progress.step("oneDNN: on vs off: identical")
    lines = [line.rsplit("  (", 1)[0] for line in out.getvalue().splitlines()]
    assert lines == ["[base side] capturing m/", "[experiments 1/2] Batch size: cpu, batch 1 vs cpu, batch 8: diverged",
                     "[captures with the noise removed 1] capturing cpu, batch 8 [determinism]",
                     "[experiments 2/2] oneDNN: on vs off: identical"]


@pytest.mark.parametrize(("knobs", "environment", "autotune", "tf32"), [
    ({}, {"tf_env": {}, "tf32_enabled": True}, "on", "on"),  # TensorFlow's defaults, as the GPU capture ran them
    ({}, {"tf_env": {"TF_CUDNN_USE_AUTOTUNE": "0"}, "tf32_enabled": False}, "off", "off"),  # the user's environment
    ({}, {"tf_env": {"TF_CUDNN_USE_AUTOTUNE": "false"}}, "off", "default"),  # a CPU capture: TF32 not recorded
    ({"autotune": "on", "tf32": "off"}, {"tf_env": {"TF_CUDNN_USE_AUTOTUNE": "0"}, "tf32_enabled": False}, "on", "off"),
])
def test_a_sides_autotune_and_tf32_settings_are_read_as_it_ran(knobs, environment, autotune, tf32):
    """The answers compare settings across experiments ("measured with this setting on both
    sides"): a side left at the default and a side that set the same value must read alike, so
    the variable's 0/1 reads as off/on, and TF32 at its default reads as the fingerprint says."""
    from tracer.diagnosis.outcomes import side_settings

    cap = Capture(Path("cap"), {"spec": {"knobs": knobs, "device": "gpu"}, "environment": environment,
                                "batch_size": 1, "artifact": {"kind": "checkpoint"}}, {})
    settings = side_settings(cap)
    assert (settings["autotune"], settings["tf32"]) == (autotune, tf32)


def test_an_answer_resting_on_the_noise_free_twin_takes_the_twins_training_graph():
    """The H200, 2026-12-04: `diagnose a1/ckpt` (a TF1 training checkpoint, its batch norm in training
    mode). Batch 1 vs 8 started at a nondeterministic conv in the default runs and at the batch norm
    with the noise removed, where the twin found the training graph; the answer, built on the twin's
    figures, still said "Cause: shape-dependent kernel choice"."""
    training = ("both sides' graphs are training graphs: their batch norms (`bn1/FusedBatchNormV3`) run with "
                "is_training=True and normalise with each run's batch statistics")
    common = {"a": {"describe": "gpu, batch 1"}, "b": {"describe": "gpu, batch 8"}, "latency_ms": None,
              "cost_pct": None, "remedy": None, "skipped": None, "settings": None, "rewrite_count": 0,
              "discrete_changes": {}, "factor": "batch"}
    experiments = [
        {**common, "name": "batch_1_vs_8", "verdict": "diverged", "max_abs_output_diff": 0.000515,
         "first_divergence": {"node": "conv1/Conv2D", "op": "Conv2D", "isolation": "nondeterministic"},
         "noise_removed": {"experiment": "batch_1_vs_8_noise_removed", "how": "op determinism on both sides"}},
        {**common, "name": "batch_1_vs_8_noise_removed", "verdict": "diverged", "max_abs_output_diff": 0.000515,
         "first_divergence": {"node": "bn1/FusedBatchNormV3", "op": "FusedBatchNormV3", "isolation": "own_error"},
         "attribution": "training_graph", "training_graph": training, "state_ops": ["bn1/FusedBatchNormV3"],
         "noise_removed_of": "batch_1_vs_8"},
    ]
    answers = build_answers(experiments, {"atol": 1e-6, "rtol": 1e-5})
    why = next(w for w in answers["why"] if w.startswith(FACTOR_TITLES["batch"]))
    assert why.startswith("Batch size: gpu, batch 1 vs gpu, batch 8 changes the outputs by up to 0.000515; it starts "
                          "at `bn1/FusedBatchNormV3` (FusedBatchNormV3). Cause: a training graph"), why
    assert "shape-dependent kernel choice" not in " ".join(answers["why"])
    assert answers["prevent"][0].startswith("Batch size: compare the inference graph"), answers["prevent"]


CLASSIFIER = """
import sys
import numpy as np
import tensorflow as tf
tf1 = tf.compat.v1
tf1.disable_eager_execution()
with tf.Graph().as_default():  # what an Estimator's export wrote: tf.Example strings in, class names out
    serialized = tf1.placeholder(tf.string, [None], name="input_example_tensor")
    features = tf1.io.parse_example(serialized, {"x": tf1.io.FixedLenFeature([4], tf.float32)})
    w = tf1.get_variable("dense/kernel", [4, 3], initializer=tf1.random_normal_initializer(seed=1))
    b = tf1.get_variable("dense/bias", [3], initializer=tf1.zeros_initializer())
    probs = tf.nn.softmax(tf.nn.bias_add(tf.matmul(features["x"], w), b), name="probabilities")
    classes = tf.tile(tf.constant([["0", "1", "2"]]), [tf.shape(probs)[0], 1])
    with tf1.Session() as session:
        session.run(tf1.global_variables_initializer())
        builder = tf1.saved_model.Builder(sys.argv[1])
        builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
            "serving_default": tf1.saved_model.classification_signature_def(serialized, classes, probs)})
        builder.save()
examples = [tf.train.Example(features=tf.train.Features(feature={"x": tf.train.Feature(
    float_list=tf.train.FloatList(value=list(np.random.RandomState(i).randn(4))))})).SerializeToString()
    for i in range(16)]
np.save(sys.argv[2], np.array(examples, dtype=bytes))
"""


@pytest.mark.slow
def test_a_classify_signature_of_strings_is_diagnosed(tmp_path: Path) -> None:
    """An Estimator-style export: serialized tf.Example in, class names (strings) out. The repeat's
    replays saved the string output as a pickle, and loading it ended diagnose with an internal
    error; the class names, counted by the batch's shape, made the batch experiment's largest
    output difference "an unmeasurable amount" though its scores were measured."""
    from conftest import build_model  # noqa: PLC0415

    model, examples, out = tmp_path / "classifier", tmp_path / "examples.npy", tmp_path / "d"
    build_model(CLASSIFIER, model, examples)
    proc = run_cli("diagnose", str(model), "--inputs", str(examples), "--only", "repeat,batch", "--out", str(out),
                   env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert proc.returncode == 0, proc.stderr
    exps = _by_name(json.loads((out / "diagnosis.json").read_text()))
    assert exps["repeat_same_process"]["verdict"] == "identical"
    assert exps["repeat_same_process"]["outputs"] == {"classes": 0.0, "scores": 0.0}
    batch = exps["batch_1_vs_8"]
    assert batch["outputs"]["classes"] is None and batch["outputs"]["scores"] is not None
    assert batch["max_abs_output_diff"] == batch["outputs"]["scores"]
    assert "not compared: classes (computed from a shape, not from values (e.g. a batch index): depends on the " \
           "batch size)" in batch["notes"]
    assert "unmeasurable" not in proc.stdout
