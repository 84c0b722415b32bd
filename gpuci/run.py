"""Run: execute a schedule in fresh interpreters and write one mode's result directory.

Each interpreter is `python -m pytest -p gpuci.pytest_plugin`, in its own process group,
with its output captured to a size-capped log and its events journaled to a file. gpuci
reads the journal while the child runs, so it knows which test is running when the
child dies or hangs: that test is `crashed` or `timed-out`, and a fresh interpreter
resumes with the tests after it.
"""

from __future__ import annotations

import contextlib
import datetime
import importlib.metadata
import json
import os
import platform
import queue
import re
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

from junitparser import Error, JUnitXml, Skipped, TestCase, TestSuite
from junitparser.junitparser import JUnitXmlError

from gpuci.discover import PLUGIN, Discovery, child_env, file_of
from gpuci.model import (
    NOT_PASSING,
    SUITE_UNIT,
    FileRun,
    FileStatus,
    GpuciError,
    Interpreter,
    Mode,
    ModeRun,
    Outcome,
    TestResult,
    UsageError,
    mode_run_to_json,
    printable,
    write_json_atomic,
)
from gpuci.plan import Schedule

SUITE_STEM = "suite"  # its journal, log and JUnit file names
EXIT_ID = "[interpreter exit]"  # pseudo test: the interpreter died after its last test
GRACE_S = 2.0  # between SIGTERM and SIGKILL of a process group
LOG_HEAD_BYTES = 2 << 20  # keep the first 2 MiB of each interpreter's output...
LOG_TAIL_BYTES = 1 << 20  # ...and the last 1 MiB; a flood in between is counted, not kept
LOG_EXCERPT_CHARS = 3000  # of a crashed or hung interpreter's output, kept in run.json
EXCERPT_SEARCH_BYTES = 32 << 10  # where to look for the fatal-error banner
EXCERPT_MAX_CHARS = 8000  # a faulthandler dump of many threads can run long
FATAL_BANNER = "Fatal Python error"
SKIP_REASONS_SHOWN = 3
OUTCOME_WORDS = (
    Outcome.PASSED,
    Outcome.FAILED,
    Outcome.SKIPPED,
    Outcome.CRASHED,
    Outcome.TIMED_OUT,
    Outcome.NOT_RUN,
)


class Interrupted(GpuciError):
    """Ctrl-C or SIGTERM: what finished was written; exit code 130."""

    exit_code = 130


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """What `gpuci run` was asked to do, for one mode."""

    mode: Mode
    out: Path  # the mode's directory: OUT/<mode> or OUT/<mode>/shard-I-of-N
    pytest_args: tuple[str, ...] = ()
    timeout: float | None = None
    reruns: int = 2
    python: str = sys.executable
    command: tuple[str, ...] = ()
    shard: tuple[int, int] | None = None
    gpus: tuple[str, ...] = ()


@dataclass(slots=True)
class _Attempt:
    """What one interpreter did, read back from its journal and exit status."""

    interpreter: Interpreter
    results: list[TestResult] = field(default_factory=list)
    resume: list[str] = field(default_factory=list)  # ids to run in a fresh interpreter
    status: FileStatus = FileStatus.PASSED
    junit_part: Path | None = None
    finished: list[dict[str, Any]] = field(default_factory=list)


# --- process control -----------------------------------------------------------------


class _Supervisor:
    """Live children and the stop flag, shared by the slots and the signal handler."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen[bytes]] = set()

    def add(self, proc: subprocess.Popen[bytes]) -> None:
        """Track a child so a stop can reach it."""
        with self._lock:
            self._live.add(proc)
            if self.stopping.is_set():
                _signal_group(proc, signal.SIGKILL)

    def discard(self, proc: subprocess.Popen[bytes]) -> None:
        """Forget a child that is gone."""
        with self._lock:
            self._live.discard(proc)

    def stop(self) -> None:
        """End every child's process group, now."""
        self.stopping.set()
        with self._lock:
            for proc in self._live:
                _signal_group(proc, signal.SIGKILL)

    @contextlib.contextmanager
    def handling_signals(self) -> Iterator[None]:
        """Turn Ctrl-C and SIGTERM into an orderly stop while the mode runs."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return

        def on_signal(signum: int, frame: FrameType | None) -> None:
            self.stop()

        previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for signum, handler in previous.items():
                signal.signal(signum, handler)


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """Signal the child's whole process group: a test's own children die with it."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)


