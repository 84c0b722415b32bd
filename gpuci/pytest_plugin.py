"""The child side: a pytest plugin (in PYTEST_PLUGINS: `gpuci.run.proc.plugin_env`) that
journals every event.

It appends one JSON line per event to the file named by `GPUCI_JOURNAL` and flushes at
once, so whatever happened survives an interpreter that dies the next instant:

    {"e": "collected", "ids": [...], "serial": [...], "rootdir": "...",
     "deselected": [files whose tests -m, -k or --deselect left out],
     "deselected_tests": 3,
     "parallel_threads": 4, "threads": 4, "single_threaded": [...], "last_failed": true}
    {"e": "collect-error", "id": "tests/test_x.py", "message": "..."}
    {"e": "collect-skip", "id": "tests/test_y.py", "message": "the skip's reason"}
    {"e": "poison", "libs": ["cupy", "torch"], "errors": {"cupy": "..."}}
    {"e": "start", "id": "..."}
    {"e": "finish", "id": "...", "outcome": "passed|failed|skipped", "duration": 0.1,
     "message": "...", "where": "tests/test_x.py:12", "pytest": ["failed", "error"]}
    {"e": "internal-error", "message": "RuntimeError: ...", "where": "conftest.py:3 in hook"}
    {"e": "end", "exitstatus": 1}

`last_failed` (--lf): a path given may have yielded nothing. `parallel_threads` is what
`--parallel-threads` says (the suite's addopts, or gpuci's threads runs), where above 1:
how discovery learns that the suite asks for threads. Outside gpuci's threads runs (no
`--parallel-threads` on gpuci's own command line) the plugin takes pytest-run-parallel's
runner out, so those modes run each test once.
`pytest`, where it is not just the outcome, is what pytest's own summary line counts for
the test (`xfailed`, `xpassed`, `error`; a failure and a teardown error are two).
`where`, on a failure only, is the innermost frame of the traceback in the suite's own
code (not under site-packages): with the message it is the failure's fingerprint.

With a rendezvous in `GPUCI_ONLY`'s file (`{"ids": [...], "rendezvous": "DIR:N"}`, given
only to the interpreters of a concurrency pair), the first test waits in its setup
until N interpreters have reached theirs (at most RENDEZVOUS_WAIT_S), so that the two
tests run at the same time, whatever each interpreter's start-up cost.

With `GPUCI_HOLD=1` (the check's suite interpreter, started before gpuci knows the suite),
the interpreter journals a `held` event once pytest has collected (what `collected` says,
before GPUCI_ONLY: gpuci's discovery), and waits until `GPUCI_ONLY`'s file appears
(`gpuci.run.proc.waits`).

`threads` is there only under pytest-run-parallel with `--parallel-threads` above 1: each
test ran in that many threads at once, except those in `single_threaded` (marked
`thread_unsafe` and the like), which ran in one. A failure in any thread is the test's
failure, with that thread's exception as the message.

With `GPUCI_ONLY` naming a file of test ids (a JSON list, so that an id keeps every
character pytest allows in it, a newline included; or that list and a pair's rendezvous,
handed over when the tests start, so that an interpreter started ahead may be paired),
only those tests run: that is how
gpuci resumes after a crash and reruns a test alone. `null` there runs every test collected
(a held interpreter released for a screen, which runs files, not ids).

With `GPUCI_POISON=1`, every device allocation handed to a test is filled first (CuPy:
0xFF bytes; PyTorch: NaN and the largest integer), so a kernel that reads memory it never
wrote fails the same way every time. CuPy and PyTorch are never imported for it: they are
poisoned once the test modules are imported and again before each test's setup and call,
as soon as something has imported them. A `poison` event names the libraries poisoned
just then (first, and again after a test undid it); `errors`, only where one could not
be, says why. A test ran poisoned where such an event for its library precedes its
`finish`: one that imports the library in its own body is poisoned from the next test on.

Where it journals, `gpuci.state.recorder` adds a `left` event after each test (and each
file) that changed state a later test inherits: the state ledger (GPUCI_STATE=off: none).

It imports only child-side modules, each light: the poisoning (`gpuci.evidence.poison`), the
ids and the hold (`gpuci.run.proc.ids`, `waits`), what pytest's reports say
(`gpuci.run.proc.reports`) and the state ledger's recorder, so loading it costs the child
next to nothing.
"""

from __future__ import annotations

import functools
import json
import os
import time
from collections.abc import Generator
from pathlib import Path
from typing import IO, Any

import pytest

from gpuci.evidence.poison import POISON_WARNING_FILTERS, Poisoner
from gpuci.run.proc.handshake import read_asked
from gpuci.run.proc.ids import select_ids
from gpuci.run.proc.plugin_env import (
    plain_run,
    randomly_seed,
    restore_user_plugins,
    write_junit,
)
from gpuci.run.proc.reports import (
    first_line,
    innermost_own,
    internal_error_cause,
    report_outcome,
)
from gpuci.run.proc.waits import Rendezvous, hold_until_released
from gpuci.state.changes import state_level
from gpuci.state.recorder import StateRecorder

