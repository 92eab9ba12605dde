"""A child's model loaded before its job came (``launcher.PreparedChild``'s other half).

A capture or isolation child started ahead gets a ``{"prepare": side}`` line first and opens that
side's runtime while another child works; when its job comes, the runtime is used if the job is
for that very side (its inputs aside), else closed and the job's side opened anew.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ..runspec import Side
from .runtime import Runtime, open_runtime

__all__ = ["Opened", "Prepared", "runtime_for"]


class Prepared:
    """A side's runtime opened before its job arrived (or the error opening it met, raised when
    the job asks for it, so the parent hears it as from any capture)."""

    def __init__(self, side: Side) -> None:
        self.side = side
        started = time.perf_counter()
        self._runtime: Runtime | None = None
        self._error: BaseException | None = None
        try:
            self._runtime = open_runtime(side)
        except Exception as exc:  # noqa: BLE001 - re-raised by runtime(), in the job's handling
            self._error = exc
        self.opened = (started, time.perf_counter())

    def runtime(self) -> Runtime:
        if self._error is not None:
            raise self._error
        assert self._runtime is not None
        return self._runtime

    def close(self) -> None:
        if self._runtime is not None:
            self._runtime.close()


@dataclass(frozen=True)
class Opened:
    """The runtime a job runs on, and how it came to be open."""

    runtime: Runtime
    window: tuple[float, float]  # when it was opened: start, end (time.perf_counter)
    ahead: bool  # opened before the job came (:class:`Prepared`)

    @property
    def seconds(self) -> float:
        return self.window[1] - self.window[0]


def runtime_for(side: Side, prepared: Prepared | None, started: float) -> Opened:
    """The job's runtime: ``prepared``'s where it opened this very side (its inputs aside), else
    ``side`` opened now (``started``: when the job began)."""
    if prepared is not None and prepared.side == side.with_(inputs=prepared.side.inputs):
        return Opened(prepared.runtime(), prepared.opened, ahead=True)
    if prepared is not None:
        prepared.close()
    runtime = open_runtime(side)
    return Opened(runtime, (started, time.perf_counter()), ahead=False)
