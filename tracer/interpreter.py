"""The entry point of every capture and isolation child: ``python -m tracer.interpreter -``.

:mod:`tracer.captures.launcher` starts it in the side's interpreter (this Python, or the one
``--python`` names: another TensorFlow release or build). It first checks, importing only the
standard library, that this interpreter has what the child imports
(:func:`tracer.pythons.child_problem`); a missing piece is one ``error`` event naming the install
command, and exit status 3 (a user error, as the worker reports them), instead of an ImportError.
Then it runs the worker (:func:`tracer.captures.worker.main`), which reads the job on stdin.

Nothing imports this module: it stands above the captures package it starts, as ``tracer.cli``
stands above what the parent runs.
"""

from __future__ import annotations

import os
import sys

from .pythons import child_problem

__all__ = ["main"]


def main() -> int:
    """Check this interpreter, then run the capture/isolation worker."""
    problem = child_problem()
    if problem is not None:
        import json  # noqa: PLC0415

        # on the parent's event pipe (tracer.captures._events; its stdout is not the channel), named
        # by TFTRACE_EVENT_FD: that module's package is not imported before the check
        fd = os.environ.get("TFTRACE_EVENT_FD", "")
        out = os.fdopen(int(fd), "w", encoding="utf-8", closefd=False) if fd.isdigit() else sys.stdout
        out.write(json.dumps({"event": "error", "problem": problem[0], "fix": problem[1]}) + "\n")
        out.flush()
        return 3  # a user error, as the worker reports them
    from .captures import worker  # noqa: PLC0415 - imports numpy and the rest: checked above

    return worker.main()


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as the worker: skip TensorFlow's teardown
