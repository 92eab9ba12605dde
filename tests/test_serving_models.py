"""TF Serving's own test SavedModels (tests/real_models, its README), compared as a user types it.

Written by old TensorFlow releases, for a server, not for tftrace: another model's weights
(half_plus_three), a model directory with two versions, a TF2 export whose signature has no batch
axis, and a TF1 Saver export without any signature in the old checkpoint format (V1: one
``export`` file, no ``.index``)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, run_cli

pytestmark = pytest.mark.slow

MODELS = REPO / "tests" / "real_models"
ENV = {"TF_ENABLE_ONEDNN_OPTS": "0"}


def _compare(tmp_path: Path, *args: str) -> tuple[int, dict]:
    proc = run_cli("compare", *args, "--onednn", "off", "--out", str(tmp_path / "r"), env=ENV)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads((tmp_path / "r" / "report.json").read_text())


def test_half_plus_three_against_half_plus_two_is_one_weight(tmp_path: Path) -> None:
    """y = 0.5·x + 3 against 0.5·x + 2: the first divergence is the bias variable itself, a weight
    that differs (not a kernel), by exactly the 1 it was set to; the graphs differ only in where `y`
    is named."""
    code, report = _compare(tmp_path, str(MODELS / "saved_model_half_plus_two_cpu"),
                            str(MODELS / "saved_model_half_plus_three"))
    first = report["first_divergence"]
    assert code == 1 and report["verdict"] == "diverged"
    assert (first["node"], first["op"], first["isolation"]["verdict"], first["rewrite"]) == \
        ("b", "VariableV2", "weights_differ", "const_changed")
    changed = next(r for r in report["rewrites"] if r["kind"] == "const_changed")
    assert changed["a_nodes"] == ["b", "b/read"] and changed["detail"]["values"] == {"a": 2.0, "b": 3.0}
    assert sorted(r["kind"] for r in report["rewrites"]) == ["const_changed", "node_removed", "op_changed"]
    assert report["answers"]["causes"] == ["weights"]
    assert abs(report["outputs"]["y"]["max_abs"] - 1.0) < 1e-6


def test_a_model_directory_with_two_versions_is_read_at_its_latest(tmp_path: Path) -> None:
    """As TF Serving serves it: of 00000123 and 00000124, the later one."""
    code, report = _compare(tmp_path, str(MODELS / "saved_model_half_plus_two_2_versions"),
                            str(MODELS / "saved_model_half_plus_two_cpu"))
    assert code == 0 and report["verdict"] == "identical"
    assert report["sides"]["a"]["artifact"]["location"] == str(MODELS / "saved_model_half_plus_two_2_versions" / "00000124")
    assert report["sides"]["a"]["artifact"]["tf_version_written"] == "1.1.0-rc2"


def test_a_tf2_export_without_a_batch_axis_runs_one_example_a_run(tmp_path: Path) -> None:
    model = str(MODELS / "saved_model_half_plus_two_tf2_cpu")
    code, report = _compare(tmp_path, model, model)
    assert code == 0 and report["verdict"] == "identical"
    assert report["sides"]["a"]["label"] == "cpu, one example per run (the signature has no batch axis), onednn=off"


def test_a_v1_saver_export_without_signature_is_compared_by_the_tensors_named(tmp_path: Path) -> None:
    """TF Serving's "bad" model: exported with a Saver and no signature, in the V1 checkpoint format.
    Unnamed, it is refused naming what would do; named, it is the same computation as half_plus_two."""
    bad, good = str(MODELS / "bad_half_plus_two" / "00000123"), str(MODELS / "saved_model_half_plus_two_cpu")
    proc = run_cli("compare", bad, good, "--out", str(tmp_path / "refused"), env=ENV)
    assert proc.returncode == 2 and not (tmp_path / "refused").exists()
    assert "has no signature, and the signature 'serving_default'" in proc.stderr
    assert "Name this side's tensors with --outputs/--input-names" in proc.stderr
    np.savez(tmp_path / "x.npz", x=np.array([[1.0], [2.0], [5.0]], np.float32))
    code, report = _compare(tmp_path, bad, good, "--a-outputs", "Add", "--a-input-names", "Placeholder",
                            "--inputs", str(tmp_path / "x.npz"), "--map", "Add=y")
    assert code == 0 and report["verdict"] == "identical"
    assert report["sides"]["a"]["artifact"]["kind"] == "checkpoint"
