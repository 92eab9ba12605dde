"""In the parent: start a child process for one side and follow it.

The parent never imports TensorFlow. It builds the child's environment from the side
(:func:`tracer.runspec.child_env`), passes the job as a JSON file, shows the child's progress,
and turns the child's fate into either a result or one :class:`TftraceError`: a user error the
child reported, a crash (with the tail of its stderr), a timeout, or an interruption.
"""

from __future__ import annotations

import json
import os
import re
import selectors
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from rich.console import Console

from .. import children
from ..errors import TftraceError
from ..pythons import interpreter, remember, with_package_on_path
from ..jsonvalues import dumps
from ..runspec import Side, child_env
from ._events import EVENT_FD_ENV, valid
from .child_errors import DEBUG_LINES, cause_in_stderr
from .inputs import inputs_file_sha256
from .orphan import PARENT_PID_ENV
from .progress_view import ProgressView, working

if TYPE_CHECKING:
    from .reader import Capture

__all__ = ["run_child", "capture", "PreparedChild", "ChildCrashed", "PREPARE_HEADROOM", "available_memory",
           "children_that_fit", "prepared_if_room", "isolation_ahead"]

STDERR_TAIL_LINES = 15
HEARTBEAT_S = 0.25  # how often a quiet child is checked on (deadline, progress bar)
# What a side read back from a file (a capture's manifest, a report's job) may put in the replay
# child's environment: the knobs tftrace itself sets or records, each with the values it takes.
# Anything else there (TF_DUMP_GRAPH_PREFIX, XLA_FLAGS=--xla_dump_to, ONEDNN_JIT_DUMP write files;
# CUDA_INJECTION64_PATH, NCCL's plugins, LD_PRELOAD load code) must come from the user's own shell.
_FLAG = r"(--tf_xla_auto_jit=(-1|0|1|2|fusible|single-gpu\([0-2]\))|--tf_xla_cpu_global_jit(=(true|false))?)"
REPLAYABLE_ENV: dict[str, str] = {
    "TF_ENABLE_ONEDNN_OPTS": r"[01]",
    "TF_CUDNN_USE_AUTOTUNE": r"[01]",
    "TF_DETERMINISTIC_OPS": r"[01]|true|false",
    "TF_CUDNN_DETERMINISTIC": r"[01]|true|false",
    "NVIDIA_TF32_OVERRIDE": r"[01]",
    "TF_CPP_MIN_LOG_LEVEL": r"[0-3]",
    "TF_XLA_FLAGS": rf"({_FLAG}( {_FLAG})*)?",
    "CUDA_VISIBLE_DEVICES": r"-1|[0-9]{1,3}(,[0-9]{1,3})*|",
    "TF_GPU_ALLOCATOR": r"cuda_malloc_async|bfc",
    "OMP_NUM_THREADS": r"[0-9]{1,4}",
    "TF_NUM_INTRAOP_THREADS": r"[0-9]{1,4}",
    "TF_NUM_INTEROP_THREADS": r"[0-9]{1,4}",
}


def run_child(
    job: dict[str, Any],
    side: Side,
    *,
    label: str,
    console: Console | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    child: PreparedChild | None = None,
) -> None:
    """Run the worker (``python -m tracer.interpreter -``) for ``job``; raise TftraceError if it fails.

    ``side``'s permission (``allow_unsafe_ops``) travels beside the job's side, never inside it:
    the child reads it from here, while a side read back from a file never carries one. ``child``:
    one started ahead for this side (:func:`isolation_ahead`), else a new one."""
    if job.get("mode") == "isolate":
        _refuse_code_loading_env(side)
    (child or PreparedChild(side)).run(job, label=label, console=console, on_event=on_event)


# A child started ahead holds TensorFlow and the model's weights while another child captures:
# started only where the working child's --max-memory and this much more per child fit in what
# is available (compare's side B, diagnose's next captures).
PREPARE_HEADROOM = 1 << 30


