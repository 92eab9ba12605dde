"""Capture directories: round trips, crash safety, locking and refusal of damaged input."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tracer.captures._format import EXTENDED, NATIVE, widen, widens
from tracer.captures.store import FORMAT_VERSION, Capture, CaptureWriter, safe_filename
from tracer.errors import TftraceError

ROWS = np.arange(20 * 2 * 3, dtype=np.float32).reshape(20, 2, 3) - 50.5


def _write_batches(writer: CaptureWriter, name: str, data: np.ndarray, sizes: tuple[int, ...]) -> None:
    offset = 0
    for size in sizes:
        writer.write_rows(name, data[offset : offset + size], offset, len(data))
        offset += size


def _simple_capture(path: Path, packed: bool = False) -> Path:
    """Plain ``.npy`` files by default: the file-level refusals below are about those (the packed
    files of format 2 have their own in test_store_packed.py)."""
    with CaptureWriter(path, packed=packed) as writer:
        _write_batches(writer, "conv/out:0", ROWS, (8, 8, 4))
        writer.write_whole("conv/kernel", np.array([[1.0, -2.0], [3.0, np.nan]], dtype=np.float64))
        writer.finalize({"spec": {"batch_size": 8}, "environment": {"tf": "2.21"}})
    return path


# --------------------------------------------------------------------------- round trips


def test_rows_over_three_batches_read_back_exactly(tmp_path: Path) -> None:
    cap = Capture.open(_simple_capture(tmp_path / "cap"))
    got = cap.tensor("conv/out:0")
    assert got.dtype == np.float32 and got.shape == (20, 2, 3)
    np.testing.assert_array_equal(got, ROWS)
    record = cap.record("conv/out:0")
    assert record["shape"] == [20, 2, 3] and record["size_bytes"] == 480 and record["batch_major"] is True
    assert record["stats"] == {"min": -50.5, "max": 68.5, "mean": 9.0, "nan": 0, "inf": 0}
    assert cap.tensor_names == ["conv/out:0", "conv/kernel"]
    assert cap.spec == {"batch_size": 8} and cap.environment == {"tf": "2.21"}
    assert cap.manifest["format"] == "tftrace-capture" and cap.manifest["format_version"] == FORMAT_VERSION == 2


def test_write_whole_keeps_values_and_counts_nan(tmp_path: Path) -> None:
    cap = Capture.open(_simple_capture(tmp_path / "cap"))
    kernel = cap.tensor("conv/kernel")
    np.testing.assert_array_equal(kernel, np.array([[1.0, -2.0], [3.0, np.nan]]))
    assert cap.record("conv/kernel")["stats"] == {"min": -2.0, "max": 3.0, "mean": 2.0 / 3.0, "nan": 1, "inf": 0}
    assert cap.record("conv/kernel")["batch_major"] is False


def test_scalar_empty_int_bool_and_fortran_arrays(tmp_path: Path) -> None:
    fortran = np.asfortranarray(np.arange(6, dtype=np.int64).reshape(2, 3))
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_whole("scalar", np.float32(2.5))
        writer.write_whole("empty", np.zeros((0, 4), np.float32))
        writer.write_whole("fortran", fortran)
        writer.write_rows("mask", np.array([True, False, True]), 0, 3)
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.tensor("scalar").shape == () and float(cap.tensor("scalar")) == 2.5
    assert cap.tensor("empty").shape == (0, 4)
    assert cap.record("empty")["stats"] == {"min": None, "max": None, "mean": None, "nan": 0, "inf": 0}
    np.testing.assert_array_equal(cap.tensor("fortran"), fortran)
    assert cap.record("fortran")["stats"] == {"min": 0, "max": 5, "mean": 2.5, "nan": 0, "inf": 0}
    np.testing.assert_array_equal(cap.tensor("mask"), [True, False, True])
    assert cap.record("mask")["stats"] == {"min": 0, "max": 1, "mean": 2 / 3, "nan": 0, "inf": 0}


def test_bfloat16_round_trip_widens_exactly_to_float32(tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    values = np.array([[1.0, -0.0078125], [3.140625, np.inf], [np.nan, -65280.0], [0.5, 2.0]], np.float32)
    bf16 = values.astype(ml_dtypes.bfloat16)
    with CaptureWriter(tmp_path / "cap") as writer:
        _write_batches(writer, "bf", bf16, (3, 1))
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    record = cap.record("bf")
    assert (record["dtype"], record["stored_dtype"]) == ("bfloat16", "<u2")
    got = cap.tensor("bf")
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, bf16.astype(np.float32))
    mean = (1.0 - 0.0078125 + 3.140625 - 65280.0 + 0.5 + 2.0) / 6
    assert record["stats"] == {"min": -65280.0, "max": 3.140625, "mean": mean, "nan": 1, "inf": 1}


def test_widens_names_the_dtypes_widen_reads_back_as_others() -> None:
    """One predicate decides what is read back widened: widen and Capture.rows_check (which
    checks a received digest only against pieces that are the stored values) both ask it."""
    pytest.importorskip("ml_dtypes")
    for name in sorted(NATIVE | set(EXTENDED)):
        stored = np.zeros(2, EXTENDED[name][0] if name in EXTENDED else name)
        assert widens(name) == (widen(stored, name) is not stored), name


def test_float8_and_complex_round_trip(tmp_path: Path) -> None:
    ml_dtypes = pytest.importorskip("ml_dtypes")
    f8 = np.array([0.5, -448.0, 3.5], np.float32).astype(ml_dtypes.float8_e4m3fn)
    z = np.array([3 + 4j, np.nan, -1j, np.inf], np.complex64)
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_whole("f8", f8)
        writer.write_rows("z", z, 0, 4)
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.record("f8")["stored_dtype"] == "|u1" and cap.tensor("f8").tolist() == [0.5, -448.0, 3.5]
    np.testing.assert_array_equal(cap.tensor("z"), z)
    assert cap.record("z")["stats"] == {"min": 1.0, "max": 5.0, "mean": 3.0, "nan": 1, "inf": 1}


def test_strings_of_growing_width_across_batches(tmp_path: Path) -> None:
    first = np.array([b"a", b"bc"], dtype=object)
    second = np.array([b"a much longer value", b""], dtype=object)
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_rows("text:0", first, 0, 4)
        writer.write_rows("text:0", second, 2, 4)
        writer.write_whole("vocab", np.array(["héllo", "x"]))
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.tensor("text:0").tolist() == [b"a", b"bc", b"a much longer value", b""]
    assert cap.record("text:0")["dtype"] == "string" and cap.record("text:0")["stats"] is None
    assert cap.tensor("vocab").tolist() == ["héllo".encode(), b"x"]


def test_stored_equals_compares_bits_not_values(tmp_path: Path) -> None:
    """A whole tensor seen again in a later run is the same only if its bytes are: a NaN equals
    itself (a constant holding NaN does not "vary"), -0.0 is not 0.0, strings compare as stored."""
    nan_const = np.array([1.0, np.nan], dtype=np.float32)
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_whole("nan_const", nan_const)
        writer.write_whole("zero", np.zeros(3, dtype=np.float32))
        writer.write_whole("words", np.array([b"a", b"bc"], dtype=object))
        assert writer.stored_equals("nan_const", nan_const.copy())
        assert not writer.stored_equals("nan_const", np.array([1.0, 2.0], dtype=np.float32))
        assert not writer.stored_equals("nan_const", nan_const.astype(np.float64))  # same values, other dtype
        assert not writer.stored_equals("zero", -np.zeros(3, dtype=np.float32))
        assert writer.stored_equals("words", np.array([b"a", b"bc"], dtype=object))
        assert not writer.stored_equals("words", np.array([b"a", b"bd"], dtype=object))
        assert not writer.stored_equals("never written", nan_const)
        writer.finalize({})

def test_unstorable_values_become_uncaptured_with_reason(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_whole("nul", np.array([b"ab\0"], dtype=object))
        writer.write_whole("resource", np.array([object()], dtype=object))
        writer.mark_uncaptured("loop/while:0", "inside a while loop")
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.uncaptured == {
        "nul": "a string value ends in a NUL byte, which fixed-width storage drops",
        "resource": "object tensor holding object values cannot be stored",
        "loop/while:0": "inside a while loop",
    }
    assert cap.tensor_names == [] and not cap.has("nul")
    with pytest.raises(TftraceError, match=r"'loop/while:0' was not captured .*: inside a while loop"):
        cap.tensor("loop/while:0")
    with pytest.raises(TftraceError, match="no tensor 'nope'"):
        cap.tensor("nope")


def test_shape_varying_between_batches_is_uncaptured_and_its_file_deleted(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_rows("nms:0", np.zeros((2, 5)), 0, 4)
        writer.write_rows("nms:0", np.zeros((2, 3)), 2, 4)
        writer.write_rows("nms:0", np.zeros((2, 5)), 2, 4)  # ignored: already uncaptured
        writer.finalize({})
    cap = Capture.open(tmp_path / "cap")
    assert cap.uncaptured == {"nms:0": "shape varies between batches: rows of (5,) then (3,)"}
    assert os.listdir(tmp_path / "cap" / "tensors") == []


def test_missing_rows_make_the_tensor_uncaptured(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_rows("x", ROWS[:8], 0, 20)
        writer.write_rows("x", ROWS[16:], 16, 20)
        writer.finalize({})
    assert Capture.open(tmp_path / "cap").uncaptured == {
        "x": "only 12 of 20 rows were written (a batch failed or was skipped)"
    }


def test_caller_bugs_raise_value_error(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "cap") as writer:
        writer.write_rows("x", ROWS[:8], 0, 20)
        with pytest.raises(ValueError, match="already written"):
            writer.write_rows("x", ROWS[4:12], 4, 20)
        with pytest.raises(ValueError, match="do not fit"):
            writer.write_rows("x", ROWS[:8], 16, 20)
        with pytest.raises(ValueError, match="not 21 rows"):
            writer.write_rows("x", ROWS[8:16], 8, 21)
        with pytest.raises(ValueError, match="must not set"):
            writer.finalize({"tensors": {}})
        with pytest.raises(TypeError):
            writer.finalize({"spec": np.float32(1)})
        _write_batches(writer, "y", ROWS, (20,))
        writer.finalize({})  # still usable after the refused calls above
    with pytest.raises(RuntimeError, match="already finalized"):
        writer.write_whole("z", np.ones(1))


# --------------------------------------------------------------------------- crash safety and locking


def test_directory_without_manifest_is_refused_as_incomplete(tmp_path: Path) -> None:
    _simple_capture(tmp_path / "cap")
    (tmp_path / "cap" / "manifest.json").unlink()
    with pytest.raises(TftraceError, match="incomplete capture .*manifest.json is missing.*--force"):
        Capture.open(tmp_path / "cap")


def test_exception_inside_with_leaves_an_incomplete_unlocked_capture(tmp_path: Path) -> None:
    with pytest.raises(KeyError), CaptureWriter(tmp_path / "cap") as writer:
        writer.write_rows("x", ROWS[:8], 0, 20)
        raise KeyError("worker crashed")
    assert not (tmp_path / "cap" / "manifest.json").exists()
    assert not (tmp_path / "cap" / ".lock").exists()
    with pytest.raises(TftraceError, match="incomplete capture"):
        Capture.open(tmp_path / "cap")


def test_non_empty_directory_needs_force_and_force_replaces_the_capture(tmp_path: Path) -> None:
    _simple_capture(tmp_path / "cap")
    with pytest.raises(TftraceError, match=r"cap is not empty. Pass --force"):
        CaptureWriter(tmp_path / "cap")
    with CaptureWriter(tmp_path / "cap", force=True) as writer:
        assert not (tmp_path / "cap" / "manifest.json").exists()
        assert os.listdir(tmp_path / "cap" / "tensors") == []
        writer.write_whole("only", np.arange(3))
        writer.finalize({})
    assert Capture.open(tmp_path / "cap").tensor_names == ["only"]


def test_force_refuses_to_wipe_a_directory_with_foreign_files(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "tensors").mkdir(parents=True)
    (home / "tensors" / "a.npy").write_bytes(b"")
    (home / "thesis.tex").write_text("years of work")
    with pytest.raises(TftraceError, match=r"not part of a capture \(thesis.tex\).*will not delete"):
        CaptureWriter(home, force=True)
    assert (home / "thesis.tex").read_text() == "years of work" and (home / "tensors" / "a.npy").exists()
    assert not (home / ".lock").exists()
    (home / "thesis.tex").unlink()
    (home / "tensors" / "notes").mkdir()  # a sub-directory is never something a writer made
    with pytest.raises(TftraceError, match=r"\(tensors\)"):
        CaptureWriter(home, force=True)


def test_second_writer_is_refused_while_the_first_holds_the_lock(tmp_path: Path) -> None:
    first = CaptureWriter(tmp_path / "cap")
    for force in (False, True):
        with pytest.raises(TftraceError, match=rf"another capture is writing to .*cap \(pid {os.getpid()}\)"):
            CaptureWriter(tmp_path / "cap", force=force)
    first.write_whole("a", np.ones(2))
    first.finalize({})
    assert not (tmp_path / "cap" / ".lock").exists()
    CaptureWriter(tmp_path / "cap", force=True).abort()  # lock released: a new writer may start


def test_stale_lock_of_a_dead_process_is_taken_over_only_with_force(tmp_path: Path) -> None:
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    cap = tmp_path / "cap"
    (cap / "tensors").mkdir(parents=True)
    (cap / ".lock").write_text(json.dumps({"pid": pid, "host": socket.gethostname(), "nonce": "x"}))
    with pytest.raises(TftraceError, match=rf"was interrupted \(pid {pid} is gone\).*--force"):
        CaptureWriter(cap)
    with CaptureWriter(cap, force=True) as writer:
        assert json.loads((cap / ".lock").read_text())["pid"] == os.getpid()
        writer.finalize({})
    assert sorted(os.listdir(cap)) == ["manifest.json", "tensors"]


def test_unreadable_lock_counts_as_stale(tmp_path: Path) -> None:
    cap = tmp_path / "cap"
    cap.mkdir()
    (cap / ".lock").write_bytes(b"")  # a writer that died between creating and filling its lock
    with pytest.raises(TftraceError, match=r"interrupted \(its writer is gone\)"):
        CaptureWriter(cap)
    CaptureWriter(cap, force=True).abort()
    assert sorted(os.listdir(cap)) == ["tensors"]


def test_the_store_never_imports_tensorflow() -> None:
    code = (
        "import sys, tracer.captures, tracer.captures.store, tracer.captures.reader; "
        "print(sorted(m for m in ('tensorflow', 'ml_dtypes') if m in sys.modules))"
    )
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=root, check=True)
    assert done.stdout.strip() == "[]"


# --------------------------------------------------------------------------- damaged or hostile manifests


def _tamper(cap: Path, change: Any) -> None:
    manifest = json.loads((cap / "manifest.json").read_text())
    change(manifest["tensors"]["conv/out:0"], manifest)
    (cap / "manifest.json").write_text(json.dumps(manifest))


def _set(key: str, value: Any) -> Any:
    return lambda record, manifest: record.__setitem__(key, value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (_set("file", "../x.npy"), r"file path '../x.npy' contains '..'"),
        (_set("file", "tensors/../../x.npy"), r"contains '..'"),
        (_set("file", "/etc/passwd"), r"file path '/etc/passwd' is absolute"),
        (_set("file", "C:\\x.npy"), r"is absolute"),
        (_set("file", "tensors/gone.npy"), r"file tensors/gone.npy is missing"),
        (_set("file", "manifest.json"), r"is not tensors/<name>.npy"),
        (_set("shape", [100, 2, 3]), r"size_bytes 480 does not match shape \[100, 2, 3\]"),
        (_set("shape", [20, -2, -3]), r"not a list of at most 32 non-negative integers"),
        (_set("shape", [20, 2.0, 3]), r"non-negative integers"),
        (_set("shape", [2**25, 2**25]), r"declares 4503599627370496 bytes, more than the 1099511627776-byte limit"),
        (_set("dtype", "evil"), r"unknown dtype 'evil'"),
        (_set("stored_dtype", "|O8"), r"stored dtype '\|O8' does not hold float32"),
        (_set("stored_dtype", "<f8"), r"stored dtype '<f8' does not hold float32"),
        (lambda r, m: r.update(shape=[100, 2, 3], size_bytes=2400), r"smaller than the 2400 bytes"),
        (lambda r, m: m.__setitem__("format_version", FORMAT_VERSION + 1), r"newer tftrace .*Upgrade tftrace"),
        (lambda r, m: m.__setitem__("format", "other"), r"not a tftrace capture manifest"),
        (lambda r, m: m.__setitem__("spec", [1]), r'"spec" is not a JSON object'),
    ],
)
def test_tampered_manifest_is_refused(tmp_path: Path, change: Any, message: str) -> None:
    cap = _simple_capture(tmp_path / "cap")
    _tamper(cap, change)
    with pytest.raises(TftraceError, match=message):
        Capture.open(cap)


def test_symlink_pointing_outside_the_capture_is_refused(tmp_path: Path) -> None:
    cap = _simple_capture(tmp_path / "cap")
    np.save(tmp_path / "secret.npy", ROWS)
    (cap / "tensors" / "link.npy").symlink_to(tmp_path / "secret.npy")
    _tamper(cap, _set("file", "tensors/link.npy"))
    with pytest.raises(TftraceError, match=r"tensors/link.npy resolves to .*secret.npy, outside tensors/"):
        Capture.open(cap)


def test_header_disagreeing_with_the_record_is_refused_before_mapping(tmp_path: Path) -> None:
    cap = _simple_capture(tmp_path / "cap")
    _tamper(cap, lambda r, m: r.update(shape=[10, 2, 3], size_bytes=240))
    opened = Capture.open(cap)  # the cheap checks pass: the file is larger than declared
    with pytest.raises(TftraceError, match=r"holds float32 \(20, 2, 3\) in 480 bytes but the manifest declares"):
        opened.tensor("conv/out:0")


def test_non_json_and_non_object_manifests_are_refused(tmp_path: Path) -> None:
    cap = _simple_capture(tmp_path / "cap")
    for text, message in [("{not json", "is not valid JSON"), ("[1, 2]", "not a tftrace capture manifest"),
                          ('{"format": "tftrace-capture", "format_version": NaN}', "is not valid JSON")]:
        (cap / "manifest.json").write_text(text)
        with pytest.raises(TftraceError, match=message):
            Capture.open(cap)


def test_paths_that_are_not_capture_directories_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TftraceError, match="the path does not exist"):
        Capture.open(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(TftraceError, match="is a file, not a capture directory"):
        Capture.open(tmp_path / "file")


# --------------------------------------------------------------------------- file names

HOSTILE = ["a/b:0", "a_b:0", "<script>alert(1)</script>", "../../etc/passwd", "x" * 10_000, "ünïcødé/层:0", "",
           ".hidden", "-rf", "..", "con", "Conv", "conv", "abc-0123456789ab"]


def test_hostile_names_stay_inside_tensors_and_never_collide(tmp_path: Path) -> None:
    with CaptureWriter(tmp_path / "cap") as writer:
        for i, name in enumerate(HOSTILE):
            writer.write_whole(name, np.array([i]))
        writer.finalize({})
    files = os.listdir(tmp_path / "cap" / "tensors")
    assert len({f.casefold() for f in files}) == len(HOSTILE)
    assert sorted(os.listdir(tmp_path / "cap")) == ["manifest.json", "tensors"]
    cap = Capture.open(tmp_path / "cap")
    assert [int(cap.tensor(name)[0]) for name in HOSTILE] == list(range(len(HOSTILE)))


def test_safe_filename_examples() -> None:
    assert safe_filename("logits") == "logits.npy"
    assert safe_filename("a/b:0") != safe_filename("a_b:0")
    assert safe_filename("a/b:0").startswith("a_b_0-") and len(safe_filename("a/b:0")) == len("a_b_0-") + 12 + 4
    assert safe_filename("../../etc/passwd").startswith("____etc_passwd-")
    assert safe_filename("abc-0123456789ab") != "abc-0123456789ab.npy"  # looks hashed: hashed for real
    assert len(safe_filename("x" * 10_000)) == 124


@settings(max_examples=300)
@given(st.sets(st.text(max_size=300), max_size=40))
def test_safe_filename_is_safe_and_injective(names: set[str]) -> None:
    files = [safe_filename(name) for name in names]
    for f in files:
        assert "/" not in f and "\\" not in f and ".." not in f.removesuffix(".npy")
        assert not f.startswith((".", "-")) and len(f) <= 130 and f.isascii()
    assert len({f.casefold() for f in files}) == len(names)


def test_the_typed_views_of_a_manifest_name_its_parts_and_default_what_an_older_one_lacks() -> None:
    from tracer.captures.views import ObserverEffect, Timings  # noqa: PLC0415

    old = ObserverEffect.from_json({"outputs_identical": False, "executed_ops": {"plain": {"MatMul": 2}}})
    assert (old.outputs_identical, old.executed_ops, old.only_in_plain, old.executed_nodes_plain) == (
        False, {"plain": {"MatMul": 2}, "instrumented": {}}, (), {})
    timings = Timings.from_json({"plain_latency_ms": {"median": 4.0, "batch_rows": 8}, "instrumented_s": 2})
    assert (timings.rows_per_run, timings.instrumented_s, timings.load_s) == (8, 2.0, None)
    assert Timings.from_json({"plain_latency_ms": {"median": 4.0}}).rows_per_run == 1
