"""Faults while tftrace runs: signals, a killed child, a full disk, two writers at once.

Each test starts ``tftrace`` as a user would (a fresh process), injects the fault at a point
where the work is really under way (the child worker exists and has started writing tensors),
and then checks the three promises of issue 8: the user sees one line saying what happened and
exit 2; nothing incomplete looks complete (no ``manifest.json`` in a partial capture, no
``report.json`` in a partial report); no child process is left running; and re-running the same
command with ``--force`` succeeds.

A hanging child stopped by ``--timeout`` is tested where the launcher is (``test_capture.py::
test_timeout_stops_the_child`` end to end, ``test_capture_launcher.py::
test_timeout_kills_the_whole_child_group`` for the process group); RELIABILITY.md lists them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import REPO, assert_user_error, run_cli
from tracer.captures import Capture
from tracer.errors import TftraceError

pytestmark = pytest.mark.slow

LONG = ("--examples", "400", "--batch-size", "4")  # 100 runs: seconds of work after the first tensor
SHORT = ("--examples", "2")
INTERRUPTED = "tftrace: interrupted; nothing incomplete was left looking complete"
SIGNALS = {"SIGINT": signal.SIGINT, "SIGTERM": signal.SIGTERM}


# --------------------------------------------------------------------------- helpers


def _foreground_signals() -> None:
    """Ctrl-C reaches a foreground command: a test run started in the background (``make test &``)
    hands its children SIGINT ignored, and tftrace rightly keeps what it inherits."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tracer.cli", *args], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "COLUMNS": "200", **(env or {})},
                            preexec_fn=_foreground_signals)


