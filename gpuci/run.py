"""Run: one mode of a schedule in fresh interpreters, and its result directory.

A pool of slots takes the schedule's files one by one (one slot but in `parallel`); each
file runs in a fresh interpreter, and after a crash or a timeout a fresh one resumes with
the tests after it. The mode's `run.json`, JUnit and logs are written to its directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import queue
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from gpuci.discover import POISON_ENV, Discovery, child_env, file_of, pytest_target
from gpuci.formats import mode_run_to_json, write_json_atomic
from gpuci.gpumem import MemoryGate
from gpuci.gpus import describe_environment
from gpuci.interpreter import SUITE_STEM, Attempt, Interpreters, Launch
from gpuci.journal import collection_error
from gpuci.junit import kept_junit, write_file_junit, write_mode_junit
from gpuci.model import (
    INTERRUPTED,
    SUITE_UNIT,
    FileRun,
    FileStatus,
    GpuciError,
    Mode,
    ModeRun,
    Outcome,
    TestResult,
)
from gpuci.plan import Schedule, thread_args
from gpuci.progress import Progress
from gpuci.resume import Earlier
from gpuci.supervisor import Supervisor


class Interrupted(GpuciError):
    """Ctrl-C or SIGTERM: what finished was written; exit code 130."""

    exit_code = 130


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """What `gpuci run` was asked to do, for one mode."""

    mode: Mode
    out: Path  # the mode's directory: OUT/<mode> or OUT/<mode>/shard-I-of-N
    pytest_args: tuple[str, ...] = ()
    threads: int | None = None  # threads mode: each test in N threads
    poison: bool = False  # fill every fresh device allocation in every interpreter
    timeout: float | None = None
    reruns: int = 2
    python: str = sys.executable
    command: tuple[str, ...] = ()
    shard: tuple[int, int] | None = None
    gpus: tuple[str, ...] = ()
    gpus_per_slot: int | None = None
    paths: tuple[str, ...] = ()  # PATHS as given, absolute
    resume: ModeRun | None = None  # an interrupted run of this mode to continue (--resume)
    run_id: str = ""  # the check's (or this run's): recorded in run.json
    settings: dict[str, Any] = field(default_factory=dict)  # run.json's effective settings
    peaks: Mapping[str, int] = dataclasses.field(default_factory=dict)  # MiB, earlier run


def start_interpreters(
    options: RunOptions, out: Path, clock_zero: float, supervisor: Supervisor
) -> Interpreters:
    """The interpreter launcher of a mode: its pytest arguments, timeout and environment."""
    environ = child_env(os.environ)
    environ["GPUCI_MODE"] = options.mode.value
    if options.poison:
        environ[POISON_ENV] = "1"
    return Interpreters(
        out=out,
        python=options.python,
        pytest_args=options.pytest_args + thread_args(options.threads),
        timeout=options.timeout,
        environ=environ,
        clock_zero=clock_zero,
        supervisor=supervisor,
        gate=MemoryGate(options.peaks),  # a file starts once its GPU has room for it
    )


class _UnitRunner:
    """Runs one scheduled unit (a file, or the whole suite) to the end."""

    def __init__(
        self, interpreters: Interpreters, discovery: Discovery, resume: ModeRun | None = None
    ) -> None:
        self.interpreters = interpreters
        self.discovery = discovery
        self.earlier = Earlier.of(resume) if resume is not None else None  # --resume

    def target(self, file: str) -> str:
        """The path pytest is given for a file."""
        return pytest_target(self.discovery.rootdir, file)

    def run_unit(
        self,
        key: str,
        ids: tuple[str, ...],
        slot: int,
        gpu: str | None,
    ) -> tuple[FileRun, list[TestResult]]:
        """Run a file (or the suite) to the end, resuming after crashes and timeouts.

        After an interrupted run (--resume), the tests it finished are kept, the rest run.
        """
        broken = self.discovery.broken_dirs
        if key in broken:  # nothing pytest could be handed: discovery's error stands
            now = self.interpreters.now()
            error = collection_error(key, self.discovery.errors[key])
            status = FileStatus.COLLECTION_ERROR
            return FileRun(file=key, status=status, slot=slot, gpu=gpu, start=now, end=now), [error]
        earlier = self.earlier
        junit_dir = self.interpreters.out / "junit"
        stem = SUITE_STEM if key == SUITE_UNIT else key
        targets = (
            tuple(self.target(f) for f in self.discovery.files if f not in broken)
            if key == SUITE_UNIT
            else (self.target(key),)
        )
        kept = earlier.finished(key) if earlier is not None else []
        results: dict[str, TestResult] = {t.id: t for t in kept}
        kept_cases = kept_junit(junit_dir / f"{stem}.xml", results) if kept else []
        attempts: list[Attempt] = []
        todo = tuple(i for i in ids if i not in results)
        while todo or not kept:  # once at least, unless --resume left nothing to run
            number = len(attempts) + 1
            if self.interpreters.supervisor.stopping.is_set():
                break
            attempt = self.interpreters.run(
                Launch(
                    key=key,
                    ids=todo,
                    targets=targets
                    if (number == 1 and not kept) or key != SUITE_UNIT
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
        if self.interpreters.supervisor.stopping.is_set():
            for test_id in ids:
                results.setdefault(
                    test_id,
                    TestResult(
                        id=test_id,
                        file=file_of(test_id),
                        outcome=Outcome.NOT_RUN,
                        message=f"{INTERRUPTED} before this test ran",
                    ),
                )
        if key == SUITE_UNIT:
            results.update((f, collection_error(f, self.discovery.errors[f])) for f in broken)
        ordered = list(results.values())
        if kept:  # in the order of an uninterrupted run
            place = {test_id: n for n, test_id in enumerate(ids)}
            ordered.sort(key=lambda t: place.get(t.id, len(place)))
        file_run = self._file_run(key, len(ids), slot, gpu, attempts)
        if attempts:
            write_file_junit(junit_dir / f"{stem}.xml", key, attempts, ordered, kept=kept_cases)
        return file_run, ordered

    def _file_run(
        self, key: str, tests: int, slot: int, gpu: str | None, attempts: list[Attempt]
    ) -> FileRun:
        """The unit's run from its attempts, after what an interrupted run did (--resume)."""
        before = self.earlier.files.get(key) if self.earlier is not None else None
        if before is not None and not before.interpreters:
            before = None  # it never started: nothing of it to keep
        statuses = [a.status for a in attempts] + ([before.status] if before else [])
        now = self.interpreters.now()
        return FileRun(
            file=key,
            status=_worst(statuses) if statuses else FileStatus.NOT_RUN,
            slot=slot,
            gpu=gpu,
            start=before.start if before else attempts[0].interpreter.start if attempts else now,
            end=attempts[-1].interpreter.end if attempts else before.end if before else now,
            interpreters=(before.interpreters if before else ())
            + tuple(a.interpreter for a in attempts),
            tests=tests,
            leftovers=(before.leftovers if before else ())
            + tuple(x for a in attempts for x in a.leftovers),
            strangers=(before.strangers if before else ())
            + tuple(x for a in attempts for x in a.strangers),
        )

    def _suite_targets(self, todo: tuple[str, ...], targets: tuple[str, ...]) -> tuple[str, ...]:
        """Resumed suite interpreters need only the files that still have tests."""
        left = {file_of(i) for i in todo}
        kept = tuple(self.target(f) for f in self.discovery.files if f in left)
        return kept or targets


