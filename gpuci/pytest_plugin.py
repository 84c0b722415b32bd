"""The child side: a pytest plugin (`-p gpuci.pytest_plugin`) that journals every event.

It appends one JSON line per event to the file named by `GPUCI_JOURNAL` and flushes at
once, so whatever happened survives an interpreter that dies the next instant:

    {"e": "collected", "ids": [...], "serial": [...], "rootdir": "...",
     "deselected": [files whose tests -m, -k or --deselect left out],
     "threads": 4, "single_threaded": [...]}
    {"e": "collect-error", "id": "tests/test_x.py", "message": "..."}
    {"e": "poison", "libs": ["cupy", "torch"], "errors": {"cupy": "..."}}
    {"e": "start", "id": "..."}
    {"e": "finish", "id": "...", "outcome": "passed|failed|skipped", "duration": 0.1,
     "message": "..."}
    {"e": "end", "exitstatus": 1}

`threads` is there only under pytest-run-parallel with `--parallel-threads` above 1: each
test ran in that many threads at once, except those in `single_threaded` (marked
`thread_unsafe` and the like), which ran in one. A failure in any thread is the test's
failure, with that thread's exception as the message.

With `GPUCI_ONLY` naming a file of test ids (one a line), only those tests run: that is
how gpuci resumes after a crash and reruns a test alone.

With `GPUCI_POISON=1`, every device allocation handed to a test is filled first (CuPy:
0xFF bytes; PyTorch: NaN and the largest integer), so a kernel that reads memory it never
wrote fails the same way every time. CuPy and PyTorch are never imported for it: they are
poisoned once the test modules are imported and again before each test's setup and call,
as soon as something has imported them. A `poison` event names the libraries poisoned
just then (first, and again after a test undid it); `errors`, only where one could not
be, says why. A test ran poisoned where such an event for its library precedes its
`finish`: one that imports the library in its own body is poisoned from the next test on.

This module imports nothing of gpuci's, so loading it costs the child next to nothing.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

MESSAGE_LIMIT = 500
SERIAL_MARK = "gpu_serial"
POISON_BYTE = 0xFF
# pytest-run-parallel's plugin object; its run_in_parallel maps the ids it runs threaded
RUN_PARALLEL_PLUGIN = "_run-parallel"
# Poisoning turns on torch's deterministic mode (warn_only), which warns about every op
# without a deterministic kernel and about cuBLAS; in a suite that errors on warnings those
# would read as failures caused by poison, i.e. as reads of uninitialized memory.
POISON_WARNING_FILTERS = (
    "ignore:.*does not have a deterministic implementation:UserWarning",
    "ignore:Deterministic behavior was enabled:UserWarning",
)


class Journal:
    """The journal file, written line by line and flushed per event."""

    def __init__(self, path: str) -> None:
        self._file: IO[str] = Path(path).open("a", encoding="utf-8")  # noqa: SIM115
        self._reports: dict[str, list[pytest.TestReport]] = {}
        self._deselected: set[str] = set()  # files with tests the user's arguments left out

    def write(self, event: dict[str, Any]) -> None:
        """Append one event and push it to the OS before going on."""
        self._file.write(json.dumps(event, ensure_ascii=False) + "\n")
        self._file.flush()

    def close(self) -> None:
        """Close the file at the very end of the session."""
        self._file.close()

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """Keep only the tests named in GPUCI_ONLY, in collection order."""
        only_file = os.environ.get("GPUCI_ONLY")
        if not only_file:
            return
        wanted = set(Path(only_file).read_text(encoding="utf-8").splitlines())
        keep = [item for item in items if item.nodeid in wanted]
        dropped = [item for item in items if item.nodeid not in wanted]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = keep

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        """Remember which files lost tests to -m, -k or --deselect (not to GPUCI_ONLY)."""
        if not os.environ.get("GPUCI_ONLY"):
            self._deselected.update(item.nodeid.split("::", 1)[0] for item in items)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """Record a file that could not be imported or collected."""
        if report.failed:
            self.write(
                {
                    "e": "collect-error",
                    "id": report.nodeid,
                    "message": _first_line(report),
                    "t": time.time(),
                }
            )

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Record the ids that will run, which must run alone, and in how many threads."""
        event: dict[str, Any] = {
            "e": "collected",
            "ids": [item.nodeid for item in session.items],
            "serial": [
                item.nodeid
                for item in session.items
                if item.get_closest_marker(SERIAL_MARK) is not None
            ],
            "rootdir": str(session.config.rootpath),
            "deselected": sorted(self._deselected),
            "t": time.time(),  # the wall clock: the parent measures start-up against it
        }
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
        outcome, message = _outcome(reports)
        duration = sum(r.duration for r in reports)
        self.write(
            {
                "e": "finish",
                "id": nodeid,
                "outcome": outcome,
                "duration": round(duration, 6),
                "message": message,
            }
        )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, exitstatus: int) -> None:
        """Record an orderly end: pytest, not a crash, decided what did not run."""
        self.write({"e": "end", "exitstatus": int(exitstatus)})


class PoisonedAllocator:
    """A CuPy allocator that fills every block it hands out with 0xFF bytes first."""

    def __init__(self, cupy: Any, allocate: Callable[[int], Any]) -> None:
        self._cuda = cupy.cuda
        self._allocate = allocate

    def __call__(self, size: int) -> Any:
        """Allocate with the wrapped allocator, then fill on the current stream."""
        memptr = self._allocate(size)
        if size > 0:
            # the allocating thread's current stream: the fill is ordered before any use on it
            stream = self._cuda.get_current_stream().ptr
            self._cuda.runtime.memsetAsync(memptr.ptr, POISON_BYTE, size, stream)
        return memptr


