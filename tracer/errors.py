"""The one public error type.

A :class:`TftraceError` is the user's to fix: bad path, wrong flag, incomplete capture.
It carries the problem and the fix separately so the CLI can print both on one line
and exit 2 without a traceback. Anything else that escapes is a bug in tftrace.
"""

from __future__ import annotations

from .text import printable

__all__ = ["TftraceError", "EXIT_OK", "EXIT_DIVERGED", "EXIT_ERROR"]

EXIT_OK = 0
EXIT_DIVERGED = 1
EXIT_ERROR = 2


class TftraceError(Exception):
    """An error in the user's input or environment, with the fix spelled out."""

    debug_detail: str = ""  # what --debug prints after the line: a failed child's stderr (its traceback)

    def __init__(self, problem: str, fix: str = "") -> None:
        self.problem = printable(problem).rstrip(". ")  # model text in a message never reaches a terminal raw
        self.fix = printable(fix).rstrip(". ")
        super().__init__(str(self))

    def __reduce__(self) -> tuple[type[TftraceError], tuple[str, str], dict[str, object]]:
        """Crosses a process boundary whole (a side loaded in a child process): problem and fix apart."""
        return type(self), (self.problem, self.fix), self.__dict__

    def __str__(self) -> str:
        fix = self.fix[:1].upper() + self.fix[1:]
        return f"{self.problem}. {fix}." if fix else f"{self.problem}."
