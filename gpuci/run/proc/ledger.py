"""Ledger: what a gpuci command started, on disk, so that a killed one is cleaned up after.

While a command holds OUT's lock it appends every process it starts to
`OUT/.gpuci/processes.jsonl`: an interpreter's pid and start time and its cookie (which
everything the interpreter starts inherits). An orderly end removes the file. A command
killed with `kill -9` cannot: its interpreters die with it (`dying_with_me`), but a
process a test started in its own session lives on,
holding the dead command's cookie. The next command that takes OUT's lock ends every
process the ledger names (by pid and start time, or by cookie, so a pid reused since is
never touched) and says what it ended.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from gpuci.processes import Leftover
from gpuci.run.proc.reaper import end_recorded, start_ticks

LEDGER_NAME = "processes.jsonl"  # in OUT/.gpuci, beside the lock
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>
_lock = threading.Lock()
_ledger: IO[str] | None = None  # the open ledger of this command, where it holds a lock


def open_ledger(state: Path, command: str) -> list[Leftover]:
    """Begin this command's ledger in `state` (OUT/.gpuci, its lock held); first end what
    a killed command's ledger there names. What was ended, for the caller to say."""
    global _ledger  # noqa: PLW0603 -- one ledger per process, like OUT's lock
    path = state / LEDGER_NAME
    ended = end_left_behind(path)
    with _lock:
        _ledger = path.open("w", encoding="utf-8")
    note_started(os.getpid(), command=command)
    return ended


def close_ledger(state: Path) -> None:
    """An orderly end: nothing this command started runs any more; forget it."""
    global _ledger  # noqa: PLW0603 -- see open_ledger
    with _lock:
        if _ledger is not None:
            _ledger.close()
        _ledger = None
    (state / LEDGER_NAME).unlink(missing_ok=True)


def note_started(pid: int, *, cookie: str = "", command: str = "") -> None:
    """Record a process just started (no-op without a ledger): its pid and start time, and
    the cookie everything it starts inherits."""
    ticks = start_ticks(pid)
    if ticks is None:
        return  # gone already: nothing of it to end later
    entry: dict[str, Any] = {"pid": pid, "start": ticks}
    if cookie:
        entry["cookie"] = cookie
    if command:
        entry["command"] = command
    with _lock:
        if _ledger is not None:
            _ledger.write(json.dumps(entry) + "\n")
            _ledger.flush()  # a kill -9 the next instant leaves it on disk


def end_left_behind(path: Path) -> list[Leftover]:
    """End what the ledger at `path` names (a command killed before it could clear it)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return []
    entries = []
    for line in lines:
        with contextlib.suppress(ValueError):  # a line torn by the kill
            entries.append(json.loads(line))
    cookies = {str(e["cookie"]) for e in entries if isinstance(e, dict) and e.get("cookie")}
    started = {
        (int(e["pid"]), int(e["start"]))
        for e in entries
        if isinstance(e, dict) and isinstance(e.get("pid"), int) and isinstance(e.get("start"), int)
    }
    return end_recorded(cookies, started)


def dying_with_me() -> Callable[[], None]:
    """A Popen preexec_fn: the child asks Linux for SIGKILL when the thread that started it
    ends (with gpuci, even by kill -9), and ends at once where that has happened already."""
    parent = os.getpid()

    def die_with_parent() -> None:  # between fork and exec: a prctl looked up before
        if _prctl is not None:
            _prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # gpuci died before the prctl: too late for the signal
            os._exit(1)

    return die_with_parent


def _load_prctl() -> Any:
    """libc's prctl, looked up before any fork (a child must not load libraries)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_prctl = _load_prctl()
