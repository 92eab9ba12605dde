"""diagnose's captures: each distinct run captured once, the next runs' children loading ahead.

No TensorFlow here: the capture children are replaced by fakes that record what they were
given. A real diagnose that loads ahead runs in tests/test_diagnose.py (``full``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from tracer import children
from tracer.artifacts.loader import ArtifactRef
from tracer.diagnosis import captures as captures_module
from tracer.diagnosis.captures import Captures, captures_ahead
from tracer.diagnosis.plan import Run, with_knobs
from tracer.errors import TftraceError
from tracer.runspec import InputSpec, Side

GIB = 1 << 30


def _side(**knobs: Any) -> Side:
    side = Side(ArtifactRef("model/ckpt"), batch_size=1, inputs=InputSpec(examples=2))
    return with_knobs(side, **knobs) if knobs else side


class _Fakes:
    """Stands in for launcher.PreparedChild and launcher.capture; keeps the order of events."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail_on: str | None = None) -> None:
        self.events: list[tuple[str, str]] = []
        self.no_start: str | None = None  # a side whose child cannot even start
        fakes = self

        class Child:
            def __init__(self, side: Side, *, prepare: bool = False) -> None:
                assert prepare
                self.side = side
                if side.label() == fakes.no_start:
                    raise TftraceError(f"no interpreter for {side.label()}", "give one")
                fakes.events.append(("start", side.label()))

            def cancel(self) -> None:
                fakes.events.append(("cancel", self.side.label()))

        def capture(side: Side, path: Path, *, force: bool, console: Console, prepared: Any = None) -> str:
            fakes.events.append(("capture ahead" if prepared is not None else "capture", side.label()))
            if prepared is not None:
                assert prepared.side == side
            if side.label() == fail_on:
                raise TftraceError(f"{side.label()} refused", "fix it")
            return f"capture of {side.label()}"

        monkeypatch.setattr(captures_module, "PreparedChild", Child)
        monkeypatch.setattr(captures_module, "capture_side", capture)


def test_the_next_runs_load_ahead_while_one_is_captured_and_each_gets_its_own_child(tmp_path, monkeypatch):
    fakes = _Fakes(monkeypatch)
    runs = [Run(_side(), "base"), Run(_side(autotune="off"), "off"), Run(_side(tf32="off"), "tf32 off"),
            Run(_side(determinism=True), "determinism")]
    labels = [r.side.label() for r in runs]
    with Captures(tmp_path, Console(file=None, quiet=True), ahead=2) as captures:
        captures.expect(runs)
        assert [captures.get(r) for r in runs] == [f"capture of {label}" for label in labels]
        assert captures.get(runs[1]) == f"capture of {labels[1]}"  # captured once
    assert fakes.events == [
        ("start", labels[1]), ("start", labels[2]), ("capture", labels[0]),  # two load while the first runs
        ("start", labels[3]), ("capture ahead", labels[1]),
        ("capture ahead", labels[2]),
        ("capture ahead", labels[3]),
    ]


def test_a_child_loaded_for_a_run_never_asked_for_is_stopped(tmp_path, monkeypatch):
    """A refused run ends the stage (or the diagnosis): the children loading for the runs after it
    are stopped, none left behind."""
    runs = [Run(_side(), "base"), Run(_side(autotune="off"), "off"), Run(_side(tf32="off"), "tf32 off")]
    labels = [r.side.label() for r in runs]
    fakes = _Fakes(monkeypatch, fail_on=labels[0])
    with pytest.raises(TftraceError, match="refused"):
        with Captures(tmp_path, Console(file=None, quiet=True), ahead=4) as captures:
            captures.expect(runs)
            captures.get(runs[0])
    assert fakes.events == [("start", labels[1]), ("start", labels[2]), ("capture", labels[0]),
                            ("cancel", labels[1]), ("cancel", labels[2])]


def test_a_child_left_from_the_stage_before_gives_its_place_to_the_next_stages_runs(tmp_path, monkeypatch):
    """A stage that did not ask for every run it expected (a run refused, its pair's other side
    never captured) leaves a loaded child behind: the next stage's expectation stops it at once,
    and loads its own runs in its place."""
    fakes = _Fakes(monkeypatch)
    stage_1 = [Run(_side(), "base"), Run(_side(autotune="off"), "off")]
    stage_2 = [Run(_side(tf32="off"), "tf32 off"), Run(_side(determinism=True), "determinism")]
    labels = [r.side.label() for r in stage_1 + stage_2]
    with Captures(tmp_path, Console(file=None, quiet=True), ahead=1) as captures:
        captures.expect(stage_1)
        captures.get(stage_1[0])  # the stage ends here: "off" was loaded and never asked for
        captures.expect(stage_2)
        for run in stage_2:
            captures.get(run)
    assert fakes.events == [
        ("start", labels[1]), ("capture", labels[0]),
        ("cancel", labels[1]),
        ("start", labels[3]), ("capture", labels[2]),
        ("capture ahead", labels[3]),
    ]


