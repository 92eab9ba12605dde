"""What a running child is doing, shown while it does it.

On a terminal: a live bar (stage, runs, tensors stored, megabytes, time) that appears once the
child has run for a second, so quick captures do not flicker. On a pipe (a CI log, ``| tee``),
where a bar cannot be drawn: a plain line once the child has run for ``PLAIN_AFTER_S``, then one
at each new stage and at most every ``PLAIN_EVERY_S`` while it works, so a long capture is never
minutes of silence (a 35,000-op detector's capture printed nothing for 24 minutes), and a quick
one prints nothing at all.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from ..text import printable

__all__ = ["ProgressView", "working", "PROGRESS_AFTER_S", "PLAIN_AFTER_S", "PLAIN_EVERY_S"]

PROGRESS_AFTER_S = 1.0  # no bar for captures quicker than this
PLAIN_AFTER_S = 10.0  # no plain line for captures quicker than this
PLAIN_EVERY_S = 30.0  # a plain line at least this far apart, but for a new stage


class ProgressView:
    """One child's progress: :meth:`stage` and :meth:`progress` take its events, :meth:`tick`
    its quiet moments (the reader calls it at every heartbeat)."""

    def __init__(self, console: Console, label: str) -> None:
        self.console, self.label = console, printable(label, newlines=False)  # a model's path: no control bytes
        self.started = time.monotonic()
        self.stage_text = ""
        self.where = ""  # "run 1/2 · 12,000/35,445 tensors stored"
        self.mb = 0.0
        self.terminal = console.is_terminal
        self._bar = Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[where]}"),
            TextColumn("{task.fields[mb]:.1f} MB"), TimeElapsedColumn(),
            console=console, transient=True, disable=not self.terminal,
        )
        self._task = self._bar.add_task(escape(self.label), total=None, mb=0.0, where="")
        self._said: str | None = None  # the stage the last plain line named
        self._said_at = 0.0

    def stage(self, text: str) -> None:
        self.stage_text = printable(text, newlines=False)
        self._bar.update(self._task, description=escape(f"{self.label}: {self.stage_text}"))
        self.tick()

    def progress(self, event: dict[str, Any]) -> None:
        """A ``progress`` event: ``done``/``total`` runs, ``bytes`` written, and where the child
        has them, ``stored``/``tensors`` of the run in hand and its ``run_bytes`` stored of
        those ``planned``. The bar moves by bytes within a run: one run of a large model is the
        whole capture, and its tensors' count says little of its time (most are small weights)."""
        done, total = event["done"], event["total"]
        self.mb = event["bytes"] / 1e6
        where = [f"run {min(done + 1, total)}/{total}" if done < total else f"{total}/{total} runs"]
        if isinstance(event.get("tensors"), int) and done < total:
            where.append(f"{event.get('stored', 0):,}/{event['tensors']:,} tensors stored")
        share = _share(event) if done < total else None
        if share is not None:
            where.append(f"{share:.0%} of ~{event['planned'] / 1e6:,.0f} MB")
        self.where = " · ".join(where)
        self._bar.update(self._task, completed=done + (share or 0.0), total=total, mb=self.mb, where=self.where)
        self.tick()

    def tick(self) -> None:
        elapsed = time.monotonic() - self.started
        if self.terminal:
            if not self._bar.live.is_started and elapsed > PROGRESS_AFTER_S:
                self._bar.start()
            return
        if elapsed < PLAIN_AFTER_S:
            return
        new_stage = self.stage_text != self._said
        if new_stage or time.monotonic() - self._said_at >= PLAIN_EVERY_S:  # unchanged: still alive, said so
            self._say(elapsed)

    def _say(self, elapsed: float) -> None:
        parts = [p for p in (self.stage_text, self.where, f"{self.mb:.1f} MB" if self.mb else "") if p]
        line = f"{self.label}: {', '.join(parts) or 'starting'} ({_duration(elapsed)})"
        self.console.print(printable(line, newlines=False), highlight=False, markup=False, soft_wrap=True)
        self._said, self._said_at = self.stage_text, time.monotonic()

    def stop(self) -> None:
        self._bar.stop()


@contextmanager
def working(console: Console, label: str, text: str) -> Iterator[None]:
    """A long step of the parent's own (diffing two 35,000-op graphs, comparing every tensor,
    writing the report) shown as a child's stage is: a thread ticks the view while it runs."""
    view = ProgressView(console, label)
    view.stage(text)
    done = threading.Event()

    def beat() -> None:
        while not done.wait(0.25):
            view.tick()

    thread = threading.Thread(target=beat, name="tftrace-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        view.stop()


def _share(event: dict[str, Any]) -> float | None:
    """How much of the run in hand is stored, by bytes (None where the event does not say). The
    planned bytes are an estimate, so the share stops at 99% until the run is done."""
    run_bytes, planned = event.get("run_bytes"), event.get("planned")
    if not isinstance(run_bytes, int) or not isinstance(planned, int) or planned <= 0:
        return None
    return min(run_bytes / planned, 0.99)


def _duration(seconds: float) -> str:
    """12 s, 3 min 05 s: how long the child has run, as a person reads it in a log."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes} min {rest:02d} s"
