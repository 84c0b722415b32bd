"""The child side of the state ledger: a snapshot between tests, and what each test and
each test file changed, journaled as `left` events.

Registered by `gpuci.pytest_plugin` where gpuci journals. Its `pytest_runtest_protocol`
wrapper is the outermost one (registered after pytest's own, tryfirst), so a snapshot
sees what outlives pytest's per-test restoring (its warnings filters, monkeypatch, log
capture): only what the next test inherits. Tests run back to back, so one snapshot
serves as one test's "after" and the next one's "before". `GPUCI_STATE` says how often:
`test` (default: every test), `file` (around each file only), `off`.

    {"e": "left", "v": 2, "id": "tests/test_a.py::test_x", "left": {KEY: CHANGE}}
    {"e": "left", "v": 2, "file": "tests/test_a.py", "left": {KEY: CHANGE}}
    {"e": "left", "v": 2, "import": "tests/test_a.py", "left": {KEY: CHANGE}}
    {"e": "modules", "v": 2, "import": "tests/test_a.py", "modules": ["multiprocessing"]}
    {"e": "modules", "v": 2, "file": "tests/test_a.py", "modules": ["cupy.cuda.nccl"]}
    {"e": "ledger-cost", "s": 0.084, "snapshots": 1193}

`import`: what importing the test module left (its collection; a per-test snapshot, not a
full one), less the folder pytest itself puts on sys.path to import it, and less warnings
filters where pytest's warnings plugin restores them after collection.
`modules`: what `sys.modules` gained while pytest imported the file, and while its tests
ran (names only, `gpuci.state.modules`): a later file's test may need a module it brought.
`ledger-cost`, at the session's end: the seconds its snapshots and diffs took in all, by
the process's own clock (what it cost this interpreter, whatever the machine's load).

A CHANGE is `[before, after]` or, for a set, `{"added": [...], "removed": [...]}`; see
docs/formats.md for the keys.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator
from typing import Any

import pytest

from gpuci.state.changes import LEDGER_VERSION, changes, snapshot
from gpuci.state.host import Snapshot
from gpuci.state.modules import gained, loaded


class StateRecorder:
    """Snapshots around each test (or each file) and journals what each left behind."""

    def __init__(self, write: Callable[[dict[str, Any]], None], level: str) -> None:
        self._write = write
        self._per_test = level == "test"
        self._last: Snapshot | None = None  # after the previous test
        self._file = ""
        self._file_before: Snapshot | None = None
        self._file_modules: frozenset[str] = frozenset()  # sys.modules as the file began
        self._cost_s = 0.0  # this process's CPU seconds in snapshots and diffs
        self._snapshots = 0

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        """Snapshot before and after the test's whole protocol; journal what changed."""
        file = item.nodeid.split("::", 1)[0]
        last_of_file = nextitem is None or nextitem.nodeid.split("::", 1)[0] != file
        if self._last is None or (not self._per_test and file != self._file):
            self._last = self._snapshot(full=True)
        if file != self._file:
            self._file, self._file_before = file, self._last
            self._file_modules = self._modules()
        before = self._last
        try:
            return (yield)
        finally:
            if self._per_test or last_of_file:
                after = self._snapshot(full=last_of_file)
                if self._per_test:
                    self._journal({"id": item.nodeid}, before, after)
                if last_of_file and self._file_before is not None:
                    self._journal({"file": file}, self._file_before, after)
                if last_of_file:
                    self._journal_modules({"file": file}, self._file_modules)
                self._last = after if self._per_test else None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_make_collect_report(
        self, collector: pytest.Collector
    ) -> Generator[None, pytest.CollectReport, pytest.CollectReport]:
        """A test module's import (its collection): what it left behind."""
        if not isinstance(collector, pytest.Module):
            return (yield)
        before = self._snapshot(full=False)
        modules = self._modules()
        try:
            return (yield)
        finally:
            self._journal_modules({"import": collector.nodeid}, modules)
            after = self._snapshot(full=False)
            pytests = {str(p) for p in collector.path.parents}  # pytest's own sys.path entry
            if collector.config.pluginmanager.has_plugin("warnings"):
                # it restores the filters once collection ends: an import's do not outlive it
                after["warnings"] = before.get("warnings")
            self._journal({"import": collector.nodeid}, before, after, ignored_paths=pytests)

    def pytest_sessionfinish(self) -> None:
        """Journal what the ledger cost this interpreter (nothing where no test ran)."""
        if not self._snapshots:
            return
        self._write({"e": "ledger-cost", "s": round(self._cost_s, 6), "snapshots": self._snapshots})

    def _snapshot(self, *, full: bool) -> Snapshot:
        start = time.process_time()
        taken = snapshot(full=full)
        self._cost_s += time.process_time() - start
        self._snapshots += 1
        return taken

    def _modules(self) -> frozenset[str]:
        start = time.process_time()
        names = loaded()
        self._cost_s += time.process_time() - start
        return names

    def _journal_modules(self, subject: dict[str, str], before: frozenset[str]) -> None:
        """Journal what `sys.modules` gained since `before` (nothing where it gained none)."""
        start = time.process_time()
        names = gained(before, loaded())
        self._cost_s += time.process_time() - start
        if names:
            self._write({"e": "modules", "v": LEDGER_VERSION, **subject, "modules": names})

    def _journal(
        self,
        subject: dict[str, str],
        before: Snapshot,
        after: Snapshot,
        ignored_paths: set[str] | frozenset[str] = frozenset(),
    ) -> None:
        start = time.process_time()
        left = changes(before, after)
        added = left.get("sys.path", {}).get("added", [])
        if ignored_paths and added:
            kept = {**left["sys.path"], "added": [p for p in added if p not in ignored_paths]}
            left["sys.path"] = {k: v for k, v in kept.items() if v}
            if not left["sys.path"]:
                del left["sys.path"]
        self._cost_s += time.process_time() - start
        if left:
            self._write({"e": "left", "v": LEDGER_VERSION, **subject, "left": left})
