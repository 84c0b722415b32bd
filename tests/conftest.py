"""gpuci's own test run: with GPUCI_FILE_TIMES=1 (`nox -s tests`), one line per test file
as it finishes, with its time and the time so far, so a long run shows where it is; with
GPUCI_RUN_PARALLEL_SITE (`nox -s tests`: where it installed pytest-run-parallel), that folder
on the PYTHONPATH of the tests marked `threads_plugin`, and only theirs."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

FILE_TIMES = os.environ.get("GPUCI_FILE_TIMES") == "1"
_SITE = os.environ.get("GPUCI_RUN_PARALLEL_SITE", "")
RUN_PARALLEL_SITE = str(Path(_SITE).resolve()) if _SITE else ""  # children run elsewhere


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """A test marked `threads_plugin` (its suites run the threads mode) runs with
    pytest-run-parallel where its interpreters find it: its fixtures, set up and torn down
    inside, start them too. Any other test's interpreters start without it, as most
    users' do (where it is installed beside pytest, every test has it anyway)."""
    if not RUN_PARALLEL_SITE or item.get_closest_marker("threads_plugin") is None:
        yield
        return
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [RUN_PARALLEL_SITE, before]))
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = before


class FileTimes:
    """Prints `tests/test_x.py: 12 tests in 31.2s (4m05s so far)` after each file."""

    def __init__(self, reporter: pytest.TerminalReporter) -> None:
        self.reporter = reporter
        self.zero = self.since = time.monotonic()
        self.file = ""
        self.count = 0

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        # Flushed when a test of the next file starts, not when it finishes, so the next
        # file's first test and its module fixtures count for that file, not this one.
        file = nodeid.split("::", 1)[0]
        if file != self.file:
            self.flush()
            self.file, self.count, self.since = file, 0, time.monotonic()
        self.count += 1

    def pytest_sessionfinish(self) -> None:
        self.flush()

    def flush(self) -> None:
        if not self.file:
            return
        now = time.monotonic()
        total = now - self.zero
        self.reporter.write("\n")  # the progress dots do not end their line
        self.reporter.write_line(
            f"  {self.file}: {self.count} tests in {now - self.since:.1f}s"
            f" ({int(total // 60)}m{total % 60:02.0f}s so far)"
        )
        self.since = now
        self.file = ""


@pytest.hookimpl(trylast=True)  # after the terminal reporter is registered
def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if FILE_TIMES and reporter is not None:
        config.pluginmanager.register(FileTimes(reporter), "gpuci-file-times")
