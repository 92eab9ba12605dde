"""A rewrite applied when the graph runs is named as such, not as nondeterminism.

The artifacts are the tf_slim net's training checkpoint and its frozen, renamed export
(``slim_models``, made as TF1 users made them). Freezing is exact in the graph, yet at run time
Grappler's remapper splits an inference batch norm whose parameters are constants into Mul + Add,
while the checkpoint's batch norm reads variables and runs as one oneDNN kernel. Replayed alone on
identical inputs, both sides agree: the difference is the rewrite's, and tftrace once called it
"changes from run to run". oneDNN is set explicitly (its default depends on the CPU).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow

ORIGIN = "net/conv1/BatchNorm/FusedBatchNormV3"


def _compare(slim_models: Path, out: Path, *args: str) -> tuple[int, dict[str, Any], str]:
    proc = run_cli("compare", str(slim_models / "ckpt"), str(slim_models / "renamed"), "--onednn", "on",
                   "--out", str(out), *args)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads((out / "report.json").read_text(encoding="utf-8")), proc.stdout


def test_a_batch_norm_split_at_run_time_in_the_frozen_export_is_a_run_time_rewrite(slim_models: Path,
                                                                                    tmp_path: Path) -> None:
    code, report, stdout = _compare(slim_models, tmp_path / "r")
    if report["verdict"] == "identical":
        pytest.skip("on this CPU the oneDNN batch norm and Mul + Add agree bit for bit: nothing to attribute")
    first = report["first_divergence"]
    assert (first["node"], first["b_node"]) == (ORIGIN, "exported/" + ORIGIN)
    iso = first["isolation"]
    assert iso["verdict"] == "run_time_rewrite", iso
    assert iso["executed"] == {"a": ["_MklNativeFusedBatchNormV3"], "b": ["Add", "Mul"]}
    assert iso["max_abs"] == 0.0 and iso["noise_max_abs"] == first["max_abs"]  # B's replay is A's, not B's capture
    causes = report["answers"]["causes"]
    assert causes[0] == "grappler" and "nondeterminism" not in causes and "export" not in causes
    why = report["answers"]["why"][0]
    assert "ran as _MklNativeFusedBatchNormV3 on side A and as Add + Mul on side B" in why
    assert "Freezing turned variables into constants" in why
    flat = " ".join(stdout.split())
    assert "rewritten at run time" in flat and "changes from run to run" not in flat
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert "Rewritten at run time: the two runs executed it as different kernels" in md
    html = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "which the two runs executed as different kernels (a rewrite at run time)" in html
    assert code == 0  # the plain outputs agree within tolerance


def test_with_the_remapper_off_on_both_sides_the_checkpoint_and_frozen_export_are_identical(
        slim_models: Path, tmp_path: Path) -> None:
    code, report, stdout = _compare(slim_models, tmp_path / "r", "--grappler", "remapping=off")
    assert (code, report["verdict"]) == (0, "identical")
    assert stdout.startswith("IDENTICAL")