def _parent_of(pid: int) -> int | None:
    try:
        return int(Path("/proc", str(pid), "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None  # exited while we looked


def _workers(pid: int) -> list[int]:
    """The capture children (``python -m tracer.interpreter``) of ``pid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and _parent_of(int(entry.name)) == pid:
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if b"tracer.interpreter" in cmdline:
                found.append(int(entry.name))
    return found


def _started(pid: int) -> int:
    """When ``pid`` started, in clock ticks since boot (``/proc/PID/stat`` field 22)."""
    stat = (Path("/proc") / str(pid) / "stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[19])


def _running(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie waiting to be reaped."""
    try:
        return "State:\tZ" not in Path("/proc", str(pid), "status").read_text()
    except FileNotFoundError:
        return False


def _worker_writing(cli: subprocess.Popen, tensors: Path, timeout: float = 180) -> int:
    """Wait until the CLI's worker exists and has written its first tensor; returns its pid."""
    deadline = time.monotonic() + timeout
    while True:
        assert cli.poll() is None, cli.communicate()
        assert time.monotonic() < deadline, "the capture never started writing"
        workers = _workers(cli.pid)
        if workers and tensors.is_dir() and any(tensors.iterdir()):
            # a compare of two artifacts starts B's worker once A's is up, to load meanwhile: A's is the older
            assert len(workers) <= 2, workers
            return min(workers, key=_started)
        time.sleep(0.05)


def _finish(cli: subprocess.Popen, timeout: float = 60) -> subprocess.CompletedProcess:
    try:
        stdout, stderr = cli.communicate(timeout=timeout)
    finally:
        if cli.poll() is None:
            cli.kill()
            cli.communicate()
    return subprocess.CompletedProcess(cli.args, cli.returncode, stdout, stderr)


def _gone(pid: int, within: float = 10) -> bool:
    deadline = time.monotonic() + within
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _running(pid)


def _ok(proc: subprocess.CompletedProcess) -> None:
    assert proc.returncode == 0, (proc.returncode, proc.stdout, proc.stderr)


def _files(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture(scope="module")
def capture_b(models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """B for the compare tests: the detector over the SHORT examples, captured once."""
    out = tmp_path_factory.mktemp("faults") / "b"
    _ok(run_cli("capture", str(models["detector"]), "--out", str(out), *SHORT))
    return out


# --------------------------------------------------------------------------- signals


@pytest.mark.parametrize("name", sorted(SIGNALS))
def test_signal_to_capture_leaves_it_incomplete_and_force_rerun_works(
    name: str, models: dict[str, Path], tmp_path: Path
) -> None:
    out = tmp_path / "cap"
    cli = _start("capture", str(models["detector"]), "--out", str(out), *LONG)
    worker = _worker_writing(cli, out / "tensors")
    cli.send_signal(SIGNALS[name])
    done = _finish(cli)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.strip().splitlines()[-1] == INTERRUPTED and "Traceback" not in done.stderr
    assert _gone(worker), f"worker {worker} outlived its parent"
    assert not (out / "manifest.json").exists() and any((out / "tensors").iterdir())
    with pytest.raises(TftraceError, match=r"incomplete capture at .*manifest.json is missing"):
        Capture.open(out)
    assert_user_error(run_cli("capture", str(models["detector"]), "--out", str(out), *SHORT),
                      f"a capture of {out} was interrupted", "Re-run the capture with --force")
    _ok(run_cli("capture", str(models["detector"]), "--out", str(out), *SHORT, "--force"))
    assert Capture.open(out).manifest["examples"]["count"] == 2


def test_sigkill_of_tftrace_itself_stops_its_worker_and_force_rerun_works(
    models: dict[str, Path], tmp_path: Path
) -> None:
    """SIGKILL gives tftrace no chance to stop its child. The child stops at its next progress line
    (the pipe is closed) or, when busy and silent, through tracer.captures.orphan (tested alone in
    test_capture_launcher.py); either way the capture is left incomplete and --force re-runs it.
    Nothing of the job is left in the temp directory (issue 15: the job goes through the child's
    stdin, its stderr into an unnamed file)."""
    out, tmp = tmp_path / "cap", tmp_path / "tmp"
    tmp.mkdir()
    cli = _start("capture", str(models["detector"]), "--out", str(out), *LONG, env={"TMPDIR": str(tmp)})
    worker = _worker_writing(cli, out / "tensors")
    cli.kill()
    cli.communicate()
    assert _gone(worker), f"worker {worker} outlived its SIGKILLed parent"
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("tftrace")], sorted(p.name for p in tmp.iterdir())
    assert not (out / "manifest.json").exists() and any((out / "tensors").iterdir())
    with pytest.raises(TftraceError, match=r"incomplete capture at .*manifest.json is missing"):
        Capture.open(out)
    _ok(run_cli("capture", str(models["detector"]), "--out", str(out), *SHORT, "--force"))
    assert Capture.open(out).manifest["examples"]["count"] == 2


@pytest.mark.parametrize("name", sorted(SIGNALS))
def test_signal_to_compare_leaves_no_report_and_force_rerun_works(
    name: str, models: dict[str, Path], capture_b: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    cli = _start("compare", str(models["detector"]), str(capture_b), "--out", str(out), *LONG, "--isolate", "0")
    worker = _worker_writing(cli, out / "captures" / "a" / "tensors")
    cli.send_signal(SIGNALS[name])
    done = _finish(cli)
    assert done.returncode == 2, (done.returncode, done.stderr)
    assert done.stderr.strip().splitlines()[-1] == INTERRUPTED and "Traceback" not in done.stderr
    assert _gone(worker), f"worker {worker} outlived its parent"
    left = _files(out)
    assert "report.json" not in left and "captures/a/manifest.json" not in left, left
    rerun = run_cli("compare", str(models["detector"]), str(capture_b), "--out", str(out), *SHORT, "--isolate", "0",
                    "--force", "--keep-captures")
    _ok(rerun)
    assert (out / "report.json").is_file() and Capture.open(out / "captures" / "a").manifest["examples"]["count"] == 2


def test_two_compares_into_one_out_the_second_is_refused_naming_the_first(
    models: dict[str, Path], capture_b: Path, tmp_path: Path
) -> None:
    """Issue 15: a second compare into an --out a running compare writes must not hand either
    user the other's report; it exits 2 naming the first one's pid and touches nothing there."""
    out = tmp_path / "report"
    first = _start("compare", str(models["detector"]), str(models["detector"]), "--out", str(out), "--examples", "4000",
                   "--batch-size", "4", "--isolate", "0")  # A and B: a thousand runs each, interrupted below
    worker = _worker_writing(first, out / "captures" / "a" / "tensors")
    both = _workers(first.pid)  # A's, and B's when it was started ahead to load while A is captured
    assert worker in both, both
    before = _files(out)
    for extra in ((), ("--force",)):
        second = run_cli("compare", str(models["detector"]), str(capture_b), "--out", str(out), *SHORT, *extra)
        assert_user_error(second, f"another tftrace run (pid {first.pid}) is writing to the report directory {out}")
        assert first.poll() is None  # still running: the refusal came from its lock
    assert before <= _files(out)  # the second deleted nothing of the first's
    first.send_signal(signal.SIGINT)
    done = _finish(first)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == INTERRUPTED, done.stderr
    assert all(_gone(pid) for pid in both) and not (out / "report.json").exists()


def test_killed_worker_during_compare_is_reported_with_its_stderr(
    models: dict[str, Path], capture_b: Path, tmp_path: Path
) -> None:
    out = tmp_path / "report"
    cli = _start("compare", str(models["detector"]), str(capture_b), "--out", str(out), *LONG, "--isolate", "0")
    worker = _worker_writing(cli, out / "captures" / "a" / "tensors")
    os.kill(worker, signal.SIGKILL)
    done = _finish(cli)
    assert_user_error(done, "the child process running capture savedmodel [cpu, batch 4] was killed by signal 9; "
                            "the tail of its stderr:", "any partial output is left incomplete")
    left = _files(out)
    assert "report.json" not in left and "captures/a/manifest.json" not in left, left
    _ok(run_cli("compare", str(models["detector"]), str(capture_b), "--out", str(out), *SHORT, "--isolate", "0",
                "--force"))
    assert (out / "report.json").is_file()


# --------------------------------------------------------------------------- a full disk


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (the detector's weights alone are 16 MiB as .npy); skipped where mounting is not allowed."""
    mount = tmp_path / "small"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here ({done.stderr.strip() or done.returncode}); needs root "
                    "and CAP_SYS_ADMIN")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=True)


# Packed (format 2) keeps the restored weights by digest and compresses the rest: 2 examples of the
# detector take 0.65 MB there, so it needs 32 (7 MB) to fill the 2 MiB disk; .npy files fill it at 2.
FILLING = {"packed": ("--examples", "32"), "npy": (*SHORT, "--tensor-format", "npy")}


@pytest.mark.parametrize("tensor_format", sorted(FILLING))
def test_full_disk_during_capture_says_so_and_leaves_an_incomplete_capture(
    models: dict[str, Path], small_disk: Path, tensor_format: str
) -> None:
    out = small_disk / "cap"
    proc = run_cli("capture", str(models["detector"]), "--out", str(out), *FILLING[tensor_format])
    assert_user_error(proc, "disk full at ", f"bytes written to {out} (No space left on device)",
                      "has no manifest.json and is refused as incomplete")
    written = int(proc.stderr.split("disk full at ", 1)[1].split(" bytes", 1)[0].replace(",", ""))
    assert 1_000_000 < written <= 2 * 1024 * 1024  # it got most of the way through 2 MiB, and said so
    assert sorted(p.name for p in out.iterdir()) == ["tensors"]  # no manifest, and the lock released
    with pytest.raises(TftraceError, match=r"incomplete capture at .*manifest.json is missing"):
        Capture.open(out)
    assert_user_error(run_cli("compare", str(out), str(out), "--out", str(small_disk.parent / "report")),
                      f"incomplete capture at {out}: manifest.json is missing")


# --------------------------------------------------------------------------- two writers


def test_two_captures_into_one_directory_one_wins_the_other_says_so(models: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "cap"
    first = _start("capture", str(models["detector"]), "--out", str(out), "--examples", "40", "--batch-size", "1")
    holder = _worker_writing(first, out / "tensors")
    os.kill(holder, signal.SIGSTOP)  # a slow capture, deterministically: it holds the lock while the others try
    try:
        # Plain, and with --force: --force replaces an *interrupted* capture, never a running one.
        losers = [_start("capture", str(models["detector"]), "--out", str(out), *SHORT, *extra) for extra in ((), ("--force",))]
        for loser in losers:
            assert_user_error(_finish(loser, timeout=300), f"another capture is writing to {out} (pid {holder})",
                              "Wait for it to finish or write elsewhere")
    finally:
        os.kill(holder, signal.SIGCONT)
    _ok(_finish(first, timeout=300))
    assert Capture.open(out).manifest["examples"]["count"] == 40
