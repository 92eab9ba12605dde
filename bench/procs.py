"""Running and measuring child processes, and the small statistics the harness needs.

Every contender runs as its own process, started the same way, so each pays the same
interpreter and TensorFlow start-up and nothing leaks between them (TF reads its environment
once, at import). Wall time is measured from just before ``Popen`` in this process; peak
memory is not taken from the kernel's child accounting: on Linux a child's ``ru_maxrss``
includes the parent's resident set at ``fork`` (the harness holds gigabytes of memory-mapped
captures at times), so a process that needs its peak reads its own ``VmHWM`` instead
(:mod:`bench.rss_probe`).
"""

from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["REPO", "BenchError", "ChildRun", "child_env", "dir_bytes", "machine", "median", "run_child", "settle"]

REPO = Path(__file__).resolve().parents[1]
SETTLE = True  # bench.run turns it off for --quick, where timings do not matter


class BenchError(RuntimeError):
    """A contender failed: the benchmark cannot report a number for it."""


@dataclass
class ChildRun:
    """One finished child process."""

    argv: list[str]
    wall_s: float
    started_epoch: float  # time.time() just before Popen, to place the child's own milestones
    returncode: int
    stdout: str
    stderr: str
    result: dict[str, Any] = field(default_factory=dict)  # the last JSON object line of stdout, if any
    peak_tree_rss_bytes: int = 0  # with sample_rss: the most its process tree held at one sampling

    def since_start(self, epoch: float) -> float:
        """Seconds from the start of this process to a milestone the child stamped with time.time()."""
        return epoch - self.started_epoch


def child_env(extra: dict[str, str] | None = None, device: str = "cpu") -> dict[str, str]:
    """The environment every contender gets: CPU only (unless ``device`` is a GPU: then CUDA
    stays as the user's environment has it), oneDNN pinned off, TF quiet.

    oneDNN is pinned so that every contender runs the same kernels (its default depends on
    the CPU); the repository is on PYTHONPATH so ``bench`` and ``tracer`` import alike.
    """
    env = dict(os.environ)
    env.update({"TF_ENABLE_ONEDNN_OPTS": "0", "TF_CPP_MIN_LOG_LEVEL": "2",
                "COLUMNS": "200", "PYTHONPATH": os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)})
    if not device.lower().startswith("gpu"):
        env["CUDA_VISIBLE_DEVICES"] = "-1"
    env.update(extra or {})
    return env


def settle() -> None:
    """Let the previous contender's writes and deletions reach the disk before timing the next.

    Without this, the next contender's writes queue behind the last one's writeback (and, on
    a file system mounted with ``discard``, behind its deleted files), and pays for them.
    """
    if SETTLE:
        os.sync()
        time.sleep(0.5)


def run_child(argv: Sequence[str], *, env: dict[str, str] | None = None, timeout_s: float = 1800,
              ok_codes: Sequence[int] = (0,), stderr_log: Path | None = None, sample_rss: bool = False) -> ChildRun:
    """Run ``argv`` to completion; raise BenchError (with its stderr tail) on a bad exit code.

    ``stderr_log``: the child's stderr goes to this file as it is written, so that a long run
    (diagnose on a lent machine that can be taken back) shows how far it got. ``sample_rss``:
    the resident set of the child and every process below it is summed every
    :data:`SAMPLE_EVERY_S` (a capture's memory is mostly its own child's)."""
    settle()
    err_file = open(stderr_log, "w+") if stderr_log else tempfile.TemporaryFile("w+")
    with tempfile.TemporaryFile("w+") as out, err_file as err, open(os.devnull, "rb") as stdin:
        started_epoch = time.time()
        t0 = time.perf_counter()
        proc = subprocess.Popen(list(argv), stdin=stdin, stdout=out, stderr=err, env=env or child_env(), cwd=REPO,
                                start_new_session=True)
        timer = threading.Timer(timeout_s, lambda: os.killpg(proc.pid, signal.SIGKILL))
        timer.start()
        peak = _TreeRss(proc.pid) if sample_rss else None
        try:
            proc.wait()
        finally:
            timer.cancel()
            if peak is not None:
                peak.stop()
        wall = time.perf_counter() - t0
        out.seek(0)
        err.seek(0)
        run = ChildRun(list(argv), wall, started_epoch, proc.returncode, out.read(), err.read(),
                       peak_tree_rss_bytes=peak.bytes if peak is not None else 0)
    if run.returncode not in ok_codes:
        tail = "\n".join(run.stderr.strip().splitlines()[-12:])
        raise BenchError(f"{' '.join(argv[:6])} ... exited with {run.returncode}:\n{tail}")
    run.result = _last_json(run.stdout)
    return run


SAMPLE_EVERY_S = 0.1


class _TreeRss:
    """The largest resident set that a process and its descendants held together, sampled in a
    thread from the moment it is made until :meth:`stop`."""

    def __init__(self, root: int) -> None:
        self.root, self.bytes = root, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._done.wait(SAMPLE_EVERY_S):
            self.bytes = max(self.bytes, tree_rss(self.root))

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def tree_rss(root: int) -> int:
    """The resident bytes of ``root`` and every process below it, now (Linux ``/proc``)."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, grew = {root}, True
    while grew:
        below = {pid for pid, parent in parents.items() if parent in tree} - tree
        tree |= below
        grew = bool(below)
    total = 0
    for pid in tree:
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1]) * 1024
        except OSError:
            continue
    return total


def _last_json(text: str) -> dict[str, Any]:
    for line in reversed(text.strip().splitlines()):
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(value, dict):
                return value
    return {}


def dir_bytes(path: Path) -> dict[str, int]:
    """Apparent size (sum of file lengths) and space really allocated on disk, in bytes.

    A file with several names (hard links: tftrace stores a tensor and its ``alias_of`` once)
    counts once, as ``du`` counts it; ``files`` counts the names.
    """
    apparent = allocated = files = 0
    seen: set[tuple[int, int]] = set()
    for f in Path(path).rglob("*"):
        if f.is_file():
            st = f.stat()
            files += 1
            if (st.st_dev, st.st_ino) in seen:
                continue
            seen.add((st.st_dev, st.st_ino))
            apparent += st.st_size
            allocated += st.st_blocks * 512
    return {"apparent": apparent, "allocated": allocated, "files": files}


def median(values: Sequence[float]) -> float:
    if not values:
        raise BenchError("no measurement to take a median of")
    return float(statistics.median(values))


def machine() -> dict[str, Any]:
    """What the numbers were measured on (the load average says how busy it was)."""
    cpu = platform.processor() or platform.machine()
    flags: list[str] = []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and cpu in ("", platform.machine()):
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                break
    except OSError:
        pass
    try:
        mem_kb = int(next(x for x in Path("/proc/meminfo").read_text().splitlines() if x.startswith("MemTotal")).split()[1])
    except (OSError, StopIteration, ValueError):
        mem_kb = 0
    import numpy  # only for its version

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "avx512": any(f.startswith("avx512") for f in flags),
        "avx2": "avx2" in flags,
        "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "os": f"{platform.system()} {platform.release()}",
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
