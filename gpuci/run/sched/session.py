"""Session: what one mode of a schedule ran, and its result directory.

Each unit (a file, or the suite) runs in a fresh interpreter, and after a crash or a
timeout a fresh one resumes with the tests after it (`gpuci.run.sched.unit`); the session
keeps each unit's results, and writes the mode's `run.json`, JUnit and logs to its
directory. `gpuci.run.sched.one_mode` drives one session through the slots; the check's
screens drive several in one pool (`gpuci.run.sched.screens`).
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import time
from pathlib import Path
from typing import Any

from gpuci.formats import mode_run_to_json, write_json_atomic
from gpuci.model import (
    INTERRUPTED,
    NOT_PASSING,
    SUITE_UNIT,
    FileRun,
    FileStatus,
    GpuciError,
    Mode,
    ModeRun,
    Outcome,
    TestResult,
    unit_of,
    whole_suite_unit,
)
from gpuci.run.disk.resume import Earlier
from gpuci.run.proc.discover import Discovery, file_of
from gpuci.run.proc.gpus import describe_environment
from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.junit import write_mode_junit
from gpuci.run.sched.pace import slowed
from gpuci.run.sched.plan import Schedule
from gpuci.run.sched.unit import RunOptions, UnitRunner, discovery_ids, start_interpreters

__all__ = ["Interrupted", "ModeSession", "RunOptions"]

BESIDE_LOG = "beside"  # a file's log from its side-by-side run, kept aside: FILE.beside.log


class Interrupted(GpuciError):
    """Ctrl-C or SIGTERM: what finished was written; exit code 2, as pytest's interrupt."""

    exit_code = 2


