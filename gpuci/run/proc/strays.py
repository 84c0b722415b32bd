"""Strays: what a test file left running, and who else held GPU memory, as warning lines.

The same sentences everywhere: the terminal after `gpuci run`, the check's summary, the
report and the comment ("test_x.py left `sleep 300` running"). A leftover is a test-isolation
bug of its own; a stranger is a process gpuci did not start that held memory on the GPUs
its interpreters use. The lines are untrusted text (command lines): callers escape them
for their medium.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpuci.model import ModeRun
from gpuci.processes import Leftover, Stranger

CMDLINE_SHOWN = 200  # characters of a command line in a warning; run.json has more
LINES_SHOWN = 20  # warnings in a summary, report or comment; run.json has them all


def leftover_line(file: str, leftover: Leftover, *, where: str = "") -> str:
    """`test_x.py left `sleep 300` running (pid 4242, 1.2s old; ended with SIGTERM)`."""
    how = "SIGKILL: it outlived SIGTERM" if leftover.killed else "SIGTERM"
    prefix = f"{where}: " if where else ""
    return (
        f"{prefix}{file} left `{_cut(leftover.cmdline) or '?'}` running"
        f" (pid {leftover.pid}, {leftover.age_s:.1f}s old; gpuci ended it with {how})"
    )


def stranger_line(file: str, stranger: Stranger, *, where: str = "") -> str:
    """`after test_x.py, pid 77 (`python job.py`) held 1024 MiB of GPU-…, not started by gpuci`."""
    memory = "memory" if stranger.used_mib is None else f"{stranger.used_mib} MiB"
    command = f" (`{_cut(stranger.cmdline)}`)" if stranger.cmdline else ""
    prefix = f"{where}: " if where else ""
    return (
        f"{prefix}after {file}, pid {stranger.pid}{command} held {memory} on"
        f" {stranger.gpu_uuid or 'a GPU'}; gpuci did not start it"
    )


def run_lines(run: ModeRun) -> list[str]:
    """Every leftover and stranger of one mode's run."""
    lines = [leftover_line(f.file, x) for f in run.files for x in f.leftovers]
    return lines + [stranger_line(f.file, x) for f in run.files for x in f.strangers]


def verdict_lines(
    modes: Mapping[str, Any], evidence: Mapping[str, Any], *, limit: int = LINES_SHOWN
) -> list[str]:
    """The leftovers and strangers `verdict.json` records, mode by mode, then evidence.

    At most `limit` lines; the last then says how many more run.json holds.
    """
    leftovers: list[str] = []
    strangers: list[str] = []
    for name, mode in modes.items():
        runs = mode.get("file_runs") if isinstance(mode, Mapping) else None
        for run in runs if isinstance(runs, list) else ():
            if isinstance(run, Mapping):
                file = str(run.get("file", "?"))
                leftovers += [leftover_line(file, x, where=name) for x in _read(run, "leftovers")]
                strangers += [stranger_line(file, x, where=name) for x in _read(run, "strangers")]
    for file, entries in _by_file(evidence, "leftovers"):
        leftovers += [leftover_line(file, x, where="evidence") for x in entries]
    for file, entries in _by_file(evidence, "strangers"):
        strangers += [stranger_line(file, x, where="evidence") for x in entries]
    lines = leftovers + strangers
    if len(lines) <= limit:
        return lines
    more = len(lines) - limit + 1
    return [
        *lines[: limit - 1],
        f"... and {more} more left running or holding GPU memory (see run.json)",
    ]


def leftover_count(modes: Mapping[str, Any], evidence: Mapping[str, Any]) -> int:
    """How many processes the test files left running, in all modes and the evidence."""
    total = 0
    for mode in modes.values():
        runs = mode.get("file_runs") if isinstance(mode, Mapping) else None
        for run in runs if isinstance(runs, list) else ():
            total += len(_read(run, "leftovers")) if isinstance(run, Mapping) else 0
    return total + sum(len(entries) for _, entries in _by_file(evidence, "leftovers"))


def _by_file(evidence: Mapping[str, Any], key: str) -> list[tuple[str, list[Any]]]:
    """evidence.json's leftovers or strangers, per file."""
    found = evidence.get(key)
    if not isinstance(found, Mapping):
        return []
    return [(str(file), _entries(entries, key)) for file, entries in found.items()]


def _read(run: Mapping[str, Any], key: str) -> list[Any]:
    return _entries(run.get(key), key)


def _entries(entries: Any, key: str) -> list[Any]:
    """The well-formed entries of a leftovers or strangers list; others are skipped."""
    kind = Leftover if key == "leftovers" else Stranger
    found: list[Any] = []
    for entry in entries if isinstance(entries, Iterable) else ():
        try:
            found.append(kind.from_json(entry))
        except (KeyError, TypeError, ValueError, AttributeError):
            continue
    return found


def _cut(text: str) -> str:
    return text if len(text) <= CMDLINE_SHOWN else text[: CMDLINE_SHOWN - 3] + "..."
