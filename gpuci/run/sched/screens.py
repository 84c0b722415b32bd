"""Screens: a check's main passes run at once, in one pool of slots on the same GPUs.

The suite interpreter starts first (it is the longest unit) and holds slot 0 to its end;
the parallel files and the threads files share the other slots, longest first (and long
where the suite interpreter found them long, `gpuci.run.sched.learning`); files marked
gpu_serial run last, one at a time, with nothing beside them. Each mode still
writes its own directory (run.json, JUnit, journals, logs), and its run.json names the
modes that ran beside it (`beside`): what failed there failed under the check's combined
load, and only a strict run (evidence) may call it a finding.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TextIO

from gpuci.model import WHOLE_SUITE_MODES, FileRun, Mode, ModeRun, unit_of
from gpuci.run.proc.deadline import hang_limit_of
from gpuci.run.proc.discover import Discovery, pytest_target
from gpuci.run.proc.held import held_file_slot, hold_for_later
from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.learning import LearnedOrder, SuiteClock
from gpuci.run.sched.pace import PlainPace, behind, slots_beside
from gpuci.run.sched.plan import Schedule, cpu_count
from gpuci.run.sched.pool import ahead_count, run_beside, run_slots, same_gpus, wait_for
from gpuci.run.sched.progress import Progress
from gpuci.run.sched.session import Interrupted, ModeSession, RunOptions

# the order screens fill the pool: the longest units (the whole suite, in each order) first
SCREEN_ORDER = (*WHOLE_SUITE_MODES, Mode.PARALLEL, Mode.THREADS, Mode.ISOLATED)


@dataclass(frozen=True, slots=True, kw_only=True)
class Screen:
    """One mode's part of the screens: what `run_mode` would be handed for it alone."""

    discovery: Discovery
    schedule: Schedule
    options: RunOptions
    estimates: Mapping[str, float] = field(default_factory=dict)  # seconds per file, if known
    # tests per file, a kernel compile counted as many (`plan_mode`): what orders the files
    # no time is known for
    weights: Mapping[str, int] = field(default_factory=dict)


Job = tuple[Mode, str]  # a screen's mode and one of its units (a file, or the suite)


def screen_jobs(sessions: Mapping[Mode, ModeSession]) -> tuple[list[Job], list[Job]]:
    """The pool's units in the order they start, then the units that run alone."""
    pool: list[Job] = []
    alone: list[Job] = []
    for mode in sorted(sessions, key=SCREEN_ORDER.index):
        shared, serial = sessions[mode].units()
        pool += [(mode, key) for key in shared]
        alone += [(mode, key) for key in serial]
    return pool, alone


