"""The parent side of a capture, without TensorFlow: the child's environment and the event stream.

The children here are small Python scripts that speak the worker's JSON-line protocol, so the
launcher's reading, progress display, timeout and error handling are tested in milliseconds.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from conftest import REPO
from tracer.artifacts.loader import ArtifactRef
from tracer.captures.fingerprint import REDACTED, tensorflow_env
from tracer.captures.launcher import _follow
from tracer.errors import TftraceError
from tracer.runspec import InputSpec, Knobs, Side, child_env, parse_grappler


def _child(script: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], stdout=subprocess.PIPE,
                            start_new_session=True)


def _terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=120), out


def test_events_are_read_whole_even_when_split_across_writes() -> None:
    proc = _child(
        """
        import sys, time
        w = sys.stdout.write
        w("TF says hello, not JSON\\n"); sys.stdout.flush()
        w('{"event": "stage", "te'); sys.stdout.flush(); time.sleep(0.2)
        w('xt": "plain run"}\\n{"event": "progress", "done": 1, "total": 2, "bytes": 10}\\n'); sys.stdout.flush()
        w('[1, 2]\\n{"event": "error", "problem": "p", "fix": "f"}')
        """
    )
    events: list[dict[str, Any]] = []
    console, out = _terminal()
    error = _follow(proc, None, "cap", console, events.append)
    assert proc.returncode == 0
    assert events == [{"event": "stage", "text": "plain run"}, {"event": "progress", "done": 1, "total": 2, "bytes": 10},
                      {"event": "error", "problem": "p", "fix": "f"}]
    assert error == {"event": "error", "problem": "p", "fix": "f"}
    assert out.getvalue() == ""  # under a second: no progress bar


def test_events_with_missing_or_wrong_fields_are_dropped_not_a_crash() -> None:
    """A bare ``progress`` crashed the parent with a KeyError; every event's fields are checked."""
    proc = _child(
        """
        import json
        for event in ({"event": "progress"}, {"event": "progress", "done": "1", "total": 2, "bytes": 0},
                      {"event": "progress", "done": True, "total": 2, "bytes": 0}, {"event": "error", "problem": 3},
                      {"event": "stage"}, {"event": "launch", "what": "x"}, {"event": "stage", "text": "ok"}):
            print(json.dumps(event), flush=True)
        """
    )
    events: list[dict[str, Any]] = []
    assert _follow(proc, None, "cap", _terminal()[0], events.append) is None
    assert events == [{"event": "stage", "text": "ok"}]


def test_progress_bar_appears_after_a_second_on_a_terminal() -> None:
    proc = _child(
        """
        import json, sys, time
        for done in range(1, 4):
            time.sleep(0.5)
            print(json.dumps({"event": "progress", "done": done, "total": 3, "bytes": done * 2_500_000}), flush=True)
        """
    )
    console, out = _terminal()
    assert _follow(proc, None, "capture detector", console, None) is None
    shown = out.getvalue()
    assert "capture detector" in shown and "run 3/3" in shown and "7.5 MB" in shown


def test_progress_bar_appears_while_the_child_is_quiet() -> None:
    proc = _child(
        """
        import json, time
        print(json.dumps({"event": "stage", "text": "loading model"}), flush=True)
        time.sleep(1.6)
        """
    )
    console, out = _terminal()
    assert _follow(proc, None, "capture detector", console, None) is None
    assert "capture detector: loading model" in out.getvalue()


def test_a_quick_child_prints_nothing_on_a_pipe() -> None:
    proc = _child(
        """
        import json, time
        time.sleep(1.2)
        print(json.dumps({"event": "progress", "done": 1, "total": 1, "bytes": 1}), flush=True)
        """
    )
    out = io.StringIO()
    assert _follow(proc, None, "cap", Console(file=out, force_terminal=False), None) is None
    assert out.getvalue() == ""


