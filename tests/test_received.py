"""Received capture and report directories that lie (issue 24): digests, bombs, wide strings, links.

A capture or report directory may come from anyone (a CI artifact, an issue attachment). What its
manifest claims decides nothing until the bytes bear it out, decoding it is bounded by
``--max-memory`` before anything is inflated, and it is walked without following links. Each
attack is made the way the red team made it, from a real capture written by
:class:`CaptureWriter` (``test_fuzz.synthetic``), and each has its negative control: the same
directory, untouched, still compares.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_user_error
from test_fuzz import X, cli, synthetic


def _manifest(cap: Path) -> dict:
    return json.loads((cap / "manifest.json").read_text())


def _write_manifest(cap: Path, manifest: dict) -> None:
    (cap / "manifest.json").write_text(json.dumps(manifest))


@pytest.fixture()
def received(tmp_path: Path) -> dict[str, Path]:
    """Capture A made here and B, a copy of it as received from elsewhere."""
    a = synthetic(tmp_path / "a", 2.0, "/nonexistent/model_a")
    b = tmp_path / "received"
    shutil.copytree(a, b)
    return {"a": a, "b": b, "root": tmp_path}


def test_a_values_digest_is_checked_against_the_stored_bytes(received: dict[str, Path]) -> None:
    """B's mul:0 is given x:0's chunk file but keeps mul:0's values_digest: equal recorded digests
    made the pair "bitwise identical" without a read (IDENTICAL, exit 0, for values 2x apart)."""
    b = received["b"]
    manifest = _manifest(b)
    mul, x = manifest["tensors"]["mul:0"], manifest["tensors"]["x:0"]
    assert mul["values_digest"].startswith("xxh3-128:") and mul["values_digest"] != x["values_digest"]
    mul["file"], mul["encoding"] = x["file"], x["encoding"]
    _write_manifest(b, manifest)
    proc = cli("compare", str(received["a"]), str(b), "--out", str(received["root"] / "report"))
    assert_user_error(proc, f"damaged capture at {b}: tensor 'mul:0': its values_digest xxh3-128:",
                      "is not the digest of its stored values")
    assert not (received["root"] / "report" / "report.json").exists()


def test_an_untouched_received_capture_is_still_identical(received: dict[str, Path]) -> None:
    proc = cli("compare", str(received["a"]), str(received["b"]), "--out", str(received["root"] / "report"))
    assert proc.returncode == 0, proc.stderr
    report = json.loads((received["root"] / "report" / "report.json").read_text())
    assert report["verdict"] == "identical" and report["outputs"]["y"]["max_abs"] == 0.0
    assert float(np.max(X)) > 0  # the values are real: identical is a measured answer
