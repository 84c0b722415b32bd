"""The state ledger read back: what each test and each file left behind, from the `left`
events of a results directory's journals (`gpuci.state.recorder` writes them), and each
change told in words.

A test's entry comes from the first journal that has one, the suite interpreter's first
(the plain run: the order its victims failed in), then the other screens', then the
evidence's. Events of another version than LEDGER_VERSION are skipped, not misread.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.state.changes import DEVICE_MEMORY, LEDGER_VERSION, PER_FILE_ONLY

# where the journals lie, most telling first: the plain run's order is the victims'
JOURNAL_GLOBS = (
    "suite/journal/**/*.jsonl",
    "suite/shard-*/journal/**/*.jsonl",
    "isolated/journal/**/*.jsonl",
    "parallel/journal/**/*.jsonl",
    "*/shard-*/journal/**/*.jsonl",
    "*/journal/**/*.jsonl",
)
GIB = 1 << 30
MIB = 1 << 20
SHOWN_NAMES = 4  # of a set's members, in one sentence
_COUNTED = re.compile(r" \((\d+)\)$")  # `pipe (2)`: an `fds` entry's count
SETTINGS = {  # key -> what the sentence calls it
    "numpy.seterr": "NumPy's seterr",
    "numpy.printoptions": "NumPy's print options",
    "decimal.context": "the decimal context",
    "locale": "the locale",
    "torch.cudnn.deterministic": "torch.backends.cudnn.deterministic",
    "torch.cudnn.benchmark": "torch.backends.cudnn.benchmark",
    "torch.cudnn.allow_tf32": "torch.backends.cudnn.allow_tf32",
    "torch.matmul.allow_tf32": "torch.backends.cuda.matmul.allow_tf32",
    "torch.default_dtype": "PyTorch's default dtype",
    "torch.deterministic_algorithms": "PyTorch's deterministic algorithms",
    "cupy.routine_accelerators": "CuPy's routine accelerators",
    "cupy.reduction_accelerators": "CuPy's reduction accelerators",
    "cupy.fft": "CuPy's FFT configuration",
}
SETS = {  # key -> (what was added, what was removed)
    "sys.path": ("added to sys.path", "removed from sys.path"),
    "warnings": ("added warnings filters", "removed warnings filters"),
    "threads": ("left threads running", ""),
    "children": ("left child processes running", ""),
    "signals": ("left signal handlers", "removed signal handlers"),
    "logging": ("left logging handlers", "removed logging handlers"),
    "gpu.processes": ("left other processes on the GPU", ""),
}


@dataclass(frozen=True, slots=True)
class Ledger:
    """What each test id and each test file changed that later tests inherit."""

    tests: dict[str, dict[str, Any]] = field(default_factory=dict)
    files: dict[str, dict[str, Any]] = field(default_factory=dict)  # what its tests left
    imports: dict[str, dict[str, Any]] = field(default_factory=dict)  # what importing it left
    # by file, the modules its import brought, and its tests (`gpuci.state.modules`): in any
    # interpreter (its own in the parallel screen brings all it needs, the suite's only
    # what no earlier file had)
    imported_modules: dict[str, set[str]] = field(default_factory=dict)
    test_modules: dict[str, set[str]] = field(default_factory=dict)

    def entries(self, test_id: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """What a test (or a file) left, and what only its file's entries can say of it:
        what importing the file left, and what the snapshots taken per file saw (umask,
        processes, descriptors)."""
        if "::" not in test_id:  # a file: what importing it and what its tests left
            return {**self.imports.get(test_id, {}), **self.files.get(test_id, {})}, {}
        own = self.tests.get(test_id, {})
        path = test_id.split("::", 1)[0]
        file = {k: v for k, v in self.files.get(path, {}).items() if k in PER_FILE_ONLY}
        return own, {
            k: v for k, v in {**self.imports.get(path, {}), **file}.items() if k not in own
        }


def read_ledger(out: Path) -> Ledger:
    """The ledger of every journal under `out` (a check's or a run's results directory)."""
    ledger = Ledger()
    seen: set[Path] = set()
    for pattern in JOURNAL_GLOBS:
        for path in sorted(out.glob(pattern)):
            if path not in seen:
                seen.add(path)
                for event in _left_events(path):
                    if event.get("e") == "modules":
                        _add_modules(ledger, event)
                    elif "id" in event:
                        ledger.tests.setdefault(str(event["id"]), event["left"])
                    elif "file" in event:
                        ledger.files.setdefault(str(event["file"]), event["left"])
                    elif "import" in event:
                        ledger.imports.setdefault(str(event["import"]), event["left"])
    return ledger


def _add_modules(ledger: Ledger, event: dict[str, Any]) -> None:
    names = {str(n) for n in event["modules"]}
    if "import" in event:
        ledger.imported_modules.setdefault(str(event["import"]), set()).update(names)
    elif "file" in event:
        ledger.test_modules.setdefault(str(event["file"]), set()).update(names)


def _left_events(path: Path) -> Iterator[dict[str, Any]]:
    """The `left` events of one journal, and its `modules` events."""
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return
    for line in lines:
        if b'"left"' not in line and b'"modules"' not in line:  # most lines: no need to parse
            continue
        try:
            event = json.loads(line)
        except ValueError:  # a line torn by a kill
            continue
        if not isinstance(event, dict) or event.get("v") != LEDGER_VERSION:
            continue
        if (event.get("e") == "left" and isinstance(event.get("left"), dict)) or (
            event.get("e") == "modules" and isinstance(event.get("modules"), list)
        ):
            yield event


def describe(left: Mapping[str, Any]) -> list[str]:
    """Each change in words: `left the working directory at /tmp/x`, `left 2.0 GiB in
    CuPy's pool`. Untrusted text: whoever shows it escapes it."""
    return [line for key, change in left.items() if (line := describe_one(key, change))]


def describe_one(key: str, change: Any) -> str:
    """One change in words ("" for one not worth telling)."""
    if isinstance(change, dict):
        return _describe_set(key, change)
    if not isinstance(change, list) or len(change) != 2:
        return ""
    before, after = change
    if key in DEVICE_MEMORY:
        return _describe_memory(key, int(after))
    told = TOLD.get(key)
    if told is not None:
        return told(before, after)
    name = SETTINGS.get(key)
    if name is None:
        return ""
    return f"changed {name} to {_changed_part(after, before)} (was {_changed_part(before, after)})"


def _pool_limit(before: Any, after: Any) -> str:
    if not after:
        return f"removed CuPy's pool limit (was {_size(int(before or 0))})"
    return f"left a CuPy pool limit of {_size(int(after))}"


def _fraction(value: Any) -> str:
    """A fraction as set (`0.01`), not as the allocator stores it (`0.009999999999529509`)."""
    try:
        return f"{float(value):.3g}"
    except (TypeError, ValueError):
        return str(value)


def _stream(before: Any, after: Any) -> str:
    return f"left a non-default stream current ({after})" if after != "default" else ""


def _device(before: Any, after: Any) -> str:
    return f"left device {after} current (was {before})"


TOLD: dict[str, Callable[[Any, Any], str]] = {  # key -> (before, after) in words
    "cwd": lambda before, after: f"left the working directory at {after}",
    "umask": lambda before, after: f"left the umask at {after} (was {before})",
    "cupy.pool_limit": _pool_limit,
    "torch.memory_fraction": lambda before, after: (
        f"left PyTorch's per-process memory fraction at {_fraction(after)}"
        f" (was {_fraction(before)})"
    ),
    "cupy.device": _device,
    "torch.device": _device,
    "cupy.stream": _stream,
    "torch.stream": _stream,
    "cuda.error": lambda before, after: f"left a sticky CUDA error: {after}",
    "cupy.fft_plans": lambda before, after: f"left {after} cuFFT plan(s) cached (was {before})",
}


def _describe_descriptors(change: Mapping[str, list[str]]) -> str:
    """`left 302 more descriptor(s) open: /dev/null (300), pipe (2)`."""
    added = change.get("added", [])
    if not added:
        return ""
    total = sum(int(m[1]) if (m := _COUNTED.search(e)) else 1 for e in added)
    return f"left {total} more descriptor(s) open: {_names(added)}"


def _describe_set(key: str, change: Mapping[str, list[str]]) -> str:
    if key == "fds":
        return _describe_descriptors(change)
    if key == "env":
        parts = [
            f"{what} {_names(change.get(k, []))}"
            for k, what in (("added", "set"), ("changed", "changed"), ("removed", "removed"))
            if change.get(k)
        ]
        return "left environment variables " + "; ".join(parts) if parts else ""
    added, removed = SETS.get(key, ("", ""))
    parts = [
        f"{what} {_names(change.get(k, []))}"
        for k, what in (("added", added), ("removed", removed))
        if what and change.get(k)
    ]
    return "; ".join(parts)


def _describe_memory(key: str, after: int) -> str:
    where = {
        "cupy.pool_used": "in use in CuPy's pool",
        "cupy.pool_total": "held by CuPy's pool",
        "torch.allocated": "allocated by PyTorch",
        "torch.reserved": "reserved by PyTorch's caching allocator",
    }[key]
    return f"left {_size(after)} {where}"


def _size(n: int) -> str:
    if n >= GIB:
        return f"{n / GIB:.1f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    return f"{n} bytes"


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:SHOWN_NAMES])
    return shown + (f" (+{len(names) - SHOWN_NAMES} more)" if len(names) > SHOWN_NAMES else "")


def _changed_part(value: Any, other: Any) -> str:
    """Of a `k=v,k=v` setting, the fields that differ from `other`; else the whole value."""
    text, against = str(value), str(other)
    if "=" in text and "=" in against:
        fields, others = text.split(","), set(against.split(","))
        differ = [f for f in fields if f not in others]
        if differ:
            return ",".join(differ)
    return text
