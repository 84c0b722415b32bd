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

import os
from collections.abc import Callable, Generator
from typing import Any

import pytest

from gpuci.state.device import device_snapshot
from gpuci.state.host import Snapshot, Value, host_snapshot

STATE_ENV = "GPUCI_STATE"
LEDGER_VERSION = 1
LEVELS = ("test", "file", "off")
# changes that are not something left behind: a thread or child that ended, a descriptor
# closed, memory given back
ONLY_ADDED = frozenset({"threads", "children", "gpu.processes"})
DEVICE_MEMORY = frozenset(
    {"cupy.pool_used", "cupy.pool_total", "torch.allocated", "torch.reserved"}
)
ONLY_MORE = DEVICE_MEMORY | {"fds"}
# held memory and a sticky error count from nothing: the test that first touched the device
MISSING_IS_NONE = DEVICE_MEMORY | {"cuda.error"}
SHOWN_PER_SET = 20  # of a set's members added or removed, at most so many


def snapshot(*, full: bool = False) -> Snapshot:
    """The host's and the device's state now; `full`: what costs more too (per file)."""
    return {**host_snapshot(full=full), **device_snapshot(processes=full)}


def state_level(environ: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """How often the ledger snapshots (GPUCI_STATE); an unknown value is `test`."""
    level = environ.get(STATE_ENV, "test").strip().lower()
    return level if level in LEVELS else "test"


def changes(before: Snapshot, after: Snapshot) -> dict[str, Any]:
    """What changed from `before` to `after` that a later test inherits, JSON-ready."""
    found: dict[str, Any] = {}
    for key in sorted(before.keys() | after.keys()):
        old, new = before.get(key), after.get(key)
        if old == new or (_newly_probed(key, before, after) and key not in MISSING_IS_NONE):
            continue  # a library imported since, a context created: its state is not left
        if isinstance(old, frozenset) or isinstance(new, frozenset):
            change = _set_change(key, _as_set(old), _as_set(new))
            if change:
                found[key] = change
        elif not _undone(key, old, new):
            found[key] = [old, new]
    return found


def _newly_probed(key: str, before: Snapshot, after: Snapshot) -> bool:
    return key not in before or key not in after


def _as_set(value: Value) -> frozenset[Any]:
    return value if isinstance(value, frozenset) else frozenset()


def _undone(key: str, old: Value, new: Value) -> bool:
    """A change that leaves nothing behind: memory given back, an error gone."""
    return (key in ONLY_MORE and not _grew(old, new)) or (key == "cuda.error" and not new)


def _grew(old: Value, new: Value) -> bool:
    return isinstance(new, int) and new > (old if isinstance(old, int) else 0)


def _set_change(key: str, old: frozenset[Any], new: frozenset[Any]) -> dict[str, list[str]]:
    if key == "env":  # (name, value) pairs: only the names are written, never a value
        before, after = dict(old), dict(new)
        changed = (k for k in before.keys() & after.keys() if before[k] != after[k])
        change = {
            "added": sorted(map(os.fsdecode, after.keys() - before.keys())),
            "removed": sorted(map(os.fsdecode, before.keys() - after.keys())),
            "changed": sorted(map(os.fsdecode, changed)),
        }
    else:
        change = {"added": sorted(new - old), "removed": sorted(old - new)}
        if key in ONLY_ADDED:
            change["removed"] = []
    return {k: v[:SHOWN_PER_SET] for k, v in change.items() if v}


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