class _CappedLog:
    """A child's output on disk: the head and the tail, never more than the cap."""

    def __init__(self, path: Path, header: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("ab")
        self._file.write(header.encode())
        self._head_left = LOG_HEAD_BYTES
        self._tail = bytearray()
        self._dropped = 0

    def write(self, data: bytes) -> None:
        """Keep the start of the output on disk, and only the latest bytes after it."""
        if self._head_left > 0:
            head = data[: self._head_left]
            self._file.write(head)
            self._head_left -= len(head)
            data = data[len(head) :]
        if data:
            self._tail += data
            excess = len(self._tail) - LOG_TAIL_BYTES
            if excess > 0:
                del self._tail[:excess]
                self._dropped += excess

    def excerpt(self) -> str:
        """The end of the output, from Python's fatal-error banner when there is one."""
        data = bytes(self._tail[-EXCERPT_SEARCH_BYTES:]) if self._tail else self._last_head()
        text = data.decode("utf-8", "replace")
        banner = text.rfind(FATAL_BANNER)
        if banner >= 0:
            return text[banner:][:EXCERPT_MAX_CHARS]
        return text[-LOG_EXCERPT_CHARS:]

    def _last_head(self) -> bytes:
        self._file.flush()
        with Path(self._file.name).open("rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - EXCERPT_SEARCH_BYTES))
            return f.read()

    def close(self) -> None:
        """Write the kept tail after a note of what was dropped."""
        if self._dropped:
            self._file.write(f"\n[gpuci: {self._dropped} bytes of output omitted]\n".encode())
        self._file.write(bytes(self._tail))
        self._file.close()


class _JournalReader:
    """Reads the events a child appends, complete lines only, from where it left off."""

    def __init__(self, path: Path) -> None:
        self._path = path
        self._offset = path.stat().st_size if path.exists() else 0
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        """The events written since the last call."""
        try:
            with self._path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        events = []
        for line in lines:
            with contextlib.suppress(ValueError):  # a line torn by a kill is not an event
                events.append(json.loads(line))
        return events


def _describe_exit(code: int | None, signum: int | None) -> str:
    if signum is not None:
        try:
            return f"killed by {signal.Signals(signum).name} (signal {signum})"
        except ValueError:
            return f"killed by signal {signum}"
    return f"exit code {code}"


@dataclass(frozen=True, slots=True)
class _Ending:
    """How an interpreter ended, and what that makes of the test it was running."""

    outcome: Outcome  # of the test that started and never finished
    status: FileStatus | None  # None: an orderly end says nothing about the file
    message: str
    before_tests: str  # the message when it ended before any test was collected
    resume: bool = True  # whether a fresh interpreter should go on with the rest
    not_run: str = ""  # the message for tests left behind when not resuming


@dataclass(slots=True)
class _JournalState:
    """The journal of one interpreter, folded: what was collected, started, finished."""

    collected: list[str] | None = None
    started: str | None = None
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    ended: dict[str, Any] | None = None

    @classmethod
    def from_events(cls, events: list[dict[str, Any]]) -> _JournalState:
        """Fold the events in the order they were written."""
        state = cls()
        for event in events:
            kind, test_id = event.get("e"), str(event.get("id"))
            if kind == "collected":
                state.collected = [str(i) for i in event.get("ids", [])]
            elif kind == "collect-error":
                state.errors[test_id] = str(event.get("message", ""))
            elif kind == "start":
                state.started = test_id
            elif kind == "finish":
                state.finished[test_id] = event
                state.started = None
            elif kind == "end":
                state.ended = event
        return state

    def results(self) -> list[TestResult]:
        """Collection errors and finished tests; the unfinished one is the caller's call."""
        errors = [
            TestResult(
                id=i,
                file=file_of(i),
                outcome=Outcome.FAILED,
                message=f"collection error: {message}",
            )
            for i, message in self.errors.items()
        ]
        return errors + [
            TestResult(
                id=i,
                file=file_of(i),
                outcome=Outcome(e.get("outcome", "failed")),
                duration=float(e.get("duration", 0.0)),
                message=str(e.get("message", "")),
            )
            for i, e in self.finished.items()
        ]

    def remaining(self) -> list[str]:
        """Collected tests that neither finished nor were running, in order."""
        done = set(self.finished) | {self.started}
        return [i for i in self.collected or () if i not in done]


def _not_run(test_id: str, message: str) -> TestResult:
    return TestResult(id=test_id, file=file_of(test_id), outcome=Outcome.NOT_RUN, message=message)


# --- one interpreter -----------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class _Launch:
    key: str  # the scheduled unit: a file, or SUITE_UNIT
    ids: tuple[str, ...]
    targets: tuple[str, ...]  # the paths handed to pytest
    slot: int
    gpu: str | None
    attempt: int
    junit: Path | None
    label: str


class _Runner:
    """Runs interpreters for one mode and turns their journals into results."""

    def __init__(self, options: RunOptions, discovery: Discovery, clock_zero: float) -> None:
        self.options = options
        self.discovery = discovery
        self.zero = clock_zero
        self.supervisor = _Supervisor()
        self.tmp = Path(tempfile.mkdtemp(prefix="gpuci-"))
        self.base_env = child_env(os.environ)
        self.base_env["GPUCI_MODE"] = options.mode.value

    def now(self) -> float:
        return time.monotonic() - self.zero

    def stem(self, key: str) -> str:
        return SUITE_STEM if key == SUITE_UNIT else key

    def target(self, file: str) -> str:
        """A path pytest finds from our working directory (ids are rootdir-relative)."""
        path = self.discovery.rootdir / file
        with contextlib.suppress(ValueError):
            return str(path.relative_to(Path.cwd()))
        return str(path)

    def command(self, launch: _Launch) -> list[str]:
        cmd = [
            self.options.python,
            "-m",
            "pytest",
            "-p",
            PLUGIN,
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
        ]
        if launch.junit is not None:
            cmd += ["-o", f"junit_suite_name={launch.key}", f"--junitxml={launch.junit}"]
        return [*cmd, *self.options.pytest_args, *launch.targets]

    def run_interpreter(self, launch: _Launch) -> _Attempt:
        """Start one interpreter, watch it to the end, and read what it did."""
        out = self.options.out
        stem = self.stem(launch.key)
        journal = out / "journal" / f"{stem}.jsonl"
        journal.parent.mkdir(parents=True, exist_ok=True)
        only = self.tmp / f"only-{threading.get_ident()}-{launch.attempt}.txt"
        only.write_text("".join(f"{i}\n" for i in launch.ids), encoding="utf-8")
        env = dict(
            self.base_env,
            GPUCI_JOURNAL=str(journal),
            GPUCI_ONLY=str(only),
            GPUCI_SLOT=str(launch.slot),
        )
        if launch.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = launch.gpu
        log_rel = f"logs/{stem}.log"
        cmd = self.command(launch)
        log = _CappedLog(out / log_rel, f"=== gpuci: {launch.label}: {shlex.join(cmd)}\n")
        reader = _JournalReader(journal)
        start = self.now()
        try:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            log.close()
            raise GpuciError(f"could not start {self.options.python}: {exc}") from None
        self.supervisor.add(proc)
        try:
            events, timed_out = self._watch(proc, reader, log)
        finally:
            _signal_group(proc, signal.SIGKILL)  # nothing a test started outlives it
            self.supervisor.discard(proc)
        excerpt = log.excerpt()
        log.close()
        code = proc.returncode
        interpreter = Interpreter(
            exit_code=code if code is None or code >= 0 else None,
            signal=-code if code is not None and code < 0 else None,
            start=start,
            end=self.now(),
            log=log_rel,
        )
        return self._interpret(launch, interpreter, events, timed_out, excerpt)

    def _watch(
        self, proc: subprocess.Popen[bytes], reader: _JournalReader, log: _CappedLog
    ) -> tuple[list[dict[str, Any]], bool]:
        """Pump output into the log, follow the journal, enforce the timeout."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        timeout = self.options.timeout
        events: list[dict[str, Any]] = []
        last_progress = time.monotonic()
        timed_out = False
        kill_at: float | None = None
        exited_at: float | None = None
        eof = False
        while not eof:
            wake = 0.1 if kill_at is not None or exited_at is not None else 0.25
            readable, _, _ = select.select([fd], [], [], wake if timeout else 1.0)
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
            now = time.monotonic()
            if self.supervisor.stopping.is_set() and kill_at is None:
                _signal_group(proc, signal.SIGKILL)
                kill_at = now
            if timeout and kill_at is None and now - last_progress > timeout:
                timed_out = True
                _signal_group(proc, signal.SIGTERM)
                kill_at = now + GRACE_S
            if kill_at is not None and now >= kill_at and proc.poll() is None:
                _signal_group(proc, signal.SIGKILL)
            if proc.poll() is not None and not eof:
                # the child is gone but something it started still holds the pipe
                exited_at = exited_at or now
                if now - exited_at > 1.0:
                    _signal_group(proc, signal.SIGKILL)
                    if now - exited_at > 3.0:
                        break
        proc.stdout.close()
        proc.wait()
        events += reader.read()
        return events, timed_out

    def _interpret(  # noqa: PLR0912 -- every way an interpreter can end, in one place
        self,
        launch: _Launch,
        interpreter: Interpreter,
        events: list[dict[str, Any]],
        timed_out: bool,
        excerpt: str,
    ) -> _Attempt:
        """Decide every asked-for test's outcome from the journal and the exit status."""
        journal = _JournalState.from_events(events)
        attempt = _Attempt(interpreter=interpreter, junit_part=launch.junit)
        attempt.finished = list(journal.finished.values())
        attempt.results = journal.results()
        if journal.errors:
            attempt.status = FileStatus.COLLECTION_ERROR
        how = _describe_exit(interpreter.exit_code, interpreter.signal)
        if timed_out:
            ending = _Ending(
                Outcome.TIMED_OUT,
                FileStatus.TIMED_OUT,
                f"timed out after {self.options.timeout:g}s; gpuci killed the process",
                f"no progress during start-up or collection for {self.options.timeout:g}s",
            )
        elif journal.ended is None and not self.supervisor.stopping.is_set():
            ending = _Ending(
                Outcome.CRASHED,
                FileStatus.CRASHED,
                f"interpreter died while this test ran: {how}",
                f"interpreter died during start-up or collection: {how}",
            )
        elif journal.ended is None:
            ending = _Ending(
                Outcome.NOT_RUN, FileStatus.NOT_RUN, "gpuci was interrupted while this test ran", ""
            )
        else:
            status = int(journal.ended.get("exitstatus", 0))
            ending = _Ending(
                Outcome.FAILED,
                None,
                f"pytest ended the session during this test (exit status {status})",
                "",
                resume=False,
                not_run=f"pytest ended the session first (exit status {status})",
            )
            if interpreter.signal is not None or interpreter.exit_code != status:
                # pytest had finished; the interpreter died on the way out (atexit, CUDA
                # teardown). Every test has its outcome, and the file still crashed.
                attempt.status = FileStatus.CRASHED
                attempt.results.append(
                    self._unit_failure(
                        launch,
                        Outcome.CRASHED,
                        f"interpreter died at exit after pytest finished: {how}",
                        excerpt,
                    )
                )
        if journal.started is not None:
            attempt.results.append(
                TestResult(
                    id=journal.started,
                    file=file_of(journal.started),
                    outcome=ending.outcome,
                    message=ending.message,
                    log=excerpt if ending.outcome in (Outcome.CRASHED, Outcome.TIMED_OUT) else "",
                )
            )
        if journal.collected is None:
            if ending.before_tests:  # it never got as far as running a test
                attempt.results.append(
                    self._unit_failure(launch, ending.outcome, ending.before_tests, excerpt)
                )
            remaining: list[str] = []
        else:
            collected = set(journal.collected)
            attempt.results += [
                _not_run(i, "not collected in this interpreter")
                for i in launch.ids
                if i not in collected
            ]
            remaining = journal.remaining()
        if ending.status is not None:
            attempt.status = ending.status
        progressed = journal.started is not None or bool(journal.finished)
        if ending.resume and progressed:
            attempt.resume = remaining  # a fresh interpreter goes on after the crash
        else:
            attempt.results += [_not_run(i, ending.not_run or ending.message) for i in remaining]
        if attempt.status is FileStatus.PASSED and any(
            r.outcome in NOT_PASSING for r in attempt.results
        ):
            attempt.status = FileStatus.FAILED
        return attempt

    def _unit_failure(
        self, launch: _Launch, outcome: Outcome, message: str, log: str
    ) -> TestResult:
        """A pseudo test for what went wrong outside any test, so no report can miss it."""
        file = launch.key if launch.key != SUITE_UNIT else (launch.ids or (SUITE_UNIT,))[-1]
        return TestResult(
            id=f"{file_of(file)}::{EXIT_ID}",
            file=file_of(file),
            outcome=outcome,
            message=message,
            log=log,
        )

    # --- one scheduled unit: a file, or the whole suite ---------------------------------

    def run_unit(
        self, key: str, ids: tuple[str, ...], slot: int, gpu: str | None
    ) -> tuple[FileRun, list[TestResult]]:
        """Run a file (or the suite) to the end, resuming after crashes and timeouts."""
        junit_dir = self.options.out / "junit"
        stem = self.stem(key)
        targets = (
            tuple(self.target(f) for f in self.discovery.files)
            if key == SUITE_UNIT
            else (self.target(key),)
        )
        results: dict[str, TestResult] = {}
        attempts: list[_Attempt] = []
        todo = ids
        while True:
            number = len(attempts) + 1
            if self.supervisor.stopping.is_set():
                break
            attempt = self.run_interpreter(
                _Launch(
                    key=key,
                    ids=todo,
                    targets=targets
                    if number == 1 or key != SUITE_UNIT
                    else self._suite_targets(todo, targets),
                    slot=slot,
                    gpu=gpu,
                    attempt=number,
                    junit=junit_dir / f"{stem}.part{number}.xml",
                    label=f"interpreter {number}" + (" (resumed)" if number > 1 else ""),
                )
            )
            attempts.append(attempt)
            for result in attempt.results:
                results[result.id] = result
            if not attempt.resume:
                break
            todo = tuple(attempt.resume)
        if self.supervisor.stopping.is_set():
            for test_id in ids:
                results.setdefault(
                    test_id,
                    TestResult(
                        id=test_id,
                        file=file_of(test_id),
                        outcome=Outcome.NOT_RUN,
                        message="gpuci was interrupted before this test ran",
                    ),
                )
        ordered = list(results.values())
        status = _worst(a.status for a in attempts) if attempts else FileStatus.NOT_RUN
        file_run = FileRun(
            file=key,
            status=status,
            slot=slot,
            gpu=gpu,
            start=attempts[0].interpreter.start if attempts else self.now(),
            end=attempts[-1].interpreter.end if attempts else self.now(),
            interpreters=tuple(a.interpreter for a in attempts),
            tests=len(ids),
        )
        if attempts:
            _write_file_junit(junit_dir / f"{stem}.xml", key, attempts, ordered)
        return file_run, ordered

    def _suite_targets(self, todo: tuple[str, ...], targets: tuple[str, ...]) -> tuple[str, ...]:
        """Resumed suite interpreters need only the files that still have tests."""
        left = {file_of(i) for i in todo}
        kept = tuple(self.target(f) for f in self.discovery.files if f in left)
        return kept or targets

    def rerun_alone(self, result: TestResult, gpu: str | None) -> Outcome:
        """Run one test by itself in a fresh interpreter."""
        attempt = self.run_interpreter(
            _Launch(
                key=result.file,
                ids=(result.id,),
                targets=(self.target(result.file),),
                slot=0,
                gpu=gpu,
                attempt=0,
                junit=None,
                label=f"rerun alone: {result.id}",
            )
        )
        for rerun in attempt.results:
            if rerun.id == result.id:
                return rerun.outcome
        return Outcome.NOT_RUN


def _worst(statuses: Iterator[FileStatus] | Sequence[FileStatus]) -> FileStatus:
    order = list(FileStatus)
    return min(statuses, key=order.index)


# --- JUnit ---------------------------------------------------------------------------


def _write_file_junit(
    path: Path, key: str, attempts: list[_Attempt], results: list[TestResult]
) -> None:
    """One JUnit file per scheduled unit: pytest's own where it wrote one, else the journal's."""
    suite = TestSuite(key)
    written: set[str] = set()
    for attempt in attempts:
        cases = _read_part(attempt.junit_part)
        if cases is None:  # the interpreter died before pytest wrote its JUnit
            cases = [
                _case(
                    e["id"],
                    e.get("outcome", "failed"),
                    float(e.get("duration", 0)),
                    str(e.get("message", "")),
                )
                for e in attempt.finished
            ]
        for case in cases:
            suite.append(case)
            written.add(_case_key(case))
        if attempt.junit_part is not None:
            attempt.junit_part.unlink(missing_ok=True)
    for result in results:
        if result.outcome in (Outcome.CRASHED, Outcome.TIMED_OUT, Outcome.NOT_RUN):
            case = _case(result.id, result.outcome.value, result.duration, result.message)
            if _case_key(case) not in written:
                suite.append(case)
    xml = JUnitXml()
    xml.append(suite)  # counts once below: add_testcase would recount per case
    xml.update_statistics()
    path.parent.mkdir(parents=True, exist_ok=True)
    xml.write(str(path))


def _read_part(path: Path | None) -> list[TestCase] | None:
    if path is None or not path.exists() or path.stat().st_size == 0:
        return None
    try:
        xml = JUnitXml.fromfile(str(path))
    except (JUnitXmlError, OSError, SyntaxError, ValueError):
        return None  # malformed: rebuilt from the journal instead
    suites = [xml] if isinstance(xml, TestSuite) else list(xml)
    return [case for suite in suites for case in suite]


def _case_key(case: TestCase) -> str:
    return f"{case.classname}::{case.name}"


def _case(test_id: str, outcome: str, duration: float, message: str) -> TestCase:
    """A JUnit test case named the way pytest names it (classname from the path)."""
    file, _, rest = test_id.partition("::")
    parts = rest.split("::") if rest else [file]
    module = file.removesuffix(".py").replace("/", ".")
    classname = ".".join([module, *parts[:-1]])
    case = TestCase(parts[-1], classname, duration)
    if outcome in (Outcome.SKIPPED.value, Outcome.NOT_RUN.value):
        case.result = [Skipped(message or outcome)]
    elif outcome != Outcome.PASSED.value:
        case.result = [Error(message or outcome, outcome)]
    return case


def write_mode_junit(out: Path, keys: Sequence[str]) -> None:
    """The mode's `junit.xml`: every unit's suite, counts recomputed once."""
    merged = JUnitXml()
    for key in keys:
        path = out / "junit" / f"{SUITE_STEM if key == SUITE_UNIT else key}.xml"
        if path.exists():
            for suite in JUnitXml.fromfile(str(path)):
                merged.append(suite)  # names are unique per file: no merging search
    merged.update_statistics()
    merged.write(str(out / "junit.xml"))


# --- the mode ------------------------------------------------------------------------


def prepare_out(out: Path) -> None:
    """Make the mode directory, replacing an earlier run of the same mode."""
    if out.exists():
        if (
            any(out.iterdir())
            and not (out / "run.json").exists()
            and not (out / "journal").exists()
        ):
            raise UsageError(
                f"{out}: exists and is not a gpuci result directory; choose another --out"
            )
        for name in ("junit", "journal", "logs"):
            shutil.rmtree(out / name, ignore_errors=True)
        for name in ("run.json", "junit.xml"):
            (out / name).unlink(missing_ok=True)
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".gpuci-write-test"
        probe.write_text("", encoding="utf-8")
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"{out}: cannot write results there ({exc.strerror or exc})") from None


def run_mode(
    discovery: Discovery,
    schedule: Schedule,
    options: RunOptions,
    *,
    estimates: Mapping[str, float] | None = None,
    progress: TextIO = sys.stderr,
) -> ModeRun:
    """Run one mode of the schedule, rerun what did not pass, and write its directory."""
    out = options.out
    started_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    zero = time.monotonic()
    runner = _Runner(options, discovery, zero)
    reporter = _Progress(progress, options.mode, schedule, estimates or {}, zero)
    file_runs: dict[str, FileRun] = {}
    results: dict[str, list[TestResult]] = {}

    def run_one(key: str, slot: int) -> None:
        ids = discovery_ids(discovery, key)
        file_run, tests = runner.run_unit(key, ids, slot, schedule.slot_gpus[slot])
        file_runs[key] = file_run
        results[key] = tests
        if not runner.supervisor.stopping.is_set():
            reporter.file_done(file_run, tests)

    try:
        with runner.supervisor.handling_signals():
            if options.mode is Mode.SUITE:
                run_one(SUITE_UNIT, 0)
            else:
                _run_pool(schedule.pool, schedule.workers, run_one, runner.supervisor)
                _run_pool(schedule.serial, 1, run_one, runner.supervisor)
            tests = [t for key in _keys(options.mode, schedule) for t in results.get(key, [])]
            tests = _rerun_suspects(runner, tests, options, schedule, progress)
        interrupted = runner.supervisor.stopping.is_set()
        keys = _keys(options.mode, schedule)
        for key in keys:
            if key not in file_runs:
                file_runs[key] = FileRun(
                    file=key,
                    status=FileStatus.NOT_RUN,
                    slot=0,
                    gpu=None,
                    start=0.0,
                    end=0.0,
                    tests=len(discovery_ids(discovery, key)),
                )
                tests += [
                    TestResult(
                        id=i,
                        file=file_of(i),
                        outcome=Outcome.NOT_RUN,
                        message="gpuci was interrupted before this file ran",
                    )
                    for i in discovery_ids(discovery, key)
                ]
        run = ModeRun(
            mode=options.mode,
            command=options.command,
            pytest_args=options.pytest_args,
            rootdir=str(discovery.rootdir),
            workers=schedule.workers,
            gpus=options.gpus,
            shard=options.shard,
            timeout=options.timeout,
            reruns=options.reruns,
            wall_s=time.monotonic() - zero,
            started_at=started_at,
            interrupted=interrupted,
            environment=describe_environment(os.environ, options.python),
            files=tuple(file_runs[k] for k in keys),
            tests=tuple(tests),
        )
        write_mode_junit(out, [k for k in keys if file_runs[k].interpreters])
        write_json_atomic(out / "run.json", mode_run_to_json(run))
    finally:
        shutil.rmtree(runner.tmp, ignore_errors=True)
    reporter.mode_done(run)
    if interrupted:
        raise Interrupted(f"interrupted; what finished is in {out}")
    return run


def discovery_ids(discovery: Discovery, key: str) -> tuple[str, ...]:
    """The test ids of a scheduled unit."""
    if key == SUITE_UNIT:
        return tuple(i for f in discovery.files for i in discovery.tests.get(f, ()))
    return discovery.tests.get(key, ())


def _keys(mode: Mode, schedule: Schedule) -> list[str]:
    return [SUITE_UNIT] if mode is Mode.SUITE else list(schedule.files)


def _run_pool(
    files: Sequence[str], workers: int, run_one: Callable[[str, int], None], supervisor: _Supervisor
) -> None:
    """Run files in up to `workers` slots; a slot takes the next file as soon as it is free."""
    if not files:
        return
    slots: queue.SimpleQueue[int] = queue.SimpleQueue()
    for slot in range(workers):
        slots.put(slot)

    def in_a_slot(key: str) -> None:
        slot = slots.get()
        try:
            if not supervisor.stopping.is_set():
                run_one(key, slot)
        finally:
            slots.put(slot)

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="gpuci-slot") as pool:
        futures = [pool.submit(in_a_slot, key) for key in files]
        for future in futures:
            while not future.done():  # a timed wait lets Ctrl-C reach the main thread
                with contextlib.suppress(TimeoutError):
                    future.result(timeout=0.5)
            future.result()


