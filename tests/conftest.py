"""gpuci's own test run: with GPUCI_FILE_TIMES=1 (`nox -s tests`), one line per test file
as it finishes, with its time and the time so far, so a long run shows where it is; with
GPUCI_RUN_PARALLEL_SITE (`nox -s tests`: where it installed pytest-run-parallel), that folder
on the PYTHONPATH of the tests marked `threads_plugin`, and only theirs; always, a test not
marked `slow` that used more than QUICK_CPU_S seconds of CPU fails (QuickLaneGuard)."""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

FILE_TIMES = os.environ.get("GPUCI_FILE_TIMES") == "1"
_SITE = os.environ.get("GPUCI_RUN_PARALLEL_SITE", "")
RUN_PARALLEL_SITE = str(Path(_SITE).resolve()) if _SITE else ""  # children run elsewhere
QUICK_CPU_S = 2.0  # the most CPU a test not marked `slow` may use (QuickLaneGuard)


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
    """Prints `tests/test_x.py: 12 tests in 31.2s (4m05s so far)` as each file ends: its
    tests' own seconds (setup, call and teardown, as pytest reports them) and the run's so
    far. Under pytest-xdist (`--dist loadfile`: a file runs whole on one worker) a file
    ends when its worker reports a test of another file, or the run ends."""

    def __init__(self, reporter: pytest.TerminalReporter) -> None:
        self.reporter = reporter
        self.zero = time.monotonic()
        self.running: dict[str, tuple[str, int, float]] = {}  # worker: file, tests, seconds

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        gateway = getattr(getattr(report, "node", None), "gateway", None)  # xdist's worker
        worker = str(getattr(gateway, "id", ""))
        file = report.nodeid.split("::", 1)[0]
        if worker in self.running and self.running[worker][0] != file:
            self.flush(worker)
        _, tests, seconds = self.running.get(worker, (file, 0, 0.0))
        self.running[worker] = (file, tests + (report.when == "setup"), seconds + report.duration)

    def pytest_sessionfinish(self) -> None:
        for worker in list(self.running):
            self.flush(worker)

    def flush(self, worker: str) -> None:
        file, tests, seconds = self.running.pop(worker)
        total = time.monotonic() - self.zero
        self.reporter.write("\n")  # the progress dots do not end their line
        self.reporter.write_line(
            f"  {file}: {tests} tests in {seconds:.1f}s"
            f" ({int(total // 60)}m{total % 60:02.0f}s so far)"
        )


def cpu_seconds() -> float:
    """This process's CPU time and its ended children's (theirs, and their children's that
    they waited for): the work a test did, whatever else the machine was doing."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class QuickLaneGuard:
    """Fails a test not marked `slow` that used more than QUICK_CPU_S of CPU, from its
    setup to its teardown: the quick lane (`-m 'not slow'`) stays quick. CPU time, not
    wall: a busy machine stretches a test's wall time many times over, its CPU time
    hardly at all; a test that end-to-end runs a check (a few interpreters) uses more
    than QUICK_CPU_S, one that runs the CLI once (an interpreter) far less."""

    def __init__(self) -> None:
        self.started: dict[str, float] = {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self.started[item.nodeid] = cpu_seconds()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Iterator[None]:
        yield
        used = cpu_seconds() - self.started.pop(item.nodeid, cpu_seconds())
        if used > QUICK_CPU_S and item.get_closest_marker("slow") is None:
            pytest.fail(
                f"{item.nodeid} used {used:.1f}s of CPU (its children's included), more"
                f" than a quick test's {QUICK_CPU_S:.0f}s: mark it @pytest.mark.slow",
                pytrace=False,
            )


@pytest.hookimpl(trylast=True)  # after the terminal reporter is registered
def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if FILE_TIMES and reporter is not None and not hasattr(config, "workerinput"):
        config.pluginmanager.register(FileTimes(reporter), "gpuci-file-times")
    config.pluginmanager.register(QuickLaneGuard(), "gpuci-quick-lane-guard")
