"""``--max-process-memory`` (issue 29, item 4): the capture's whole process held under a limit.

The plain runs measure what TensorFlow and the model hold (the kernel's ``VmHWM``, reset before
them); the fetch gets what the limit leaves after that and the writer's share, and is split into
parts under it. A limit that leaves no room for the largest tensor is refused before the capture
directory exists. Every capture records its peaks in the manifest's ``memory``.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from conftest import assert_user_error, run_cli
from tracer.captures._jobs import MAX_IN_FLIGHT
from tracer.captures.fetch_plan import FetchPlan, check_fetched
from tracer.captures.process_memory import SCRATCH_PER_THREAD, fit_fetch, peak_rss, reset_peak, writer_share
from tracer.errors import TftraceError
from tracer.artifacts.loader import ArtifactRef
from tracer.runspec import Side

MB = 1 << 20


def test_the_fetch_gets_what_tensorflow_and_the_writer_leave() -> None:
    fit = fit_fetch(1000, 10**9, ("conv:0", 100), runtime_peak=600, reset=True, writer=150)
    assert (fit.limit, fit.runtime_peak, fit.writer, fit.fetch) == (1000, 600, 150, 250)
    assert fit.words() == ("the 250 bytes --max-process-memory 1,000 leaves for one fetch (after 600 bytes that "
                           "TensorFlow and the model held in the plain run, and 150 for the writer)")
    assert fit.to_json() == {"max_process_memory": 1000, "writer_share_bytes": 150, "fetch_budget_bytes": 250}
    # --max-memory still bounds one fetch where it is the smaller
    assert fit_fetch(1000, 200, ("conv:0", 100), runtime_peak=600, reset=True, writer=150).fetch == 200


def test_a_limit_without_room_for_the_largest_tensor_names_the_limit_that_would_do() -> None:
    with pytest.raises(TftraceError) as err:
        fit_fetch(5 * MB, 10**9, ("conv:0", 2 * MB), runtime_peak=3 * MB, reset=True, writer=MB // 2)
    assert err.value.problem == (
        "--max-process-memory 5,242,880 cannot be held: TensorFlow and the model held 3,145,728 bytes in the plain "
        "run, the writer may hold 524,288, and the largest tensor, conv:0, needs 2,097,152 in one fetch; nothing was "
        "written")
    assert err.value.fix == f"use --max-process-memory {6 * MB:,} or more, or lower --batch-size"  # 5.5 MiB, up to MiB
    with pytest.raises(TftraceError, match="counted from the process start"):
        fit_fetch(5 * MB, 10**9, ("conv:0", 2 * MB), runtime_peak=3 * MB, reset=False, writer=MB // 2)
    with pytest.raises(TftraceError, match="needs the process's resident-set peak"):
        fit_fetch(5 * MB, 10**9, ("conv:0", 1), runtime_peak=None, reset=True, writer=0)


def test_a_tensor_over_the_fetch_share_is_refused_in_the_words_of_the_process_limit() -> None:
    fit = fit_fetch(1000, 10**9, ("a:0", 10), runtime_peak=600, reset=True, writer=150)
    plan = FetchPlan(["a:0"], {"a:0": 10}, set(), max_memory=fit.fetch, bound=fit.words(),
                     fix="raise --max-process-memory")
    with pytest.raises(TftraceError) as err:
        check_fetched(plan, "a:0", 251)
    assert "more than the 250 bytes --max-process-memory 1,000 leaves for one fetch" in err.value.problem
    assert err.value.fix.startswith("raise --max-process-memory, or lower --batch-size")


def test_the_writer_share_is_its_queue_and_each_threads_scratch() -> None:
    assert writer_share(2) == MAX_IN_FLIGHT + 2 * SCRATCH_PER_THREAD
    assert writer_share(8) - writer_share(2) == 6 * SCRATCH_PER_THREAD


def test_the_peak_is_measured_and_reset_by_the_kernel() -> None:
    """Real measurements of this process: 200 MB touched raise the peak; after they are freed,
    a reset brings it back down to what is resident now."""
    before = peak_rss()
    assert before is not None and before > 0
    block = np.ones(200 * MB // 8)  # written, so resident
    high = peak_rss()
    assert high >= before + 190 * MB or high >= block.nbytes
    del block
    assert reset_peak()
    assert peak_rss() < high - 150 * MB


def test_the_side_refuses_a_limit_that_is_not_positive_and_records_it() -> None:
    with pytest.raises(TftraceError, match="--max-process-memory 0 is not positive"):
        Side(ArtifactRef("model"), max_process_memory=0)
    side = Side(ArtifactRef("model"), max_process_memory=3_000_000_000)
    assert side.to_json()["max_process_memory"] == 3_000_000_000
    assert Side.from_json(side.to_json()) == side
    assert Side.from_json({**side.to_json(), "max_process_memory": None}).max_process_memory is None


def test_under_a_process_limit_the_child_maps_large_blocks_apart() -> None:
    """glibc would keep what earlier parts freed in its arenas; 1 MB blocks and larger are mapped
    apart, so they go back to the kernel when freed. Only under the limit, and a value the user
    set wins."""
    from tracer.runspec import child_env

    side = Side(ArtifactRef("model"))
    assert "MALLOC_MMAP_THRESHOLD_" not in child_env(side, base={})
    assert child_env(side.with_(max_process_memory=10**9), base={})["MALLOC_MMAP_THRESHOLD_"] == str(1 << 20)
    mine = {"MALLOC_MMAP_THRESHOLD_": "4194304"}
    assert child_env(side.with_(max_process_memory=10**9), base=mine)["MALLOC_MMAP_THRESHOLD_"] == "4194304"


# --------------------------------------------------------------------------- end to end


def _manifest(path: Path) -> dict:
    return json.loads((path / "manifest.json").read_text())


@pytest.mark.slow
def test_a_capture_stays_under_the_process_limit_and_loses_nothing(models: dict[str, Path], tmp_path: Path) -> None:
    """The sample detector (40.8 MB of tensors at batch 8, its largest weight 16.8 MB): captured
    once without the limit, which records TensorFlow's peak over the plain runs; then with a limit
    that leaves about 28 MB for the fetch, so it must split. The limited capture stays under the
    limit, says how it divided it, and holds the same values."""
    env = {"TF_ENABLE_ONEDNN_OPTS": "0"}
    model = str(models["detector"])
    whole, split = tmp_path / "whole", tmp_path / "split"
    proc = run_cli("capture", model, "--out", str(whole), "--batch-size", "8", env=env)
    assert proc.returncode == 0, proc.stderr
    free = _manifest(whole)
    assert free["fetch_chunks"] == 1 and free["spec"]["max_process_memory"] is None
    memory = free["memory"]
    assert memory["load_peak_bytes"] <= memory["plain_peak_bytes"] <= memory["run_peak_bytes"]
    assert "fetch_budget_bytes" not in memory

    limit = memory["plain_peak_bytes"] + writer_share() + 28 * MB
    proc = run_cli("capture", model, "--out", str(split), "--batch-size", "8", "--max-process-memory", str(limit),
                   env=env)
    assert proc.returncode == 0, proc.stderr
    held = _manifest(split)
    memory = held["memory"]
    assert held["spec"]["max_process_memory"] == limit and memory["max_process_memory"] == limit
    assert memory["writer_share_bytes"] == writer_share()
    assert memory["fetch_budget_bytes"] == limit - memory["plain_peak_bytes"] - memory["writer_share_bytes"]
    assert held["fetch_chunks"] >= 2
    assert memory["run_peak_bytes"] <= limit
    assert any(note.startswith(f"fetched in {held['fetch_chunks']} chunks to stay under the "
                               f"{memory['fetch_budget_bytes']:,} bytes --max-process-memory {limit:,} leaves")
               for note in held["notes"])
    assert held["tensors"].keys() == free["tensors"].keys()
    report = tmp_path / "report"
    proc = run_cli("compare", str(whole), str(split), "--out", str(report))  # the same values, part by part
    assert proc.returncode == 0 and proc.stdout.startswith("IDENTICAL"), (proc.stdout, proc.stderr)
    assert json.loads((report / "report.json").read_text())["verdict"] == "identical"


@pytest.mark.slow
def test_a_process_limit_tensorflow_alone_exceeds_is_refused_before_the_capture_exists(
        models: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cap"
    proc = run_cli("capture", str(models["detector"]), "--out", str(out), "--max-process-memory", "300000000",
                   env={"TF_ENABLE_ONEDNN_OPTS": "0"})
    assert_user_error(proc, "--max-process-memory 300,000,000 cannot be held: TensorFlow and the model held ",
                      "nothing was written", "Use --max-process-memory ")
    assert not out.exists()
