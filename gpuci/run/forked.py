"""A forked child: the `subprocess.Popen`-like handle on one interpreter the fork server
started (`gpuci.run.forkserver`), whose exit status the pre-imported parent reports."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from typing import IO, Protocol


class Statuses(Protocol):
    """Where a forked child's exit status comes from: the fork server."""

    def returncode(self, pid: int, *, wait: float) -> int | None:
        """The reported exit status of a forked child, None while it runs."""


class ForkedChild:
    """A `subprocess.Popen`-like handle on one interpreter the fork server started."""

    def __init__(self, server: Statuses, pid: int, stdout: IO[bytes]) -> None:
        self.server = server
        self.pid = pid  # also its process group and session: it called setsid
        self.stdout = stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        """Its returncode once it ended (-N: killed by signal N), else None."""
        if self.returncode is None:
            self.returncode = self.server.returncode(self.pid, wait=0.0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """Wait for it to end; its returncode."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(["pytest"], timeout or 0.0)
            self.returncode = self.server.returncode(self.pid, wait=0.05)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, signum: int) -> None:
        """Signal its process group (a forked child's group is its pid)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signum)

    def kill(self) -> None:
        """SIGKILL its process group."""
        self.send_signal(signal.SIGKILL)