SERIAL_MARK = "gpu_serial"
# pytest-run-parallel's plugin object; its run_in_parallel maps the ids it runs threaded
RUN_PARALLEL_PLUGIN = "_run-parallel"
THREADS_OPTION = "--parallel-threads"  # how gpuci asks pytest-run-parallel for threads


class Journal:
    """The journal file, written line by line and flushed per event."""

    def __init__(self, path: str, config: pytest.Config | None = None) -> None:
        self._file: IO[str] = Path(path).open("a", encoding="utf-8")  # noqa: SIM115
        self._config = config  # whose hooks say what pytest's own summary counts
        self._reports: dict[str, list[pytest.TestReport]] = {}
        self._deselected: set[str] = set()  # files with tests the user's arguments left out
        self._deselected_tests = 0  # how many: every test deselected is pytest's exit 5
        self._filtering = False  # while GPUCI_ONLY's tests are kept

    def write(self, event: dict[str, Any]) -> None:
        """Append one event and push it to the OS before going on."""
        # ASCII escapes: an id holding a lone surrogate is still one line of UTF-8
        self._file.write(json.dumps(event) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file at the very end of the session, and let go of the config: held
        longer, it keeps the test modules alive into interpreter teardown, where their
        objects' __del__ would find their globals gone (a crash at exit would not show)."""
        self._file.close()
        self._config = None

    # outermost (registered at configure, after pytest's cache plugins): past `yield`,
    # --lf, --ff, --nf, --sw have chosen, so `held` (discovery) is what the suite runs
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> Generator[None]:
        """Keep only the tests named in GPUCI_ONLY, in collection order (an id computed
        differently here matched by its stable part, `gpuci.run.proc.ids`); held first
        (GPUCI_HOLD), with what was collected, until that file is there. A file that says
        `null` keeps every test: a screen runs what pytest collects, as plain pytest would."""
        yield
        only_file = os.environ.get("GPUCI_ONLY")
        if not only_file:
            return
        held = functools.partial(self._collection, "held", config, items)
        hold_until_released(Path(only_file), held, self.write)
        asked, rendezvous = read_asked(Path(only_file).read_text(encoding="utf-8"))
        if rendezvous:  # a pair's side: its first test waits for the others' (`waits`)
            config.pluginmanager.register(Rendezvous(rendezvous), "gpuci-rendezvous")
        if asked is None:
            return
        wanted = set(select_ids(asked, [item.nodeid for item in items]))
        keep = [item for item in items if item.nodeid in wanted]
        dropped = [item for item in items if item.nodeid not in wanted]
        if dropped:
            self._filtering = True  # not the user's arguments: not recorded as deselected
            config.hook.pytest_deselected(items=dropped)
            self._filtering = False
        items[:] = keep

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Remember which files lost tests to -m, -k or --deselect (not to GPUCI_ONLY)."""
        if not self._filtering:
            self._deselected.update(item.nodeid.split("::", 1)[0] for item in items)
            self._deselected_tests += len(items)

    @pytest.hookimpl(wrapper=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        """A file (or conftest) that calls sys.exit while pytest imports it is a collection
        error of that file: pytest would end the whole session there, the other files unrun.
        Not in the plain run, which ends as pytest does (INTERNALERROR, exit 3)."""
        try:
            return (yield)
        except SystemExit as exc:
            if plain_run():
                raise
            excinfo = pytest.ExceptionInfo.from_exception(exc)
            return pytest.CollectReport(
                collector.nodeid, "failed", collector.repr_failure(excinfo), []
            )

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Record a file that could not be imported or collected, or that skipped itself
        (`pytest.skip(allow_module_level=True)`, `importorskip`): pytest counts each."""
        kind = "collect-error" if report.failed else "collect-skip" if report.skipped else ""
        if kind:
            self.write(
                {"e": kind, "id": report.nodeid, "message": first_line(report), "t": time.time()}
            )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Record the ids that will run, which must run alone, and in how many threads."""
        event = self._collection("collected", session.config, session.items)
        threads = _parallel_threads(session.config)
        if threads > 1:
            event["threads"] = threads
            # pytest-run-parallel's own collection_finish (tryfirst) has sorted them by now
            threaded = getattr(
                session.config.pluginmanager.get_plugin(RUN_PARALLEL_PLUGIN),
                "run_in_parallel",
                None,
            )
            if isinstance(threaded, dict):
                event["single_threaded"] = [
                    item.nodeid for item in session.items if item.nodeid not in threaded
                ]
        self.write(event)

    def _collection(
        self, kind: str, config: pytest.Config, items: list[pytest.Item]
    ) -> dict[str, Any]:
        """What was collected: the ids, which must run alone, the rootdir, the files the
        user's arguments deselected, the threads the suite's configuration asks for."""
        event: dict[str, Any] = {
            "e": kind,
            "ids": [item.nodeid for item in items],
            "serial": [
                item.nodeid for item in items if item.get_closest_marker(SERIAL_MARK) is not None
            ],
            "rootdir": str(config.rootpath),
            "deselected": sorted(self._deselected),
            "deselected_tests": self._deselected_tests,
            "t": time.time(),  # the wall clock: the parent measures start-up against it
        }
        asked = _configured_threads(config)
        if asked > 1:  # the suite's configuration (or arguments) ask for threads
            event["parallel_threads"] = asked
        if config.getoption("lf", False):  # a file given may hold no test that failed last
            event["last_failed"] = True
        event.update(randomly_seed(config))  # every other interpreter runs with it
        return event

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        """Record that a test started: if no finish follows, it crashed or hung."""
        self._reports[nodeid] = []
        self.write({"e": "start", "id": nodeid})

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Collect the setup, call and teardown reports of the running test."""
        self._reports.setdefault(report.nodeid, []).append(report)

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        """Record the test's outcome over all its phases."""
        reports = self._reports.pop(nodeid, [])
        outcome, message = report_outcome(reports)
        duration = sum(r.duration for r in reports)
        where = next((w for r in reports if r.failed and (w := innermost_own(r))), "")
        words = self._counted(reports)
        self.write(
            {
                "e": "finish",
                "id": nodeid,
                "outcome": outcome,
                "duration": round(duration, 6),
                "message": message,
                **({"where": where} if where else {}),
                **({"pytest": words} if words != [outcome] else {}),
            }
        )

    def _counted(self, reports: list[pytest.TestReport]) -> list[str]:
        """What pytest's own summary line counts for these reports (`xfailed`, `error`...),
        asked of pytest's hooks as its terminal asks them; one word per counted report."""
        if self._config is None:
            return []
        status = self._config.hook.pytest_report_teststatus
        found = (status(report=r, config=self._config) for r in reports)
        return [str(category) for category, _, _ in found if category]

    def pytest_internalerror(self, excinfo: pytest.ExceptionInfo[BaseException]) -> None:
        """Record pytest's INTERNALERROR (exit 3) with its cause: the parent fails the file
        with it rather than taking the tests pytest never ran for a pass."""
        self.write({"e": "internal-error", **internal_error_cause(excinfo)})

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, exitstatus: int) -> None:
        """Record an orderly end: pytest, not a crash, decided what did not run."""
        self.write({"e": "end", "exitstatus": int(exitstatus)})


