"""Spawn: start one fresh `python -m pytest` interpreter, as every interpreter of gpuci is.

Every interpreter whose outcome can enter a category or stand behind a printed command is
a fresh process (DESIGN, "Fresh interpreters, started ahead"): a forked one was measured
unfaithful in a new way each time (imports under `if TYPE_CHECKING:`, warnings at import
outside the suite's filters, a test file's imports before its conftest.py).
"""

from __future__ import annotations

import contextlib
import os
import queue
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future

from gpuci.run.proc.ledger import dying_with_me
from gpuci.run.proc.reaper import start_child


def start_interpreter(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """Start `argv` in a session of its own, its output on one pipe, no standard input.

    Through `start_child`: once gpuci is a subreaper, `reap_orphans` must leave its exit
    status to its handle.
    """

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(argv),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=True,
            # a kill -9 of gpuci ends it too; safe beside threads: it only calls a prctl
            # looked up before the fork, getppid and _exit
            preexec_fn=dying_with_me(),  # noqa: PLW1509
        )

    return start_child(start)


def start_lasting(argv: Sequence[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    """`start_interpreter`, from a thread that lives as long as gpuci: an interpreter started
    ahead and held may be taken long after the thread that asked for it ended (a screen's
    slot, an evidence wave), and Linux sends a child SIGKILL as the thread that started it
    ends (`dying_with_me`). Measured: an isolated interpreter started from a screen's slot
    was dead when the isolated pass came to take it."""
    return _STARTER.call(lambda: start_interpreter(argv, env))


class _Starter:
    """One daemon thread, started on first use, that runs what it is handed in order."""

    def __init__(self) -> None:
        self._asked: queue.SimpleQueue[tuple[Callable[[], object], Future[object]]]
        self._asked = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def call(self, make: Callable[[], subprocess.Popen[bytes]]) -> subprocess.Popen[bytes]:
        done: Future[object] = Future()
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._serve, name="gpuci-starter", daemon=True
                )
                self._thread.start()
        self._asked.put((make, done))
        started = done.result()
        assert isinstance(started, subprocess.Popen)
        return started

    def _serve(self) -> None:
        while True:
            make, done = self._asked.get()
            try:
                done.set_result(make())
            except BaseException as exc:  # the caller raises it
                done.set_exception(exc)


_STARTER = _Starter()


def yield_cpu(pid: int, nice: int) -> None:
    """Give interpreter `pid` `nice` more niceness than gpuci's own (its threads and
    children inherit it): a screen's interpreter yields the CPU to the suite interpreter."""
    if nice:
        with contextlib.suppress(OSError):  # ended already: nothing to yield
            os.setpriority(os.PRIO_PROCESS, pid, os.getpriority(os.PRIO_PROCESS, 0) + nice)