def _worst(statuses: Iterator[FileStatus] | Sequence[FileStatus]) -> FileStatus:
    order = list(FileStatus)
    return min(statuses, key=order.index)


def run_mode(
    discovery: Discovery,
    schedule: Schedule,
    options: RunOptions,
    *,
    estimates: Mapping[str, float] | None = None,
    progress: TextIO = sys.stderr,
    inferred_from: ModeRun | None = None,
) -> ModeRun:
    """Run one mode of the schedule and write its directory; with `inferred_from` (a lazy
    isolated pass), the files the schedule leaves out take that run's outcomes, inferred."""
    out = options.out
    started_at = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    zero = time.monotonic() - (options.resume.wall_s if options.resume else 0.0)  # goes on
    supervisor = Supervisor()
    interpreters = start_interpreters(options, out, zero, supervisor)
    runner = _UnitRunner(interpreters, discovery, options.resume)
    reporter = Progress(progress, options.mode, schedule, estimates or {}, zero)
    file_runs: dict[str, FileRun] = {}
    results: dict[str, list[TestResult]] = {}
    keys = _keys(options.mode, schedule)

    def run_one(key: str, slot: int) -> None:
        ids = discovery_ids(discovery, key)
        file_run, tests = runner.run_unit(key, ids, slot, schedule.slot_gpus[slot])
        file_runs[key] = file_run
        results[key] = tests
        if not supervisor.stopping.is_set():
            reporter.file_done(file_run, tests)

    try:
        with supervisor.handling_signals():
            if options.mode is Mode.SUITE:
                run_one(SUITE_UNIT, 0)
            else:
                _run_pool(schedule.pool, schedule.workers, run_one, supervisor)
                _run_pool(schedule.serial, 1, run_one, supervisor)
            tests = [t for key in keys for t in results.get(key, [])]
        interrupted = supervisor.stopping.is_set()
        for key in keys:
            if key not in file_runs:  # interrupted before it started
                file_runs[key], left = _never_started(discovery, key, runner.earlier)
                tests += left
        if inferred_from is not None:
            runs, more = _inferred(inferred_from, discovery, set(keys), schedule.slot_gpus[0])
            file_runs.update((f.file, f) for f in runs)
            keys += [f.file for f in runs]
            tests += more
        run = ModeRun(
            mode=options.mode,
            run_id=options.run_id,
            command=options.command,
            pytest_args=options.pytest_args,
            threads=options.threads,
            poison=options.poison,
            settings=options.settings,
            rootdir=str(discovery.rootdir),
            workers=schedule.workers,
            gpus=options.gpus,
            gpus_per_slot=options.gpus_per_slot,
            shard=options.shard,
            timeout=options.timeout,
            reruns=options.reruns,
            wall_s=time.monotonic() - zero,
            started_at=started_at,
            interrupted=interrupted,
            environment=describe_environment(os.environ, options.python),
            files=tuple(file_runs[k] for k in keys),
            tests=tuple(tests),
            paths=options.paths,
            resumed=options.resume is not None,
            gpu_check=interpreters.strangers.method,
        )
        write_mode_junit(out, [k for k in keys if file_runs[k].interpreters])
        write_json_atomic(out / "run.json", mode_run_to_json(run))
    finally:
        interpreters.close()
    reporter.mode_done(run)
    if interrupted:
        raise Interrupted(f"interrupted; what finished is in {out}")
    return run