def _rerun_suspects(
    runner: _Runner,
    tests: list[TestResult],
    options: RunOptions,
    schedule: Schedule,
    progress: TextIO,
) -> list[TestResult]:
    """Rerun every test that did not pass alone, serially, `reruns` times each."""
    suspects = [
        t for t in tests if t.outcome in NOT_PASSING and not t.id.endswith(EXIT_ID) and "::" in t.id
    ]
    if not suspects or options.reruns == 0:
        return tests
    print(
        f"gpuci: {options.mode.value}: rerunning {len(suspects)} test(s) alone,"
        f" {options.reruns}x each",
        file=progress,
        flush=True,
    )
    gpu = schedule.slot_gpus[0]
    reruns: dict[str, tuple[Outcome, ...]] = {}
    for suspect in suspects:
        outcomes: list[Outcome] = []
        for _ in range(options.reruns):
            if runner.supervisor.stopping.is_set():
                break
            outcomes.append(runner.rerun_alone(suspect, gpu))
        reruns[suspect.id] = tuple(outcomes)
        print(
            f"gpuci:   {printable(suspect.id)}: {suspect.outcome.value},"
            f" alone: {', '.join(o.value for o in outcomes) or '-'}",
            file=progress,
            flush=True,
        )
    return [
        TestResult(
            id=t.id,
            file=t.file,
            outcome=t.outcome,
            duration=t.duration,
            message=t.message,
            reruns=reruns[t.id],
            log=t.log,
        )
        if t.id in reruns
        else t
        for t in tests
    ]