def test_a_long_child_on_a_pipe_says_each_stage_and_where_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    """Piped into a CI log, a 35,000-op capture printed nothing for 24 minutes: past PLAIN_AFTER_S
    a line at each stage, and one at least every PLAIN_EVERY_S while a stage goes on."""
    from tracer.captures import progress_view

    monkeypatch.setattr(progress_view, "PLAIN_AFTER_S", 0.3)
    monkeypatch.setattr(progress_view, "PLAIN_EVERY_S", 0.6)
    proc = _child(
        """
        import json, time
        say = lambda **e: print(json.dumps(e), flush=True)
        say(event="stage", text="loading model")
        time.sleep(0.5)
        say(event="stage", text="instrumented run: fetching 35,445 tensors")
        time.sleep(1.5)
        say(event="stage", text="instrumented run: storing 35,445 tensors")
        say(event="progress", done=0, total=1, bytes=350_000_000, stored=12000, tensors=35445)
        time.sleep(0.9)
        """
    )
    out = io.StringIO()
    assert _follow(proc, None, "capture fp32 [cpu, batch 4]", Console(file=out, force_terminal=False, width=80),
                   None) is None
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("capture fp32 [cpu, batch 4]: ") and line.endswith(" s)") for line in lines)
    fetching = [line for line in lines if "fetching 35,445 tensors" in line]
    assert len(fetching) >= 2  # the stage, then still at it a PLAIN_EVERY_S later
    assert any("storing 35,445 tensors, run 1/1 · 12,000/35,445 tensors stored, 350.0 MB" in line for line in lines)
    assert not any(line.startswith(" ") for line in lines)  # one line each, never wrapped at 80 columns