def _inferred(
    source: ModeRun, discovery: Discovery, ran: set[str], gpu: str | None
) -> tuple[list[FileRun], list[TestResult]]:
    """The files this mode did not run, with `source`'s outcomes, marked inferred."""
    wanted = [f for f in discovery.files if f not in ran]
    by_file = {f.file: f for f in source.files}
    runs = [
        FileRun(
            file=f,
            status=by_file[f].status,
            slot=0,
            gpu=gpu,
            start=0.0,
            end=by_file[f].duration,  # its duration in `source`: what later plans order by
            tests=by_file[f].tests,
            inferred=True,
        )
        for f in wanted
        if f in by_file
    ]
    files = {f.file for f in runs}
    tests = [
        dataclasses.replace(t, inferred=True, reruns=(), cut="")
        for t in source.tests
        if t.file in files
    ]
    return runs, tests


def _never_started(
    discovery: Discovery, key: str, earlier: Earlier | None
) -> tuple[FileRun, list[TestResult]]:
    """A unit gpuci was interrupted before: its tests not-run, or as `earlier` left them."""
    if earlier is not None and key in earlier.files:
        return earlier.files[key], earlier.tests.get(key, [])
    ids = discovery_ids(discovery, key)
    file_run = FileRun(
        file=key, status=FileStatus.NOT_RUN, slot=0, gpu=None, start=0.0, end=0.0, tests=len(ids)
    )
    message = f"{INTERRUPTED} before this file ran"
    return file_run, [
        TestResult(id=i, file=file_of(i), outcome=Outcome.NOT_RUN, message=message) for i in ids
    ]


def discovery_ids(discovery: Discovery, key: str) -> tuple[str, ...]:
    """The test ids of a scheduled unit."""
    if key == SUITE_UNIT:
        return tuple(i for f in discovery.files for i in discovery.tests.get(f, ()))
    return discovery.tests.get(key, ())


def _keys(mode: Mode, schedule: Schedule) -> list[str]:
    return [SUITE_UNIT] if mode is Mode.SUITE else list(schedule.files)


def _run_pool(
    files: Sequence[str], workers: int, run_one: Callable[[str, int], None], supervisor: Supervisor
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
