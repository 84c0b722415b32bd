"""gpuci's own test run: with GPUCI_FILE_TIMES=1 (`nox -s tests`), one line per test file
as it finishes, with its time, its CPU seconds and the time so far, so a long run shows
where it is and where the CPU goes; under `--dist loadgroup`, the tests of a file that
shares a module's or a class's fixture on one worker, every other test on any; with
GPUCI_RUN_PARALLEL_SITE (`nox -s tests`: where it installed pytest-run-parallel), that folder
on the PYTHONPATH of the tests marked `threads_plugin`, and only theirs, loaded by name
(PYTEST_PLUGINS), with NumPy hidden; the plugins installed beside pytest loaded by the
interpreters of the tests marked `installed_plugins` only (PYTEST_DISABLE_PLUGIN_AUTOLOAD);
always, a test not marked `slow` that used more than QUICK_CPU_S seconds of CPU fails
(QuickLaneGuard), and gpuci's bytecode is written before the first test (compile_gpuci)."""

from __future__ import annotations

import compileall
import functools
import os
import re
import resource
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

FILE_TIMES = os.environ.get("GPUCI_FILE_TIMES") == "1"
_SITE = os.environ.get("GPUCI_RUN_PARALLEL_SITE", "")
RUN_PARALLEL_SITE = str(Path(_SITE).resolve()) if _SITE else ""  # children run elsewhere
GPUCI_SOURCES = Path(__file__).parent.parent / "gpuci"
QUICK_CPU_S = 2.0  # the most CPU a test not marked `slow` may use (QuickLaneGuard)
HEAVIEST = 15  # how many tests FileTimes lists at the end, those that used the most CPU
CPU = "cpu_s"  # the user property (and JUnit property) of the CPU seconds a test used
AUTOLOAD_OFF = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"  # tests/cli_runner.py's clean_env keeps it
PLUGINS = "PYTEST_PLUGINS"  # and this: the plugins pytest loads by name
RUN_PARALLEL_PLUGIN = "pytest_run_parallel.plugin"  # its pytest11 entry point's module
NO_NUMPY = (
    "raise ImportError('NumPy is hidden from the interpreters of the tests marked"
    " threads_plugin (tests/conftest.py): pytest-run-parallel imports it where it can')\n"
)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    """The environment a test's interpreters start in. A test marked `threads_plugin` (its
    suites run the threads mode) runs with pytest-run-parallel where its interpreters find
    it: its fixtures, set up and torn down inside, start them too. Any other test's
    interpreters start without it, as most users' do (where it is installed beside pytest,
    every test has it anyway). Only a test marked `installed_plugins` has its interpreters
    load the plugins installed beside pytest (pytest-cov, xdist, pytest-randomly): the
    others' tiny suites need none, and loading them is about a quarter of each
    interpreter's start-up, thousands of times a run. A test marked `threads_plugin` alone
    loads pytest-run-parallel by name (PYTEST_PLUGINS), as pytest loads an installed one,
    and no other: a third of its interpreters' start-up; and there NumPy cannot be
    imported (`hidden_numpy`), which pytest-run-parallel imports where it can (for its
    `thread_comp` fixture's arrays), another third, and no suite of these tests uses."""
    changes: dict[str, str | None] = {}  # None: unset
    threads = item.get_closest_marker("threads_plugin") is not None
    if threads:
        before = os.environ.get("PYTHONPATH")
        ahead = [hidden_numpy(), RUN_PARALLEL_SITE, before]
        changes["PYTHONPATH"] = os.pathsep.join(filter(None, ahead))
    plugins = item.get_closest_marker("installed_plugins") is not None
    changes[AUTOLOAD_OFF] = None if plugins else "1"
    changes[PLUGINS] = RUN_PARALLEL_PLUGIN if threads and not plugins else None
    saved = {name: os.environ.get(name) for name in changes}
    set_env(changes)
    try:
        yield
    finally:
        set_env(saved)


@functools.cache
def hidden_numpy() -> str:
    """A folder whose `numpy` package raises ImportError, to put ahead of the installed
    one (written once per user, whole or not at all: xdist's workers share it)."""
    folder = Path(tempfile.gettempdir()) / f"gpuci-tests-no-numpy-{os.getuid()}"
    init = folder / "numpy" / "__init__.py"
    init.parent.mkdir(parents=True, exist_ok=True)
    if not init.exists() or init.read_text(encoding="utf-8") != NO_NUMPY:
        part = init.with_name(f"__init__.{os.getpid()}.part")
        part.write_text(NO_NUMPY, encoding="utf-8")
        part.replace(init)
    return str(folder)


def set_env(values: dict[str, str | None]) -> None:
    """Each of `values` set in this process's environment, or unset where None."""
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """`--dist loadgroup` (`nox -s tests`): the tests of a file that shares a fixture wider
    than a test (module or class scope: a check run once for several tests) run on one
    worker, where it is built once, as `--dist loadfile` runs every file; every other test
    runs on whichever worker is free, so no long file holds up the end. (pytest-xdist's own
    loadgroup reads `xdist_group` marks from test ids that pytest 9.2 no longer lets it
    change.) The files that share go first, the largest first."""
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            file = file_of(nodeid)
            return file if shares_fixtures(config.rootpath / file) else nodeid

    return SharedFixtureScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first, in their order (a file that shares a fixture stays whole, where
    it was): the workers start the long tests early and end on quick ones, so neither waits
    long for the other's last test."""
    items.sort(key=lambda item: quick(item) and not shares_fixtures(item.path))


