"""Isolation replays of both sides: B's child loads its model while A's replays run
(tracer.comparison.isolate._run_local_jobs), and a child started ahead that gets no job is stopped."""

from __future__ import annotations

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
    views = {key: SimpleNamespace(capture=SimpleNamespace(path=f"/captures/{key}")) for key in "ab"}
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
