"""Model text made safe to show: control characters escaped, never interpreted.

Signature keys, node names and paths come from the model. Written raw to a terminal, an
``ESC ] 52`` sequence sets the clipboard, ``ESC [ 2J`` clears the screen, ``\\r`` overwrites
the line, a C1 ``\\x9b`` starts a CSI on terminals that honour 8-bit controls; in report.md
they reach whoever ``cat``s it. Every place that shows model text (:class:`TftraceError`
messages, the terminal printer, report.md and report.html) passes it through
:func:`printable`, which writes each such character as a visible escape (``\\x1b``), so the
name stays recognisable and nothing is executed. Bidirectional overrides (U+202A..U+202E,
U+2066..U+2069) are escaped the same way: they reorder what the reader sees.

report.json keeps the exact strings (JSON escapes control characters itself).
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from typing import Any

__all__ = ["printable", "printable_tree", "count", "listed", "wrapped", "unbroken"]

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_AND_LAYOUT = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return {"\r": "\\r", "\n": "\\n", "\t": "\\t"}.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}")


def printable(text: Any, *, newlines: bool = True) -> str:
    """``text`` as a string with every C0/C1 control character (and bidi override) escaped.

    ``newlines``: keep ``\\n`` and ``\\t`` (layout, no terminal control); ``\\r`` is always
    escaped because it overwrites what was printed before it on the line.
    """
    text = str(text)
    if text.isprintable():  # no control or bidi character in it (all are unprintable): the common case, fast
        return text
    return (_CONTROL if newlines else _CONTROL_AND_LAYOUT).sub(_escape, text)


def printable_tree(value: Any) -> Any:
    """A JSON-like value with every string in it (dict keys too) made :func:`printable`."""
    if isinstance(value, str):
        return printable(value)
    if isinstance(value, dict):
        return {printable(k) if isinstance(k, str) else k: printable_tree(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(printable_tree(v) for v in value)
    return value


def listed(names: Iterable[object], shown: int, quote: str = "") -> str:
    """The first ``shown`` names, each in ``quote`` (a backtick in Markdown), then "and N more":
    "`a`, `b` and 3 more". One more than ``shown`` is listed whole ("and 1 more" hides a name and
    saves no room)."""
    items = [f"{quote}{n}{quote}" for n in names]
    if len(items) <= shown + 1:
        return ", ".join(items)
    return ", ".join(items[:shown]) + f" and {len(items) - shown:,} more"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 op``, ``6 ops``, ``2 origins``: a number and its noun as a sentence says them, never ``op(s)``."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


_GLUED_ARROW = "\x00→\x00"  # as wide as " → ", but not a place textwrap breaks
_GLUED_SPACE = "\x01"  # a space :func:`wrapped` never breaks at (:func:`unbroken`)


def unbroken(text: str) -> str:
    """``text`` kept on one line by :func:`wrapped`, as a figure and its unit (``1.85 ms``) or an
    interval (``[-71, -49]``) are read: its spaces are no place to break."""
    return text.replace(" ", _GLUED_SPACE)

_LABEL = re.compile(r"( *)(\d+\. |[A-Z]: |why: |noise: |- )?")


def wrapped(text: str, width: int) -> str:
    """``text`` wrapped to ``width`` columns as a reader follows it in a terminal or a CI log.

    Left to rich, an 80-column terminal got continuation lines from column 0, each broken line
    ending in a space, and a name longer than what was left of a line cut in two. Here a line
    breaks only at a space (never inside ``block1/conv/Conv2D`` or at its hyphens: a name longer
    than the width runs past it whole; never around the arrow of ``0.05 → 0.0499878``), carries no trailing space, and continues under its text:
    past a label (``  1. ``, ``  A: ``, ``why: ``), else two columns in from where the line starts.
    """
    lines = []
    for line in text.split("\n"):
        label = _LABEL.match(line)
        hang = len(label.group(0)) if label and label.group(2) else len(label.group(1) if label else "") + 2
        wrapper = textwrap.TextWrapper(width=max(width, hang + 20), subsequent_indent=" " * hang,
                                       break_long_words=False, break_on_hyphens=False)
        glued = line.replace(" → ", _GLUED_ARROW)  # ``0.05 → 0.0499878`` is read as one change: never split it
        lines += [part.replace(_GLUED_ARROW, " → ").replace(_GLUED_SPACE, " ") for part in wrapper.wrap(glued)] or [""]
    return "\n".join(lines)
