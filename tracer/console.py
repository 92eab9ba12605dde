"""The terminal consoles the CLI prints through.

rich answers a closed pipe (``tftrace compare A B | head -1``) by exiting with status 1, which
in tftrace's contract means "diverged". Here the console instead stops printing (its stream
goes to /dev/null) and the command goes on: the report is still written and the exit status is
still the verdict.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console

__all__ = ["terminal"]


class _Console(Console):
    def on_broken_pipe(self) -> None:
        self.quiet = True
        devnull = os.open(os.devnull, os.O_WRONLY)
        try:
            os.dup2(devnull, self.file.fileno())  # later writes by anyone to this stream are dropped too
        finally:
            os.close(devnull)


def terminal(*, stderr: bool = False, **options: Any) -> Console:
    """A rich Console on stdout (or stderr) that outlives its reader."""
    return _Console(stderr=stderr, **options)