def test_timeout_kills_the_whole_child_group() -> None:
    proc = _child(
        """
        import json, subprocess, sys, time
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        print(json.dumps({"event": "stage", "text": str(grandchild.pid)}), flush=True)
        time.sleep(60)
        """
    )
    events: list[dict[str, Any]] = []
    started = time.monotonic()
    with pytest.raises(TftraceError, match=r"cap did not finish within --timeout 0.5 s and was stopped"):
        _follow(proc, 0.5, "cap", _terminal()[0], events.append)
    assert time.monotonic() - started < 10
    assert proc.poll() is not None and proc.returncode < 0
    grandchild = int(events[0]["text"])
    for _ in range(100):  # the orphan is reaped by init shortly after the signal
        if not _running(grandchild):
            break
        time.sleep(0.05)
    assert not _running(grandchild)


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie waiting to be reaped."""
    try:
        return "State:\tZ" not in Path("/proc", str(pid), "status").read_text()
    except FileNotFoundError:
        return False


def test_a_child_that_closes_stdout_but_keeps_running_still_meets_the_deadline() -> None:
    proc = _child(
        """
        import os, time
        os.close(1)
        time.sleep(60)
        """
    )
    with pytest.raises(TftraceError, match="did not finish within --timeout 0.5 s"):
        _follow(proc, 0.5, "cap", _terminal()[0], None)
    assert proc.poll() is not None


# --------------------------------------------------------------------------- the child's environment


def _side(**knobs: Any) -> Side:
    return Side(ArtifactRef("m"), knobs=Knobs(**knobs))


def test_child_env_sets_what_tf_reads_at_import() -> None:
    base = {"PATH": "/bin", "TF_XLA_FLAGS": "--tf_xla_auto_jit=2 --tf_xla_enable_lazy_compilation=false"}
    env = child_env(_side(onednn="on", autotune="off", determinism=True, xla="off", env=(("TF_X", "1"),)), base)
    assert env == {
        "PATH": "/bin", "TF_ENABLE_ONEDNN_OPTS": "1", "TF_CUDNN_USE_AUTOTUNE": "0", "TF_DETERMINISTIC_OPS": "1",
        "TF_XLA_FLAGS": "--tf_xla_enable_lazy_compilation=false", "CUDA_VISIBLE_DEVICES": "-1",
        "TF_CPP_MIN_LOG_LEVEL": "2", "TF_X": "1",
    }
    assert child_env(_side(onednn="off", xla="on"), {})["TF_ENABLE_ONEDNN_OPTS"] == "0"
    assert child_env(_side(xla="on"), {})["TF_XLA_FLAGS"] == "--tf_xla_auto_jit=2 --tf_xla_cpu_global_jit"


def test_default_knobs_inherit_the_callers_environment() -> None:
    base = {"TF_ENABLE_ONEDNN_OPTS": "1", "CUDA_VISIBLE_DEVICES": "1", "TF_CPP_MIN_LOG_LEVEL": "0"}
    assert child_env(_side(), base) == {**base, "CUDA_VISIBLE_DEVICES": "-1"}  # a CPU side never sees a GPU
    gpu = Side(ArtifactRef("m"), device="gpu:1")
    assert child_env(gpu, base) == {**base, "TF_FORCE_GPU_ALLOW_GROWTH": "true"}  # shares the GPU with others
    assert child_env(gpu, {**base, "TF_FORCE_GPU_ALLOW_GROWTH": "false"})["TF_FORCE_GPU_ALLOW_GROWTH"] == "false"


def test_fingerprint_keeps_tensorflows_variables_and_no_secrets() -> None:
    """The fingerprint's TF_* variables: TensorFlow's kept as they are; Terraform's (same prefix,
    TF_VAR_* and TF_TOKEN_* hold secrets) left out; any other credential-like name kept as set only."""
    environ = {
        "TF_ENABLE_ONEDNN_OPTS": "0", "TF_XLA_FLAGS": "--tf_xla_auto_jit=2", "TF_CUDNN_USE_AUTOTUNE": "0",
        "TF_CPP_MIN_LOG_LEVEL": "2", "TF_GPU_ALLOCATOR": "cuda_malloc_async", "TF_LOGGING_SOMETHING": "1",
        "TF_VAR_db_password": "hunter2", "TF_TOKEN_app_terraform_io": "t1", "TF_CLI_ARGS_plan": "-refresh=false",
        "TF_CLI_CONFIG_FILE": "/root/.terraformrc", "TF_LOG": "TRACE", "TF_LOG_PATH": "tf.log",
        "TF_WORKSPACE": "prod", "TF_IN_AUTOMATION": "1", "TF_PLUGIN_CACHE_DIR": "/c", "TF_REGISTRY_CLIENT_TIMEOUT": "15",
        "TF_API_TOKEN": "t2", "TF_GCS_SECRET": "s", "HOME": "/root", "AWS_SECRET_ACCESS_KEY": "k",
    }
    assert tensorflow_env(environ) == {
        "TF_API_TOKEN": REDACTED, "TF_CPP_MIN_LOG_LEVEL": "2", "TF_CUDNN_USE_AUTOTUNE": "0",
        "TF_ENABLE_ONEDNN_OPTS": "0", "TF_GCS_SECRET": REDACTED, "TF_GPU_ALLOCATOR": "cuda_malloc_async",
        "TF_LOGGING_SOMETHING": "1", "TF_XLA_FLAGS": "--tf_xla_auto_jit=2",
    }
    assert list(tensorflow_env(environ)) == sorted(tensorflow_env(environ))

def test_knob_validation() -> None:
    assert parse_grappler("remapping=OFF, constant_folding=on") == (("constant_folding", "on"), ("remapping", "off"))
    with pytest.raises(TftraceError, match="has no value"):
        parse_grappler("remapping")
    with pytest.raises(TftraceError, match="takes on, off or default"):
        Knobs(onednn="yes")
    with pytest.raises(TftraceError, match="--env TF_ENABLE_ONEDNN_OPTS=1 contradicts --onednn off"):
        Knobs(onednn="off", env=(("TF_ENABLE_ONEDNN_OPTS", "1"),))
    assert Knobs(onednn="on", env=(("TF_ENABLE_ONEDNN_OPTS", "1"),)).onednn == "on"
    with pytest.raises(TftraceError, match="unknown device 'tpu'"):
        Side(ArtifactRef("m"), device="tpu")


def test_side_survives_its_json_round_trip() -> None:
    side = Side(ArtifactRef("m", signature="s"), device="gpu:1", batch_size=4,
                knobs=Knobs(onednn="off", threads=(2, 1), grappler=(("remapping", "off"),), env=(("A", "b"),),
                            session_config_text="x: 1", session_config_path="/c.pbtxt"),
                max_memory=123, timeout_s=9.5)
    assert Side.from_json(side.to_json()) == side
    assert side.label() == "gpu:1, batch 4, onednn=off, threads=(2, 1), grappler={'remapping': 'off'}, env={'A': 'b'}, " \
                           "session config c.pbtxt"


def test_an_orphaned_child_stops_its_group_when_its_parent_is_sigkilled(tmp_path: Path) -> None:
    """The parent is SIGKILLed while its child is busy and silent (a long session.run): nothing
    is written to the pipe, so only tracer.captures.orphan can notice, and the whole group goes."""
    pids = tmp_path / "pids"
    child = textwrap.dedent(
        f"""
        import subprocess, sys, time
        from tracer.captures.orphan import exit_with_parent
        exit_with_parent(interval_s=0.1)
        grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pids)!r}, "w").write(f"{{grandchild.pid}}")
        time.sleep(60)
        """
    )
    parent = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        env = {{**os.environ, "TFTRACE_PARENT_PID": str(os.getpid())}}
        child = subprocess.Popen([sys.executable, "-c", {child!r}], env=env, start_new_session=True,
                                 stdout=subprocess.PIPE)
        print(child.pid, flush=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", parent], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        child_pid = int(proc.stdout.readline())
        deadline = time.monotonic() + 30
        while not pids.exists() or not pids.read_text():
            assert time.monotonic() < deadline, "the child never started its grandchild"
            time.sleep(0.05)
        grandchild = int(pids.read_text())
        assert _running(child_pid) and _running(grandchild)
    finally:
        proc.kill()
        proc.communicate()
    deadline = time.monotonic() + 10
    while (_running(child_pid) or _running(grandchild)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(child_pid), "the orphaned child ran on"
    assert not _running(grandchild), "the orphaned child's group ran on"


def test_a_child_dead_at_start_takes_its_job_and_its_cancel_without_a_broken_pipe():
    """compare's side B, started ahead, can die at import (a bad TF_XLA_FLAGS) before its job is
    sent: the job stayed in stdin's buffer, and closing stdin in cancel() flushed it into the broken
    pipe, so the user got "internal error: BrokenPipeError" instead of the child's own error (seen
    once in CI, test_child_errors). The writes and the close now take a dead child quietly."""
    from tracer.captures.launcher import _close_stdin, _send

    proc = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
    proc.wait()
    _send(proc, "x" * 200_000, close=False)  # the prepare message: more than the pipe holds
    _send(proc, "{}", close=True)  # the job
    _close_stdin(proc)  # cancel()
    assert proc.stdin is not None and proc.stdin.closed


def test_a_models_path_and_stage_reach_a_pipe_and_a_terminal_without_control_bytes_or_markup(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The label names the model's directory, which a received artifact chooses."""
    from tracer.captures import progress_view

    monkeypatch.setattr(progress_view, "PLAIN_AFTER_S", 0.0)
    monkeypatch.setattr(progress_view, "PROGRESS_AFTER_S", 0.0)
    for terminal in (False, True):
        out = io.StringIO()
        view = progress_view.ProgressView(Console(file=out, force_terminal=terminal, width=120),
                                          "capture evil\x1b[2J[bold]x[/bold] [cpu]")
        view.stage("loading\x07 model")
        time.sleep(0.2)  # the bar draws a frame
        view.tick()
        view.stop()
        shown = out.getvalue()
        assert "\x1b[2J" not in shown and "\x07" not in shown and "\\x1b[2J[bold]x[/bold]" in shown, repr(shown)


