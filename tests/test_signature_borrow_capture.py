"""A side without a signature borrows it from a capture directory given as the other side: the
capture's recorded signature and op graph lend it (read by the capture runtime from the manifest;
the artifact loader never opens captures). Artifacts as in test_signature_borrow (``slim_models``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow


def test_a_checkpoint_borrows_the_signature_a_capture_recorded(slim_models: Path, tmp_path: Path) -> None:
    ckpt, sm, cap = slim_models / "ckpt", slim_models / "savedmodel", tmp_path / "sm_capture"
    proc = run_cli("capture", str(sm), "--out", str(cap), "--examples", "4")
    assert proc.returncode == 0, proc.stderr
    proc = run_cli("compare", str(ckpt), str(cap), "--out", str(tmp_path / "r"), "--examples", "4", "--isolate", "0")
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r" / "report.json").read_text(encoding="utf-8"))
    assert report["verdict"] == "identical"
    assert report["sides"]["a"]["signature"] == {"key": "serving_default", "from_user": False, "borrowed_from": str(cap)}
    assert list(report["outputs"]) == ["scores"] and report["outputs"]["scores"]["identical"] is True
    assert f"borrowed from {cap}" in " ".join(proc.stdout.split())