def poison_cupy(cupy: Any) -> bool:
    """Wrap CuPy's current allocator in a PoisonedAllocator; False if it already is one."""
    current = cupy.cuda.get_allocator()  # the default pool's malloc unless the suite chose
    if isinstance(current, PoisonedAllocator):
        return False
    cupy.cuda.set_allocator(PoisonedAllocator(cupy, current))
    return True


def poison_torch(torch: Any) -> bool:
    """Make torch fill uninitialized memory (NaN, max int); False if it already does."""
    deterministic: Any = importlib.import_module("torch.utils.deterministic")
    changed = False
    if not torch.are_deterministic_algorithms_enabled():
        # the fill only happens in deterministic mode; warn_only keeps ops that have no
        # deterministic kernel running instead of raising (a suite's own strict mode stays)
        torch.use_deterministic_algorithms(True, warn_only=True)
        changed = True
    if not deterministic.fill_uninitialized_memory:
        deterministic.fill_uninitialized_memory = True
        changed = True
    return changed


POISONERS: dict[str, Callable[[Any], bool]] = {"cupy": poison_cupy, "torch": poison_torch}


class Poisoner:
    """Poisons the GPU libraries already imported, at collection and before every test."""

    def __init__(self, journal: Journal | None) -> None:
        self._journal = journal
        self._poisoned: set[str] = set()
        self._errors: dict[str, str] = {}

    def poison(self) -> None:
        """Poison each library in sys.modules that is not poisoned now; journal what changed."""
        libs: list[str] = []
        errors: dict[str, str] = {}
        for name, poison in POISONERS.items():
            module = sys.modules.get(name)
            if module is None:  # importing it here would cost seconds; a later hook retries
                continue
            try:
                changed = poison(module)
            except Exception as exc:  # a failure here must not fail the test it precedes
                message = f"{type(exc).__name__}: {exc}"[:MESSAGE_LIMIT]
                if self._errors.get(name) != message:
                    errors[name] = self._errors[name] = message
                continue
            self._errors.pop(name, None)
            if changed or name not in self._poisoned:
                self._poisoned.add(name)
                libs.append(name)
        if (libs or errors) and self._journal is not None:
            self._journal.write(
                {"e": "poison", "libs": libs, **({"errors": errors} if errors else {})}
            )

    @pytest.hookimpl(trylast=True)  # after the journal's "collected"
    def pytest_collection_finish(self) -> None:
        """Poison what the test modules and conftests imported."""
        self.poison()

    @pytest.hookimpl(tryfirst=True)  # before the test's fixtures allocate
    def pytest_runtest_setup(self) -> None:
        """Poison what an earlier test imported lazily, or re-poison what it undid."""
        self.poison()

    @pytest.hookimpl(tryfirst=True)  # after the fixtures, which may have imported one
    def pytest_runtest_call(self) -> None:
        """Poison what this test's fixtures imported."""
        self.poison()


def _parallel_threads(config: pytest.Config) -> int:
    """How many threads pytest-run-parallel runs each test in (1 where it is not loaded)."""
    value = config.getoption("parallel_threads", default=None)
    if value is None:
        return 1
    if value == "auto":  # as pytest-run-parallel counts: the CPUs this process may use
        if hasattr(os, "sched_getaffinity"):
            return len(os.sched_getaffinity(0))
        return os.cpu_count() or 1
    return int(value)


def _outcome(reports: list[pytest.TestReport]) -> tuple[str, str]:
    """Fold a test's phase reports into one outcome and the failure's first line."""
    for report in reports:
        if report.failed:
            return "failed", _first_line(report)
    for report in reports:
        if report.skipped:
            return "skipped", _first_line(report)
    return "passed", ""


def _first_line(report: pytest.TestReport | pytest.CollectReport) -> str:
    """The first line that says what went wrong (or why the test was skipped)."""
    longrepr = report.longrepr
    text = ""
    if isinstance(longrepr, tuple):  # a skip: (path, lineno, reason)
        text = str(longrepr[2]).removeprefix("Skipped: ")
    elif longrepr is not None:
        crash = getattr(longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(longrepr).strip()
        if not text:
            text = str(longrepr).strip()
        if report.when in ("setup", "teardown"):
            text = f"error in {report.when}: {text}"
    lines = [line for line in text.splitlines() if line.strip()]
    if isinstance(report, pytest.CollectReport) and lines:
        # collection errors print a whole traceback; its last line names the error
        return lines[-1].removeprefix("E").strip()[:MESSAGE_LIMIT]
    return lines[0][:MESSAGE_LIMIT] if lines else ""


def pytest_configure(config: pytest.Config) -> None:
    """Register the journal when gpuci started this interpreter."""
    config.addinivalue_line(
        "markers", f"{SERIAL_MARK}: gpuci runs this test's file alone, after the parallel pool"
    )
    path = os.environ.get("GPUCI_JOURNAL")
    journal = Journal(path) if path else None
    if journal is not None:
        config.pluginmanager.register(journal, "gpuci-journal")
    if os.environ.get("GPUCI_POISON", "") not in ("", "0"):
        for line in POISON_WARNING_FILTERS:
            config.addinivalue_line("filterwarnings", line)
        config.pluginmanager.register(Poisoner(journal), "gpuci-poison")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the journal."""
    journal = config.pluginmanager.get_plugin("gpuci-journal")
    if isinstance(journal, Journal):
        journal.close()
