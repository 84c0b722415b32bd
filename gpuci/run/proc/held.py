"""Held: the check's suite interpreter, started fresh beside discovery and held after its
collection until the suite screen takes it.

Plain pytest is one interpreter that imports and collects, then runs. A check collects
first (discovery) to plan its screens; a suite interpreter started only then imports and
collects all over again, seconds before its first test (about 5 s on CuPy's subset). So a
check starts it at once, on the check's PATHS (what discovery collects, with the same
arguments), under `GPUCI_HOLD`: once collected it journals `held` and waits for the file
of ids to run (`gpuci.run.proc.waits`). The suite screen takes it where its command and
environment are exactly what it would start (`take_held`); one not taken (a check that
stopped before its screens, or planned them otherwise) is killed (`let_go`).

The parallel screen's first files are started beside discovery the same way (`hold_file`,
from `gpuci.run.sched.beside`), each taken by the slot that starts its file (`take_file`).
The same hold serves the files a slot starts ahead (`start_held`, from
`gpuci.run.proc.interpreter.Interpreters.start_ahead`): each waits on a file of its own.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.run.proc.handshake import HOLD_ENV, POLL_S, asked_json
from gpuci.run.proc.journal import JournalReader
from gpuci.run.proc.launch import (
    Launch,
    launch_environ,
    pytest_command,
    without_private_cache,
)
from gpuci.run.proc.ledger import note_started
from gpuci.run.proc.reaper import COOKIE_ENV, new_cookie
from gpuci.run.proc.spawn import start_lasting, yield_cpu
from gpuci.run.proc.supervisor import raise_if_interrupted, signal_group

# the keys every interpreter has its own of: not compared when the screen takes it (an
# interpreter started ahead may be taken by another slot than the one that started it,
# where the GPUs it sees are the same: its GPUCI_SLOT names the one that started it)
OWN_KEYS = ("GPUCI_JOURNAL", "GPUCI_ONLY", "GPUCI_SLOT", COOKIE_ENV, HOLD_ENV)
PIPE_BYTES = 1 << 20  # what it may print before it is taken, unread (Linux's default: 64 KiB)
OUTPUT_BYTES = 1 << 20  # what is kept of what it printed before its collection ended
# a start-up this long (CuPy's 2-4 s on an H100 machine; a CPU suite's 0.3 s is not) is worth
# hiding by an interpreter started before its turn
WORTH_HIDING_S = 1.0
JOURNAL_WAIT_S = 60.0  # a file's interpreter still importing its conftest.py after that: restarted


@dataclass(slots=True)
class Held:
    """An interpreter started before gpuci needs it, held after its collection: the check's
    suite interpreter (started beside discovery), or a file started ahead of its slot."""

    proc: subprocess.Popen[bytes]
    command: list[str]
    targets: tuple[str, ...]  # the check's PATHS, as the command ends with them
    env: dict[str, str]
    started: float  # time.monotonic() at its start
    started_at: float  # time.time() at its start: the clock of the journal's stamps
    output: bytearray = field(default_factory=bytearray)  # read before it was taken
    # started for a later pass, ahead of its turn (isolated, during the screens): its wall
    # counts from when it is taken, its start-up only what was not hidden
    ahead: bool = False

    def matches(
        self, command: Sequence[str], targets: Sequence[str], env: Mapping[str, str]
    ) -> bool:
        """Whether it still runs and is what `command` would start but for its targets (the
        suite's were the check's PATHS), with `env` but for each interpreter's own keys;
        killed where not."""
        if self.fits(command, targets, env):
            return True
        end_held(self)
        return False

    def fits(self, command: Sequence[str], targets: Sequence[str], env: Mapping[str, str]) -> bool:
        """`matches`, without killing it where not."""
        # each has a cache of its own (`Launch.cache`)
        ours = without_private_cache(self.command[: len(self.command) - len(self.targets)])
        asked = without_private_cache(command[: len(command) - len(targets)])
        going = self.proc.poll() is None or self.ended_by_pytest()
        return going and ours == asked and _same(self.env, env)

    def ended_by_pytest(self) -> bool:
        """Whether its pytest ended its session by itself before holding (a hook's
        `pytest.exit` at collection): its journal and exit status are that run's, as a
        fresh start would end it again, so the screen reads them rather than starting one."""
        kinds = {e.get("e") for e in JournalReader(Path(self.env["GPUCI_JOURNAL"]), 0).read()}
        return "end" in kinds and "held" not in kinds  # one that held ends only when released

    @property
    def cookie(self) -> str:
        """The cookie its processes carry (`gpuci.run.proc.reaper`)."""
        return self.env[COOKIE_ENV]

    def release(
        self, journal: Path, ids: Sequence[str] | None, rendezvous: str | None = None
    ) -> subprocess.Popen[bytes]:
        """Let it run `ids` (None: every test it collected; where paired, meeting the others
        at `rendezvous`), journaling into `journal` from now on; the process."""
        started_in = Path(self.env["GPUCI_JOURNAL"])
        if started_in != journal:  # the file it has open goes along
            started_in.replace(journal)
        only = Path(self.env["GPUCI_ONLY"])
        ready = only.with_suffix(".tmp")
        ready.write_text(asked_json(ids, rendezvous), encoding="utf-8")
        ready.replace(only)  # whole at once: it reads the file as soon as it appears
        return self.proc


class _Holding:
    """The held suite interpreter of this process, the files' started beside discovery (by
    the paths they collected), and their folders."""

    def __init__(self) -> None:
        self.held: Held | None = None
        self.files: dict[tuple[str, ...], Held] = {}
        self.folders: list[Path] = []  # removed at the end: a taken one reads its ids there

    def take(self) -> Held | None:
        held, self.held = self.held, None
        return held


_HOLDING = _Holding()


def hold_suite(
    python: str,
    pytest_args: Sequence[str],
    environ: Mapping[str, str],
    launch: Launch,
    folder: Path,
) -> None:
    """Start the suite interpreter that `launch` (on the check's PATHS) and a mode's
    `python`, `pytest_args` and `environ` describe, held; its journal and ids in `folder`."""
    earlier = _HOLDING.take()
    if earlier is not None:
        end_held(earlier)
    held_folder(folder)
    command = pytest_command(python, pytest_args, launch, out=folder)
    env = launch_environ(
        environ, launch, journal=folder / "journal.jsonl", only=folder / "only.json"
    )
    _HOLDING.held = start_held(command, launch.targets, env)


def held_folder(folder: Path) -> Path:
    """`folder`, emptied, for held interpreters' journals and files of ids; removed by
    `let_go`."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    _HOLDING.folders.append(folder)
    return folder


def hold_file(
    command: list[str],
    targets: Sequence[str],
    env: dict[str, str],
    *,
    nice: int,
    ahead: bool = False,
) -> None:
    """Start a file's interpreter beside discovery (`gpuci.run.sched.beside`), held until
    a screen's slot takes it (`take_file`), at `nice` more niceness (as its screen's);
    `ahead`: for a later pass, while the screens go on."""
    held = start_held(command, targets, env)
    held.ahead = ahead
    yield_cpu(held.proc.pid, nice)
    earlier = _HOLDING.files.pop(tuple(targets), None)
    if earlier is not None:
        end_held(earlier)
    _HOLDING.files[tuple(targets)] = held


def held_file_slot(targets: Sequence[str]) -> int | None:
    """The slot the interpreter started beside discovery for `targets` was started for
    (the GPUs it sees are that slot's); None where none waits for them."""
    held = _HOLDING.files.get(tuple(targets))
    return int(held.env["GPUCI_SLOT"]) if held is not None else None


def hold_for_later(targets: Sequence[str]) -> None:
    """The interpreter started beside discovery for `targets` waits its turn (the screen
    starts other files first): taken then, its wall counts from then, as a file started
    ahead, not from its start (the wait is no part of its file's time)."""
    held = _HOLDING.files.get(tuple(targets))
    if held is not None:
        held.ahead = True


def take_file(
    command: Sequence[str], targets: Sequence[str], env: Mapping[str, str]
) -> Held | None:
    """The interpreter started beside discovery for `targets`, where it still runs, was
    started with `command` and `env` but for each interpreter's own keys, and opened its
    journal; else None (one that never opened it is killed; one started otherwise waits
    on, for its own slot, or is killed by `let_go`)."""
    held = _HOLDING.files.get(tuple(targets))
    if held is None or not held.fits(command, targets, env):
        return None  # another mode's interpreter of the file (threads), or another slot's
    del _HOLDING.files[tuple(targets)]
    if _opened_journal(held):
        return held
    end_held(held)
    return None


def _opened_journal(held: Held) -> bool:
    """Whether `held` opened its journal (its pytest_configure), waiting for it up to
    JOURNAL_WAIT_S: only an open journal can be moved to where its screen reads it (the
    interpreter writes on into the file it opened)."""
    journal = Path(held.env["GPUCI_JOURNAL"])
    deadline = time.monotonic() + JOURNAL_WAIT_S
    while not journal.exists():
        if held.proc.poll() is not None or time.monotonic() > deadline:
            return False  # a fresh start of the file says what keeps it from starting
        time.sleep(POLL_S)
    return True


def start_held(command: list[str], targets: Sequence[str], env: dict[str, str]) -> Held:
    """Start `command` with `env` (its journal and its file of ids named there, the file
    not yet written), held after its collection until `Held.release`."""
    env = {**env, COOKIE_ENV: new_cookie(), HOLD_ENV: "1"}
    started, started_at = time.monotonic(), time.time()
    proc = start_lasting(command, env)  # held: it outlives the thread that asked for it
    note_started(proc.pid, cookie=env[COOKIE_ENV])  # a killed gpuci's next command ends it
    if proc.stdout is not None:
        with contextlib.suppress(AttributeError, OSError):  # no such fcntl: 64 KiB it is
            fcntl.fcntl(proc.stdout.fileno(), fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    return Held(proc, command, tuple(targets), env, started, started_at)


def held_collection(timeout: float) -> list[dict[str, Any]] | None:
    """What the held suite interpreter collected: its journal's events up to `held`, once
    it got there (gpuci's discovery: the same collection of PATHS, fresh); None where none
    is held, or it ended or took `timeout` before (collection then runs on its own)."""
    held = _HOLDING.held
    if held is None or held.proc.stdout is None:
        return None
    # from its start: its own journal, fresh, which it may have written to the end already
    # (a check that reaches discovery late, on a loaded machine, waited out the timeout)
    reader = JournalReader(Path(held.env["GPUCI_JOURNAL"]), offset=0)
    fd = held.proc.stdout.fileno()
    events: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        raise_if_interrupted()  # a Ctrl-C lost while gpuci started it: not a minute's wait
        events += reader.read()
        if any(e.get("e") == "held" for e in events):
            return events
        if held.proc.poll() is not None:
            events += reader.read()  # what it wrote last, before it ended
            return events if _collected_and_passed(events) else None
        # what it prints meanwhile is read here (and logged once taken), so a full pipe
        # never stops it short of its collection
        if select.select([fd], [], [], POLL_S)[0]:
            data = os.read(fd, 1 << 16)
            held.output += data[: max(0, OUTPUT_BYTES - len(held.output))]
    return None


def _collected_and_passed(events: list[dict[str, Any]]) -> bool:
    """Whether an interpreter that ended before holding had collected and then ended as
    pytest ends a run that passed (exit 0, a hook's `pytest.exit(returncode=0)`): its
    collection is the discovery; any other end is for `discover_tests` to explain."""
    ends = [e for e in events if e.get("e") == "end"]
    collected = any(e.get("e") == "collected" for e in events)
    return collected and bool(ends) and ends[-1].get("exitstatus") == 0


def take_held(
    command: Sequence[str], targets: Sequence[str], env: Mapping[str, str]
) -> Held | None:
    """The held suite interpreter, where it still runs and was started with `command` but
    for its targets, and with `env` but for each interpreter's own keys; else None (and
    one held is killed: the suite runs as `command` says)."""
    held = _HOLDING.take()
    if held is None:
        return None
    return held if held.matches(command, targets, env) else None


def let_go() -> None:
    """Kill the held interpreters no screen took; remove their folders (at the end of the
    check: a taken one reads its file of ids there)."""
    held = _HOLDING.take()
    if held is not None:
        end_held(held)
    while _HOLDING.files:
        end_held(_HOLDING.files.popitem()[1])
    while _HOLDING.folders:
        shutil.rmtree(_HOLDING.folders.pop(), ignore_errors=True)


def _same(held: Mapping[str, str], asked: Mapping[str, str]) -> bool:
    def without(env: Mapping[str, str]) -> dict[str, str]:
        return {k: v for k, v in env.items() if k not in OWN_KEYS}

    return without(held) == without(asked)


def end_held(held: Held) -> None:
    """Kill a held interpreter that will not be taken, and wait for it."""
    signal_group(held.proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        held.proc.wait(timeout=5)
    if held.proc.stdout is not None:
        held.proc.stdout.close()
