"""A capture child started ahead of its job (:class:`tracer.captures.launcher.PreparedChild`).

``compare`` starts side B's child once side A's is up, so B imports TensorFlow and loads its
model while A is captured (B's examples are A's, known only when A is done). What B records
must be what a child started for the job records; an error met while loading ahead reaches the
user as from any capture; a child whose job never comes is stopped.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli
from tracer.artifacts.loader import ArtifactRef
from tracer.captures import Capture
from tracer.captures.launcher import PreparedChild, capture
from tracer.errors import TftraceError
from tracer.runspec import InputSpec, Knobs, Side


def _running(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_child_whose_job_never_comes_is_stopped(tmp_path: Path) -> None:
    child = PreparedChild(Side(ArtifactRef(str(tmp_path / "nothing"))), prepare=True)
    pid = child.proc.pid
    assert _running(pid)
    child.cancel()
    deadline = time.monotonic() + 10
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid) and child.proc.returncode is not None


@pytest.mark.slow
def test_an_error_met_while_loading_ahead_is_the_captures_error(tmp_path: Path) -> None:
    side = Side(ArtifactRef(str(tmp_path / "no_such_model")))
    child = PreparedChild(side, prepare=True)
    with pytest.raises(TftraceError) as ahead:
        capture(side, tmp_path / "out", prepared=child)
    with pytest.raises(TftraceError) as plain:
        capture(side, tmp_path / "out2")
    assert ahead.value.problem == plain.value.problem and "no_such_model" in ahead.value.problem
    assert not (tmp_path / "out" / "manifest.json").exists()


@pytest.mark.slow
def test_a_side_loaded_ahead_records_what_a_side_loaded_for_its_job_records(tmp_path: Path,
                                                                            models: dict[str, Path]) -> None:
    """The detector's SavedModel loaded ahead, then given its examples, against the same side
    captured by a child started for the job: the same tensors, bit for bit, the same observer
    effect; the manifest says it was loaded ahead. A side the job changes (another knob) is
    loaded again, for the job's side."""
    np.save(tmp_path / "x.npy", np.random.RandomState(3).normal(size=(4, 64, 64, 3)).astype(np.float32))
    inputs = InputSpec(inputs_file=str(tmp_path / "x.npy"))
    side = Side(ArtifactRef(str(models["detector"])), knobs=Knobs(onednn="off"))
    ahead = capture(side.with_(inputs=inputs), tmp_path / "ahead", prepared=PreparedChild(side, prepare=True))
    alone = capture(side.with_(inputs=inputs), tmp_path / "alone")
    assert ahead.manifest["timings"]["loaded_ahead"] is True and "loaded_ahead" not in alone.manifest["timings"]
    assert ahead.manifest["timings"]["load_s"] > 0
    assert set(ahead.manifest["tensors"]) == set(alone.manifest["tensors"]) and len(ahead.manifest["tensors"]) > 50
    for name in ahead.manifest["tensors"]:
        assert np.array_equal(np.asarray(ahead.tensor(name)), np.asarray(alone.tensor(name)), equal_nan=True), name
    for key in ("executed_ops", "only_in_plain", "only_in_instrumented", "outputs_identical"):
        assert ahead.manifest["observer_effect"][key] == alone.manifest["observer_effect"][key], key
    assert ahead.manifest["spec"] == alone.manifest["spec"]
    other = side.with_(knobs=Knobs(onednn="off", threads=(1, 1)))
    changed = capture(other.with_(inputs=inputs), tmp_path / "changed", prepared=PreparedChild(side, prepare=True))
    assert "loaded_ahead" not in changed.manifest["timings"]
    assert changed.manifest["spec"]["knobs"]["threads"] == [1, 1]


@pytest.mark.slow
def test_compare_of_two_artifacts_loads_b_while_a_is_captured(tmp_path: Path, models: dict[str, Path]) -> None:
    out = tmp_path / "report"
    proc = run_cli("compare", str(models["detector_ckpt"]), str(models["detector"]), "--out", str(out),
                   "--examples", "2", "--isolate", "0", "--keep-captures", "--onednn", "off")
    assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = Capture.open(out / "captures" / "a"), Capture.open(out / "captures" / "b")
    assert b.manifest["timings"]["loaded_ahead"] is True and "loaded_ahead" not in a.manifest["timings"]
    for key, tensor in a.manifest["graph"]["inputs"].items():  # B ran on A's very examples
        assert np.array_equal(np.asarray(a.tensor(tensor)), np.asarray(b.tensor(b.manifest["graph"]["inputs"][key])))
    assert json.loads((out / "report.json").read_text())["verdict"] == "identical"
