"""Where a command's seconds go in its child processes (tracer.children, issue 29)."""

from __future__ import annotations

import io
import json
import threading
import time
from pathlib import Path

import pytest
from rich.console import Console

from tracer import children
from tracer.artifacts.loader import ArtifactRef
from tracer.captures._events import valid
from tracer.captures.launcher import capture
from tracer.runspec import Side


def test_a_child_is_recorded_under_the_step_that_started_it() -> None:
    before = len(children.recorded())
    env: dict[str, str] = {}
    started = children.stamp(env)
    assert abs(float(env[children.SPAWNED_AT_ENV]) - time.time()) < 5
    with children.tagged("batch_1_vs_8"):
        inside = children.record("isolate", started, {"start_s": 0.25, "import_s": 2.5, "model_s": 0.5})
    outside = children.record("capture", started, None)  # a child that failed says nothing
    assert inside.tag == "batch_1_vs_8" and (inside.start_s, inside.import_s, inside.model_s) == (0.25, 2.5, 0.5)
    assert outside.tag == "" and outside.model_s is None and outside.wall_s >= 0
    assert children.recorded()[before:] == [inside, outside]


def test_tags_are_per_thread_so_two_experiments_at_once_keep_their_own() -> None:
    seen: dict[str, str] = {}

    def experiment(name: str) -> None:
        with children.tagged(name):
            time.sleep(0.05)  # the other thread enters its own block meanwhile
            seen[name] = children.record("isolate", time.monotonic()).tag

    threads = [threading.Thread(target=experiment, args=(n,)) for n in ("onednn", "xla")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {"onednn": "onednn", "xla": "xla"}


def test_summary_adds_up_each_part_and_each_purpose() -> None:
    kids = [children.ChildTime("capture", "captures", 5.0, 0.5, 3.0, 1.0),
            children.ChildTime("capture", "captures", 4.0, 0.5, 2.5, 0.5),
            children.ChildTime("timing", "costs", 10.0, None, None, None)]
    total = children.summary(kids)
    assert {k: total[k] for k in ("count", "reported", "wall_s", "start_s", "import_s", "model_s")} == {
        "count": 3, "reported": 2, "wall_s": 19.0, "start_s": 1.0, "import_s": 5.5, "model_s": 1.5}
    assert total["by_purpose"]["capture"]["wall_s"] == 9.0 and total["by_purpose"]["timing"]["reported"] == 0


@pytest.mark.parametrize("seconds, ok", [(1.5, True), (0.0, True), (-1.0, False), (float("nan"), False),
                                         (float("inf"), False), (3, False), ("2", False)])
def test_a_timings_event_is_checked_like_every_event(seconds, ok) -> None:
    assert valid({"event": "timings", "import_s": seconds, "model_s": 0.5}) is ok
    assert valid({"event": "timings", "import_s": 1.0, "model_s": 0.5, "start_s": seconds}) is ok


def test_a_report_a_child_forges_is_bounded() -> None:
    """A model runs in the child: what it reports is numbers in a range, or nothing."""
    child = children.record("capture", time.monotonic(), {"import_s": -5, "model_s": "a lot", "start_s": 1e30})
    assert (child.import_s, child.model_s, child.start_s) == (None, None, None)


@pytest.mark.slow
def test_a_capture_child_says_how_it_came_up(models: dict[str, Path], tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The manifest splits the load into TensorFlow's import and the rest, and says how long the
    child took to start; the parent's ledger holds the same child."""
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    before = len(children.recorded())
    capture(Side(ArtifactRef(str(models["detector"]))), tmp_path / "cap", force=True, console=Console(file=io.StringIO()))
    (kid,) = children.recorded()[before:]
    timings = json.loads((tmp_path / "cap" / "manifest.json").read_text())["timings"]
    assert kid.purpose == "capture" and kid.import_s == timings["import_s"] > 0.5  # TensorFlow takes seconds
    assert kid.start_s == timings["start_s"] > 0
    assert timings["load_s"] == pytest.approx(timings["import_s"] + kid.model_s, abs=2e-4)
    assert kid.wall_s > kid.start_s + kid.import_s + kid.model_s
