"""Which Python runs a side's child, and what that Python must have.

A side may run under another interpreter (``--python PATH``: a virtual environment with another
TensorFlow release, ``tensorflow`` instead of ``tensorflow-cpu``, a vendor build), because
"we upgraded TensorFlow and the numbers moved" can only be answered op by op when each side runs
its own TensorFlow. The child imports *this* checkout's ``tracer`` (the launcher puts it first
on ``PYTHONPATH``), so the other environment needs only what the child's modules import:
:data:`CHILD_PACKAGES`. Nothing else of tftrace (rich, jinja2, numba...) runs there.

The parent checks the path (:func:`interpreter`); the child checks its packages first thing,
before any of them is imported (:func:`child_problem`, called by the child's entry point
``python -m tracer.interpreter -``), and reports a missing one as a user error naming the install
command, so it exits 2 through the parent instead of crashing with an ImportError. An
interpreter is this run's choice: it is never taken from a capture, a report or a job file (a
path to run is code; those files come from anyone).

Only the standard library is imported here: this runs before the child's packages are known.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys

__all__ = ["PACKAGE_ROOT", "with_package_on_path", "CHILD_PACKAGES", "MIN_PYTHON", "interpreter", "missing_packages", "install_command", "remember",
           "made_with", "child_problem"]

# The directory that holds the ``tracer`` package: a child started with ``python -m tracer...``
# imports this very copy, whatever its working directory.
PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def with_package_on_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` with :data:`PACKAGE_ROOT` first on ``PYTHONPATH``, for a child process of tftrace."""
    env["PYTHONPATH"] = os.pathsep.join(p for p in (PACKAGE_ROOT, env.get("PYTHONPATH", "")) if p)
    return env

# import name -> the pip requirement that provides it (tensorflow-cpu stands for any TensorFlow build)
CHILD_PACKAGES = {
    "tensorflow": "tensorflow-cpu",
    "numpy": "numpy",
    "networkx": "networkx",
    "xxhash": "xxhash",
    "zstandard": "zstandard",
}
MIN_PYTHON = (3, 10)  # tracer's own syntax
OLDEST_TENSORFLOW = (2, 12)  # the oldest release the child is tested with (make other-tf)


def interpreter(path: str | None) -> str:
    """The executable a side's child runs: ``path`` when given (checked), else this Python."""
    if path is None:
        return sys.executable
    if not os.path.isfile(path):
        raise _error(f"--python {path} does not exist (or is not a file)",
                     "give the python of the environment to run the side in, e.g. --python .venv-tf2.12/bin/python "
                     "(make other-tf TF=2.12.1 prepares one)")
    if not os.access(path, os.X_OK):
        raise _error(f"--python {path} is not executable", f"chmod +x {shlex.quote(path)}, or give another interpreter")
    return os.path.abspath(path)


# The captures this process made under another interpreter: a replay of their ops (isolation, diagnose's
# fetch-alone replays, --repeat) must run the same TensorFlow. Kept in memory, never read from a file.
_MADE: dict[str, str] = {}


def remember(capture_dir: str, python: str | None) -> None:
    """Record that this process captured ``capture_dir`` under ``python`` (None: this interpreter)."""
    key = os.path.realpath(capture_dir)
    if python:
        _MADE[key] = python
    else:
        _MADE.pop(key, None)


def made_with(capture_dir: str | os.PathLike[str]) -> str | None:
    """The interpreter this process captured ``capture_dir`` with; None: this one, or not made here."""
    return _MADE.get(os.path.realpath(os.fspath(capture_dir)))


def missing_packages() -> list[str]:
    """The import names of :data:`CHILD_PACKAGES` this interpreter cannot find (none imported)."""
    return [name for name in CHILD_PACKAGES if importlib.util.find_spec(name) is None]


def install_command(missing: list[str], executable: str | None = None) -> str:
    """The one command that installs ``missing`` into ``executable``'s environment."""
    python = shlex.quote(executable or sys.executable)
    return f"{python} -m pip install " + " ".join(shlex.quote(CHILD_PACKAGES[name]) for name in missing)


def _error(problem: str, fix: str) -> Exception:
    from .errors import TftraceError  # noqa: PLC0415 - stdlib only, like this module

    return TftraceError(problem, fix)


def child_problem() -> tuple[str, str] | None:
    """What this interpreter lacks to run tftrace's child, as (problem, fix), or None."""
    if sys.version_info[:2] < MIN_PYTHON:
        return (f"the side's interpreter {sys.executable} is Python {sys.version.split()[0]}; tftrace's child needs "
                f"Python {'.'.join(map(str, MIN_PYTHON))} or newer",
                "give --python an interpreter of Python 3.10+ with TensorFlow installed")
    missing = missing_packages()
    if missing:
        return (f"the side's interpreter {sys.executable} lacks {', '.join(missing)}, which tftrace's child imports "
                f"(it needs {', '.join(CHILD_PACKAGES.values())})",
                f"install them there: {install_command(missing)}")
    return None
