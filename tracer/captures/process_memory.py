"""The capture process's own memory: measured always, bounded by ``--max-process-memory`` when given.

``--max-memory`` bounds what tftrace holds of a model's tensors: one fetch. The process holds
more: TensorFlow's runtime, the model's weights and the tensors of the op running now, which
no option of ours sizes. ``--max-process-memory`` bounds the whole process instead. It cannot
be planned from the graph, so it is measured: the kernel's high-water mark of the resident set
(``VmHWM``) is reset before the plain runs and read after them. That peak is what TensorFlow
and the model need to run this batch without tftrace's fetches; the fetch then gets what the
limit leaves after it and after the writer's share (:func:`writer_share`), and is split into
parts under that (:func:`fit_fetch`). A limit that leaves no room for the largest tensor is
refused before the capture directory is touched.

The load comes before the reset: reading a model can peak above what running it holds, and it
is over before the limit could act on anything. Its peak is recorded all the same
(``load_peak_bytes`` in the manifest's ``memory``), beside the peak of everything after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import TftraceError
from ._jobs import MAX_IN_FLIGHT, writer_threads
from ._packed import CHUNK_BYTES

__all__ = ["ProcessFit", "fit_fetch", "peak_rss", "reset_peak", "writer_share"]

STATUS = Path("/proc/self/status")
CLEAR_REFS = Path("/proc/self/clear_refs")
RESET_PEAK = "5"  # clear_refs: reset the peak resident set size to the current one (Linux >= 4.0)
# What one writer thread allocates beside the tensors it was handed, at most: a chunk shuffled,
# compressed and, for a predicted chunk, its residual (each at most one chunk of CHUNK_BYTES).
SCRATCH_PER_THREAD = 3 * CHUNK_BYTES


def peak_rss() -> int | None:
    """The process's resident-set high-water mark (``VmHWM``) in bytes; None off Linux."""
    try:
        text = STATUS.read_text(encoding="ascii")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return None


def reset_peak() -> bool:
    """Start the high-water mark again from the current resident set; False where the kernel
    does not let this process (then :func:`peak_rss` counts from the process's start)."""
    try:
        CLEAR_REFS.write_text(RESET_PEAK, encoding="ascii")
    except OSError:
        return False
    return True


def writer_share(threads: int | None = None) -> int:
    """The most the capture writer holds beside the fetch: tensors handed over but not yet
    written (:data:`MAX_IN_FLIGHT`) and every thread's scratch."""
    return MAX_IN_FLIGHT + (threads or writer_threads()) * SCRATCH_PER_THREAD


@dataclass(frozen=True)
class ProcessFit:
    """How ``--max-process-memory`` is divided: what TensorFlow took, the writer's share, the fetch's."""

    limit: int  # --max-process-memory
    runtime_peak: int  # VmHWM over the plain runs: TensorFlow, the model, one batch's own tensors
    writer: int  # writer_share()
    fetch: int  # what one fetch may bring back: the rest, or --max-memory where that is less

    def words(self) -> str:
        """The bound a too-large tensor is refused by, for an error message."""
        return (f"the {self.fetch:,} bytes --max-process-memory {self.limit:,} leaves for one fetch (after "
                f"{self.runtime_peak:,} bytes that TensorFlow and the model held in the plain run, and "
                f"{self.writer:,} for the writer)")

    def to_json(self) -> dict[str, Any]:
        """The manifest's ``memory`` fields of the division (the plain runs' peak is there already)."""
        return {"max_process_memory": self.limit, "writer_share_bytes": self.writer, "fetch_budget_bytes": self.fetch}


def fit_fetch(limit: int, max_memory: int, largest: tuple[str, int], runtime_peak: int | None,
              reset: bool, writer: int) -> ProcessFit:
    """Divide ``limit`` between TensorFlow's measured peak, the writer and the fetch.

    ``largest``: the planned tensor (name, bytes per run) that needs the biggest part. Raises a
    TftraceError naming the limit that would do when the rest cannot hold it, and when this
    machine cannot measure the peak (no ``/proc``)."""
    if runtime_peak is None:
        raise TftraceError(
            "--max-process-memory needs the process's resident-set peak (VmHWM in /proc/self/status), which this "
            "system does not provide", "leave --max-process-memory out and bound the fetch with --max-memory")
    rest = limit - runtime_peak - writer
    name, size = largest
    if rest < size:
        needed = runtime_peak + writer + size
        raise TftraceError(
            f"--max-process-memory {limit:,} cannot be held: TensorFlow and the model held {runtime_peak:,} bytes in "
            f"the plain run{'' if reset else ' (counted from the process start: the kernel refused to reset the peak)'}"
            f", the writer may hold {writer:,}, and the largest tensor, {name}, needs {size:,} in one fetch; "
            "nothing was written",
            f"use --max-process-memory {_round_up(needed):,} or more, or lower --batch-size")
    return ProcessFit(limit, runtime_peak, writer, min(rest, max_memory))


def _round_up(nbytes: int, step: int = 1 << 20) -> int:
    return -(-nbytes // step) * step
