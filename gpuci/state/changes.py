"""What changed between two snapshots that a later test inherits, JSON-ready: the body of
a `left` event (`gpuci.state.recorder` journals it; `gpuci.state.left` reads it back).

Child side, and read by the parent for its constants: it imports no pytest.
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from gpuci.state.device import device_snapshot, fresh_pool_limit
from gpuci.state.host import Snapshot, Value, host_snapshot, render

STATE_ENV = "GPUCI_STATE"
LEDGER_VERSION = 2  # 2: `fds` is what the descriptors left point at
LEVELS = ("test", "file", "off")
# changes that are not something left behind: a thread or child that ended, a descriptor
# closed, memory given back
ONLY_ADDED = frozenset({"threads", "children", "gpu.processes"})
DEVICE_MEMORY = frozenset(
    {"cupy.pool_used", "cupy.pool_total", "torch.allocated", "torch.reserved"}
)
ONLY_MORE = DEVICE_MEMORY
# the descriptors a GPU driver keeps open on its device files (NVIDIA's, ROCm's, WSL's), in
# every process that uses the device, for the process's life: never a test's to close
DRIVER_FILES = ("/dev/nvidia", "/dev/kfd", "/dev/dri/", "/dev/dxg")
# what the driver opens beside them where it starts in a process (its threads' pipes, its
# event descriptors, the socket NVIDIA's driver connects): where the driver started, these
# are its, not the test's that started it
DRIVER_STARTS_TOO = ("pipe:", "anon_inode:", "socket:")
REACHED = ("cupy.device", "torch.device")  # read once a library reached the device
# variables a library sets for itself where it first reaches the device (PyTorch's CUDA
# initialization sets CUDA_MODULE_LOADING where unset): not the test's that reached it
SET_ON_REACHING = frozenset({"CUDA_MODULE_LOADING"})
# what a device key reads in a process where the library has not reached the device yet
# (its snapshot has no such key): the library's defaults. The test that first reaches it
# and leaves memory, a limit, a stream or another device current is compared to them
# (`cupy.pool_limit`'s comes from the environment: `fresh`).
FRESH: dict[str, Value] = {
    **dict.fromkeys(DEVICE_MEMORY, 0),
    "torch.memory_fraction": 1.0,
    "cupy.device": 0,
    "torch.device": 0,
    "cupy.stream": "default",
    "torch.stream": "default",
    "cuda.error": "",
    "cupy.fft_plans": 0,
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
        if key == "fds":
            opened = _descriptors_left(before, after)
            if opened:
                found[key] = opened
            continue
        if key in before and key in after:
            old, new = before[key], after[key]
        else:  # a library imported since, or the device reached: against its defaults
            default = fresh(key)
            if default is None:
                continue  # none known (a setting's, an import's): its state is not left
            old, new = before.get(key, default), after.get(key, default)
        if old == new:
            continue
        old, new = render(key, old), render(key, new)
        if isinstance(old, frozenset) or isinstance(new, frozenset):
            change = _set_change(key, _as_set(old), _as_set(new))
            if key == "env" and _reached(before, after):
                change = _less_the_librarys(change)
            if change:
                found[key] = change
        elif not _undone(key, old, new):
            found[key] = [old, new]
    return found


def fresh(key: str) -> Value:
    """What `key` reads before its library reached the device (None: nothing known)."""
    if key == "cupy.pool_limit":
        return fresh_pool_limit()
    return FRESH.get(key)


def _descriptors_left(before: Snapshot, after: Snapshot) -> dict[str, list[str]]:
    """The descriptors opened since `before` and open still, less the GPU driver's, by what
    they point at (`/tmp/x.log`, `pipe`, `socket`: `NAME (N)` where N of them), most
    first: `{"added": [...]}`, or {} where none (or where either snapshot read none)."""
    old, new = before.get("fds"), after.get("fds")
    if not isinstance(old, tuple) or not isinstance(new, tuple):
        return {}
    added = [target for _, target in sorted(set(new) - set(old))]
    started = _reached(before, after) or any(t.startswith(DRIVER_FILES) for t in added)
    counts = Counter(
        _descriptor_kind(t)
        for t in added
        if not t.startswith(DRIVER_FILES) and not (started and t.startswith(DRIVER_STARTS_TOO))
    )
    ranked = sorted(counts.items(), key=lambda kind: (-kind[1], kind[0]))
    if len(ranked) > SHOWN_PER_SET:  # the rest as one entry: the count stays whole
        rest = sum(n for _, n in ranked[SHOWN_PER_SET - 1 :])
        ranked = [*ranked[: SHOWN_PER_SET - 1], ("others", rest)]
    entries = [f"{name} ({n})" if n > 1 else name for name, n in ranked]
    return {"added": entries} if entries else {}


def _reached(before: Snapshot, after: Snapshot) -> bool:
    """Whether a library reached the device between the two snapshots."""
    return any(k in after and k not in before for k in REACHED)


def _less_the_librarys(change: dict[str, list[str]]) -> dict[str, list[str]]:
    """An `env` change without the variables a library set as it reached the device."""
    added = [name for name in change.get("added", []) if name not in SET_ON_REACHING]
    return {k: v for k, v in {**change, "added": added}.items() if v}


def _descriptor_kind(target: str) -> str:
    """`pipe:[81]` as `pipe` (its inode says nothing to a reader); a path as itself."""
    kind, bracket, _ = target.partition(":[")
    return kind if bracket and kind in ("pipe", "socket") else target


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