def run_by_mode(
    jobs: Sequence[Job],
    slots: int,
    run_one: Callable[[Job, int], None],
    supervisor: Supervisor,
    *,
    first_slot: int = 0,
    choose: Callable[[Sequence[Job]], Job] | None = None,
    ahead: Callable[[Job, int], None] | None = None,
    depth: int = 1,
    alike: Callable[[int, int], bool] = lambda a, b: True,
    early: Sequence[tuple[Job, int]] = (),
    admit: Callable[[int], int] | None = None,
) -> None:
    """Each mode's files in an equal share of the slots, the modes beside each other: the
    parallel files run W at a time whether or not the threads files run beside them; each
    keeps its share of `depth` files started ahead (and its `early` ones), and of the slots
    `admit` allows."""
    modes = list(dict.fromkeys(mode for mode, _ in jobs))
    if len(modes) <= 1:
        run_slots(
            jobs,
            slots,
            run_one,
            supervisor,
            first_slot=first_slot,
            choose=choose,
            ahead=ahead,
            depth=depth,
            alike=alike,
            early=early,
            admit=admit,
        )
        return
    share = max(1, slots // len(modes))
    with ThreadPoolExecutor(max_workers=len(modes), thread_name_prefix="gpuci-screen") as pool:
        wait_for(
            [
                pool.submit(
                    run_slots,
                    [j for j in jobs if j[0] is mode],
                    share,
                    run_one,
                    supervisor,
                    first_slot=first_slot + k * share,
                    choose=choose,
                    ahead=ahead,
                    depth=max(1, depth // len(modes)),  # the cores left idle, shared too
                    alike=alike,
                    early=[(j, slot) for j, slot in early if j[0] is mode],
                    admit=admit,
                )
                for k, mode in enumerate(modes)
            ]
        )


def suite_clock(sessions: Mapping[Mode, ModeSession]) -> SuiteClock | None:
    """The suite interpreter's clock, fed by its journal; None where no suite screen runs."""
    if Mode.SUITE not in sessions:
        return None
    clock = SuiteClock()
    sessions[Mode.SUITE].interpreters.on_events = clock.observe
    return clock


def suite_admission(
    pace: PlainPace | None, clock: SuiteClock | None, counts: Mapping[str, int]
) -> Callable[[int], int] | None:
    """How many of a screen's slots may run files beside the suite interpreter now: fewer
    while it runs behind its earlier `pace` (`gpuci.run.sched.pace`) over the tests it
    finished (of `counts` per file), all once it ended; None where there is no pace to run
    behind."""
    if clock is None or pace is None:
        return None

    def admit(slots: int) -> int:
        if clock.ended:
            return slots
        return slots_beside(slots, behind(pace, clock.progress(counts)))

    return admit


def learned_orders(
    screens: Sequence[Screen], sessions: Mapping[Mode, ModeSession], clock: SuiteClock | None
) -> dict[Mode, LearnedOrder]:
    """Beside the suite interpreter, each other screen's order, learning from its journal
    which files are long (`gpuci.run.sched.learning`), and how long a test it passed may
    take elsewhere before it counts as hung (`gpuci.run.proc.deadline`)."""
    if clock is None:
        return {}
    suite = sessions[Mode.SUITE]
    orders: dict[Mode, LearnedOrder] = {}
    for screen in screens:
        mode = screen.options.mode
        if mode is not Mode.SUITE:
            # a test the suite interpreter passed quickly is not waited on for the timeout
            sessions[mode].interpreters.hang_limit = hang_limit_of(clock.took, os.environ)
        if mode not in WHOLE_SUITE_MODES:
            counts = {f: len(screen.discovery.tests.get(f, ())) for f in screen.schedule.files}
            orders[mode] = LearnedOrder(
                screen.schedule.pool,
                screen.estimates,
                counts,
                clock,
                weights=screen.weights,
                pace=suite.options.pace,
                suite_order=suite.discovery.files,
                peaks=screen.options.peaks,
            )
    return orders


def started_beside_discovery(
    sessions: Mapping[Mode, ModeSession],
    jobs: Sequence[Job],
    workers: int,
    order: LearnedOrder | None = None,
) -> list[tuple[Job, int]]:
    """The parallel files whose interpreters started beside discovery
    (`gpuci.run.sched.beside`), each with the slot it was started for: the pool's slots
    take them as files started ahead. Only the files the plan starts first: a guess made
    before collection (a first check's, from the source) that the plan does not start at
    once waits its turn, so that a first check starts the files a second would; the files
    the parallel screen's `order` would choose first, where it has one."""
    if Mode.PARALLEL not in sessions:
        return []
    planned = list(sessions[Mode.PARALLEL].schedule.pool)
    slots = file_slots(sessions, workers)
    first = set(first_choices(order, planned, slots) if order else planned[:slots])
    found = []
    for job in jobs:
        mode, key = job
        if mode is Mode.PARALLEL:
            targets = (pytest_target(sessions[mode].discovery.rootdir, key),)
            slot = held_file_slot(targets)
            if slot is not None and key in first:
                found.append((job, slot))
            elif slot is not None:
                hold_for_later(targets)
    return found


def first_choices(order: LearnedOrder, planned: Sequence[str], slots: int) -> list[str]:
    """The files `order` chooses for the first `slots` slots, one after the other."""
    remaining, chosen = list(planned), list[str]()
    while remaining and len(chosen) < slots:
        chosen.append(order.choose(remaining))
        remaining.remove(chosen[-1])
    return chosen


def file_slots(sessions: Mapping[Mode, ModeSession], workers: int) -> int:
    """The slots each screen of files gets (`_run_jobs`, `run_by_mode`): the pool's, less
    one for each whole suite, shared equally among the screens of files."""
    whole = sum(1 for mode in sessions if mode in WHOLE_SUITE_MODES)
    files = sum(1 for mode in sessions if mode not in WHOLE_SUITE_MODES)
    return max(1, (workers - whole) // max(1, files))


def choosing(orders: Mapping[Mode, LearnedOrder]) -> Callable[[Sequence[Job]], Job]:
    """The pool's choice of the next job of one mode's files: its learned order's."""

    def choose(jobs: Sequence[Job]) -> Job:
        mode = jobs[0][0]
        if mode not in orders:
            return jobs[0]
        return mode, orders[mode].choose([key for _, key in jobs])

    return choose


def _estimates(screens: Sequence[Screen]) -> dict[str, float]:
    """Each unit's estimate, keyed as the progress names it (`mode unit`)."""
    found: dict[str, float] = {}
    for screen in screens:
        mode = screen.options.mode
        if not screen.estimates:
            continue
        unit = unit_of(mode)
        if unit is not None:  # the suite's files, one after the other
            total = sum(screen.estimates.get(f, 0.0) for f in screen.schedule.files)
            found[f"{mode.value} {unit}"] = total
        else:
            for file in screen.schedule.files:
                if file in screen.estimates:
                    found[f"{mode.value} {file}"] = screen.estimates[file]
    return found


def _run_jobs(
    pool: Sequence[Job],
    alone: Sequence[Job],
    *,
    workers: int,
    run_one: Callable[[Job, int], None],
    supervisor: Supervisor,
    choose: Callable[[Sequence[Job]], Job],
    start_ahead: Callable[[Job, int], None],
    slot_gpus: Sequence[str | None],
    early: Sequence[tuple[Job, int]] = (),
    admit: Callable[[int], int] | None = None,
) -> None:
    """The suite interpreter in slot 0 from start to end (and each other order of the whole
    suite in the next slot, `reversed`, `shuffled`), the other screens' files in the rest,
    started ahead where a slot sees the same GPUs (the `early` ones beside discovery, each
    by the slot it names); then the files that run alone."""

    by_mode = functools.partial(
        run_by_mode,
        run_one=run_one,
        supervisor=supervisor,
        ahead=start_ahead,
        depth=ahead_count(workers, cpu_count()),
        alike=same_gpus(slot_gpus),
        early=early,
    )
    whole = [j for j in pool if j[0] in WHOLE_SUITE_MODES]
    rest = [j for j in pool if j not in whole]

    def beside_the_rest(held: int) -> None:
        """Each whole suite holds a slot of its own from start to end (slot 0 the suite's);
        the rest share the slots after them."""
        if held < len(whole):
            run_beside(whole[held], held, run_one, lambda: beside_the_rest(held + 1))
        elif held:  # beside the whole suites: as many slots as the suite's pace leaves
            by_mode(rest, workers - held, first_slot=held, choose=choose, admit=admit)
        else:
            by_mode(rest, workers)

    beside_the_rest(0)
    run_slots(alone, 1, run_one, supervisor, ahead=start_ahead)


def run_screens(
    screens: Sequence[Screen],
    *,
    workers: int,
    slot_gpus: Sequence[str | None],
    progress: TextIO = sys.stderr,
    file_done: Callable[[Mode, FileRun], None] | None = None,
) -> dict[Mode, ModeRun]:
    """Run every screen's units in one pool of `workers` slots; each mode's run, written
    (`file_done` told of each file as it ends)."""
    supervisor = Supervisor()
    zero = time.monotonic()
    sessions: dict[Mode, ModeSession] = {}
    try:
        for screen in screens:
            sessions[screen.options.mode] = ModeSession(
                screen.discovery,
                screen.schedule,
                screen.options,
                zero=zero,
                supervisor=supervisor,
            )
        pool, alone = screen_jobs(sessions)
        units = [f"{mode.value} {key}" for mode, key in pool + alone]
        estimates = _estimates(screens)
        clock = suite_clock(sessions)
        orders = learned_orders(screens, sessions, clock)
        suite = sessions.get(Mode.SUITE)
        admit = None
        if suite is not None:  # its tests per file: how far into a file its journal is
            counts = {f: len(ids) for f, ids in suite.discovery.tests.items()}
            admit = suite_admission(suite.options.pace, clock, counts)
        # estimates come from an earlier run's file times (start-up included) or are none
        reporter = Progress(progress, units, workers, estimates, zero)

        def run_one(job: Job, slot: int) -> None:
            mode, key = job
            file_run, tests = sessions[mode].run_unit(key, slot, slot_gpus[slot])
            if mode in orders:
                orders[mode].finished(key, file_run.duration)
            if not supervisor.stopping.is_set():
                unit = f"{mode.value} {key}"
                reporter.file_done(file_run, tests, unit=unit, label=mode.value)
                if file_done is not None:
                    file_done(mode, file_run)

        with supervisor.handling_signals():
            _run_jobs(
                pool,
                alone,
                workers=workers,
                run_one=run_one,
                supervisor=supervisor,
                choose=choosing(orders),
                start_ahead=lambda job, slot: sessions[job[0]].start_ahead(
                    job[1], slot, slot_gpus[slot]
                ),
                slot_gpus=slot_gpus,
                early=started_beside_discovery(sessions, pool, workers, orders.get(Mode.PARALLEL)),
                admit=admit,
            )
        modes = tuple(sessions)
        runs = {
            mode: session.finish(beside=tuple(m for m in modes if m is not mode))
            for mode, session in sessions.items()
        }
    finally:
        for session in sessions.values():
            session.close()
    for run in runs.values():
        reporter.mode_done(run)
    if supervisor.stopping.is_set():
        where = ", ".join(str(s.options.out) for s in screens)
        raise Interrupted(f"interrupted; what finished is in {where}")
    return runs
