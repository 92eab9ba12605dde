"""Making written tensor files durable in the background, while the capture goes on.

The manifest of a capture is written last and must never reach the disk before the bytes it
describes (otherwise a power cut right after a capture could leave a manifest over files of
zeros: an incomplete capture that looks complete). fsync is what guarantees that order, and
it waits for the disk: done one file after another at the end, it cost a ResNet-50 capture
0.7 s at batch 1 and 4 s at batch 8. Here a thread fsyncs each file as soon as it is written, so the disk
works while the writer goes on with the next tensors (and the session with the next batch);
:meth:`Flusher.wait` returns when every file handed over is durable.
"""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path

from ._format import fsync

__all__ = ["Flusher"]


class Flusher:
    """One background thread that fsyncs the paths it is given, each after its latest write.

    A path submitted again while it still waits is fsynced once; a path submitted while its
    fsync runs is queued again, so every write is followed by an fsync that *started* after
    it. A file deleted or replaced meanwhile is fine: it is opened by path when its turn comes
    (a deleted one needs no durability; a replacement is the file that must be durable).
    """

    def __init__(self) -> None:
        self._queue: deque[Path] = deque()
        self._waiting: set[Path] = set()
        self._busy = 0  # paths taken off the queue whose fsync has not finished
        self._error: OSError | None = None
        self._stopped = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="tftrace-fsync", daemon=True)
        self._thread.start()

    def submit(self, path: Path) -> None:
        """Queue ``path`` for fsync; raises the first error a previous fsync met."""
        with self._cond:
            self._raise_error()
            if path not in self._waiting:
                self._waiting.add(path)
                self._queue.append(path)
                self._cond.notify()

    def wait(self) -> None:
        """Block until every submitted path is durable."""
        with self._cond:
            while (self._queue or self._busy) and self._error is None:
                self._cond.wait()
            self._raise_error()

    def stop(self) -> None:
        """Give up on what is queued (an aborted capture needs no durability) and end the thread."""
        with self._cond:
            self._stopped = True
            self._queue.clear()
            self._waiting.clear()
            self._cond.notify_all()
        self._thread.join()

    def _raise_error(self) -> None:
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopped:
                    self._cond.wait()
                if self._stopped:
                    return
                path = self._queue.popleft()
                self._waiting.discard(path)
                self._busy += 1
            error = _fsync_existing(path)
            with self._cond:
                self._busy -= 1
                self._error = self._error or error
                self._cond.notify_all()


def _fsync_existing(path: Path) -> OSError | None:
    """fsync a file if it still exists; returns the error instead of raising it (thread side)."""
    try:
        fsync(path)
    except FileNotFoundError:
        return None  # deleted since (an uncaptured tensor): nothing left to make durable
    except OSError as exc:
        return exc
    return None
