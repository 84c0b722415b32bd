"""One child interpreter: start it, watch it, time it out, cap its log, say how it ended.

Each interpreter is `python -m pytest` (gpuci's plugin in PYTEST_PLUGINS), in its own
process group, with its output captured to a size-capped log and its events journaled to a
file. gpuci reads the journal while the child runs, so it knows which test is running when the
child dies or hangs: that test is `crashed` or `timed-out`, and the caller may resume
with the tests after it in a fresh interpreter (`Attempt.resume`).
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import select
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from gpuci import shell
from gpuci.model import GpuciError, Interpreter
from gpuci.processes import Leftover
from gpuci.run.proc.attempts import read_attempt
from gpuci.run.proc.deadline import START_FLOOR_S, Deadline, HangLimit
from gpuci.run.proc.gpumem import MemoryGate, sampler
from gpuci.run.proc.handshake import asked_json
from gpuci.run.proc.held import Held, end_held, start_held, take_file, take_held
from gpuci.run.proc.holders import StrangerCheck, gpu_watch
from gpuci.run.proc.journal import JournalReader, startup_of
from gpuci.run.proc.launch import Attempt, Launch, launch_environ, pytest_command
from gpuci.run.proc.ledger import note_started
from gpuci.run.proc.logs import CappedLog
from gpuci.run.proc.reaper import (
    COOKIE_ENV,
    end_leftovers,
    forget_child,
    new_cookie,
    reap_orphans,
)
from gpuci.run.proc.spawn import start_interpreter, yield_cpu
from gpuci.run.proc.supervisor import Supervisor, signal_group

GRACE_S = 2.0  # between SIGTERM and SIGKILL of a process group


class _Started(NamedTuple):
    """An interpreter as `Interpreters._start` hands it over."""

    proc: subprocess.Popen[bytes]
    command: list[str]
    cookie: str
    start: float  # on the mode's clock
    started_at: float  # on the wall clock that the plugin stamps its first events with
    output: bytes  # what it printed before it was taken, unlogged
    reader: JournalReader
    ahead: bool = False  # started before its turn: its start-up (partly) hidden


class Interpreters:
    """Starts interpreters with one command line and environment, into one directory."""

    def __init__(
        self,
        *,
        out: Path,
        python: str,
        pytest_args: tuple[str, ...],
        timeout: float | None,
        environ: Mapping[str, str],
        clock_zero: float,
        supervisor: Supervisor,
        gate: MemoryGate | None = None,  # holds a start back until its GPU has room
        nice: int = 0,  # added to each interpreter's niceness (its threads and children too)
    ) -> None:
        self.nice = nice
        self.gate = gate
        self.out = out  # journal/ and logs/ go here
        self.python = python
        self.pytest_args = pytest_args
        self.timeout = timeout
        self.environ = environ
        self.zero = clock_zero
        self.supervisor = supervisor
        self.tmp = Path(tempfile.mkdtemp(prefix="gpuci-"))
        self.strangers = StrangerCheck(gpu_watch())  # the first of a command snapshots
        # started ahead, by unit, until taken; where their journal's events begin
        self._ahead: dict[str, tuple[Held, int]] = {}
        self._ahead_numbers = itertools.count()
        # told each batch of journal events as it is read (the screens learn from the suite)
        self.on_events: Callable[[list[dict[str, Any]]], None] | None = None
        # where the suite interpreter ran a test quickly, how long it may hang (`deadline`)
        self.hang_limit: HangLimit | None = None

    def now(self) -> float:
        """Seconds since the clock's zero (the start of the mode)."""
        return time.monotonic() - self.zero

    def close(self) -> None:
        """End the interpreters started ahead and never taken; remove the scratch files of
        the interpreters started; collect adopted zombies."""
        for held, _ in self._ahead.values():
            self.supervisor.discard(held.proc)
            end_held(held)
        self._ahead.clear()
        shutil.rmtree(self.tmp, ignore_errors=True)
        reap_orphans()

    def start_ahead(self, launch: Launch) -> None:
        """Start `launch`'s interpreter now, fresh, held after its collection until `run`
        takes it with the same command and environment (`gpuci.run.proc.held`): the start-up
        of a slot's next unit costs cores that are idle while the current one runs."""
        if self.supervisor.stopping.is_set():
            return
        # its own file of ids, which it waits for: ids written when taken (one file shared
        # by two interpreters held at once would release both)
        only = self.tmp / f"ahead-{next(self._ahead_numbers)}.json"
        journal = self.out / "journal" / f"{launch.stem}.jsonl"
        journal.parent.mkdir(parents=True, exist_ok=True)
        offset = journal.stat().st_size if journal.exists() else 0
        held = self._start_held(launch, journal, only)
        earlier, _ = self._ahead.pop(launch.key, (None, 0))
        if earlier is not None:
            end_held(earlier)
        self._ahead[launch.key] = (held, offset)

    def hold(self, launch: Launch) -> Held:
        """Start `launch`'s interpreter now, fresh, held after its collection, and hand it to
        the caller, who passes it to `run` (it runs there if still alike) or to `end_held`:
        an evidence run whose start-up is paid while other runs decide whether it is needed.
        It journals into a file of its own beside the runs' (`FILE.held-N.jsonl`)."""
        number = next(self._ahead_numbers)
        only = self.tmp / f"ahead-{number}.json"
        journal = self.out / "journal" / f"{launch.stem}.held-{number}.jsonl"
        # its own cache: the run that takes it may be any lane of its file's
        launch = dataclasses.replace(launch, cache=f"{launch.stem}.held-{number}")
        journal.parent.mkdir(parents=True, exist_ok=True)
        return self._start_held(launch, journal, only)

    def _start_held(self, launch: Launch, journal: Path, only: Path) -> Held:
        """A fresh interpreter for `launch`, held after its collection, waiting on `only`;
        a stop ends it, and its start-up yields the CPU to the suite interpreter."""
        env = launch_environ(self.environ, launch, journal=journal, only=only)
        try:
            held = start_held(self.command(launch), launch.targets, env)
        except OSError as exc:
            raise GpuciError(f"could not start {self.python}: {exc}") from None
        self.supervisor.add(held.proc)
        yield_cpu(held.proc.pid, self.nice)
        return held

    def command(self, launch: Launch) -> list[str]:
        """The command line of one interpreter."""
        return pytest_command(self.python, self.pytest_args, launch, out=self.out)

    def run(
        self,
        launch: Launch,
        *,
        cancel: threading.Event | None = None,
        held: Held | None = None,
    ) -> Attempt:
        """Start one fresh interpreter (or take `held`, from `hold`, where it is what this
        one would start), watch it to the end, and read what it did. Once `cancel` is set it
        is killed (a speculated run whose answer is no longer needed)."""
        stem = launch.stem
        journal = self.out / "journal" / f"{stem}.jsonl"
        journal.parent.mkdir(parents=True, exist_ok=True)
        started, ticket = self._start_gated(launch, journal, held)
        proc, cmd, cookie, start, started_at, output, reader, ahead = started
        log_rel = f"logs/{stem}.log"
        log = CappedLog(self.out / log_rel, f"=== gpuci: {launch.label}: {shell.join(cmd)}\n")
        log.write(output)  # what a held interpreter printed while gpuci collected from it
        self.supervisor.add(proc)
        yield_cpu(proc.pid, self.nice)
        sampler().watch(proc.pid)
        left: list[Leftover] = []
        try:
            timeout = launch.timeout if launch.timeout is not None else self.timeout
            # a wrapper's own timeout (compute-sanitizer) is slower than the suite's times
            hang = self.hang_limit if launch.timeout is None else None
            # a wrapper's timeout covers its own slow start-up: no floor beside it
            deadline = Deadline(timeout, hang, START_FLOOR_S if launch.timeout is None else 0.0)
            events, timed_out = self._watch(
                proc, reader, log, cookie, left, deadline=deadline, cancel=cancel
            )
        finally:
            # nothing a test started outlives it: first whatever carries its cookie (the
            # subreaper adopted the orphans), then what is left of its process group
            left += end_leftovers(cookie, interpreter=proc.pid)
            signal_group(proc, signal.SIGKILL)
            self.supervisor.discard(proc)
            forget_child(proc.pid)
            reap_orphans()
            if self.gate is not None:
                self.gate.done(ticket)  # its memory is free again
        excerpt = log.excerpt()
        log.close()
        code = proc.returncode
        use = sampler().done(proc.pid)
        interpreter = Interpreter(
            exit_code=code if code is None or code >= 0 else None,
            signal=-code if code is not None and code < 0 else None,
            start=start,
            end=self.now(),
            log=log_rel,
            gpu_peak_mib=use.peak_mib,
            gpus_held=use.gpus,
            startup_s=startup_of(events, started_at),
            ahead=ahead,
        )
        attempt = read_attempt(
            launch,
            interpreter,
            events,
            timed_out=timed_out,
            excerpt=excerpt,
            deadline=deadline,
            stopping=self.supervisor.stopping.is_set(),
        )
        attempt.leftovers = sorted(left, key=lambda leftover: leftover.pid)
        attempt.strangers = self.strangers.after(
            launch.gpu,
            alone=self.supervisor.running() == 0,
            ended=[proc.pid, *(leftover.pid for leftover in left)],
        )
        return attempt

    def _start_gated(
        self, launch: Launch, journal: Path, held: Held | None
    ) -> tuple[_Started, int | None]:
        """`_start`, once the memory gate admits it; and the gate's ticket (its memory is
        kept until `done`)."""
        gate = self.gate
        ticket = gate.wait(launch.key, launch.gpu, self.supervisor) if gate is not None else None
        try:
            started = self._start(launch, journal, held)
        except BaseException:
            if gate is not None:
                gate.done(ticket)
            raise
        if gate is not None:
            gate.started(ticket, started.proc.pid)
        return started, ticket

    def _start(self, launch: Launch, journal: Path, given: Held | None = None) -> _Started:
        """Start the interpreter (or take the held suite interpreter, `gpuci.run.proc.held`, or
        one started ahead); the process, its command and cookie, when it started (on the
        mode's clock, and on the wall clock that the plugin stamps its first events with),
        what it printed unlogged, and the reader of its journal's events."""
        only = self.tmp / f"only-{threading.get_ident()}-{launch.attempt}.json"
        env = launch_environ(self.environ, launch, journal=journal, only=only)
        cookie = env[COOKIE_ENV] = new_cookie()  # inherited by all the interpreter starts
        cmd = self.command(launch)
        # started before discovery with this command's options and environment, and held
        # after its collection: taken, its start-up before the mode's clock as it was
        held = take_held(cmd, launch.targets, env) if launch.held else None
        if held is not None:
            reader = JournalReader(journal)  # from its end: an earlier attempt's are read
            proc = held.release(journal, launch.ids, launch.rendezvous)
            start = held.started - self.zero
            output = bytes(held.output)
            return _Started(proc, held.command, held.cookie, start, held.started_at, output, reader)
        if given is not None and given.targets != launch.targets:  # it collected others
            end_held(given)
        elif given is not None and given.matches(cmd, launch.targets, env):  # held for it
            own = Path(given.env["GPUCI_JOURNAL"])
            # its own file, read whole: a file it could not collect was journaled before
            # the release, its tests' events come after
            reader = JournalReader(own, offset=0)
            proc = given.release(own, launch.ids, launch.rendezvous)
            now, now_at = self.now(), time.time()
            return _Started(proc, given.command, given.cookie, now, now_at, b"", reader, True)
        # started ahead while its slot's previous unit ran, journaling into `journal` from
        # its start: its wall from now, when its tests may start, and its start-up only
        # what was not hidden (from now to its collection, 0 where it had collected)
        ahead, offset = self._ahead.pop(launch.key, (None, 0))
        if ahead is not None and ahead.matches(cmd, launch.targets, env):
            proc = ahead.release(journal, launch.ids, launch.rendezvous)
            reader = JournalReader(journal, offset)
            now, now_at = self.now(), time.time()
            return _Started(proc, ahead.command, ahead.cookie, now, now_at, b"", reader, True)
        # started beside discovery (`gpuci.run.sched.beside`): its wall from its start, as
        # the suite interpreter's
        early = take_file(cmd, launch.targets, env) if launch.attempt == 1 else None
        if early is not None:
            reader = JournalReader(journal)
            proc = early.release(journal, launch.ids, launch.rendezvous)
            if early.ahead:  # started for this pass during an earlier one: from now
                return _Started(
                    proc, early.command, early.cookie, self.now(), time.time(), b"", reader, True
                )
            start = early.started - self.zero
            return _Started(proc, early.command, early.cookie, start, early.started_at, b"", reader)
        reader = JournalReader(journal)  # from its end: an earlier attempt's are read
        # ids exactly, any character
        only.write_text(asked_json(launch.ids, launch.rendezvous), encoding="utf-8")
        start, started_at = self.now(), time.time()
        try:
            proc = start_interpreter(cmd, env)
        except OSError as exc:
            raise GpuciError(f"could not start {self.python}: {exc}") from None
        note_started(proc.pid, cookie=cookie)  # a killed gpuci's next command ends it
        return _Started(proc, cmd, cookie, start, started_at, b"", reader)

    def _watch(
        self,
        proc: subprocess.Popen[bytes],
        reader: JournalReader,
        log: CappedLog,
        cookie: str,
        left: list[Leftover],
        *,
        deadline: Deadline,
        cancel: threading.Event | None = None,
    ) -> tuple[list[dict[str, Any]], bool]:
        """Pump output into the log, follow the journal, enforce the timeout; kill it once
        gpuci stops or `cancel` is set."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        events: list[dict[str, Any]] = []
        last_progress = time.monotonic()
        timed_out = False
        kill_at: float | None = None
        exited_at: float | None = None
        eof = False
        while not eof:
            wake = 0.1 if kill_at is not None or exited_at is not None else 0.25
            # a timeout, a listener learning from it, or a cancel wants its events soon
            soon = deadline.watching or self.on_events or cancel
            readable, _, _ = select.select([fd], [], [], wake if soon else 1.0)
            if readable:
                data = os.read(fd, 1 << 16)
                if data:
                    log.write(data)
                else:
                    eof = True
            new = reader.read()
            if new:
                last_progress = time.monotonic()
                events += new
                deadline.observe(new)
                self._tell(new)
            now = time.monotonic()
            cancelled = cancel is not None and cancel.is_set()
            if (self.supervisor.stopping.is_set() or cancelled) and kill_at is None:
                signal_group(proc, signal.SIGKILL)
                kill_at = now
            if kill_at is None and deadline.expired(now - last_progress):
                timed_out = True
                signal_group(proc, signal.SIGTERM)
                kill_at = now + GRACE_S
            if kill_at is not None and now >= kill_at and proc.poll() is None:
                signal_group(proc, signal.SIGKILL)
            if proc.poll() is not None and not eof:
                # the child is gone but something it started still holds the pipe
                if exited_at is None:
                    left += end_leftovers(cookie, interpreter=proc.pid)
                    now = time.monotonic()
                exited_at = exited_at or now
                if now - exited_at > 1.0:
                    signal_group(proc, signal.SIGKILL)
                    if now - exited_at > 3.0:
                        break
        proc.stdout.close()
        proc.wait()
        new = reader.read()
        events += new
        self._tell(new)
        return events, timed_out

    def _tell(self, events: list[dict[str, Any]]) -> None:
        if events and self.on_events is not None:
            self.on_events(events)