def quick(item: pytest.Item) -> bool:
    """Whether `item` is in the quick lane (not marked `slow`)."""
    return item.get_closest_marker("slow") is None


# a fixture that outlives a test; a suite's own, written inside a test file, counts too
WIDE_FIXTURE = re.compile(r"""scope\s*=\s*["'](?:module|class|package|session)["']""")


@functools.cache
def shares_fixtures(path: Path) -> bool:
    """Whether the test file at `path` defines a fixture wider than a test (or may: one it
    cannot read keeps its tests together)."""
    try:
        return WIDE_FIXTURE.search(path.read_text(encoding="utf-8")) is not None
    except OSError:
        return True


class FileTimes:
    """Prints `tests/test_x.py: 12 tests in 31.2s, 20.4 CPU-s (4m05s so far)` as each file
    ends: its tests' own seconds (setup, call and teardown, as pytest reports them), the
    CPU they used, their interpreters' included (QuickLaneGuard's count: what a busy
    machine hardly changes), and the run's time so far. A file ends when every test it
    collected has reported, on whichever worker each ran (`--dist loadgroup` spreads most
    files' tests over the workers), or when the run ends. At the end, when each worker
    ran its last test: the run's tail, where one worker idles while the other still has
    tests queued (xdist gives a worker its next tests before it is free); and the HEAVIEST
    tests by CPU seconds, each with its own: where cutting pays (a file's sum hides them)."""

    def __init__(self, reporter: pytest.TerminalReporter) -> None:
        self.reporter = reporter
        self.zero = time.monotonic()
        self.expected: Counter[str] = Counter()  # file: its tests, as collected
        self.done: dict[str, tuple[int, float, float]] = {}  # file: tests, seconds, CPU-s
        self.last: dict[str, float] = {}  # xdist worker: when its latest test ended
        self.heaviest: list[tuple[float, str]] = []  # (CPU-s, test id), every test's

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.expected.update(file_of(item.nodeid) for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        if not self.expected:  # every worker collects the same tests
            self.expected.update(map(file_of, ids))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        file = file_of(report.nodeid)
        tests, seconds, cpu = self.done.get(file, (0, 0.0, 0.0))
        ended = report.when == "teardown"
        if ended:  # QuickLaneGuard records the test's CPU as it tears down
            used = sum(float(value) for name, value in report.user_properties if name == CPU)
            self.heaviest.append((used, report.nodeid))
            cpu += used
        self.done[file] = (tests + ended, seconds + report.duration, cpu)
        if ended and tests + 1 >= self.expected.get(file, 0) > 0:
            self.flush(file)
        worker = getattr(report, "node", None)  # xdist's controller sets it on each report
        if ended and worker is not None:
            self.last[str(worker.gateway.id)] = time.monotonic() - self.zero

    def pytest_sessionfinish(self) -> None:
        for file in list(self.done):
            self.flush(file)
        if len(self.last) > 1:
            ends = ", ".join(f"{name} {clock(at)}" for name, at in sorted(self.last.items()))
            idle = max(self.last.values()) - min(self.last.values())
            self.reporter.write_line(f"  workers' last tests ended: {ends} ({idle:.0f}s apart)")
        heaviest = sorted(self.heaviest, reverse=True)[:HEAVIEST]
        if heaviest:
            self.reporter.write_line(f"  the {len(heaviest)} tests that used the most CPU:")
            for used, nodeid in heaviest:
                self.reporter.write_line(f"  {used:6.1f} CPU-s {nodeid}")

    def flush(self, file: str) -> None:
        tests, seconds, cpu = self.done.pop(file)
        total = time.monotonic() - self.zero
        self.reporter.write("\n")  # the progress dots do not end their line
        self.reporter.write_line(
            f"  {file}: {tests} tests in {seconds:.1f}s, {cpu:.1f} CPU-s ({clock(total)} so far)"
        )


def clock(seconds: float) -> str:
    """`seconds` as minutes and seconds: 4m05s."""
    return f"{int(seconds // 60)}m{seconds % 60:02.0f}s"


def file_of(nodeid: str) -> str:
    """The file of a test's id."""
    return nodeid.split("::", 1)[0]


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
        item.user_properties.append((CPU, round(used, 2)))  # FileTimes sums it per file
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
    if not hasattr(config, "workerinput"):
        compile_gpuci()


def compile_gpuci() -> None:
    """gpuci's bytecode, written once before any test starts. The tests start gpuci's CLI
    in fresh interpreters, hundreds a run; where PYTHONDONTWRITEBYTECODE is set (as in many
    CI images) no interpreter writes it, so each would compile gpuci's sources again, a
    good part of its start-up. (A user's gpuci, from a wheel, has the bytecode pip wrote.)"""
    compileall.compile_dir(GPUCI_SOURCES, quiet=1)
