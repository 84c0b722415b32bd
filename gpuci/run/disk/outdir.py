"""OUT: one command at a time (an exclusive lock), the check's run id, and replacing for real.

Every command that writes into OUT holds `OUT/.gpuci/lock` (an `flock`, released by the
kernel when its holder dies) and writes its pid there; a second command exits 2 naming
it. A check that starts afresh moves OUT's earlier results into `OUT/.gpuci/replaced-ID`
before its first interpreter starts and removes them once it has results of its own, so
an interrupted check never leaves the previous check's modes in place. Its run id, in
`OUT/.gpuci/check.json` and every mode's `run.json`, is what `--resume` keeps.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from gpuci.formats import write_json_atomic
from gpuci.model import InputError, Mode, UsageError, printable
from gpuci.run.disk.masking import mask_files

STATE_DIR = ".gpuci"  # inside OUT: the lock, the check's run id, what a check replaced
LOCK_NAME = "lock"
CHECK_NAME = "check.json"
REPLACED_PREFIX = "replaced-"
CACHES = "cache"  # in STATE_DIR: the pytest cache of each interpreter but the plain run's
# what a check writes into OUT besides its mode directories
_START_AFRESH = "its check cannot be resumed: run without --resume to start afresh"
CHECK_OUTPUTS = (
    "verdict.json",
    "report.html",
    "comment.md",
    "evidence",
    "junit.xml",
    "durations.json",
)


def new_run_id() -> str:
    """A fresh run id: what ties a mode's results to the check that made them."""
    return uuid.uuid4().hex[:12]


@contextlib.contextmanager
def locked(
    out: Path, command: str, say: list[str] | None = None, secrets: Sequence[str] = ()
) -> Iterator[None]:
    """Hold OUT's lock while the block runs; refuse (exit 2) where another command holds it.

    `say` collects the note about a lock taken over from a process that died holding it.
    `secrets` are masked in every file under OUT before the lock is let go, whatever ended
    the block: the interpreters wrote their tests' output there as it was.
    """
    state = out / STATE_DIR
    try:
        state.mkdir(parents=True, exist_ok=True)
        handle = (state / LOCK_NAME).open("a+", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"{out}: cannot write results there ({exc.strerror or exc})") from None
    with handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UsageError(
                f"{out}: in use by {_holder(handle)}; wait for it to finish, or choose"
                " another --out"
            ) from None
        handle.seek(0)
        left = handle.read().strip()
        if left and say is not None:  # its holder ended before it could clear it
            say.append(f"took over the lock on {out} left by {printable(left)}, {_gone(left)}")
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} ({command})\n")
        handle.flush()
        try:
            yield
        finally:
            try:
                mask_files(out, secrets)
            finally:
                handle.seek(0)
                handle.truncate()  # released in order: nothing for the next one to take over


def _gone(left: str) -> str:
    """What is true of the lock's last holder, which holds it no more."""
    pid = re.match(r"pid (\d+)", left)
    if pid is None or not Path(f"/proc/{pid[1]}").exists():
        return "no longer running"
    # a live pid without the lock: the holder ended and its pid names another process
    # now, or it let go of the lock and goes on
    return f"not holding it: pid {pid[1]} runs now (its pid reused, or it let go of the lock)"


def _holder(handle: IO[str]) -> str:
    """Who holds the lock, as its holder wrote it."""
    with contextlib.suppress(OSError):
        handle.seek(0)
        text = handle.read().strip()
        if text:
            return printable(text)
    return "another gpuci process"


def replace_earlier(out: Path, run_id: str) -> tuple[list[str], Path]:
    """Move OUT's earlier results aside (one rename each) and record `run_id` as the
    check's; what was moved, by name, and where to (its file times order the new check's
    files until it has results of its own)."""
    state = out / STATE_DIR
    _forget_replaced(state)  # an earlier check interrupted before it could
    aside = state / f"{REPLACED_PREFIX}{run_id}"
    names = [m.value for m in Mode] + list(CHECK_OUTPUTS)
    moved = [name for name in names if (out / name).exists()]
    if moved:
        aside.mkdir(parents=True, exist_ok=True)
    for name in moved:
        (out / name).rename(aside / name)
    shutil.rmtree(state / CACHES, ignore_errors=True)  # a new check's interpreters start bare
    # whole or not at all: a reader (a --resume, a Ctrl-C between truncate and write) never
    # finds it empty
    write_json_atomic(state / CHECK_NAME, {"run_id": run_id})
    return moved, aside


def forget_replaced(out: Path) -> None:
    """The check has results of its own: remove what it replaced."""
    _forget_replaced(out / STATE_DIR)


def _forget_replaced(state: Path) -> None:
    for old in state.glob(f"{REPLACED_PREFIX}*"):
        shutil.rmtree(old, ignore_errors=True)


def check_run_id(out: Path) -> str | None:
    """The run id of the check that last started in OUT; None where none did. A file that
    is there but unreadable or corrupt is an error that says so, not a missing check."""
    path = out / STATE_DIR / CHECK_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: unreadable ({exc}); {_START_AFRESH}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise InputError(f"{path}: corrupt, not JSON ({exc}); {_START_AFRESH}") from None
    run_id = data.get("run_id") if isinstance(data, dict) else None
    if not isinstance(run_id, str) or not run_id:
        raise InputError(f"{path}: corrupt, it names no run_id; {_START_AFRESH}")
    return run_id


# what a mode's interpreters and its run write in its directory: a directory holding
# nothing else is gpuci's, even without its run.json (an interpreter started ahead for a
# file that is gone writes its JUnit part there at once, before the mode starts)
MODE_FOLDERS = ("junit", "journal", "logs")
MODE_FILES = ("run.json", "junit.xml")


def prepare_out(out: Path, *, keep: bool = False) -> None:
    """Make the mode directory, replacing an earlier run of the same mode unless `keep`."""
    if out.exists() and not keep:
        foreign = [p.name for p in out.iterdir() if p.name not in (*MODE_FOLDERS, *MODE_FILES)]
        if foreign and not (out / "run.json").exists() and not (out / "journal").exists():
            raise UsageError(
                f"{out}: exists and is not a gpuci result directory; choose another --out"
            )
        for name in MODE_FOLDERS:
            shutil.rmtree(out / name, ignore_errors=True)
        for name in MODE_FILES:
            (out / name).unlink(missing_ok=True)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".gpuci-write-test"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{out}: cannot write results there ({exc.strerror or exc})") from None
