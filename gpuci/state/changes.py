"""What changed between two snapshots that a later test inherits, JSON-ready: the body of
a `left` event (`gpuci.state.recorder` journals it; `gpuci.state.left` reads it back).

Child side, and read by the parent for its constants: it imports no pytest.
"""

from __future__ import annotations

import os
from typing import Any

from gpuci.state.device import device_snapshot
from gpuci.state.host import Snapshot, Value, host_snapshot, render

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
# what a device key reads before a process has a CUDA context (its snapshot has no such key):
# the test that creates the context and leaves memory, a limit or a stream is compared to it
FRESH: dict[str, Value] = {
    **dict.fromkeys(DEVICE_MEMORY, 0),
    "cupy.pool_limit": 0,
    "torch.memory_fraction": 1.0,
    "cupy.stream": "default",
    "torch.stream": "default",
    "cuda.error": "",
}
# what a snapshot reads from /proc only around a file (`snapshot(full=True)`): a test's
# own entry has it only where it was the first or last of its file
PER_FILE_ONLY = frozenset({"umask", "children", "fds", "gpu.processes"})
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
        old, new = before.get(key, FRESH.get(key)), after.get(key, FRESH.get(key))
        if old == new or (key not in FRESH and _newly_probed(key, before, after)):
            continue  # a library imported since, a context created: its state is not left
        old, new = render(key, old), render(key, new)
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
