"""What a failed child process said, in one line.

A child that fails without reporting a user error (an exception nobody caught, TensorFlow
stopping the process with a fatal log line) used to reach the user as the tail of its stderr,
a Python stack ("File …/worker.py, line 87 …") folded into the error line. The user needs
TensorFlow's own words (the op and its message); the stack is for ``--debug``. The child
describes its exception here (:func:`describe_exception`, sent as a ``crash`` event); the parent
reads the cause out of stderr when no event came (:func:`cause_in_stderr`: TensorFlow's fatal
``F…] message`` line, or a Python exception line), and keeps the stderr for ``--debug``.
"""

from __future__ import annotations

import re
import traceback

__all__ = ["describe_exception", "cause_in_stderr", "DEBUG_LINES"]

DEBUG_LINES = 80  # the child's stderr shown under --debug: its traceback whole, TF's logs around it
# absl/glog's fatal line: F0000 00:00:1796158403.825723   24802 parse_flags_from_env.cc:234] message
FATAL_LOG = re.compile(r"^\s*F\d{4} [\d:.]+\s+\d+ [^\]]+\] (?P<message>.+)$")
CHECK_FAILED = re.compile(r"Check failed: .+")
MESSAGE_LIMIT = 400


def describe_exception(exc: BaseException) -> tuple[str, bool]:
    """(one line naming the exception and its message, whether TensorFlow raised it).

    A TensorFlow ``OpError`` keeps its node and reason without TF's framing and stacks; an
    exception raised inside TensorFlow's Python (a feed of the wrong shape: ``Cannot feed value
    of shape () for Tensor x:0``) is TensorFlow's to explain too; any other is tftrace's bug."""
    frames = traceback.extract_tb(exc.__traceback__)
    from_tf = type(exc).__module__.startswith("tensorflow") or bool(
        frames and "/tensorflow/" in frames[-1].filename.replace("\\", "/"))
    if hasattr(exc, "node_def") and hasattr(exc, "error_code"):  # tf.errors.OpError, without importing TF
        from .runtime import tf_error_text  # noqa: PLC0415 - the child has TensorFlow loaded already

        text = tf_error_text(exc, MESSAGE_LIMIT)
    else:
        text = " ".join(str(exc).split())[:MESSAGE_LIMIT]
    return (f"{type(exc).__name__}: {text}" if text else type(exc).__name__), from_tf


def cause_in_stderr(lines: list[str]) -> str:
    """The line of a child's stderr that says why it ended, or "": TensorFlow's last fatal log
    message (an unknown flag in ``TF_XLA_FLAGS``, a failed check), else the last Python
    exception line (``SomeError: message``) of a traceback."""
    for line in reversed(lines):
        fatal = FATAL_LOG.match(line)
        if fatal:
            return " ".join(fatal.group("message").split())[:MESSAGE_LIMIT]
    for line in reversed(lines):
        check = CHECK_FAILED.search(line)
        if check:
            return check.group(0)[:MESSAGE_LIMIT]
    for line in reversed(lines):
        head = line.strip().split(":", 1)[0]
        if head.endswith(("Error", "Exception")) and " " not in head and not line.startswith((" ", "\t")):
            return " ".join(line.split())[:MESSAGE_LIMIT]
    return ""
