"""In the parent: start a child process for one side and follow it.

The parent never imports TensorFlow. It builds the child's environment from the side
(:func:`tracer.runspec.child_env`), passes the job as a JSON file, shows the child's progress,
and turns the child's fate into either a result or one :class:`TftraceError`: a user error the
child reported, a crash (with the tail of its stderr), a timeout, or an interruption.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..errors import TftraceError
from ..runspec import Side, child_env

__all__ = ["run_child", "capture"]

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
STDERR_TAIL_LINES = 15


def run_child(
    job: dict[str, Any],
    side: Side,
    *,
    label: str,
    console: Console | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> None:
    """Run ``python -m tracer.capture.worker`` for ``job``; raise TftraceError if it fails."""
    env = child_env(side)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    console = console or Console(stderr=True)
    with tempfile.TemporaryDirectory(prefix="tftrace-job-") as tmp:
        job_path = Path(tmp, "job.json")
        job_path.write_text(json.dumps(job), encoding="utf-8")
        stderr_path = Path(tmp, "stderr.txt")
        with open(stderr_path, "w+", encoding="utf-8", errors="replace") as stderr_file:
            proc = subprocess.Popen(
                [sys.executable, "-m", "tracer.capture.worker", str(job_path)],
                stdout=subprocess.PIPE,
                stderr=stderr_file,
                env=env,
                text=True,
                start_new_session=True,  # so a timeout or Ctrl-C can stop the whole child group
            )
            error = _follow(proc, side.timeout_s, label, console, on_event)
            stderr_file.seek(0)
            tail = stderr_file.read().strip().splitlines()[-STDERR_TAIL_LINES:]
    if error is not None:
        raise TftraceError(error["problem"], error.get("fix", ""))
    if proc.returncode != 0:
        how = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited with {proc.returncode}"
        shown = "\n".join("    " + line for line in tail) or "    (no output)"
        raise TftraceError(
            f"the child process running {label} {how}; the tail of its stderr:\n{shown}\n",
            "fix what it reports (re-run with --debug for the full picture); any partial output is left incomplete",
        )


def _follow(
    proc: subprocess.Popen,
    timeout_s: float | None,
    label: str,
    console: Console,
    on_event: Callable[[dict[str, Any]], None] | None,
) -> dict[str, Any] | None:
    """Read the child's JSON lines until it exits; returns its reported error, if any."""
    error = None
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    progress = Progress(
        TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} runs"),
        TextColumn("{task.fields[mb]:.1f} MB"), TimeElapsedColumn(),
        console=console, transient=True, disable=not console.is_terminal,
    )
    task = progress.add_task(label, total=None, mb=0.0)
    try:
        with progress:
            assert proc.stdout is not None
            for line in _lines(proc, deadline):
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue  # stray prints from TF or user code in the child
                if on_event:
                    on_event(event)
                if event.get("event") == "error":
                    error = event
                elif event.get("event") == "stage":
                    progress.update(task, description=f"{label}: {event['text']}")
                elif event.get("event") == "progress":
                    progress.update(task, completed=event["done"], total=event["total"], mb=event["bytes"] / 1e6)
            proc.wait()
    except KeyboardInterrupt:
        _kill(proc)
        raise
    except TimeoutError:
        _kill(proc)
        raise TftraceError(
            f"{label} did not finish within --timeout {timeout_s:g} s and was stopped",
            "raise --timeout, or lower --examples/--batch-size",
        ) from None
    return error


def _lines(proc: subprocess.Popen, deadline: float | None):  # noqa: ANN202 - a generator of str
    import selectors  # noqa: PLC0415

    assert proc.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(proc.stdout, selectors.EVENT_READ)
    while True:
        wait = None if deadline is None else max(0.0, deadline - time.monotonic())
        if deadline is not None and wait == 0.0:
            raise TimeoutError
        if not selector.select(timeout=wait if wait is not None else 1.0):
            if proc.poll() is not None:
                rest = proc.stdout.read()
                yield from rest.splitlines()
                return
            continue
        line = proc.stdout.readline()
        if not line:
            return
        yield line


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=5)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # already gone
        proc.wait()


def capture(side: Side, out_dir: str | os.PathLike[str], *, force: bool = False, console: Console | None = None):  # noqa: ANN201
    """Capture one side into ``out_dir`` in a child process; returns the opened Capture."""
    from .store import Capture  # noqa: PLC0415

    out = os.path.abspath(os.fspath(out_dir))
    job = {"mode": "capture", "side": side.to_json(), "out_dir": out, "force": force}
    run_child(job, side, label=f"capture {os.path.basename(side.artifact.path.rstrip('/'))} [{side.label()}]",
              console=console)
    return Capture.open(out)
