"""Tensors stored once (``alias_of``), statistics taken on the way, and durability before the manifest.

A pass-through op (a variable's ``/read`` Identity, a Reshape that keeps the shape...) repeats
its input's bytes; the writer then makes the second file a hard link to the first and records
``alias_of``, so the bytes are on disk once while every tensor keeps a file of its own. The
reader takes ``alias_of`` as a claim to check, like everything else in a manifest.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tracer.captures import _flusher
from tracer.captures import store as store_module
from tracer.captures._stats import CHUNK, Stats
from tracer.captures.store import Capture, CaptureWriter
from tracer.errors import TftraceError

KERNEL = np.arange(24, dtype=np.float32).reshape(4, 6) / 7
ROWS = np.arange(6 * 3, dtype=np.float32).reshape(6, 3) - 4.25


def _inode(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def _bytes_on_disk(cap: Path) -> int:
    """Sum of file lengths, each file (inode) once: what ``du --apparent-size`` counts."""
    return sum(os.stat(cap / "tensors" / n).st_size for n in {_inode(p): p.name for p in (cap / "tensors").iterdir()}.values())


def _file(cap: Capture, name: str) -> Path:
    return cap.path / cap.record(name)["file"]


# --------------------------------------------------------------------------- stored once


@pytest.mark.parametrize("packed", [False, True], ids=["npy", "packed"])
def test_variable_and_its_read_share_one_file_and_disk_shrinks_by_exactly_its_size(tmp_path: Path, packed: bool) -> None:
    with CaptureWriter(tmp_path / "cap", packed=packed) as writer:
        writer.write_whole("w:0", KERNEL)
        writer.write_whole("w/read:0", KERNEL.copy(), same_as="w:0")
        writer.write_whole("b:0", KERNEL[0])
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.alias_of("w/read:0") == "w:0" and cap.alias_of("w:0") is None and cap.alias_of("b:0") is None
    assert "alias_of" not in cap.record("w:0")
    read, var = _file(cap, "w/read:0"), _file(cap, "w:0")
    assert read != var and os.path.samefile(read, var) and var.stat().st_nlink == 2  # two names, one file
    np.testing.assert_array_equal(cap.tensor("w/read:0"), KERNEL)
    assert cap.record("w/read:0")["stats"] == cap.record("w:0")["stats"] == {
        "min": 0.0, "max": float(np.float32(23 / 7)), "mean": pytest.approx(23 / 14), "nan": 0, "inf": 0}
    all_files = sum(p.stat().st_size for p in (tmp_path / "cap" / "tensors").iterdir())
    if not packed:
        header = var.stat().st_size - KERNEL.nbytes
        assert all_files == 3 * header + 2 * KERNEL.nbytes + KERNEL[0].nbytes
    else:
        assert all_files == 2 * var.stat().st_size + _file(cap, "b:0").stat().st_size
    assert _bytes_on_disk(tmp_path / "cap") == all_files - var.stat().st_size  # the alias costs nothing


def test_alias_of_an_alias_points_at_the_tensor_stored(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_whole("w:0", KERNEL)
        writer.write_whole("w/read:0", KERNEL, same_as="w:0")
        writer.write_whole("again:0", KERNEL, same_as="w/read:0")
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.alias_of("again:0") == "w:0" and os.path.samefile(_file(cap, "again:0"), _file(cap, "w:0"))


def test_rows_alias_over_three_batches_stays_one_file(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "cap") as writer:
        for start, stop in ((0, 2), (2, 4), (4, 6)):
            writer.write_rows("relu:0", ROWS[start:stop], start, 6)
            writer.write_rows("out:0", ROWS[start:stop].copy(), start, 6, same_as="relu:0")
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.alias_of("out:0") == "relu:0" and os.path.samefile(_file(cap, "out:0"), _file(cap, "relu:0"))
    np.testing.assert_array_equal(cap.tensor("out:0"), ROWS)
    assert cap.record("out:0")["stats"] == {"min": -4.25, "max": 12.75, "mean": 4.25, "nan": 0, "inf": 0}


def test_rows_alias_that_stops_matching_gets_its_own_file(tmp_path: Path) -> None:
    other = ROWS.copy()
    other[4:] *= -1  # the third batch differs
    with CaptureWriter(tmp_path / "cap") as writer:
        for start, stop in ((0, 2), (2, 4), (4, 6)):
            writer.write_rows("a:0", ROWS[start:stop], start, 6)
            same = "a:0" if start < 4 else None
            writer.write_rows("b:0", other[start:stop], start, 6, same_as=same)
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.alias_of("b:0") is None and not os.path.samefile(_file(cap, "b:0"), _file(cap, "a:0"))
    np.testing.assert_array_equal(cap.tensor("a:0"), ROWS)
    np.testing.assert_array_equal(cap.tensor("b:0"), other)
    assert cap.record("b:0")["stats"]["min"] == float(other.min()) and cap.record("b:0")["stats"]["max"] == 6.75


def test_alias_survives_its_tensor_becoming_uncaptured(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_rows("a:0", ROWS[:3], 0, 6)
        writer.write_rows("b:0", ROWS[:3], 0, 6, same_as="a:0")
        writer.write_rows("c:0", ROWS[:3], 0, 6, same_as="a:0")
        writer.write_rows("a:0", np.zeros((3, 5), np.float32), 3, 6)  # a's shape varies: a is dropped
        writer.write_rows("b:0", ROWS[3:], 3, 6, same_as="a:0")
        writer.write_rows("c:0", ROWS[3:], 3, 6, same_as="b:0")
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert "a:0" in cap.uncaptured and cap.alias_of("b:0") is None and cap.alias_of("c:0") == "b:0"
    np.testing.assert_array_equal(cap.tensor("b:0"), ROWS)
    np.testing.assert_array_equal(cap.tensor("c:0"), ROWS)
    assert cap.record("b:0")["stats"] == cap.record("c:0")["stats"] == {
        "min": -4.25, "max": 12.75, "mean": 4.25, "nan": 0, "inf": 0}


@pytest.mark.parametrize(
    ("value", "same_as"),
    [(KERNEL.reshape(6, 4), "w:0"), (KERNEL.astype(np.float64), "w:0"), (KERNEL, "nowhere:0"), (KERNEL, None)],
    ids=["other shape", "other dtype", "unknown tensor", "no claim"],
)
def test_a_claim_the_writer_cannot_honour_stores_a_copy(tmp_path: Path, value: np.ndarray, same_as: str | None) -> None:
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_whole("w:0", KERNEL)
        writer.write_whole("x:0", value, same_as=same_as)
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.alias_of("x:0") is None and not os.path.samefile(_file(cap, "x:0"), _file(cap, "w:0"))
    np.testing.assert_array_equal(cap.tensor("x:0"), value)


def test_strings_are_never_aliased(tmp_path: Path) -> None:
    text = np.array([b"a", b"bc"], dtype=object)
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_rows("t:0", text, 0, 2)
        writer.write_rows("u:0", text, 0, 2, same_as="t:0")
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.alias_of("u:0") is None and cap.tensor("u:0").tolist() == [b"a", b"bc"]


def test_removing_an_alias_keeps_its_tensor(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_whole("w:0", KERNEL)
        writer.write_whole("w/read:0", KERNEL, same_as="w:0")
        writer.mark_uncaptured("w/read:0", "dropped")
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.tensor_names == ["w:0"] and _file(cap, "w:0").stat().st_nlink == 1
    np.testing.assert_array_equal(cap.tensor("w:0"), KERNEL)


# --------------------------------------------------------------------------- the reader checks the claim


def _aliased(tmp_path: Path) -> Path:
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_whole("w:0", KERNEL)
        writer.write_whole("w/read:0", KERNEL, same_as="w:0")
        writer.write_whole("v:0", KERNEL.T.copy())
        writer.write_whole("n:0", np.arange(24, dtype=np.int32).reshape(4, 6))
        writer.finalize({})
    return tmp_path / "cap"


def _edit(cap: Path, name: str, **changes: Any) -> None:
    manifest = json.loads((cap / "manifest.json").read_text())
    manifest["tensors"][name].update(changes)
    (cap / "manifest.json").write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("name", "changes", "message"),
    [
        ("w/read:0", {"alias_of": "gone:0"}, r"tensor 'w/read:0': alias_of 'gone:0' does not name another captured tensor"),
        ("w/read:0", {"alias_of": "w/read:0"}, r"alias_of 'w/read:0' does not name another captured tensor"),
        ("w/read:0", {"alias_of": ["w:0"]}, r"alias_of \['w:0'\] does not name another captured tensor"),
        ("w/read:0", {"alias_of": "v:0"}, r"alias_of 'v:0' names a tensor of another shape \(\[4, 6\] here, \[6, 4\] there\)"),
        ("w/read:0", {"alias_of": "n:0"}, r"alias_of 'n:0' names a tensor of another dtype \('float32' here, 'int32' there\)"),
        ("v:0", {"alias_of": "w/read:0"}, r"tensor 'v:0': alias_of 'w/read:0' names an alias itself"),
    ],
    ids=["missing tensor", "itself", "not a name", "other shape", "other dtype", "chain"],
)
def test_reader_refuses_a_false_alias(tmp_path: Path, name: str, changes: dict[str, Any], message: str) -> None:
    cap = _aliased(tmp_path)
    _edit(cap, name, **changes)
    with pytest.raises(TftraceError, match=r"damaged capture at .*" + message):
        Capture.open(cap)


def test_reader_refuses_an_alias_whose_file_points_outside(tmp_path: Path) -> None:
    cap = _aliased(tmp_path)
    np.save(tmp_path / "secret.npy", KERNEL)
    (cap / "tensors" / "link.npy").symlink_to(tmp_path / "secret.npy")
    _edit(cap, "w/read:0", file="tensors/link.npy")
    with pytest.raises(TftraceError, match=r"tensors/link.npy resolves to .*secret.npy, outside tensors/"):
        Capture.open(cap)


def test_alias_copied_without_its_link_still_reads(tmp_path: Path) -> None:
    """Archives and CI artifacts often drop hard links: the alias is then a copy, equally valid."""
    cap = _aliased(tmp_path)
    path = cap / json.loads((cap / "manifest.json").read_text())["tensors"]["w/read:0"]["file"]
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)
    opened = Capture.open(cap)
    assert opened.alias_of("w/read:0") == "w:0"
    np.testing.assert_array_equal(opened.tensor("w/read:0"), KERNEL)


# --------------------------------------------------------------------------- statistics on the way


@pytest.mark.parametrize(
    "values",
    [
        np.array([1.5, -2.0, 3.25], np.float32),
        np.array([1.0, np.nan, -np.inf, 2.0], np.float64),
        np.array([np.nan, np.nan], np.float32),
        np.array([3 + 4j, np.nan, 1j], np.complex64),
        np.array([7, -3, 2], np.int64),
        np.array([True, False, True]),
    ],
    ids=["finite", "nan and inf", "only nan", "complex", "int", "bool"],
)
def test_stats_in_batches_equal_stats_at_once(values: np.ndarray) -> None:
    whole, batched = Stats(values.dtype.name), Stats(values.dtype.name)
    whole.add(values)
    for part in np.array_split(values, 2):
        batched.add(part)
    assert batched.to_json() == whole.to_json()


def test_stats_find_a_nan_past_the_first_chunk() -> None:
    values = np.ones(CHUNK + 10, np.float32)
    values[CHUNK + 3] = np.nan
    values[5] = -2.0
    stats = Stats("float32")
    stats.add(values)
    assert stats.to_json() == {"min": -2.0, "max": 1.0, "mean": (CHUNK + 6) / (CHUNK + 9), "nan": 1, "inf": 0}


# --------------------------------------------------------------------------- durable before the manifest


def test_every_file_is_fsynced_before_the_manifest_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synced: list[tuple[int, int]] = []  # files (inodes: an alias is its tensor's file) made durable
    at_manifest: list[set[tuple[int, int]]] = []
    real_fsync, real_write_file = _flusher.fsync, store_module.write_file
    monkeypatch.setattr(_flusher, "fsync", lambda path: (real_fsync(path), synced.append(_inode(path))))
    monkeypatch.setattr(store_module, "write_file",
                        lambda path, text, **kw: (at_manifest.append(set(synced)), real_write_file(path, text, **kw)))
    with CaptureWriter(tmp_path / "cap") as writer:
        for start, stop in ((0, 2), (2, 6)):
            writer.write_rows("rows:0", ROWS[start:stop], start, 6)
        writer.write_whole("w:0", KERNEL)
        writer.write_whole("w/read:0", KERNEL, same_as="w:0")
        writer.finalize({})
    assert at_manifest == [{_inode(p) for p in (tmp_path / "cap" / "tensors").iterdir()}]


def test_a_full_disk_met_by_fsync_is_the_users_error_and_leaves_no_manifest(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(path: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(_flusher, "fsync", full)
    with pytest.raises(TftraceError, match=r"disk full at .* \(No space left on device\)"), \
            CaptureWriter(tmp_path / "cap") as writer:
        writer.write_whole("w:0", KERNEL)
        writer.finalize({})
    assert sorted(os.listdir(tmp_path / "cap")) == ["tensors"]


def test_without_durability_the_capture_is_the_same(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "cap", durable=False) as writer:
        writer.write_rows("rows:0", ROWS, 0, 6)
        writer.write_whole("w:0", KERNEL)
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    np.testing.assert_array_equal(cap.tensor("rows:0"), ROWS)
    np.testing.assert_array_equal(cap.tensor("w:0"), KERNEL)


@pytest.mark.parametrize("packed", [False, True], ids=["npy", "packed"])
def test_a_full_disk_met_by_a_background_write_stops_the_capture_at_the_next_tensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, packed: bool
) -> None:
    def full(self: CaptureWriter, entry: Any, f: Any, data: np.ndarray, *more: Any) -> int:
        if not packed:
            f.close()
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(CaptureWriter, "_write_chunks" if packed else "_write_body", full)
    with CaptureWriter(tmp_path / "cap", packed=packed) as writer:
        writer.write_whole("w:0", KERNEL)
        with pytest.raises(TftraceError, match=r"disk full at \d+ bytes written to .* \(No space left on device\)"):
            writer.sync()
    assert sorted(os.listdir(tmp_path / "cap")) == ["tensors"]


def test_arrays_are_written_in_the_background_and_complete_at_finalize(tmp_path: Path) -> None:
    arrays = {f"t{i}:0": np.full((64, 1024), i, np.float32) for i in range(40)}  # 10 MB, several jobs in flight
    with CaptureWriter(tmp_path / "cap") as writer:
        for name, value in arrays.items():
            writer.write_whole(name, value)
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert all(np.array_equal(cap.tensor(n), v) for n, v in arrays.items())
    assert [cap.record(n)["stats"]["mean"] for n in arrays] == [float(i) for i in range(40)]


def test_a_side_is_durable_unless_told_otherwise() -> None:
    from tracer.artifacts.loader import ArtifactRef  # noqa: PLC0415 - only this test needs a Side
    from tracer.runspec import Side  # noqa: PLC0415

    quick = Side(ArtifactRef("m"), durable=False)
    assert Side(ArtifactRef("m")).durable is True and Side.from_json(quick.to_json()).durable is False
    old = {k: v for k, v in Side(ArtifactRef("m")).to_json().items() if k != "durable"}  # written before the field
    assert Side.from_json(old).durable is True