def test_a_side_fed_from_a_file_is_labelled_by_the_file_not_the_default_count() -> None:
    """The Model Garden RetinaNet's compare printed "capture fp32 [cpu, batch 8]" for a file of 2
    images (8 is --examples' default, which a file overrides); the count is read in the child."""
    side = Side(ArtifactRef("m"), inputs=InputSpec(inputs_file="/data/images.npz"))
    assert side.label() == "cpu, every example of images.npz"
    assert side.with_(batch_size=1).label() == "cpu, batch 1"
    assert Side(ArtifactRef("m")).label() == "cpu, batch 8"  # generated examples: --examples says how many


def test_the_last_event_written_as_the_child_exits_is_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    """The race CI met once under load: select gave up just before the child's last line (its
    timings) arrived, and the child had exited by the time the parent asked, so the line was left
    in the pipe and the child counted as one that never said how it came up. Here select gives up
    once with that line already in the pipe, and the child has exited."""
    import selectors  # noqa: PLC0415

    from tracer.captures import launcher  # noqa: PLC0415

    real = selectors.DefaultSelector

    class LateOnce(real):  # type: ignore[misc, valid-type]
        gave_up = False

        def select(self, timeout: float | None = None) -> list:
            if not LateOnce.gave_up:
                LateOnce.gave_up = True
                return []  # the wait ended a moment before the line came
            return super().select(timeout)

    class Exited:
        returncode = 0

        def poll(self) -> int:
            return 0

    read_end, write_end = os.pipe()
    os.write(write_end, b'{"event": "stage", "text": "loading model"}\n{"event": "timings", "import_s": 1.5, "model_s": 0.25}\n')
    os.close(write_end)
    monkeypatch.setattr(launcher.selectors, "DefaultSelector", LateOnce)
    try:
        lines = list(launcher._lines(Exited(), None, read_end))  # type: ignore[arg-type]
    finally:
        os.close(read_end)
    assert LateOnce.gave_up
    assert lines == ['{"event": "stage", "text": "loading model"}', '{"event": "timings", "import_s": 1.5, "model_s": 0.25}']
