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


ROW = 1 << 26  # float32 elements in a row of the bomb: 256 MiB


def _plant_bomb(cap: Path, one_chunk: bool) -> int:
    """mul:0 of ``cap`` replaced by rows of zeros that a few KB of zstd declare (checksummed, valid):
    4 rows of 256 MiB, either in one chunk (the red team's: 1 GiB at once) or one chunk per row as
    the writer lays them out, every chunk the same small frame. Returns the file's size."""
    import zstandard  # noqa: PLC0415

    manifest = _manifest(cap)
    rec = manifest["tensors"]["mul:0"]
    path = cap / rec["file"]
    rows = 4 if one_chunk else 1
    with open(path, "wb") as fh:
        writer = zstandard.ZstdCompressor(level=3, write_checksum=True).stream_writer(fh, size=rows * ROW * 4,
                                                                                   closefd=False)
        zeros = bytes(16 << 20)
        for _ in range(rows * ROW * 4 // len(zeros)):
            writer.write(zeros)
        writer.close()
    size = path.stat().st_size
    for alias in (r for r in manifest["tensors"].values() if r is rec or r.get("alias_of") == "mul:0"):
        alias["shape"], alias["size_bytes"] = [4, ROW], 4 * ROW * 4  # y:0 holds mul:0's very bytes
    rec.pop("values_digest", None)
    rec["encoding"] = {"codec": rec["encoding"]["codec"], "shuffle": True,
                       "chunks": [[0, 4, 0, size, 0]] if one_chunk else [[r, r + 1, 0, size, 0] for r in range(4)]}
    _write_manifest(cap, manifest)
    return size


def test_a_decompression_bomb_chunk_is_refused_before_it_is_inflated(received: dict[str, Path]) -> None:
    """One chunk declaring 1 GiB of rows: more than the writer ever puts in a chunk (4 MiB, or one
    row); refused when the capture is opened, whatever --max-memory says."""
    b = received["b"]
    assert _plant_bomb(b, one_chunk=True) < 100_000
    proc = cli("compare", str(received["a"]), str(b), "--out", str(received["root"] / "report"),
               "--max-memory", "50000000")
    assert_user_error(proc, f"damaged capture at {b}: tensor 'mul:0': chunk of rows 0:4 holds 1,073,741,824 bytes of "
                      "rows; tftrace writes at most 1 row of this tensor per chunk")
    assert not (received["root"] / "report" / "report.json").exists()


def test_chunks_laid_out_as_the_writer_does_are_bounded_by_max_memory(received: dict[str, Path]) -> None:
    """Four 256 MiB rows, one chunk each, as the writer lays out wide rows: each chunk is checked
    against --max-memory before it is inflated (both sides hold it, so the pair is read)."""
    a, b = received["a"], received["b"]
    for cap in (a, b):
        _plant_bomb(cap, one_chunk=False)
    proc = cli("compare", str(a), str(b), "--out", str(received["root"] / "report"), "--max-memory", "50000000")
    assert_user_error(proc, f"tensor 'mul:0' of the capture at {a}: decoding one chunk of it takes 268,435,456 bytes, "
                      "more than --max-memory 50,000,000", "Raise --max-memory")
    assert not (received["root"] / "report" / "report.json").exists()
