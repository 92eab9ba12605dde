"""The report directory is what travels: the two-machine workflow, and what it keeps.

The workflow as users run it: `tftrace capture` on the machine with the model (the GPU
server), the capture directory copied to another machine, `tftrace compare` there (the side
whose model is elsewhere is "not isolated"), the report directory copied back, and
`tftrace isolate MODEL --from REPORT` where the model is. Each step runs in its own directory
and nothing of an earlier one is reachable from a later one, as on three machines (both
sides run on the CPU: the mechanism is the same for a GPU). Then what `--out` keeps: by
default only what the report and a later `isolate --from` need, the captures with
`--keep-captures`.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest

from conftest import assert_user_error, run_cli
from tracer.comparison.statuses import isolation_words
from tracer.captures.reader import Capture
from tracer.comparison.pipeline import directory_size

pytestmark = pytest.mark.slow
EXAMPLES = ("--examples", "4")
# The bf16 export converts dense/MatMul; replaying it needs A's flatten/Reshape (its input),
# the weights it reads, and A's own output (to check that A replays reproducibly).
ORIGIN = "dense/MatMul"
FEEDS = {"flatten/Reshape:0", "dense/weights/read:0", "dense/MatMul:0"}


def _ok(proc, *codes: int) -> None:
    assert proc.returncode in (codes or (0,)), (proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture(scope="module")
def machines(models, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("machines")
    gpu, cpu, back = root / "gpu_server", root / "laptop", root / "gpu_server_later"
    # 1. the "GPU server": the model and its capture
    shutil.copytree(models["detector_ckpt"], gpu / "model")
    _ok(run_cli("capture", str(gpu / "model"), "--out", str(gpu / "cap"), *EXAMPLES))
    # 2. the laptop: the capture copied over; the server's model path does not exist here
    shutil.copytree(gpu / "cap", cpu / "cap")
    shutil.move(gpu / "model", root / "model_elsewhere")
    compared = run_cli("compare", str(cpu / "cap"), str(models["detector_bf16"]), "--out", str(cpu / "report"))
    _ok(compared, 1)
    report_on_laptop = json.loads((cpu / "report" / "report.json").read_text(encoding="utf-8"))
    laptop_size = directory_size(cpu / "report")
    # 3. back on the server: only the report directory comes back; the laptop's files are gone
    shutil.copytree(cpu / "report", back / "report")
    shutil.rmtree(cpu)
    shutil.move(root / "model_elsewhere", back / "model")
    isolated = run_cli("isolate", str(back / "model"), "--from", str(back / "report"))
    return {"root": root, "gpu": gpu, "back": back, "compared": compared, "isolated": isolated,
            "report_on_laptop": report_on_laptop, "laptop_size": laptop_size}


def test_compare_on_the_second_machine_leaves_side_a_not_isolated(machines) -> None:
    report, stdout = machines["report_on_laptop"], machines["compared"].stdout
    first = report["first_divergence"]
    assert first["node"] == ORIGIN and first["rewrite"] == "cast_inserted"
    assert first["isolation"]["verdict"] == "not_run"
    assert first["isolation"]["detail"].startswith("side A was captured from a model that is not on this machine")
    assert f"{ORIGIN} (MatMul)" in stdout and isolation_words("not_run", sep=": ") in " ".join(stdout.split())
    assert re.search(r"Isolate on the other machine: tftrace isolate MODEL --from \S+/laptop/report --side a", stdout)


def test_isolate_on_the_first_machine_from_the_copied_report_alone(machines) -> None:
    proc, back = machines["isolated"], machines["back"]
    _ok(proc, 1)  # still diverged: isolation explains, it does not change the verdict
    assert "no capture at" not in proc.stderr
    report = json.loads((back / "report" / "report.json").read_text(encoding="utf-8"))
    iso = report["first_divergence"]["isolation"]
    assert iso["verdict"] == "own_error" and report["origins"][0]["isolation"] == iso
    assert f"{ORIGIN} (MatMul), max abs" in proc.stdout
    assert "given identical inputs it differs as rewritten in B (cast_inserted)" in " ".join(proc.stdout.split())
    # A's replay on "the server" reproduces the capture made there, bit for bit; the judged
    # difference is exactly that of the two replays the report directory now holds.
    replay_a = np.load(back / "report" / "work" / "isolation_a" / "0.npy")
    replay_b = np.load(back / "report" / "work" / "isolation_b" / "0.npy")
    captured = np.asarray(Capture.open(machines["gpu"] / "cap").tensor(f"{ORIGIN}:0"))
    assert replay_a.dtype == captured.dtype and np.array_equal(replay_a, captured)
    assert iso["max_abs"] == pytest.approx(float(np.max(np.abs(replay_a - replay_b))), rel=1e-6)
    assert iso["max_abs"] > 1e-3 and "not deterministic" not in iso["detail"]


def test_the_report_carries_the_origins_inputs_not_the_captures(machines) -> None:
    report_dir = machines["back"] / "report"
    feeds = Capture.open(report_dir / "work" / "feeds")
    assert set(feeds.tensor_names) == FEEDS
    whole = Capture.open(machines["gpu"] / "cap")
    for name in FEEDS:
        if whole.digest(name) is not None:  # a weight A's checkpoint holds: its digest travels, not its bytes
            assert feeds.digest(name) == whole.digest(name) and feeds.record(name)["checkpoint_key"], name
            continue
        assert np.array_equal(np.asarray(feeds.tensor(name)), np.asarray(whole.tensor(name))), name
    assert not (report_dir / "captures").exists()
    # B was captured on the laptop (an artifact there): deleted after the report, and said so
    assert machines["report_on_laptop"]["sides"]["b"]["capture_kept"] is False
    assert machines["report_on_laptop"]["sides"]["a"]["capture_kept"] is True  # given as a directory: untouched
    needed = sum(whole.record(name)["size_bytes"] for name in FEEDS if whole.digest(name) is None)
    assert machines["laptop_size"] < needed + 2_000_000  # at most the stored feeds (packed) plus a report's pages
    size_line = re.search(r"Report directory: \S+ \(([\d.]+) MB", machines["compared"].stdout)
    assert size_line and float(size_line[1]) == pytest.approx(machines["laptop_size"] / 1e6, abs=0.05)


def test_a_report_without_its_work_folder_is_refused_with_the_fix(machines, tmp_path) -> None:
    shutil.copytree(machines["back"] / "report", tmp_path / "report")
    shutil.rmtree(tmp_path / "report" / "work" / "feeds")
    proc = run_cli("isolate", str(machines["back"] / "model"), "--from", str(tmp_path / "report"), "--side", "a")
    assert_user_error(proc, "does not hold the A tensors its replays are fed",
                      "Copy the whole report directory written by tftrace compare, its work/ folder included")


def test_keep_captures_keeps_both_sides_and_costs_their_size(models, tmp_path) -> None:
    lean, kept = tmp_path / "lean", tmp_path / "kept"
    args = (str(models["detector_ckpt"]), str(models["detector_bf16"]), *EXAMPLES)
    lean_proc = run_cli("compare", *args, "--out", str(lean))
    kept_proc = run_cli("compare", *args, "--out", str(kept), "--keep-captures")
    _ok(lean_proc, 1)
    _ok(kept_proc, 1)
    assert not (lean / "captures").exists()
    caps = {key: Capture.open(kept / "captures" / key) for key in ("a", "b")}
    assert caps["a"].has(f"{ORIGIN}:0") and caps["b"].has("dense/to_fp32:0")
    report = json.loads((kept / "report.json").read_text(encoding="utf-8"))
    assert report["sides"]["a"]["capture_kept"] is True
    assert report["sides"]["a"]["capture_dir"] == str(kept / "captures" / "a")
    captures = sum(directory_size(kept / "captures" / key) for key in ("a", "b"))
    assert directory_size(kept) >= directory_size(lean) + captures - 1_000_000  # page sizes vary a little
    assert "--keep-captures keeps the captures too" in lean_proc.stdout.replace("\n", " ")
    assert "the sides captured here kept in captures/" in kept_proc.stdout.replace("\n", " ")


@pytest.mark.parametrize("planted", ["the replay file", "the replay directory", "the work directory"])
def test_isolate_from_a_received_report_never_writes_through_a_planted_link(machines, tmp_path, planted) -> None:
    """Issue 15: a report directory from someone else may hold links where the replays are
    written (``work/isolation_a/0.npy``, or the ``isolation_a`` directory itself)."""
    received, outside = tmp_path / "received", tmp_path / "outside"
    shutil.copytree(machines["back"] / "report", received, symlinks=True)
    outside.mkdir()
    replays = received / "work" / "isolation_a"
    shutil.rmtree(replays)
    if planted == "the replay file":
        replays.mkdir()
        (replays / "0.npy").symlink_to(outside / "evil.pth")
        link = replays / "0.npy"
    elif planted == "the replay directory":
        replays.symlink_to(outside)
        link = replays
    else:  # issue 24: work/ itself, its job, index and feeds moved outside (they were read, the replays written there)
        shutil.move(str(received / "work"), str(outside / "work"))
        (received / "work").symlink_to(outside / "work")
        link = received / "work"
    before = sorted(p.relative_to(outside) for p in outside.rglob("*"))
    proc = run_cli("isolate", str(machines["back"] / "model"), "--from", str(received), "--side", "a")
    assert_user_error(proc, f"{link} is a symbolic link; tftrace never writes through a link")
    assert sorted(p.relative_to(outside) for p in outside.rglob("*")) == before and link.is_symlink()
    assert not (outside / "work" / "isolation_a").exists()


def test_a_received_report_whose_isolation_index_was_tampered_with_is_refused_naming_the_field(machines) -> None:
    """The index travels with the report directory, from anyone: its fields are checked, not trusted."""
    tampered = machines["root"] / "tampered"
    shutil.copytree(machines["back"] / "report", tampered / "report")
    index_path = tampered / "report" / "work" / "isolation_index.json"
    index = json.loads(index_path.read_text(encoding="utf-8"))
    index["ops"][0]["per_process"] = "a"
    index_path.write_text(json.dumps(index), encoding="utf-8")
    proc = run_cli("isolate", str(machines["back"] / "model"), "--from", str(tampered / "report"))
    assert_user_error(proc, f"{index_path}, op 0's 'per_process' is not a list of strings: 'a'",
                      "the whole report directory written by tftrace compare")
