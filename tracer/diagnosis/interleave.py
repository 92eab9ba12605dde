"""Interleaved timings of two sides: the samples :mod:`tracer.diagnosis.timing` judges.

Each side runs in a child of its own (:mod:`tracer.diagnosis.timing_worker`), started with its
environment as for its capture, fed the inputs its capture fed to its first batch, and warmed
up. The parent then asks for one timed run at a time in the order A B, B A, A B, …, so drift
(another job on the cores, the clock) falls on both sides alike, and only one side computes at
any moment. Children are kept in a small pool keyed by the run they stand for, because most
experiments share the base side: the base side's child times every pair it is in.

A timing that fails (a child that crashes or refuses) costs that experiment its cost, never
the diagnosis: :meth:`Timer.time_pair` raises :class:`TimingFailed` with the reason, and the
caller records it.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from .. import children
from ..captures._events import EVENT_FD_ENV
from ..pythons import with_package_on_path
from ..captures.orphan import PARENT_PID_ENV
from ..captures.reader import Capture
from ..pythons import interpreter
from ..runspec import Side, child_env
from ..safewrite import write_file

__all__ = ["Timer", "TimingFailed", "first_batch_inputs"]

POOL = 3  # children kept alive at once (the base side's, and the pair at hand)
WARMUP = 2  # untimed runs of each child on its own, once loaded (allocations, autotuning)
SPREAD_S = 2.0  # the timed runs are spread over at least this long: a busy machine runs in spells
SETTLE = 10  # then untimed interleaved runs of both, discarded: a freshly loaded pair runs unevenly for a while


class TimingFailed(Exception):
    """A side could not be timed; the message says why."""


def first_batch_inputs(cap: Capture) -> dict[str, np.ndarray] | None:
    """The signature inputs the capture fed to its first batch (its plain runs were timed on
    them), by signature key; None when the capture ran each example on its own (no batch axis)."""
    examples = cap.examples
    if examples.per_example:
        return None
    start, stop = cap.runs[0]
    out = {}
    for key, tensor in cap.inputs.items():
        value = np.asarray(cap.tensor(tensor))
        out[key] = value[start:stop] if examples.batch_major and key not in examples.shared else value
    return out


class _Child:
    def __init__(self, side: Side, inputs: Path) -> None:
        env = child_env(side)
        with_package_on_path(env)
        env[PARENT_PID_ENV] = str(os.getpid())
        self.started = children.stamp(env)
        self.came_up: dict[str, Any] | None = None  # what its ready event says of its start (tracer.children)
        self.stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace", prefix="tftrace-timing-")
        # as for a capture child (tracer.captures.launcher): the side's own interpreter (--python), and the
        # events on a pipe of their own, the model's stdout going with its stderr, so that nothing the
        # model prints is taken for a timing
        read_end, write_end = os.pipe()
        env[EVENT_FD_ENV] = str(write_end)
        try:
            self.proc = subprocess.Popen([interpreter(side.python), "-m", "tracer.diagnosis.timing_worker"], env=env,
                                         stdin=subprocess.PIPE, stdout=self.stderr, stderr=self.stderr, text=True,
                                         pass_fds=(write_end,), start_new_session=True)
        except BaseException:
            self.stderr.close()
            os.close(read_end)
            raise
        finally:
            os.close(write_end)  # the child holds it: EOF on the read end once the child is gone
        self.events = os.fdopen(read_end, "r", encoding="utf-8", errors="replace")
        job = {"side": side.to_json(), "allow_unsafe_ops": side.allow_unsafe_ops, "inputs": str(inputs), "warmup": WARMUP}
        self._send(json.dumps(job))
        self.ready = False
        self.tensorflow: str | None = None  # the release the child runs, as its ready event says

    def _send(self, line: str) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError) as exc:
            raise TimingFailed(self._fate(f"the timing child stopped ({exc})")) from exc

    def _event(self) -> dict[str, Any]:
        for line in self.events:
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                continue  # TensorFlow's own chatter
            if isinstance(message, dict) and "event" in message:
                if message["event"] == "error":
                    raise TimingFailed(f"{message.get('problem')} ({message.get('fix')})")
                return message
        raise TimingFailed(self._fate("the timing child ended before answering"))

    def _fate(self, what: str) -> str:
        self.stderr.seek(0)
        tail = [line for line in self.stderr.read().splitlines() if line.strip()][-3:]
        return what + (f": {' | '.join(tail)}" if tail else "")

    def wait_ready(self) -> None:
        if not self.ready:
            message = self._event()
            if message.get("event") != "ready":
                raise TimingFailed(self._fate("the timing child did not get ready"))
            self.ready = True
            self.tensorflow = message.get("tensorflow") if isinstance(message.get("tensorflow"), str) else None
            self.came_up = message

    def run_once(self) -> float:
        self._send("run")
        message = self._event()
        if message.get("event") != "time":
            raise TimingFailed(self._fate(f"the timing child answered {message!r}"))
        return float(message["ms"])

    def close(self) -> None:
        try:
            if self.proc.poll() is None:
                self._send("quit")
                self.proc.wait(timeout=30)
        except (TimingFailed, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        children.record("timing", self.started, self.came_up)
        for stream in (self.proc.stdin, self.events):
            if stream is not None:
                stream.close()
        self.stderr.close()


class Timer:
    """Interleaved timings of pairs of sides, with a pool of children keyed by run.

    ``workdir`` holds each side's input file. Use as a context manager: every child it started
    is stopped on the way out, whatever happened."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.children: dict[str, _Child] = {}

    def __enter__(self) -> Timer:
        return self

    def __exit__(self, *exc: object) -> None:
        for child in self.children.values():
            child.close()
        self.children.clear()

    def _child(self, key: str, side: Side, cap: Capture, keep: set[str]) -> _Child:
        if key in self.children:
            return self.children[key]
        for other in [k for k in self.children if k not in keep][: max(0, len(self.children) + 1 - POOL)]:
            self.children.pop(other).close()
        inputs = first_batch_inputs(cap)
        if inputs is None:
            raise TimingFailed("the signature has no batch axis: each example runs on its own, so a run is not "
                               "one batch to time")
        path = self.workdir / f"inputs_{len(list(self.workdir.glob('inputs_*.npz'))):02d}.npz"
        buffer = io.BytesIO()
        np.savez(buffer, **inputs)
        write_file(path, buffer.getvalue())
        child = _Child(side, path)
        self.children[key] = child
        return child

    def time_pair(self, a: tuple[str, Side, Capture], b: tuple[str, Side, Capture],
                  runs: int) -> tuple[list[float], list[float], dict[str, str | None]]:
        """``runs`` timings of each side, interleaved A B, B A, …, and the TensorFlow release each
        side's child ran (``{"a", "b"}``, as the children said); each element of ``a``/``b`` is
        (run key, side, its capture)."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        keep = {a[0], b[0]}
        try:
            child_a = self._child(a[0], a[1], a[2], keep)
            child_b = self._child(b[0], b[1], b[2], keep)
            child_a.wait_ready()
            child_b.wait_ready()
            started = time.perf_counter()
            for i in range(SETTLE):  # discarded
                _pair(child_a, child_b, i)
            gap = max(0.0, SPREAD_S / runs - (time.perf_counter() - started) / SETTLE)  # the rest of the spread
            times_a, times_b = [], []
            for i in range(runs):
                if i:
                    time.sleep(gap)
                t_a, t_b = _pair(child_a, child_b, i)
                times_a.append(t_a)
                times_b.append(t_b)
            return times_a, times_b, {"a": child_a.tensorflow, "b": child_b.tensorflow}
        except TimingFailed:
            for key in keep:  # a failed child is not reused
                child = self.children.pop(key, None)
                if child is not None:
                    child.close()
            raise


def _pair(child_a: _Child, child_b: _Child, i: int) -> tuple[float, float]:
    """One timed run of each, A first on even ``i`` and B first on odd: (A's ms, B's ms)."""
    if i % 2 == 0:
        t_a = child_a.run_once()
        return t_a, child_b.run_once()
    t_b = child_b.run_once()
    return child_a.run_once(), t_b
