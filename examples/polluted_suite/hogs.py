"""Planted contention that timing cannot decide: memory hogs that fail exactly where two of
their interpreters run them at the same time, on a loaded machine as on an idle one.

Two hogs that each need most of the device contend only while both hold it. Where that
overlap is left to the clock (each holds it for a second or two), a busy machine that
starts one interpreter a few seconds late makes them miss each other, and a check that
expects `concurrency` sees `passed`. So the hogs meet through files in a scratch folder
instead (`HOG_DIR`, else `FAKEGPU_DIR`'s `hogs/`; give each run a fresh one):

- an interpreter whose first test is a hog is a *contender*: it announces itself once
  pytest has collected (`ready-PID`, from `conftest.py`). A hog in any other interpreter
  (the suite interpreter, after other files) holds the device for HOLD_S and passes:
  one after the other, hogs fit.
- a contender's hog holds the device (`busy-NAME-PID`) and fails where a partner's hog
  holds it too at any moment of its hold: whichever arrives second sees the first there,
  and leaves it a note (`met-PID`) so that both fail, the same way.
- it holds the device for HOLD_S, and up to WAIT_S more until a partner arrives where one
  is certain to: a partner has announced itself (gpuci's pair runs hold both interpreters at
  their first test until both got there, so both announced before either hog starts), or
  the run is one of `expect_modes` (`GPUCI_MODE`: gpuci's parallel screen starts the two
  hog files together, as the suite's files are laid out), or HOG_PAIRED=1 says a command
  started the two at once (the pair command gpuci prints). Alone, nothing waits.

Every step under one `fcntl` lock, so "was my partner here" has one answer for both.
A dead process's files count for nothing (its PID is gone), so a killed hog blocks none.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

# how long a hog holds the device (its steps: the file is long in durations); HOG_HOLD_S
# shortens it where nothing needs the hog files long (only the least hold: the meeting
# never depends on it)
HOLD_S = float(os.environ.get("HOG_HOLD_S") or 1.5)
WAIT_S = 20.0  # how long it waits for a partner that is certain to come
POLL_S = 0.02
DIR_ENV = "HOG_DIR"
PAIRED_ENV = "HOG_PAIRED"  # "1": the partner was started at the same time
MESSAGE = "out of device memory: another process holds most of it"

Test = TypeVar("Test", bound=Callable[..., Any])


def hog(name: str) -> Callable[[Test], Test]:
    """Mark a test as the hog `name` (what `announce` looks for in an interpreter's first test)."""

    def mark(test: Test) -> Test:
        test.hog_name = name  # type: ignore[attr-defined]
        return test

    return mark


def scratch() -> Path:
    """The folder the hogs meet in (created on first use)."""
    default = Path(os.environ.get("FAKEGPU_DIR") or tempfile.gettempdir()) / "hogs"
    path = Path(os.environ.get(DIR_ENV) or default)
    path.mkdir(parents=True, exist_ok=True)
    return path


def announce(items: Sequence[Any]) -> None:
    """Called once pytest has collected: where the first test is a hog, this interpreter is
    a contender, and says so."""
    name = getattr(getattr(items[0], "function", None), "hog_name", None) if items else None
    if name is None:
        return
    with _locked() as folder:
        (folder / f"met-{os.getpid()}").unlink(missing_ok=True)  # a PID used before
        (folder / f"ready-{os.getpid()}").write_text(name)


def contend(
    name: str,
    partners: Collection[str],
    *,
    expect_modes: Collection[str] = ("parallel",),
    keep: bool = False,
) -> bool:
    """Hold the device as the hog `name`; whether a hog of `partners` held it at the same
    time (in another interpreter). `keep`: hold it until this interpreter exits."""
    me = os.getpid()
    if not (scratch() / f"ready-{me}").exists():
        time.sleep(HOLD_S)  # not a contender: it runs after other tests, alone on the device
        return False
    with _locked() as folder:
        expect = (
            os.environ.get("GPUCI_MODE") in expect_modes
            or os.environ.get(PAIRED_ENV) == "1"
            or bool(_present(folder, partners, "ready") | _present(folder, partners, "busy"))
        )
        (folder / f"met-{me}").unlink(missing_ok=True)  # about an earlier hog of this one
        (folder / f"busy-{name}-{me}").write_text("")
    held_until = time.monotonic() + HOLD_S
    waited_until = held_until + (WAIT_S if expect else 0.0)
    seen = False
    while True:
        with _locked() as folder:
            met = _present(folder, partners, "busy")
            for pid in met:  # it will fail too, whenever it looks
                (folder / f"met-{pid}").write_text("")
            seen = seen or bool(met) or (folder / f"met-{me}").exists()
            now = time.monotonic()
            done = now >= held_until and (seen or now >= waited_until)
            if done and not keep:  # gone from the device, and not coming back to it
                (folder / f"busy-{name}-{me}").unlink(missing_ok=True)
                (folder / f"ready-{me}").unlink(missing_ok=True)
            if done:
                return seen
        time.sleep(POLL_S)


def mark_done(label: str) -> None:
    """Leave `label` behind for `wait_done` (another interpreter's wait)."""
    with _locked() as folder:
        (folder / f"done-{label}").write_text(str(os.getpid()))


def wait_done(label: str, *, wait_s: float = WAIT_S) -> bool:
    """Wait (up to `wait_s`) until some interpreter has called `mark_done(label)`."""
    deadline = time.monotonic() + wait_s
    while not (scratch() / f"done-{label}").exists():
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


def _present(folder: Path, names: Collection[str], state: str) -> set[int]:
    """The other live interpreters in `state` (ready, busy) as one of `names`."""
    found: set[int] = set()
    for path in folder.glob(f"{state}-*"):
        if state == "ready":  # ready-PID, holding the hog's name
            label, pid_text = path.read_text(), path.name[len("ready-") :]
        else:  # busy-NAME-PID
            label, _, pid_text = path.name[len(state) + 1 :].rpartition("-")
        mine = not pid_text.isdigit() or int(pid_text) == os.getpid()
        if label in names and not mine and _alive(int(pid_text)):
            found.add(int(pid_text))
    return found


def _alive(pid: int) -> bool:
    # fakegpu.py has the same check; hogs.py imports nothing of the suite's own, so that
    # gpuci's tests can copy it alone into the suites they write (tests/test_contention.py)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _locked() -> Iterator[Path]:
    folder = scratch()
    with (folder / "lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield folder
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
