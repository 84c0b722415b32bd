"""Waits in the child (`gpuci.pytest_plugin`): a concurrency pair's rendezvous at its first
test, and a held interpreter's wait for gpuci to say which tests it runs.

Imported by the plugin, so light: the standard library and pytest only.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuci.run.proc.handshake import HOLD_ENV, POLL_S, RENDEZVOUS_WAIT_S


class Rendezvous:
    """Holds the first test of this interpreter until every partner reached its own."""

    def __init__(self, spec: str) -> None:
        folder, _, count = spec.rpartition(":")
        self._folder = Path(folder)
        self._count = int(count) if count.isdigit() else 2
        self._done = False

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self) -> None:
        """Arrive, then wait for the others (once, at the first test)."""
        if self._done:
            return
        self._done = True
        self._folder.mkdir(parents=True, exist_ok=True)
        (self._folder / str(os.getpid())).touch()
        deadline = time.monotonic() + RENDEZVOUS_WAIT_S
        while time.monotonic() < deadline:
            if sum(1 for _ in self._folder.iterdir()) >= self._count:
                return
            time.sleep(POLL_S)


def hold_until_released(
    only: Path, collected: Callable[[], dict[str, Any]], write: Callable[[dict[str, Any]], None]
) -> None:
    """Under GPUCI_HOLD, journal `held` (`collected()`: what was collected, stamped with the
    wall clock) and wait until gpuci writes the file of ids to run: it starts this
    interpreter before it knows them. No time limit: gpuci kills an interpreter it does not
    take, and the kernel one whose gpuci died (PR_SET_PDEATHSIG). Elsewhere: nothing, not
    even the event (every other interpreter with GPUCI_ONLY passes here)."""
    if os.environ.get(HOLD_ENV) != "1":
        return
    write(collected())
    while not only.exists():
        time.sleep(POLL_S)
