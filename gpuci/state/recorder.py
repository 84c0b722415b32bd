"""The child side of the state ledger: a snapshot between tests, and what each test and
each test file changed, journaled as `left` events.

Registered by `gpuci.pytest_plugin` where gpuci journals. Its `pytest_runtest_protocol`
wrapper is the outermost one (registered after pytest's own, tryfirst), so a snapshot
sees what outlives pytest's per-test restoring (its warnings filters, monkeypatch, log
capture): only what the next test inherits. Tests run back to back, so one snapshot
serves as one test's "after" and the next one's "before". `GPUCI_STATE` says how often:
`test` (default: every test), `file` (around each file only), `off`.

    {"e": "left", "v": 1, "id": "tests/test_a.py::test_x", "left": {KEY: CHANGE}}
    {"e": "left", "v": 1, "file": "tests/test_a.py", "left": {KEY: CHANGE}}

A CHANGE is `[before, after]` or, for a set, `{"added": [...], "removed": [...]}`; see
docs/formats.md for the keys.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any

import pytest

from gpuci.state.changes import LEDGER_VERSION, changes, snapshot
from gpuci.state.host import Snapshot


class StateRecorder:
    """Snapshots around each test (or each file) and journals what each left behind."""

    def __init__(self, write: Callable[[dict[str, Any]], None], level: str) -> None:
        self._write = write
        self._per_test = level == "test"
        self._last: Snapshot | None = None  # after the previous test
        self._file = ""
        self._file_before: Snapshot | None = None

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        """Snapshot before and after the test's whole protocol; journal what changed."""
        file = item.nodeid.split("::", 1)[0]
        last_of_file = nextitem is None or nextitem.nodeid.split("::", 1)[0] != file
        if self._last is None or (not self._per_test and file != self._file):
            self._last = snapshot(full=True)
        if file != self._file:
            self._file, self._file_before = file, self._last
        before = self._last
        try:
            return (yield)
        finally:
            if self._per_test or last_of_file:
                after = snapshot(full=last_of_file)
                if self._per_test:
                    self._journal({"id": item.nodeid}, before, after)
                if last_of_file and self._file_before is not None:
                    self._journal({"file": file}, self._file_before, after)
                self._last = after if self._per_test else None

    def _journal(self, subject: dict[str, str], before: Snapshot, after: Snapshot) -> None:
        left = changes(before, after)
        if left:
            self._write({"e": "left", "v": LEDGER_VERSION, **subject, "left": left})