def test_a_child_that_cannot_start_ahead_is_not_the_error_of_the_run_at_hand(tmp_path, monkeypatch):
    """Starting the next run's child ahead fails (say, its --python is gone): the run at hand is
    captured as usual, and the next run is captured when asked, where its own error would be said."""
    fakes = _Fakes(monkeypatch)
    runs = [Run(_side(), "base"), Run(_side(autotune="off"), "off"), Run(_side(tf32="off"), "tf32 off")]
    labels = [r.side.label() for r in runs]
    fakes.no_start = labels[1]
    with Captures(tmp_path, Console(file=None, quiet=True), ahead=1) as captures:
        captures.expect(runs)
        for run in runs:
            captures.get(run)
    assert fakes.events == [("start", labels[2]), ("capture", labels[0]), ("capture", labels[1]),
                            ("capture ahead", labels[2])]


def test_with_nothing_ahead_every_run_is_captured_by_a_child_of_its_own_when_asked(tmp_path, monkeypatch):
    fakes = _Fakes(monkeypatch)
    runs = [Run(_side(), "base"), Run(_side(autotune="off"), "off")]
    with Captures(tmp_path, Console(file=None, quiet=True), ahead=0) as captures:
        captures.expect(runs)
        for run in runs:
            captures.get(run)
    assert [e[0] for e in fakes.events] == ["capture", "capture"]


def test_loading_ahead_begins_when_diagnose_allows_it_after_the_base_side(tmp_path, monkeypatch):
    """As diagnose runs: the base side is captured with nothing ahead (how many children fit
    depends on that model's weights), then load_ahead lets the next runs load."""
    fakes = _Fakes(monkeypatch)
    base, runs = Run(_side(), "base"), [Run(_side(autotune="off"), "off"), Run(_side(tf32="off"), "tf32 off")]
    with Captures(tmp_path, Console(file=None, quiet=True)) as captures:
        captures.get(base)
        captures.load_ahead(1)
        captures.expect(runs)
        for run in runs:
            captures.get(run)
    labels = [r.side.label() for r in runs]
    assert fakes.events == [("capture", base.side.label()), ("start", labels[1]), ("capture", labels[0]),
                            ("capture ahead", labels[1])]


@pytest.mark.parametrize(("cpus", "available", "ahead"), [
    (1, 64 * GIB, 0),  # one core: the loads would take it from the capture at work
    (2, 24 * GIB, 1),  # this CI machine
    (16, 128 * GIB, 4),  # the lent H200's host
    (64, 512 * GIB, 4),  # at most MAX_AHEAD
    (16, 4 * GIB, 1),  # 2 GiB at work, 1 GiB of headroom each: memory allows one
    (16, 3 * GIB, 0),
])
def test_how_many_load_ahead_follows_the_cores_and_the_memory(cpus, available, ahead):
    assert captures_ahead(_side(), cpus=cpus, available=available) == ahead


def test_a_big_models_children_are_counted_at_its_weights():
    """A child that has loaded the model holds its weights: 3 GiB of them on a 16-core machine
    with 12 GiB free leaves room for two children ahead, not four."""
    per_child = GIB + 3 * GIB
    assert captures_ahead(_side(), cpus=16, available=12 * GIB, per_child=per_child) == 2
    assert captures_ahead(_side(), cpus=16, available=12 * GIB) == 4


def test_what_a_loaded_child_holds_is_the_capture_s_tensors_that_do_not_grow_with_the_batch():
    from tracer.captures.reader import Capture
    from tracer.diagnosis.captures import held_whole

    capture = Capture(Path("cap"), {"tensors": {"w:0": {"size_bytes": 300}, "w/read:0": {"size_bytes": 300},
                                                "x:0": {"size_bytes": 5000}, "shape:0": {"size_bytes": 16}},
                                    "tensor_layout": {"x:0": "rows", "w:0": "whole", "w/read:0": "whole"}}, {})
    assert held_whole(capture) == 616  # a weight and its read both count: errs high


def test_a_child_started_ahead_counts_its_wait_apart_from_its_work():
    started = 100.0
    reported = {"start_s": 1.0, "import_s": 3.0, "model_s": 0.5}
    waited = children.record("capture", started, reported, job_sent=started + 10.0)
    assert waited.idle_s == 5.5 and waited.model_s == 0.5
    late = children.record("capture", started, reported, job_sent=started + 2.0)  # its job came before it was ready
    assert late.idle_s == 0.0
    plain = children.record("capture", started, reported)
    assert plain.idle_s is None
    total = children.summary([waited, late, plain])
    assert total["idle_s"] == 5.5 and total["import_s"] == 9.0


def test_two_experiments_finishing_together_print_their_counts_in_order() -> None:
    """Two experiments run at once and each prints "[experiments k/n]" when it ends. The first
    to take its count is made slow to print: the second must wait for it, or "2/2" comes out
    before "1/2" (CI, 2026-12-03: [2, 1, 3, 4, 5])."""
    import threading
    import time

    from tracer.diagnosis.run import _Progress

    lines: list[str] = []

    class SlowFirstConsole:
        def print(self, text: str, **_kw: object) -> None:
            if not lines and threading.current_thread().name == "first":
                time.sleep(0.3)  # the first step's line is late
            lines.append(text)

    progress = _Progress(SlowFirstConsole())  # type: ignore[arg-type]
    progress.begin("experiments", 2)
    first = threading.Thread(target=progress.step, args=("a",), name="first")
    first.start()
    time.sleep(0.1)  # the first has taken its count and is printing
    second = threading.Thread(target=progress.step, args=("b",), name="second")
    second.start()
    first.join()
    second.join()
    assert [line.split("]")[0] for line in lines] == ["[experiments 1/2", "[experiments 2/2"]