class _Progress:
    """One quiet line per finished file: counts, failures, elapsed time, an estimate."""

    def __init__(
        self,
        out: TextIO,
        mode: Mode,
        schedule: Schedule,
        estimates: Mapping[str, float],
        zero: float,
    ) -> None:
        self.out = out
        self.total = 1 if mode is Mode.SUITE else len(schedule.files) or 1
        self.workers = schedule.workers
        self.estimates = estimates
        self.zero = zero
        self.done = 0
        self.left_s = sum(estimates.get(f, 0.0) for f in schedule.files)
        self.lock = threading.Lock()

    def file_done(self, file_run: FileRun, tests: list[TestResult]) -> None:
        with self.lock:
            self.done += 1
            counts = dict.fromkeys(OUTCOME_WORDS, 0)
            for test in tests:
                counts[test.outcome] += 1
            said = ", ".join(f"{n} {o.value}" for o, n in counts.items() if n) or "no tests"
            elapsed = time.monotonic() - self.zero
            self.left_s -= self.estimates.get(file_run.file, 0.0)
            if self.done >= self.total:
                eta = 0.0
            elif self.estimates and self.left_s > 0:
                eta = self.left_s / self.workers
            else:
                eta = elapsed / self.done * (self.total - self.done) if self.done else 0.0
            flag = "" if file_run.status in (FileStatus.PASSED,) else f" [{file_run.status.value}]"
            width = len(str(self.total))
            print(
                f"gpuci: [{self.done:>{width}}/{self.total}] {printable(file_run.file)}: {said}"
                f" ({file_run.duration:.1f}s){flag}  elapsed {elapsed:.0f}s, ~{eta:.0f}s left",
                file=self.out,
                flush=True,
            )

    def mode_done(self, run: ModeRun) -> None:
        counts = dict.fromkeys(OUTCOME_WORDS, 0)
        for test in run.tests:
            counts[test.outcome] += 1
        said = ", ".join(f"{n} {o.value}" for o, n in counts.items() if n) or "no tests"
        print(f"gpuci: {run.mode.value}: {said} in {run.wall_s:.1f}s", file=self.out, flush=True)
        # the most common skip reasons: a suite that skipped for want of a GPU says so
        reasons = Counter(t.message for t in run.tests if t.outcome is Outcome.SKIPPED)
        for reason, n in reasons.most_common(SKIP_REASONS_SHOWN):
            print(
                f"gpuci:   {n} skipped: {printable(reason) or '(no reason given)'}",
                file=self.out,
                flush=True,
            )


