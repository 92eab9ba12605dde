"""Isolation replays of both sides: B's child loads its model while A's replays run
(tracer.comparison.isolate._run_local_jobs), and a child started ahead that gets no job is stopped."""

from __future__ import annotations

import contextlib
import json
from types import SimpleNamespace
from typing import Any

import pytest

from tracer.artifacts.loader import ArtifactRef
from tracer.comparison import isolate
from tracer.errors import TftraceError
from tracer.runspec import Side


class Child:
    """A child started ahead, as far as the orchestration sees one."""

    def __init__(self, side: Side) -> None:
        self.side, self.cancelled = side, False

    def cancel(self) -> None:
        self.cancelled = True


def _setup(monkeypatch: pytest.MonkeyPatch, fail_a: bool = False) -> tuple[dict[str, Any], list, list[Child]]:
    jobs = {key: {"mode": "isolate", "side": Side(ArtifactRef(f"/models/{key}"), max_memory=1000 + i).to_json(),
                  "ops": [{"id": 0}]} for i, key in enumerate("ab")}
    views = {key: SimpleNamespace(capture=SimpleNamespace(path=f"/captures/{key}", spec=jobs[key]["side"]))
             for key in "ab"}
    ran: list[tuple[str, Any]] = []
    started: list[Child] = []

    def ahead(side: Side, beside: int) -> Child:
        assert (side.artifact.path, beside) == ("/models/b", 1000)  # B's side, beside A's child's limit
        started.append(Child(side))
        return started[-1]

    def run_job(job: dict[str, Any], *, child: Child | None = None, **_: Any) -> None:
        ran.append((Side.from_json(job["side"]).artifact.path, child))
        if fail_a and job is jobs["a"]:
            raise TftraceError("refused", "fix")

    monkeypatch.setattr(isolate, "_local_side", lambda view: object())
    monkeypatch.setattr(isolate, "made_with", lambda path: None)
    monkeypatch.setattr(isolate, "isolation_ahead", ahead)
    monkeypatch.setattr(isolate, "run_job", run_job)
    return {"jobs": jobs, "views": views}, ran, started


def test_bs_child_is_started_when_as_replays_run_and_given_bs_job(monkeypatch: pytest.MonkeyPatch) -> None:
    given, ran, started = _setup(monkeypatch)
    isolate._run_local_jobs(given["jobs"], given["views"], None, {"a": False, "b": False})
    assert len(started) == 1 and ran == [("/models/a", None), ("/models/b", started[0])]
    assert not started[0].cancelled


@pytest.mark.parametrize("then", ["no origin", "an error"])
def test_as_replay_child_started_during_the_noise_is_stopped_when_it_gets_no_job(monkeypatch: pytest.MonkeyPatch,
                                                                                 then: str) -> None:
    """compare's judging (judging.Judging) starts A's replay child once the last noise repeat is up (measure_noise's
    ``then``) and holds it in the pipeline's ChildrenAhead; where nothing is replayed, or judging fails, that
    child is stopped on leaving it."""
    from tracer.captures.launcher import ChildrenAhead
    from tracer.comparison import judging
    from tracer.comparison.noise import RepeatPlan

    started: list[Child] = []

    def measure_noise(*_: Any, then: Any = None, **__: Any) -> Any:
        assert then is not None
        then(1000)  # the last repeat's child is up, held to 1000 bytes
        return judging.Noise()

    def ahead(side: Any, beside: int) -> Child:
        assert (side, beside) == ("A's replay side", 1000)
        started.append(Child(side))
        return started[-1]

    def classify_and_isolate(self: Any, isolate: int, drawn: Any = frozenset()) -> Any:
        assert self.ahead.waiting("replay_a") is started[0] and not started[0].cancelled
        if then == "an error":
            raise TftraceError("judging failed", "fix")
        return SimpleNamespace(origins=[]), {}

    monkeypatch.setattr(judging, "measure_noise", measure_noise)
    monkeypatch.setattr(judging, "isolation_ahead", ahead)
    monkeypatch.setattr(judging, "replays_local", lambda view: True)
    monkeypatch.setattr(judging, "replay_side", lambda capture, allowed: "A's replay side")
    monkeypatch.setattr(judging, "weights_set_at_load", lambda per_tensor, graph: set())
    monkeypatch.setattr(judging, "load_state_variables", lambda isolation, graph: set())
    monkeypatch.setattr(judging.Judging, "_classify_and_isolate", classify_and_isolate)
    with pytest.raises(TftraceError) if then == "an error" else contextlib.nullcontext():
        with ChildrenAhead() as held:
            judging.Judging(
                targets={"a": "A", "b": "B"}, captures={"a": object(), "b": object()},
                views=(SimpleNamespace(graph=None), SimpleNamespace(graph=None)), alignment=None,
                metrics={"t:0": SimpleNamespace(identical=False)}, tolerance=None, out=None, console=None,
                signature_map={}, permits={"a": False, "b": False}, plan=RepeatPlan({"a": 2, "b": 2}, [], []),
                ahead=held).run(2, 1)
    assert len(started) == 1 and started[0].cancelled