class ModeSession:
    """One mode's part of a pass: its interpreters, its units run so far, its directory.

    `run_mode` drives one session on its own; the check's screens drive several in one
    pool (`gpuci.run.sched.screens`), each writing its own directory.
    """

    def __init__(
        self,
        discovery: Discovery,
        schedule: Schedule,
        options: RunOptions,
        *,
        zero: float,
        supervisor: Supervisor,
        inferred_from: ModeRun | None = None,
    ) -> None:
        self.discovery = discovery
        self.schedule = schedule
        self.options = options
        self.inferred_from = inferred_from
        self.started_at = datetime.datetime.now(datetime.timezone.utc).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        )
        self.zero = zero - (options.resume.wall_s if options.resume else 0.0)  # goes on
        self.supervisor = supervisor
        self.interpreters = start_interpreters(options, options.out, self.zero, supervisor)
        self.runner = UnitRunner(self.interpreters, discovery, options.resume, options.gpus)
        self.file_runs: dict[str, FileRun] = {}
        self.results: dict[str, list[TestResult]] = {}
        self.keys = _keys(options.mode, schedule)

    @property
    def mode(self) -> Mode:
        """The mode this session runs."""
        return self.options.mode

    def units(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Its units: those that may run beside others, then those that run alone."""
        unit = unit_of(self.mode)
        if unit is not None:
            return (unit,), ()
        return self.schedule.pool, self.schedule.serial

    def run_unit(self, key: str, slot: int, gpu: str | None) -> tuple[FileRun, list[TestResult]]:
        """Run one unit to the end in `slot`, with `gpu` visible; kept for `finish`."""
        file_run, tests = self.runner.run_unit(key, discovery_ids(self.discovery, key), slot, gpu)
        self.file_runs[key] = file_run
        self.results[key] = tests
        return file_run, tests

    def not_passed_beside(self) -> list[str]:
        """The units run beside others (the schedule's pool, not its serial files) whose
        interpreters ran and left a test (or the file itself, by pytest's exit status) not
        passing."""
        return [
            key
            for key in self.schedule.pool
            if key in self.file_runs
            and self.file_runs[key].interpreters
            and (
                self.file_runs[key].status is not FileStatus.PASSED
                or any(t.outcome in NOT_PASSING | {Outcome.NOT_RUN} for t in self.results[key])
            )
        ]

    def forget(self, key: str) -> None:
        """Forget how `key` ran, before it runs again afresh: its results, what an
        interrupted run left of it (--resume), its journal and JUnit; its log is kept aside
        (`logs/FILE.beside.log`), out of the way of the next run's."""
        self.file_runs.pop(key, None)
        self.results.pop(key, None)
        if self.runner.earlier is not None:
            self.runner.earlier.files.pop(key, None)
            self.runner.earlier.tests.pop(key, None)
        out = self.options.out
        for part in (f"journal/{key}.jsonl", f"junit/{key}.xml"):
            (out / part).unlink(missing_ok=True)
        log = out / "logs" / f"{key}.log"
        if log.exists():
            log.replace(log.with_name(f"{log.stem}.{BESIDE_LOG}.log"))

    def start_ahead(self, key: str, slot: int, gpu: str | None) -> None:
        """Start `key`'s first interpreter now, for `run_unit` in `slot` to take."""
        self.runner.start_ahead(key, slot, gpu)

    def held(self, key: str) -> bool:
        """Whether an interpreter started before this mode began waits for `key` (the
        screens started it for the isolated pass, `gpuci.lazy_isolated.IsolatedAhead`)."""
        return not whole_suite_unit(key) and self.runner.held(key)

    def finish(self, beside: tuple[Mode, ...] = ()) -> ModeRun:
        """The mode's run from its units, written to its directory (run.json, JUnit)."""
        file_runs, keys, options = dict(self.file_runs), list(self.keys), self.options
        tests = [t for key in keys for t in self.results.get(key, [])]
        for key in keys:
            if key not in file_runs:  # interrupted before it started
                file_runs[key], left = _never_started(self.discovery, key, self.runner.earlier)
                tests += left
        if self.inferred_from is not None:
            gpu = self.schedule.slot_gpus[0]
            runs, more = _inferred(self.inferred_from, self.discovery, set(keys), gpu)
            file_runs.update((f.file, f) for f in runs)
            keys += [f.file for f in runs]
            tests += more
        ends = [f.end for f in self.file_runs.values()]
        run = ModeRun(
            mode=options.mode,
            command=options.command,
            pytest_args=options.pytest_args,
            threads=options.threads,
            poison=options.poison,
            randomly_seed=options.randomly_seed,
            shuffle_seed=options.shuffle_seed,
            rootdir=str(self.discovery.rootdir),
            workdir=str(Path.cwd()),
            workers=self.schedule.workers,
            gpus=options.gpus,
            gpus_per_slot=options.gpus_per_slot,
            shard=options.shard,
            timeout=options.timeout,
            reruns=options.reruns,
            # beside other modes, its wall ends with its last unit, not with the pool; it
            # starts with the suite interpreter held since before the mode's clock
            wall_s=(max(ends) if beside and ends else time.monotonic() - self.zero)
            - min((0.0, *(f.start for f in self.file_runs.values()))),
            started_at=self.started_at,
            interrupted=self.supervisor.stopping.is_set(),
            environment=describe_environment(os.environ, options.python),
            files=tuple(file_runs[k] for k in keys),
            tests=tuple(tests),
            paths=options.paths,
            resumed=options.resume is not None,
            gpu_check=self.interpreters.strangers.method,
            beside=beside,
            run_id=options.run_id,
            settings=options.settings,
            pace=self._pace(tests, file_runs),
        )
        write_mode_junit(options.out, [k for k in keys if file_runs[k].interpreters])
        write_json_atomic(options.out / "run.json", mode_run_to_json(run))
        return run

    def _pace(self, tests: list[TestResult], file_runs: dict[str, FileRun]) -> dict[str, Any]:
        """The suite's pace against its earlier one (`gpuci.run.sched.pace`); {} elsewhere."""
        if self.options.pace is None:
            return {}
        ran = file_runs.get(SUITE_UNIT)
        return slowed(self.options.pace, tests, ran.interpreters if ran is not None else ())

    def close(self) -> None:
        """Remove its interpreters' scratch files."""
        self.interpreters.close()


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


def _keys(mode: Mode, schedule: Schedule) -> list[str]:
    unit = unit_of(mode)
    return [unit] if unit is not None else list(schedule.files)