def prepared_if_room(side: Side, beside: int) -> PreparedChild | None:
    """``side``'s capture child started now, to import TensorFlow and load its model while another
    child works (``beside``: that child's --max-memory), where memory holds both and
    :data:`PREPARE_HEADROOM` more; None otherwise (it is started when its job comes)."""
    if children_that_fit(side.max_memory, beside) < 1:
        return None
    return PreparedChild(side, prepare=True)


def children_that_fit(each: int, beside: int, available: int | None = None) -> int:
    """How many more children of ``each`` bytes memory holds beside a working child held to
    ``beside`` bytes and :data:`PREPARE_HEADROOM` (``available``: MemAvailable, read now when None).
    The one rule for every child started ahead, by a compare or by diagnose."""
    available = available_memory() if available is None else available
    return int(max(0, (available - beside - PREPARE_HEADROOM) // max(1, each)))


class ChildrenAhead:
    """The children a compare starts before their job is certain, with one owner: held here by
    name, each is taken once by the step that gives it its job, and every one held is stopped on
    leaving the ``with`` block (its job is over, never came, or a step before it failed), so
    nothing is left running whatever happens in between."""

    def __init__(self) -> None:
        self._waiting: dict[str, PreparedChild] = {}
        self._started: list[PreparedChild] = []

    def hold(self, name: str, child: PreparedChild | None) -> None:
        if child is not None:
            self._waiting[name] = child
            self._started.append(child)

    def take(self, name: str) -> PreparedChild | None:
        """The child held as ``name``, once (a second round starts its own); None where none was started."""
        return self._waiting.pop(name, None)

    def waiting(self, name: str) -> PreparedChild | None:
        return self._waiting.get(name)

    def __enter__(self) -> ChildrenAhead:
        return self

    def __exit__(self, *_exc: object) -> None:
        for child in self._started:
            child.cancel()  # a child whose job is over has exited: stopping it is a no-op
        self._waiting.clear()


def isolation_ahead(side: Side, beside: int) -> PreparedChild | None:
    """An isolation child for ``side`` started now, to load its model while the other side's replays
    run (``beside``: that child's --max-memory), where memory holds both; None where memory does not,
    or where the side's ``--env`` would be refused (then it is, as before, when its job comes)."""
    try:
        _refuse_code_loading_env(side)
    except TftraceError:
        return None
    return prepared_if_room(side, beside)


def available_memory() -> int:
    """Bytes the kernel says new work can use (MemAvailable); 0 where it does not say."""
    try:
        with open("/proc/meminfo", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


class PreparedChild:
    """A capture child started before its job is known: it imports TensorFlow and loads the
    side's model meanwhile (``prepare``), then waits on its stdin for the job.

    ``compare`` starts side B's child so while side A is captured (B's examples are A's, known
    only once A is done): B's import and load then run on the other core instead of after A.
    Without ``prepare`` it is the plain child :func:`run_child` starts. :meth:`run` sends the
    job and follows the child to its end; :meth:`cancel` stops a child whose job never comes.
    The side's permission (``allow_unsafe_ops``) goes beside the side in both messages.
    """

    def __init__(self, side: Side, *, prepare: bool = False) -> None:
        executable = interpreter(side.python)  # this Python, or the side's --python (checked there, then here)
        env = child_env(side)
        with_package_on_path(env)
        env[PARENT_PID_ENV] = str(os.getpid())  # the child stops itself if this process is SIGKILLed
        self._started = children.stamp(env)
        # No named file in the temp directory: the job goes through the child's stdin and its stderr
        # into a file without a name (unlinked at once), so a SIGKILLed tftrace leaves nothing behind.
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace", prefix="tftrace-stderr-")
        # The events come on a pipe of their own; the child's stdout (where the model may print)
        # goes with its stderr, so nothing the model prints is taken for tftrace's words.
        self._events, write_end = os.pipe()
        env[EVENT_FD_ENV] = str(write_end)
        try:
            self.proc = subprocess.Popen(
                [executable, "-m", "tracer.interpreter", "-"],  # checks its packages, then runs the worker
                stdin=subprocess.PIPE,
                stdout=self._stderr,
                stderr=self._stderr,
                env=env,
                pass_fds=(write_end,),
                start_new_session=True,  # so a timeout or Ctrl-C can stop the whole child group
            )
        except BaseException:
            self._stderr.close()
            os.close(self._events)
            raise
        finally:
            os.close(write_end)  # the child holds it: EOF on the read end once the child is gone
        self.side = side
        self.prepared = prepare
        if prepare:
            _send(self.proc, dumps({"prepare": side.to_json(), "allow_unsafe_ops": side.allow_unsafe_ops}) + "\n",
                  close=False)

    def run(
        self,
        job: dict[str, Any],
        *,
        label: str,
        console: Console | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        """Send ``job`` and follow the child until it exits; raise TftraceError if it fails."""
        proc = self.proc
        console = console or Console(stderr=True)
        came_up: dict[str, Any] = {}

        def seen(event: dict[str, Any]) -> None:
            if event["event"] == "timings":
                came_up.update(event)
            elif on_event:
                on_event(event)

        sent = time.monotonic()
        with self._stderr as stderr_file:
            try:
                _send(proc, dumps({**job, "allow_unsafe_ops": self.side.allow_unsafe_ops}), close=True)
                error = _follow(proc, self.side.timeout_s, label, console, seen, events=self._events)
            finally:
                self._close_events()
                if proc.poll() is None:  # interrupted while following: never leave it running
                    _kill(proc)
                children.record(str(job.get("mode", "capture")), self._started, came_up or None,
                                job_sent=sent if self.prepared else None)
            stderr_file.seek(0)
            lines = stderr_file.read().strip().splitlines()
        debug = "\n".join(lines[-DEBUG_LINES:])
        if error is not None and error.get("event") == "error":
            raise _with_debug(TftraceError(error["problem"], error.get("fix", "")), debug)
        if proc.returncode != 0:
            how = f"was killed by signal {-proc.returncode}" if proc.returncode < 0 else f"exited with {proc.returncode}"
            raise _with_debug(_crashed(label, how, error, lines), debug)

    def cancel(self) -> None:
        """Stop a child that will get no job (the other side failed); nothing of it is left."""
        if self.proc.poll() is None:
            _kill(self.proc)
        _close_stdin(self.proc)
        self._close_events()
        self._stderr.close()

    def _close_events(self) -> None:
        if self._events >= 0:
            os.close(self._events)
            self._events = -1


class ChildCrashed(TftraceError):
    """A child that died without reporting a user error (a crash, a signal): not the user's to
    fix by a flag. ``reason`` is one line saying how it ended, for a caller that can go on
    without the child's work (an isolation replay: its ops are marked as not replayed)."""

    def __init__(self, problem: str, fix: str = "", *, reason: str) -> None:
        super().__init__(problem, fix)
        self.reason = reason


def _crashed(label: str, how: str, crash: dict[str, Any] | None, lines: list[str]) -> ChildCrashed:
    """A child that ended without reporting a user error, said in one line: the exception the
    child described (its ``crash`` event), TensorFlow's fatal log message, or a Python exception
    line in its stderr; only when none is found, the tail of its stderr. Its stack is --debug's."""
    incomplete = "any partial output is left incomplete"
    if crash is not None:
        cause = str(crash.get("error", ""))
        what = "TensorFlow raised " if crash.get("tensorflow") else "an error tftrace did not expect: "
        fix = ("fix what TensorFlow reports (--debug shows the child's traceback)" if crash.get("tensorflow") else
               "this is a bug in tftrace: re-run with --debug and report the child's traceback")
        return ChildCrashed(f"the child process running {label} {how}: {what}{cause}", f"{fix}; {incomplete}",
                            reason=f"its child process {how} ({cause})")
    cause = cause_in_stderr(lines)
    if cause:
        return ChildCrashed(f"the child process running {label} {how}: {cause}",
                            f"fix what it reports (--debug shows the child's stderr); {incomplete}",
                            reason=f"its child process {how} ({cause})")
    shown = "\n".join("    " + line for line in lines[-STDERR_TAIL_LINES:]) or "    (no output)"
    return ChildCrashed(f"the child process running {label} {how}; the tail of its stderr:\n{shown}\n",
                        f"fix what it reports (re-run with --debug for the full picture); {incomplete}",
                        reason=f"its child process {how}")


def _with_debug(error: TftraceError, detail: str) -> TftraceError:
    """Attach what ``--debug`` prints after the error line (the child's stderr: its traceback)."""
    error.debug_detail = detail
    return error


def _send(proc: subprocess.Popen, text: str, *, close: bool) -> None:
    """Write to the child's stdin (it reads the job whole before anything else), closing it
    after the job."""
    assert proc.stdin is not None
    if proc.stdin.closed:
        return  # closed when an earlier write found the child gone
    try:
        proc.stdin.write(text.encode("utf-8"))
        proc.stdin.flush()
    except BrokenPipeError:
        _close_stdin(proc)  # the child died at start: its exit status and stderr tell why
        return
    if close:
        _close_stdin(proc)


def _close_stdin(proc: subprocess.Popen) -> None:
    """Close the child's stdin. A child that died at start (a bad TF_XLA_FLAGS) leaves what was
    written to it in the buffer, which closing flushes into the broken pipe: that is no error of
    ours, and its exit status and stderr say what happened (the buffered pipe is closed anyway)."""
    if proc.stdin is not None and not proc.stdin.closed:
        try:
            proc.stdin.close()
        except BrokenPipeError:
            pass


def _refuse_code_loading_env(side: Side) -> None:
    """An isolation job replays a side read from a file (a capture's manifest, a report's job),
    which may come from anyone; its ``--env`` values would reach the child's environment, and
    many variables make the child write files or run code (``TF_DUMP_GRAPH_PREFIX``,
    ``XLA_FLAGS=--xla_dump_to=...``, ``CUDA_INJECTION64_PATH``, ``LD_PRELOAD``...). A family of
    prefixes cannot tell these apart, so only :data:`REPLAYABLE_ENV`'s knobs, each with a value it
    takes, are replayed from a file; anything else must already be set, to the same value, in the
    user's own environment.
    """
    foreign = sorted(key for key, value in side.knobs.env
                     if not _replayable(key, value) and os.environ.get(key) != value)
    if foreign:
        raise TftraceError(
            f"the side to replay asks for {', '.join(foreign)} in the child's environment, as recorded in a capture or report "
            f"file; tftrace replays from files only its own knobs ({', '.join(sorted(REPLAYABLE_ENV))}) with the "
            "values they take, because other variables can make the child write files or run code",
            f"if you trust the file, set them in your own shell first (e.g. export {foreign[0]}=...) and re-run",
        )


def _replayable(key: str, value: str) -> bool:
    pattern = REPLAYABLE_ENV.get(key)
    return pattern is not None and re.fullmatch(pattern, value) is not None


def _follow(
    proc: subprocess.Popen,
    timeout_s: float | None,
    label: str,
    console: Console,
    on_event: Callable[[dict[str, Any]], None] | None,
    events: int | None = None,
) -> dict[str, Any] | None:
    """Read the child's JSON lines until it exits; returns its reported error, if any.

    ``events``: the read end of the child's event pipe (else its stdout). Every line is checked
    (:func:`tracer.captures._events.valid`): one that is not a well-formed event is dropped.

    What the child is doing is shown by a :class:`ProgressView`: a bar on a terminal, plain
    lines on a pipe, neither for a child quicker than a second (ten on a pipe).
    """
    error = None
    started = time.monotonic()
    deadline = None if timeout_s is None else started + timeout_s
    view = ProgressView(console, label)
    try:
        for line in _lines(proc, deadline, events):
            if not line.strip():
                view.tick()
                continue  # a heartbeat or an empty line
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # stray prints from TF or user code in the child
            if not valid(event):
                continue  # not an event of tftrace's: a damaged or foreign line, dropped
            if on_event:
                on_event(event)
            if event.get("event") in ("error", "crash"):
                error = event  # a user error the child explains, or an exception it describes (child_errors)
            elif event.get("event") == "stage":
                view.stage(event["text"])
            elif event.get("event") == "progress":
                view.progress(event)
    except KeyboardInterrupt:
        _kill(proc)
        raise
    except TimeoutError:
        _kill(proc)
        raise TftraceError(
            f"{label} did not finish within --timeout {timeout_s:g} s and was stopped",
            "raise --timeout, or lower --examples/--batch-size",
        ) from None
    finally:
        view.stop()
    return error


def _lines(proc: subprocess.Popen, deadline: float | None, events: int | None = None) -> Iterator[str]:
    """The child's stdout, line by line, until it exits; raises TimeoutError at the deadline.

    Reads the raw pipe (``os.read`` after ``select``), so no line can sit in a Python buffer
    while ``select`` says there is nothing to read. Yields ``""`` after every quiet
    HEARTBEAT_S, so the caller can bring up the progress bar while the child is busy.
    """
    if events is None:
        assert proc.stdout is not None
    fd = proc.stdout.fileno() if events is None else events
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)
    pending = b""
    exited = False
    try:
        while True:
            wait = HEARTBEAT_S if deadline is None else min(HEARTBEAT_S, deadline - time.monotonic())
            if wait <= 0 and not exited:
                raise TimeoutError
            if selector.select(timeout=0 if exited else wait):
                chunk = os.read(fd, 1 << 16)
                if not chunk:  # EOF: the child closed stdout, so it is exiting
                    break
                *lines, pending = (pending + chunk).split(b"\n")
                yield from (line.decode("utf-8", "replace") for line in lines)
            elif exited:
                break
            elif proc.poll() is not None:
                # it exited while select waited: its last lines (its timings) may have come after
                # select gave up, so the pipe is read to its end before the loop stops
                exited = True
            else:
                yield ""
        if pending:
            yield pending.decode("utf-8", "replace")
        while proc.poll() is None:  # stdout is closed; wait for the exit status within the deadline
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError
            time.sleep(0.05)
    finally:
        selector.close()


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


def capture(
    side: Side,
    out_dir: str | os.PathLike[str],
    *,
    force: bool = False,
    console: Console | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    prepared: PreparedChild | None = None,
) -> Capture:
    """Capture one side into ``out_dir`` in a child process; returns the opened Capture.

    ``on_event`` receives every event the child reports (``stage``, ``progress``, ``error``);
    ``prepared``: a child started ahead for this side (its model loaded meanwhile), else a new one.
    """
    child = prepared if prepared is not None else PreparedChild(side)  # first: it starts while this one works
    out = os.path.abspath(os.fspath(out_dir))
    label = f"capture {os.path.basename(side.artifact.path.rstrip('/'))} [{side.label()}]"
    try:
        job = {"mode": "capture", "side": side.to_json(), "out_dir": out, "force": force}
        if side.inputs.inputs_file:  # hashed here once for every capture of the file, not in each child
            job["file_sha256"] = inputs_file_sha256(side.inputs.inputs_file)
        child.run(job, label=label, console=console, on_event=on_event)
    finally:
        if child.proc.poll() is None:  # its job never went (Ctrl-C while hashing): nothing is left running
            child.cancel()
    remember(out, side.python)  # its replays run the same interpreter
    from .reader import Capture  # noqa: PLC0415 - TF-free, needed only now: the child started without it

    with working(console or Console(stderr=True), label, "checking what was written"):
        # written by this run's own child: its digests are its own
        return Capture.open(out, received=False, max_memory=side.max_memory)