def test_a_child_started_ahead_is_stopped_when_as_replays_end_in_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    given, ran, started = _setup(monkeypatch, fail_a=True)
    with pytest.raises(TftraceError):
        isolate._run_local_jobs(given["jobs"], given["views"], None, {"a": False, "b": False})
    assert ran == [("/models/a", None)] and started[0].cancelled


@pytest.mark.slow
def test_the_readmes_example_replays_b_in_a_child_that_loaded_while_as_replays_ran(
        models: dict[str, Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checkpoint against its bfloat16 export (the README's example): the same answer at
    `dense/MatMul` (own error, 0.0344), and B's isolation child was started ahead of its job."""
    from tracer import children
    from tracer.comparison.pipeline import compare

    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    before = len(children.recorded())
    comparison = compare(str(models["detector"]), str(models["detector_bf16"]), tmp_path / "out")
    result = comparison.isolation["dense/MatMul"]
    assert (result.verdict, round(result.max_abs, 4)) == ("own_error", 0.0344)
    replays = [c for c in children.recorded()[before:] if c.purpose == "isolate"]
    assert len(replays) == 2 and replays[0].idle_s is None and replays[1].idle_s is not None


@pytest.mark.slow
def test_with_the_noise_measured_as_replay_child_loads_while_the_last_repeat_captures(
        models: dict[str, Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same example with --repeat 2: A's isolation child is started once the last repeat's child
    is up, and waits for its job loaded (its idle time is recorded), as B's does while A's replays
    run. The answer is the same; no child is left running."""
    from tracer import children
    from tracer.comparison.pipeline import compare
    from test_verdict import _live_children

    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    before = len(children.recorded())
    comparison = compare(str(models["detector"]), str(models["detector_bf16"]), tmp_path / "out", repeat=2)
    result = comparison.isolation["dense/MatMul"]
    assert (result.verdict, round(result.max_abs, 4)) == ("own_error", 0.0344)
    ran = children.recorded()[before:]
    assert [c.purpose for c in ran].count("capture") == 4
    replays = [c for c in ran if c.purpose == "isolate"]
    assert len(replays) == 2 and all(c.idle_s is not None for c in replays), ran
    assert _live_children() == []


@pytest.mark.slow
def test_a_side_whose_runs_repeat_an_origin_its_replay_moved_is_run_twice_more(
        models: dict[str, Any], tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Run s on the H200: each side's two runs agreed bit for bit, and B's replay of the origin, in
    a third process, differed from B's capture. On this CPU every run repeats itself, so A's replay
    is moved here by 1e-3 before it is judged (as a process that picked another kernel moves it);
    the rest is real: A's replay moved while A was not measured, so A runs twice (judged again:
    its replay moved again); its two runs repeated `dense/MatMul` bit for bit, so A runs twice more,
    once, and those four runs, which repeat it too, are said in the headline."""
    import numpy as np

    from tracer import children
    from tracer.comparison import judge
    from tracer.comparison.pipeline import compare
    from tracer.report.build import build_report
    from tracer.report.headline import build_headline

    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    real = judge._run_to_run

    def moved_a(capture: Any, side: str, op: Any, replay: np.ndarray, roles: Any) -> Any:
        return real(capture, side, op, replay + np.float32(1e-3) if side == "a" else replay, roles)

    monkeypatch.setattr(judge, "_run_to_run", moved_a)
    out = tmp_path / "out"
    before = len(children.recorded())
    comparison = compare(str(models["detector"]), str(models["detector_bf16"]), out)
    noise = comparison.noise
    assert noise["a"]["runs"] == 4 and noise["a"]["repeats_itself"] and noise["processes"] == 3
    assert noise["a"]["more_runs"] == {"added": 2, "because": (
        "its 2 runs repeated `dense/MatMul` bit for bit, but its replay of it in one more process differed from its "
        "capture by up to 0.001")}
    assert noise["a"]["why"].startswith("its replay of `dense/MatMul` differed from its own capture by up to 0.001")
    assert "skipped" in noise["b"]
    ran = children.recorded()[before:]
    assert [c.purpose for c in ran].count("capture") == 5  # A, B, and A's three further runs
    assert [c.purpose for c in ran].count("isolate") == 4  # twice: then A's further runs moved nothing
    result = comparison.isolation["dense/MatMul"]
    assert (result.verdict, round(result.max_abs, 4), result.replay_moved) == ("own_error", 0.0344, ["a"])
    # A's further runs moved nothing, so its replays, made once, were judged again knowing they repeat the op;
    # the index a later `tftrace report` judges from says so too
    index = json.loads((out / "work" / "isolation_index.json").read_text())
    assert [(op["node"], op["repeated"]) for op in index["ops"]] == [("dense/MatMul", ["a"])]
    report = build_report(comparison)
    assert "A ran 2 more times, which repeated it bit for bit too" in build_headline(report)[0]["text"]
