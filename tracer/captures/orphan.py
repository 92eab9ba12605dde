"""A child whose tftrace parent is gone stops itself, with everything it started.

The parent stops its child's process group on Ctrl-C, SIGTERM and timeouts. SIGKILL (the OOM
killer, ``kill -9``, a CI job cancelled) gives it no chance, and the child would run on as an
orphan, holding the capture lock and the machine's cores. Linux's ``PR_SET_PDEATHSIG`` fires
when the *thread* that started the child exits, and ``diagnose`` starts children from worker
threads, so the child watches instead: once its parent process is no longer the one that
started it (it was re-parented), it kills its own process group. What it wrote stays
incomplete (no ``manifest.json``), as after any interruption.
"""

from __future__ import annotations

import os
import signal
import threading
import time

__all__ = ["PARENT_PID_ENV", "exit_with_parent"]

PARENT_PID_ENV = "TFTRACE_PARENT_PID"  # set by the launcher: the pid the child must outlive no longer


def exit_with_parent(interval_s: float = 0.5) -> threading.Thread | None:
    """Start a daemon thread that kills this process group once the launcher's process is gone.

    The expected parent comes from the environment, not from ``os.getppid()`` at start-up: a
    parent killed before this runs would otherwise already be replaced by the re-parenting one.
    Returns None when not started by the launcher (no variable), e.g. when run by hand.
    """
    value = os.environ.get(PARENT_PID_ENV, "")
    if not value.isdigit():
        return None
    parent = int(value)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(interval_s)
        _kill_own_group()

    thread = threading.Thread(target=watch, name="tftrace-exit-with-parent", daemon=True)
    thread.start()
    return thread


def _kill_own_group() -> None:
    """SIGKILL this process's group (grandchildren included) when it leads it, else itself."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
