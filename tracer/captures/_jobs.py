"""Writing tensor bytes in background threads while the capture goes on.

Copying hundreds of MB into the page cache and taking their statistics is work for the kernel
and for numpy, and both release the GIL: two threads do it in about half the time of one on
a two-core machine, while the writer's caller compares and hands over the next tensors. Where
there are more cores there are more threads (:func:`writer_threads`). The
writer keeps every file-system *name* operation (create, link, rename, delete) in its own
thread and hands only the bytes over, as jobs keyed by file: a file's jobs run one after the
other, so no file is written by two threads at once and its statistics are folded in order.
The bytes of queued jobs are bounded, so memory stays within what the caller holds anyway
plus ``max_in_flight``.
"""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

__all__ = ["FileJobs", "MAX_IN_FLIGHT", "writer_threads"]

MAX_WRITER_THREADS = 8
MAX_IN_FLIGHT = 256 << 20  # bytes of tensors handed to the writer and not yet written


def writer_threads() -> int:
    """How many threads write: half the cores this process may run on, at least 2, at most 8.

    A fetch hands over all its tensors at once, when ``session.run`` returns, so the writers'
    work (shuffle, zstd, residuals, statistics, digests) follows the fetch rather than hiding
    behind it. With two threads it took about 1.2 s more than the fetch of ResNet-50 at batch 8
    on the H200's 16-core host (bench run h). Half the cores leaves the other half to
    TensorFlow's next fetch and to the fsync thread. A file's jobs still run one after another,
    so the bytes written do not depend on the count."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 2
    return max(2, min(MAX_WRITER_THREADS, cores // 2))


class FileJobs:
    """Background jobs keyed by file; a job returns the bytes it wrote.

    The first job to fail makes every later call raise its exception (a full disk stops the
    capture at the next tensor, not at the end).
    """

    def __init__(self, threads: int | None = None, max_in_flight: int = MAX_IN_FLIGHT) -> None:
        self._pool = ThreadPoolExecutor(threads or writer_threads(), thread_name_prefix="tftrace-write")
        self._pending: dict[str, Future[int]] = {}
        self._order: deque[Future[int]] = deque()  # oldest first, to wait for when too much is queued
        self._max_in_flight = max_in_flight
        self._in_flight = 0
        self._done_bytes = 0
        self._failure: BaseException | None = None
        self._lock = threading.Lock()

    @property
    def done_bytes(self) -> int:
        """Bytes written by the jobs that finished."""
        with self._lock:
            return self._done_bytes

    def submit(self, key: str, job: Callable[[], int], nbytes: int) -> None:
        """Run ``job`` in the background after ``key``'s earlier jobs; ``nbytes``: what it holds."""
        self._raise_failure()
        self.wait(key)
        while self._order and self._order[0].done():
            self._order.popleft()  # finished: nothing to wait for, nothing to keep
        while self._order and self._in_flight + nbytes > self._max_in_flight:
            self._order.popleft().exception()  # wait for the oldest; its failure is raised below
            self._raise_failure()
        with self._lock:
            self._in_flight += nbytes
        future = self._pool.submit(self._run, job, nbytes)
        self._pending[key] = future
        self._order.append(future)

    def wait(self, key: str) -> None:
        """Return when ``key``'s jobs are done (raising a job's failure)."""
        future = self._pending.pop(key, None)
        if future is not None:
            future.result()
        self._raise_failure()

    def wait_all(self) -> None:
        """Return when every job is done (raising the first failure)."""
        for key in list(self._pending):
            self.wait(key)
        self._order.clear()

    def close(self) -> None:
        """Finish the running jobs, drop the queued ones (after a failure or an abort) and end the threads."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        self._pending.clear()
        self._order.clear()

    def _run(self, job: Callable[[], int], nbytes: int) -> int:
        """In a pool thread: run one job and account for it, success or failure."""
        try:
            written = job()
        except BaseException as exc:
            with self._lock:
                self._in_flight -= nbytes
                self._failure = self._failure or exc
            raise
        with self._lock:
            self._in_flight -= nbytes
            self._done_bytes += written
        return written

    def _raise_failure(self) -> None:
        with self._lock:
            failure = self._failure
        if failure is not None:
            raise failure
