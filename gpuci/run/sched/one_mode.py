"""One mode run on its own (`gpuci run`, a check's lazy isolated pass): its session's
units through the slots, side by side and one at a time, each kind's first ones started
while the other runs; with `confirm_alone`, a unit that did not pass beside others runs
again alone, and that run is its own.
"""

from __future__ import annotations

import functools
import sys
import time
from collections.abc import Callable, Mapping
from typing import TextIO

from gpuci.model import ModeRun
from gpuci.run.proc.discover import Discovery
from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.plan import Schedule, cpu_count
from gpuci.run.sched.pool import ahead_count, run_slots, same_gpus
from gpuci.run.sched.progress import Progress, say
from gpuci.run.sched.session import Interrupted, ModeSession
from gpuci.run.sched.unit import RunOptions


def run_mode(
    discovery: Discovery,
    schedule: Schedule,
    options: RunOptions,
    *,
    estimates: Mapping[str, float] | None = None,
    with_startup: bool = True,
    progress: TextIO = sys.stderr,
    inferred_from: ModeRun | None = None,
    confirm_alone: bool = False,
) -> ModeRun:
    """Run one mode of the schedule and write its directory; with `inferred_from` (a lazy
    isolated pass), the files the schedule leaves out take that run's outcomes, inferred.
    `with_startup`: whether `estimates` include interpreter start-up (an earlier run's file
    times do; tests' own times do not). With `confirm_alone` (files run side by side), a
    file that did not pass runs again alone, and that run is the file's."""
    supervisor = Supervisor()
    session = ModeSession(
        discovery,
        schedule,
        options,
        zero=time.monotonic(),
        supervisor=supervisor,
        inferred_from=inferred_from,
    )
    reporter = Progress.for_mode(
        progress, options.mode, schedule, estimates or {}, session.zero, with_startup=with_startup
    )

    def run_one(key: str, slot: int) -> None:
        file_run, tests = session.run_unit(key, slot, schedule.slot_gpus[slot])
        if not supervisor.stopping.is_set():
            reporter.file_done(file_run, tests)

    try:
        with supervisor.handling_signals():
            _run_units(session, run_one)
            if confirm_alone and not supervisor.stopping.is_set():
                _again_alone(session, reporter, run_one)
        run = session.finish()
    finally:
        session.close()
    reporter.mode_done(run)
    if run.interrupted:
        raise Interrupted(f"interrupted; what finished is in {options.out}")
    return run


def _run_units(session: ModeSession, run_one: Callable[[str, int], None]) -> None:
    """The session's side-by-side units in its slots and its one-at-a-time units in turn.
    Whichever kind goes second collects while the first runs (an isolated pass's side-by-side
    files, then its likely failing ones: on the H100 the first of those started cold after
    them, 3 s). The one-at-a-time files go first, those the screens started for the
    isolated pass first of all, where the first side-by-side file was not started (on the
    H100 gpu_polluted's only side-by-side file, which failed in threads alone and ended that
    screen late, started cold: 3 s)."""
    schedule, supervisor = session.schedule, session.supervisor
    pool, serial = session.units()
    ahead = functools.partial(_start_ahead, session, schedule)
    held = [key for key in serial if session.held(key)]
    both = bool(pool and serial)
    serial_first = both and bool(held) and not session.held(pool[0])
    if serial_first:  # those held first: the next ones start while they run
        serial = (*held, *(key for key in serial if key not in held))

    def side_by_side(early: list[tuple[str, int]]) -> None:
        run_slots(
            pool,
            schedule.workers,
            run_one,
            supervisor,
            ahead=ahead,
            depth=ahead_count(schedule.workers, cpu_count()),
            alike=same_gpus(schedule.slot_gpus),
            early=early,
        )

    def one_at_a_time(early: list[tuple[str, int]]) -> None:
        # the next files collect meanwhile (a short file hides no start-up)
        depth = ahead_count(1, cpu_count())
        run_slots(serial, 1, run_one, supervisor, ahead=ahead, depth=depth, early=early)

    # the first units of the kind that goes second, started now (`run_slots`' early ones)
    if not both:
        early: list[tuple[str, int]] = []
    elif serial_first:
        early = [(key, slot) for slot, key in enumerate(pool[: schedule.workers])]
    else:
        early = [(key, 0) for key in serial[: ahead_count(1, cpu_count())]]
    for key, slot in early:
        ahead(key, slot)
    if serial_first:
        one_at_a_time([])
        side_by_side(early)
    else:
        side_by_side([])
        one_at_a_time(early)


def _again_alone(
    session: ModeSession, reporter: Progress, run_one: Callable[[str, int], None]
) -> None:
    """The files that did not pass beside others, again: one at a time, fresh, each with no
    other test running (the next one started ahead and held after its collection, as a
    one-at-a-time isolated run does); each one's strict run replaces its side-by-side run
    (a pass under combined load answers "passes"; a failure counts once confirmed alone)."""
    again = session.not_passed_beside()
    if not again:
        return
    say(
        reporter.out,
        f"{session.mode.value}: {len(again)} file(s) did not pass beside others:"
        " again alone, one at a time",
    )
    for key in again:
        session.forget(key)
    reporter.add(len(again))
    ahead = functools.partial(_start_ahead, session, session.schedule)
    depth = ahead_count(1, cpu_count())
    run_slots(again, 1, run_one, session.supervisor, ahead=ahead, depth=depth)


def _start_ahead(session: ModeSession, schedule: Schedule, key: str, slot: int) -> None:
    session.start_ahead(key, slot, schedule.slot_gpus[slot])
