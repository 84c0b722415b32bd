"""The child side: a pytest plugin (`-p gpuci.pytest_plugin`) that journals every event.

It appends one JSON line per event to the file named by `GPUCI_JOURNAL` and flushes at
once, so whatever happened survives an interpreter that dies the next instant:

    {"e": "collected", "ids": [...], "serial": [...], "rootdir": "...",
     "deselected": [files whose tests -m, -k or --deselect left out]}
    {"e": "collect-error", "id": "tests/test_x.py", "message": "..."}
    {"e": "start", "id": "..."}
    {"e": "finish", "id": "...", "outcome": "passed|failed|skipped", "duration": 0.1,
     "message": "..."}
    {"e": "end", "exitstatus": 1}

With `GPUCI_ONLY` naming a file of test ids (one a line), only those tests run: that is
how gpuci resumes after a crash and reruns a test alone. This module imports nothing of
gpuci's, so loading it costs the child next to nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import IO, Any

import pytest

MESSAGE_LIMIT = 500
SERIAL_MARK = "gpu_serial"


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
            self.write({"e": "collect-error", "id": report.nodeid, "message": _first_line(report)})

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Record the ids that will run, and which of them must run alone."""
        self.write(
            {
                "e": "collected",
                "ids": [item.nodeid for item in session.items],
                "serial": [
                    item.nodeid
                    for item in session.items
                    if item.get_closest_marker(SERIAL_MARK) is not None
                ],
                "rootdir": str(session.config.rootpath),
                "deselected": sorted(self._deselected),
            }
        )

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
    if path:
        config.pluginmanager.register(Journal(path), "gpuci-journal")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Close the journal."""
    journal = config.pluginmanager.get_plugin("gpuci-journal")
    if isinstance(journal, Journal):
        journal.close()
