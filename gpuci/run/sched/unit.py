"""Unit: one scheduled unit (a file, or the whole suite) run to the end in fresh interpreters.

After a crash or a timeout a fresh interpreter resumes with the tests after it; after an
interrupted run (--resume) the tests it finished are kept and the rest run.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.model import (
    INTERRUPTED,
    SUITE_UNIT,
    FileRun,
    FileStatus,
    Mode,
    ModeRun,
    Outcome,
    TestResult,
    whole_suite_unit,
)
from gpuci.run.disk.resume import Earlier
from gpuci.run.disk.side_outputs import plain_junit, seed_args, selects_by_cache
from gpuci.run.proc.discover import POISON_ENV, Discovery, child_env, file_of, pytest_target
from gpuci.run.proc.gpumem import MemoryGate
from gpuci.run.proc.held import held_file_slot
from gpuci.run.proc.ids import match_ids
from gpuci.run.proc.interpreter import Interpreters
from gpuci.run.proc.journal import collection_error, not_run
from gpuci.run.proc.launch import Attempt, Launch, junit_part, unit_stem
from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.junit import kept_junit, write_file_junit
from gpuci.run.sched.pace import PlainPace
from gpuci.run.sched.plan import thread_args
from gpuci.run.sched.views import wanting_gpus, window_env

# the suite interpreter is the plain run the check replaces; isolated the reference outcome
STEADY_MODES = (Mode.SUITE, Mode.ISOLATED)
# a test discovery collected that the interpreters of its file did not
UNCOLLECTED = "not run: collected in discovery, not by this mode's interpreter of its file"
SCREEN_NICE = 5  # parallel and threads interpreters yield the CPU to the suite interpreter


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
    peaks: Mapping[str, int] = field(default_factory=dict)  # MiB per file, an earlier run
    randomly_seed: int | None = None  # the plain run's pytest-randomly seed: every other's
    shuffle_seed: int | None = None  # the shuffled mode's seed of its file order
    pace: PlainPace | None = None  # the suite's: its earlier seconds per file


def start_interpreters(
    options: RunOptions, out: Path, clock_zero: float, supervisor: Supervisor
) -> Interpreters:
    """The interpreter launcher of a mode: its pytest arguments, timeout and environment."""
    return Interpreters(
        out=out,
        python=options.python,
        pytest_args=mode_pytest_args(options),
        timeout=options.timeout,
        environ=mode_environ(options),
        clock_zero=clock_zero,
        supervisor=supervisor,
        gate=MemoryGate(options.peaks),  # a file starts once its GPU has room for it
        # the suite interpreter beside them is the floor of a check's cost: it gets the CPU
        nice=0 if options.mode in STEADY_MODES else SCREEN_NICE,
    )


def mode_environ(options: RunOptions) -> dict[str, str]:
    """The environment every interpreter of a mode starts from."""
    environ = child_env(os.environ)
    environ["GPUCI_MODE"] = options.mode.value
    if options.poison:
        environ[POISON_ENV] = "1"
    return environ


def mode_pytest_args(options: RunOptions) -> tuple[str, ...]:
    """The pytest arguments every interpreter of a mode gets: the user's; in every mode but
    the suite's (the plain run, which drew it), the plain run's pytest-randomly seed."""
    seed = () if options.mode is Mode.SUITE else seed_args(options.randomly_seed)
    return options.pytest_args + seed + thread_args(options.threads)


class UnitRunner:
    """Runs one scheduled unit (a file, or the whole suite) to the end."""

    def __init__(
        self,
        interpreters: Interpreters,
        discovery: Discovery,
        resume: ModeRun | None = None,
        gpus: Sequence[str] = (),
    ) -> None:
        self.interpreters = interpreters
        self.discovery = discovery
        self.gpus = tuple(gpus)  # every GPU the check uses: what the plain run sees
        self.earlier = Earlier.of(resume) if resume is not None else None  # --resume
        self.plain_junit = plain_junit(interpreters.pytest_args)  # the suite's is the user's
        # a screen runs its files, unless pytest's cache chose the tests (--lf): only the
        # suite interpreter reads it, and the others run its choice (`side_outputs`)
        self.by_ids = selects_by_cache(interpreters.pytest_args)

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
        stem = unit_stem(key)
        kept = earlier.finished(key) if earlier is not None else []
        results: dict[str, TestResult] = {t.id: t for t in kept}
        kept_cases = kept_junit(junit_dir / f"{stem}.xml", results) if kept else []
        attempts: list[Attempt] = []
        todo = tuple(i for i in ids if i not in results)
        while todo or not kept:  # once at least, unless --resume left nothing to run
            number = len(attempts) + 1
            if self.interpreters.supervisor.stopping.is_set():
                break
            first = number == 1 and not kept
            attempt = self.interpreters.run(
                self._first_launch(key, slot, gpu)
                if first
                else self._resumed_launch(key, todo, slot, gpu, number)
            )
            as_known(attempt, ids if first else todo)
            attempts.append(attempt)
            # a failure for want of a GPU this slot did not see is not this slot's outcome
            for result in wanting_gpus(attempt.results, gpu, self.gpus):
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
        elif attempts:
            # the files ran, not a list of ids: a test discovery collected that no
            # interpreter here collected (the suite's own hooks decided so) did not run
            for test_id in ids:
                results.setdefault(test_id, not_run(test_id, UNCOLLECTED))
        if whole_suite_unit(key):
            results.update((f, collection_error(f, self.discovery.errors[f])) for f in broken)
        ordered = list(results.values())
        if kept:  # in the order of an uninterrupted run
            place = {test_id: n for n, test_id in enumerate(ids)}
            ordered.sort(key=lambda t: place.get(t.id, len(place)))
        file_run = self._file_run(key, len(ids), slot, gpu, attempts)
        if attempts:
            path, plain = junit_dir / f"{stem}.xml", self.plain_junit
            write_file_junit(path, key, attempts, ordered, kept=kept_cases, plain=plain)
        return file_run, ordered

    def start_ahead(self, key: str, slot: int, gpu: str | None) -> None:
        """Start the first interpreter of `key` now, held after its collection, for
        `run_unit` to take when `slot` frees (not after --resume, nor for a broken folder,
        nor where one waits for it already: started beside discovery, or for the isolated
        pass during the screens)."""
        if self.earlier is not None or key in self.discovery.broken_dirs or whole_suite_unit(key):
            return
        if not self.held(key):
            self.interpreters.start_ahead(self._first_launch(key, slot, gpu))

    def held(self, key: str) -> bool:
        """Whether an interpreter started before this mode began waits for the file `key`
        (beside discovery, or for the isolated pass during the screens)."""
        return held_file_slot((self.target(key),)) is not None

    def _targets(self, key: str) -> tuple[str, ...]:
        """What pytest is handed for a unit: its file, or every file of the suite in the
        unit's order (discovery's: collection order, reversed or shuffled for those modes)."""
        if not whole_suite_unit(key):
            return (self.target(key),)
        broken = self.discovery.broken_dirs
        return tuple(self.target(f) for f in self.discovery.files if f not in broken)

    def _first_launch(self, key: str, slot: int, gpu: str | None) -> Launch:
        """A unit's first interpreter: its files with the user's arguments, as plain pytest
        would run them (no list of ids). A whole suite in another order than the plain
        run's is handed its files in that order and keeps the plain run's tests (where
        PATHS named single tests, its files hold more)."""
        stem = unit_stem(key)
        by_ids = key != SUITE_UNIT and (self.by_ids or whole_suite_unit(key))
        return Launch(
            key=key,
            ids=discovery_ids(self.discovery, key) if by_ids else None,
            targets=self._targets(key),
            slot=slot,
            gpu=gpu,
            env=self._window_env(gpu),
            attempt=1,
            junit=junit_part(self.interpreters.out, stem, 1),
            label="interpreter 1",
            # the suite interpreter may be the one started beside discovery
            # (`gpuci.run.proc.held`): the user's command on PATHS, which ends where pytest,
            # handed a directory whose conftest.py is broken, ends (the plain run)
            held=key == SUITE_UNIT,
        )

    def _resumed_launch(
        self, key: str, todo: tuple[str, ...], slot: int, gpu: str | None, number: int
    ) -> Launch:
        """An interpreter after a crash or a timeout, or after --resume: the tests left."""
        targets = self._targets(key)
        stem = unit_stem(key)
        return Launch(
            key=key,
            ids=todo,
            targets=self._suite_targets(todo, targets) if whole_suite_unit(key) else targets,
            slot=slot,
            gpu=gpu,
            env=self._window_env(gpu),
            attempt=number,
            junit=junit_part(self.interpreters.out, stem, number),
            label=f"interpreter {number}" + (" (resumed)" if number > 1 else ""),
        )

    def _window_env(self, gpu: str | None) -> dict[str, str]:
        """A slot narrower than the check's GPUs skips CuPy's multi-GPU tests (`window_env`)."""
        return window_env(gpu, self.gpus, self.interpreters.environ)

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


def discovery_ids(discovery: Discovery, key: str) -> tuple[str, ...]:
    """The test ids of a scheduled unit."""
    if whole_suite_unit(key):
        return tuple(i for f in discovery.files for i in discovery.tests.get(f, ()))
    return discovery.tests.get(key, ())


def as_known(attempt: Attempt, known: Sequence[str]) -> None:
    """Name `attempt`'s results and the tests it left to resume by the ids discovery
    collected, where its interpreter computed an id differently (a parameter made at
    import: `gpuci.run.proc.ids`); the rest stay as reported."""
    matched = match_ids([*(r.id for r in attempt.results), *attempt.resume], known)
    if matched:
        attempt.results = [
            dataclasses.replace(r, id=matched[r.id]) if r.id in matched else r
            for r in attempt.results
        ]
        attempt.resume = [matched.get(i, i) for i in attempt.resume]


def _worst(statuses: Iterator[FileStatus] | Sequence[FileStatus]) -> FileStatus:
    order = list(FileStatus)
    return min(statuses, key=order.index)