def _parallel_threads(config: pytest.Config) -> int:
    """How many threads pytest-run-parallel runs each test in (1 where it is not loaded)."""
    if not config.pluginmanager.has_plugin(RUN_PARALLEL_PLUGIN):
        return 1
    return _configured_threads(config)


def _configured_threads(config: pytest.Config) -> int:
    """What `--parallel-threads` says, from the command line, addopts or the ini file."""
    value = config.getoption("parallel_threads", default=None)
    if value is None:
        return 1
    if value == "auto":  # as pytest-run-parallel counts: the CPUs this process may use
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0))
        return os.cpu_count() or 1
    return int(value)


def _threads_asked_by_gpuci(config: pytest.Config) -> bool:
    """Whether gpuci gives `--parallel-threads`: on the command line (threads mode) or in
    PYTEST_ADDOPTS (the evidence's runs in threads), not in the suite's ini addopts."""
    args = [*map(str, config.invocation_params.args), *os.environ.get("PYTEST_ADDOPTS", "").split()]
    return any(a.startswith(THREADS_OPTION) for a in args)


@pytest.hookimpl(trylast=True)  # after pytest-run-parallel registered its runner
def pytest_configure(config: pytest.Config) -> None:
    """Register the journal when gpuci started this interpreter; outside gpuci's threads
    runs, take pytest-run-parallel's runner out (its markers and fixtures stay), so every
    other mode runs each test once, in one thread, whatever the suite's addopts say."""
    if os.environ.get("GPUCI_JOURNAL") and not _threads_asked_by_gpuci(config):
        runner = config.pluginmanager.get_plugin(RUN_PARALLEL_PLUGIN)
        if runner is not None:
            config.pluginmanager.unregister(runner, RUN_PARALLEL_PLUGIN)
    if not plain_run():  # registered, it would pass --strict-markers where pytest does not
        config.addinivalue_line(
            "markers", f"{SERIAL_MARK}: gpuci runs this test's file alone, after the parallel pool"
        )
    restore_user_plugins()  # a pytest a test starts does not load this plugin
    path = os.environ.get("GPUCI_JOURNAL")
    journal = Journal(path, config) if path else None
    if journal is not None:
        config.pluginmanager.register(journal, "gpuci-journal")
        write_junit(config)  # the suite interpreter's JUnit for gpuci (GPUCI_JUNIT)
        if state_level() != "off":
            recorder = StateRecorder(journal.write, state_level())
            config.pluginmanager.register(recorder, "gpuci-state")
    if os.environ.get("GPUCI_POISON", "") not in ("", "0"):
        for line in POISON_WARNING_FILTERS:
            config.addinivalue_line("filterwarnings", line)
        write = journal.write if journal is not None else None
        config.pluginmanager.register(Poisoner(write), "gpuci-poison")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the journal."""
    journal = config.pluginmanager.get_plugin("gpuci-journal")
    if isinstance(journal, Journal):
        journal.close()