# --- environment ---------------------------------------------------------------------


def detect_gpus(requested: str | None, environ: Mapping[str, str]) -> tuple[str, ...]:
    """GPUs to spread slots over: --gpus, else CUDA_VISIBLE_DEVICES, else NVML or nvidia-smi."""
    if requested is not None:
        gpus = tuple(g.strip() for g in requested.split(","))
        if not all(re.fullmatch(r"\d+|(GPU|MIG)-[\w-]+", g) for g in gpus):
            raise UsageError(f"--gpus {requested!r}: expected GPU indices or UUIDs, e.g. 0,1")
        return gpus
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return tuple(g.strip() for g in visible.split(",") if g.strip())
    with contextlib.suppress(Exception):  # no NVML library or no driver: ask nvidia-smi
        import pynvml  # type: ignore[import-not-found,unused-ignore]

        pynvml.nvmlInit()
        try:
            return tuple(str(i) for i in range(pynvml.nvmlDeviceGetCount()))
        finally:
            pynvml.nvmlShutdown()
    lines = _nvidia_smi(["--query-gpu=index", "--format=csv,noheader"])
    return tuple(line.strip() for line in lines if line.strip().isdigit())


def _nvidia_smi(args: list[str]) -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        proc = subprocess.run(
            ["nvidia-smi", *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return proc.stdout.splitlines() if proc.returncode == 0 else []


def describe_environment(environ: Mapping[str, str], python: str) -> dict[str, str]:
    """GPU, driver, CUDA, CuPy, Python and CI facts for the report."""
    env: dict[str, str] = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "host": platform.node(),
    }
    for name in ("pytest", "cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            env["cupy" if name.startswith("cupy") else name] = importlib.metadata.version(name)
    gpu = _nvidia_smi(["--query-gpu=name,driver_version", "--format=csv,noheader"])
    if gpu:
        names = [line.split(",")[0].strip() for line in gpu]
        env["gpu"] = (
            f"{len(names)} x {names[0]}"
            if len(set(names)) == 1 and len(names) > 1
            else ", ".join(names)
        )
        env["driver"] = gpu[0].split(",")[-1].strip()
        header = "\n".join(_nvidia_smi([]))
        match = re.search(r"CUDA Version:\s*([\d.]+)", header)
        if match:
            env["cuda"] = match.group(1)
    for key, var in (
        ("commit", "CI_COMMIT_SHA"),
        ("branch", "CI_COMMIT_REF_NAME"),
        ("pipeline_url", "CI_PIPELINE_URL"),
        ("job_url", "CI_JOB_URL"),
        ("merge_request", "CI_MERGE_REQUEST_IID"),
    ):
        if environ.get(var):
            env[key] = environ[var]
    if "commit" not in env:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            sha = subprocess.run(
                ["git", "rev-parse", "HEAD"],
                capture_output=True,
                text=True,
                timeout=5,
                check=False,
                stdin=subprocess.DEVNULL,
            ).stdout.strip()
            if sha:
                env["commit"] = sha
    return env
