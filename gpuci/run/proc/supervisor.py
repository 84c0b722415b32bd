"""Process control: the live child interpreters, Ctrl-C and SIGTERM, and their process groups.

One Supervisor per gpuci command: the slots of a mode and the evidence runs register
their children with it, and a stop (a signal, or an error) reaches every one of them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Protocol


class Child(Protocol):
    """A child interpreter (a `subprocess.Popen`); its pid is its process group."""

    @property
    def pid(self) -> int: ...


class Supervisor:
    """Live children and the stop flag, shared by the slots and the signal handler."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._live: set[Child] = set()

    def add(self, proc: Child) -> None:
        """Track a child so a stop can reach it."""
        with self._lock:
            self._live.add(proc)
            if self.stopping.is_set():
                signal_group(proc, signal.SIGKILL)

    def discard(self, proc: Child) -> None:
        """Forget a child that is gone."""
        with self._lock:
            self._live.discard(proc)

    def running(self) -> int:
        """How many children are tracked now."""
        with self._lock:
            return len(self._live)

    def stop(self) -> None:
        """End every child's process group, now."""
        self.stopping.set()
        with self._lock:
            for proc in self._live:
                signal_group(proc, signal.SIGKILL)

    @contextlib.contextmanager
    def handling_signals(self) -> Iterator[None]:
        """Turn Ctrl-C and SIGTERM into an orderly stop while the mode runs."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.stop()

        # a SIGINT ignored by whoever started gpuci (nohup, a shell's background job) stays
        # ignored, as it does in plain pytest: Python then raises no KeyboardInterrupt either
        stoppers = (signal.SIGINT, signal.SIGTERM)
        signums = [s for s in stoppers if signal.getsignal(s) != signal.SIG_IGN]
        previous = {s: signal.signal(s, on_signal) for s in signums}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


# A Ctrl-C that Python raises as KeyboardInterrupt is lost where it lands in code that
# swallows exceptions: the at-fork handlers a subprocess start runs in the parent
# ("Exception ignored in: <function _releaseLock>", seen with a CPU hog beside the tests).
# The flag outlives it: gpuci's waits outside a mode's signal handling check it.
INTERRUPTED = threading.Event()


@contextlib.contextmanager
def noting_interrupts() -> Iterator[None]:
    """For a whole command: Ctrl-C sets INTERRUPTED, then raises KeyboardInterrupt as
    Python's own handler does (one ignored by whoever started gpuci stays ignored)."""
    INTERRUPTED.clear()
    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        yield
        return

    def on_interrupt(signum: int, frame: FrameType | None) -> None:
        INTERRUPTED.set()
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def raise_if_interrupted() -> None:
    """Raise the KeyboardInterrupt of a Ctrl-C that code between swallowed."""
    if INTERRUPTED.is_set():
        raise KeyboardInterrupt


def signal_group(proc: Child, signum: int) -> None:
    """Signal the child's whole process group: a test's own children die with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)
