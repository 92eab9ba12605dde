"""Keras 2 recurrent models saved as TF2 SavedModels (tests/fixtures/keras2_rnn.py), the way TF 2.x
users saved a text classifier with ``model.save(path)``.

Keras 2's LSTM and GRU keep a cuDNN path in the SavedModel's function library beside the generic
one, whichever device saved the model: ``CudnnRNN`` (``CudnnRNNV3`` from 2.21) and its gradient, in functions nothing calls
at load. The registry calls those ops stateful (their dropout's random state), and tftrace refused
every such model as unsafe: "loading this TF2 SavedModel runs its resource initialisers and restore
functions, which would execute ops with effects outside the computation: '(no caller)/..."
(``tracer.artifacts.safety.STATEFUL_ALLOWED`` now allows them, with that reason).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import REPO, run_cli
from test_other_tf import OTHER, needs_other


def _build(python: str, out: Path) -> Path:
    subprocess.run([python, str(REPO / "tests" / "fixtures" / "keras2_rnn.py"), str(out)], cwd=REPO, check=True,
                   capture_output=True, timeout=600,
                   env={**os.environ, "CUDA_VISIBLE_DEVICES": "-1", "TF_ENABLE_ONEDNN_OPTS": "0"})
    return out


def _compare_batch_1_vs_8(built: Path, out: Path) -> dict:
    model = str(built / "savedmodel")
    assert (built / "savedmodel" / "saved_model.pb").read_bytes().count(b"CudnnRNN") > 0  # the case itself (V3 from 2.21, V1 from 2.12)
    proc = run_cli("compare", model, model, "--inputs", str(built / "tokens.npz"), "--a-batch-size", "1",
                   "--b-batch-size", "8", "--onednn", "off", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    return json.loads((out / "report.json").read_text())


def _assert_the_recurrent_loop_or_nothing(report: dict) -> None:
    """Batch 1 against 8: where anything differs, it starts in the recurrent layers' while loops
    (their GEMMs at another row count), and the batch is named; nothing beyond tolerance."""
    assert report["verdict"] in ("identical", "within_tolerance"), report["verdict"]
    if report["verdict"] == "identical":
        return
    first = report["first_divergence"]["node"]
    assert first.startswith(("StatefulPartitionedCall/model/lstm/", "StatefulPartitionedCall/model/gru/")), first
    assert report["answers"]["causes"] == ["batch"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build(sys.executable, tmp_path_factory.mktemp("keras2_rnn"))


@pytest.mark.slow
def test_a_keras2_lstm_saved_by_this_tensorflow_is_compared_not_refused(built: Path, tmp_path: Path) -> None:
    report = _compare_batch_1_vs_8(built, tmp_path / "r")
    _assert_the_recurrent_loop_or_nothing(report)


@pytest.mark.slow
def test_the_cudnn_alternatives_keras_saved_are_found(built: Path) -> None:
    """Keras 2 saves each LSTM and GRU trace with a generic and a cuDNN implementation under one
    ``api_implements`` name; on a GPU, TensorFlow swaps in the cuDNN one at run time, which the
    inlined signature cannot (a GPU capture says so: test_gpu_users.py)."""
    from tracer.artifacts.loader import ArtifactRef  # noqa: PLC0415
    from tracer.captures.runtime import load_checked  # noqa: PLC0415 - imports TensorFlow
    from tracer.runspec import Side  # noqa: PLC0415

    found = load_checked(Side(ArtifactRef(str(built / "savedmodel")))).gpu_alternatives
    assert found and {name.split("_")[0] for name in found} == {"lstm", "gru"}


def test_the_gpu_alternatives_note_names_the_layer_kinds() -> None:
    from tracer.artifacts.tf2_inline import gpu_alternatives, gpu_alternatives_note  # noqa: PLC0415

    def function(**attrs: bytes) -> SimpleNamespace:
        return SimpleNamespace(attr={k: SimpleNamespace(s=v) for k, v in attrs.items()})

    library = SimpleNamespace(function=[
        function(api_implements=b"lstm_1f", api_preferred_device=b"GPU"),
        function(api_implements=b"lstm_1f", api_preferred_device=b"CPU"),
        function(api_implements=b"gru_2e", api_preferred_device=b"GPU"),
        function(api_implements=b"gru_3d"),  # no device preferred: nothing to swap
        function(),
    ])
    assert gpu_alternatives(library) == ["gru_2e", "lstm_1f"]
    assert gpu_alternatives_note(["gru_2e", "lstm_1f"]).startswith(
        "the model holds GPU implementations (`gru`, `lstm`, 2 api_implements names: Keras 2's cuDNN path of an "
        "LSTM or GRU), which TensorFlow swaps in at run time where the call runs on a GPU; tftrace runs the "
        "signature inlined, with no call left to swap, so these layers ran their generic implementation here")


@pytest.mark.slow
@needs_other
def test_a_keras2_lstm_saved_by_tensorflow_2_12_is_compared_not_refused(tmp_path: Path) -> None:
    report = _compare_batch_1_vs_8(_build(str(OTHER), tmp_path / "made"), tmp_path / "r")
    _assert_the_recurrent_loop_or_nothing(report)


def test_the_refusal_says_which_functions_nothing_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ops found only in functions nothing calls are not run by the load as tftrace reads it: the
    refusal does not say they would be, and says why they count."""
    from tracer.artifacts import loader  # noqa: PLC0415
    from tracer.errors import TftraceError  # noqa: PLC0415

    meta = SimpleNamespace(asset_file_def=[])
    uncalled = ("(no caller)/stray/write", "WriteFile", "writes a file")
    called = ("_initialize/__inference_init_7/write", "WriteFile", "writes a file")
    for found, would_run in (([uncalled], False), ([called, uncalled], True), ([called], True)):
        monkeypatch.setattr(loader, "unsafe_at_load_v2", lambda _meta, found=found: found)
        with pytest.raises(TftraceError) as refused:
            loader._refuse_unsafe_at_load("m", meta)
        message = str(refused.value)
        assert message.startswith("refusing to load m: loading this TF2 SavedModel runs its resource initialisers "
                                  "and restore functions")
        assert ("which would execute ops with effects outside the computation" in message) is would_run
        checks_uncalled = ("and tftrace checks the functions nothing calls too ('(no caller)/...'), as it cannot rule "
                           "out that they run")
        assert (checks_uncalled in message) is (uncalled in found)
        assert all(f"'{name}' ({op}: {why})" in message for name, op, why in found)


def test_the_answers_say_a_gpu_side_ran_the_generic_implementation() -> None:
    """Whatever the verdict, a GPU side of such a model did not compute what TensorFlow Serving
    computes there for those layers; a CPU side of it did (the generic one is the CPU's)."""
    from tracer.causes import explain_comparison  # noqa: PLC0415

    names = ["gru_2e", "lstm_1f"]
    sides = {"a": {"device": "cpu", "batch_size": 1, "artifact": {"gpu_alternatives": names}},
             "b": {"device": "gpu:0", "batch_size": 1, "artifact": {"gpu_alternatives": names}}}
    said = ("Side B ran on a GPU, and the model holds GPU implementations (`gru`, `lstm`, 2 api_implements names: "
            "Keras 2's cuDNN path of an LSTM or GRU), which TensorFlow swaps in at run time where the call runs on a "
            "GPU; tftrace runs the signature inlined, with no call left to swap, so these layers ran their generic "
            "implementation here, not the cuDNN one that TensorFlow Serving runs on a GPU.")
    identical = explain_comparison({"verdict": "identical", "sides": sides})
    assert identical["why"][-1] == said and not any(line.startswith("Side A") for line in identical["why"])
    noise_only = explain_comparison({"verdict": "within_tolerance", "verdict_ops": "within_noise",
                                     "verdict_outputs": "identical", "sides": sides, "origins": [], "nodes": {},
                                     "outputs": {}})
    assert noise_only["why"][-1] == said and noise_only["causes"] == []
    both_gpu = {key: {**side, "device": "gpu"} for key, side in sides.items()}  # nothing set apart explains it
    origin = {"node": "probs/MatMul", "op": "MatMul"}
    unexplained = explain_comparison({"verdict": "diverged", "sides": both_gpu, "origins": [origin], "nodes": {},
                                      "outputs": {}})
    assert unexplained["why"][0].startswith("No setting, batch size, graph rewrite or environment difference")
    assert [line[:9] for line in unexplained["why"][1:]] == ["Side A ra", "Side B ra"]
    on_cpu = {key: {**side, "device": "cpu"} for key, side in sides.items()}
    assert not any("GPU implementations" in line for line in explain_comparison({"verdict": "identical",
                                                                                 "sides": on_cpu})["why"])
