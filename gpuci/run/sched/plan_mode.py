"""Modes: one mode planned from the command line (its files, order, slots and GPUs) and run.

The shared body of `gpuci run` and of each pass of `gpuci check`: what to order files by
(--durations, an earlier run in OUT, or the check's suite pass; a file none of them timed
by its number of tests), the shard, the workers, the mode's directory; `plan_mode` stops
before running, so that the check can run several modes at once as screens.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from dataclasses import replace
from pathlib import Path

from gpuci.model import WHOLE_SUITE_MODES, GpuciError, Mode, ModeRun
from gpuci.run.disk.outdir import prepare_out
from gpuci.run.disk.resume import given_paths, was_interrupted
from gpuci.run.proc.discover import Discovery, discover_tests, discovered
from gpuci.run.proc.gpumem import earlier_peaks, screen_peaks
from gpuci.run.proc.gpus import detect_gpus
from gpuci.run.proc.held import held_collection
from gpuci.run.sched.modes import files_in_order, mode_settings, order_label
from gpuci.run.sched.one_mode import run_mode
from gpuci.run.sched.options import ModeOptions
from gpuci.run.sched.pace import earlier_pace
from gpuci.run.sched.plan import (
    Schedule,
    choose_workers,
    cpu_count,
    estimate_durations,
    parse_gpus_per_slot,
    parse_shard,
    parse_workers,
    plan_schedule,
    read_durations,
    shard_files,
    shard_from_env,
)
from gpuci.run.sched.progress import say as say_on
from gpuci.run.sched.screens import Screen
from gpuci.run.sched.session import RunOptions
from gpuci.run.sched.source_tests import weigh_collected
from gpuci.run.sched.views import describe_views


def threads_of(options: ModeOptions, mode: Mode) -> int | None:
    """How many threads each test of `mode` runs in: --threads in threads mode, else None."""
    return options.threads if mode is Mode.THREADS else None


def shard_of(options: ModeOptions) -> tuple[int, int] | None:

    return parse_shard(options.shard) if options.shard else shard_from_env(os.environ)


def mode_dir_of(options: ModeOptions, mode: Mode) -> Path:
    shard = shard_of(options)
    mode_dir = options.out / mode.value
    return mode_dir / f"shard-{shard[0]}-of-{shard[1]}" if shard else mode_dir


def history_of(options: ModeOptions) -> Path:
    """Where an earlier run's results are: what a fresh check moved aside, else OUT."""
    return options.history if options.history is not None else options.out


def _durations(
    options: ModeOptions, mode: Mode, discovery: Discovery, timed_by: ModeRun | None
) -> tuple[dict[str, float], bool]:
    """What to order files by: --durations, else an earlier run in OUT, else this check's
    suite pass (its tests' times per file), else nothing (each file's number of tests
    stands in: `estimate_durations`); and whether they include interpreter start-up (only
    an earlier run's file times do).

    Isolated never reads its own OUT: a sharded isolated run that read its sibling shards'
    results would plan differently from them.
    """

    if options.durations is not None:
        return read_durations(options.durations, mode), True
    if mode is not Mode.ISOLATED:
        # its own earlier times first (a file in threads runs longer than alone), then
        # parallel's; a lazy isolated pass ran only a few files: most of them, or none
        own = (mode,) if mode is Mode.THREADS else ()
        for earlier in (*own, Mode.PARALLEL, Mode.ISOLATED):
            directory = history_of(options) / earlier.value
            if (directory / "run.json").exists() or any(directory.glob("shard-*/run.json")):
                with contextlib.suppress(GpuciError):  # unreadable: order by the proxy
                    durations = read_durations(directory)
                    if 2 * len(durations.keys() & set(discovery.files)) >= len(discovery.files):
                        return durations, True
    if timed_by is not None:
        # Without start-up, but what longest-first needs: a file that compiles for 10 s
        # with 2 tests is long here, where its number of tests would call it short.
        per_file: dict[str, float] = {}
        for test in timed_by.tests:
            per_file[test.file] = per_file.get(test.file, 0.0) + test.duration
        if per_file:
            return per_file, False
    return {}, True


def run_one_mode(
    options: ModeOptions,
    mode: Mode,
    discovery: Discovery | None = None,
    *,
    only: set[str] | None = None,
    inferred_from: ModeRun | None = None,
    timed_by: ModeRun | None = None,
    resume: ModeRun | None = None,
    beside: bool = False,
    alone_first: frozenset[str] = frozenset(),
) -> ModeRun:
    """Discover, plan and run one mode; the shared body of `run` and `check`. `beside`
    (the check's lazy isolated pass): its files side by side, a failure confirmed alone,
    but `alone_first`, which run alone from the start (they will likely fail)."""
    screen, with_startup = plan_mode(
        options,
        mode,
        discovery,
        only=only,
        inferred_from=inferred_from,
        timed_by=timed_by,
        resume=resume,
        beside=beside,
        alone_first=alone_first,
    )
    return run_mode(
        screen.discovery,
        screen.schedule,
        screen.options,
        estimates=screen.estimates,
        with_startup=with_startup,
        inferred_from=inferred_from,
        confirm_alone=beside,
    )


def plan_mode(  # -- each step needs the one before: files, order, slots, views, directory
    options: ModeOptions,
    mode: Mode,
    discovery: Discovery | None = None,
    *,
    only: set[str] | None = None,
    inferred_from: ModeRun | None = None,
    timed_by: ModeRun | None = None,
    resume: ModeRun | None = None,
    pool: tuple[str | None, ...] | None = None,  # the screens' slots: each one's GPUs
    beside: bool = False,  # isolated side by side: the check's slots, the serial view
    alone_first: frozenset[str] = frozenset(),  # ... but these one at a time, from the start
    slot: int = 0,  # a whole suite's slot of its own in `pool` (reversed beside the suite)
) -> tuple[Screen, bool]:
    """Plan one mode (a screen in a pool of `pool` slots), and prepare its directory."""
    requested_workers = parse_workers(options.workers)
    shard = shard_of(options)
    mode_dir = mode_dir_of(options, mode)
    gpus = detect_gpus(options.gpus, os.environ)
    per_slot = parse_gpus_per_slot(options.gpus_per_slot, gpus)
    if discovery is None:
        discovery = discover(options)
    durations, with_startup = _durations(options, mode, discovery, timed_by)
    files = list(discovery.files)
    # parametrized tests count each: what a file's length goes by where no time is known;
    # one estimate per file, fitted on every file, for the shards, the order and the progress
    counts = {f: len(discovery.tests.get(f, ())) for f in files}
    weights = file_weights(mode, discovery, counts, durations, sharded=shard is not None)
    estimates = estimate_durations(files, durations, weights)
    if shard:
        files = shard_files(files, estimates, *shard)
    # the files asked for, in a latent order's order (reversed, shuffled), else as they are
    files = files_in_order(
        mode, [f for f in files if only is None or f in only], options.shuffle_seed
    )
    workers, why = (1, "one at a time")
    if mode is Mode.PARALLEL:
        workers, why = pool_workers(requested_workers, gpus, per_slot, len(files))
    if pool is not None:
        workers, why = len(pool), f"the screens' {len(pool)} slots, shared"
    threads = threads_of(options, mode)
    why += f", each test in {threads} threads" if threads else ""
    schedule = plan_schedule(
        files,
        mode=mode,
        durations=estimates,
        serial=discovery.serial,
        workers=workers,
        gpus=gpus,
        gpus_per_slot=per_slot,
    )
    if beside:
        alone = discovery.serial | alone_first
        schedule, why = _side_by_side(schedule, alone, requested_workers, gpus, per_slot)
    whole = mode in WHOLE_SUITE_MODES
    if pool is not None:  # every screen's units take the pool's slots and their GPUs
        views, workers = (pool[slot : slot + 1], 1) if whole else (pool, len(pool))
        schedule = replace(schedule, workers=workers, slot_gpus=views)
    prepare_out(mode_dir, keep=resume is not None)
    if inferred_from is None:  # about old runs (a lazy pass's check's are new: evidence.early)
        shutil.rmtree(options.out / "evidence", ignore_errors=True)
    if whole:
        discovery = _restrict(discovery, files)
    tests = sum(len(discovery.tests.get(f, ())) for f in files)
    where = f"shard {shard[0]}/{shard[1]}, " if shard else ""
    gpu_text = describe_views(schedule.slot_gpus) if gpus else "no GPU pinning"
    lazy = _order_text(mode, options.shuffle_seed)
    lazy += f" (the rest inferred from {inferred_from.mode.value})" if inferred_from else ""
    kept = (
        sum(1 for t in resume.tests if not t.inferred and not was_interrupted(t)) if resume else 0
    )
    resuming = f", resuming: {kept} finished earlier" if resume else ""
    say(
        f"{mode.value}: {where}{len(files)} files{lazy}, {tests} tests{resuming}, workers {why},"
        f" {gpu_text} -> {mode_dir}"
    )
    planned = run_options(
        options, mode, out=mode_dir, shard=shard, gpus=gpus, per_slot=per_slot, resume=resume
    )
    planned = replace(planned, randomly_seed=discovery.randomly_seed)
    if beside:  # the gate goes by this check's screens' peaks first, an earlier run's after
        planned = replace(planned, peaks={**planned.peaks, **screen_peaks(options.out)})
    # seconds only where some were measured (else numbers of tests): the progress's estimates
    seconds = {f: estimates[f] for f in files if f in estimates} if durations else {}
    screen = Screen(
        discovery=discovery,
        schedule=schedule,
        options=planned,
        estimates=seconds,
        weights=weights,
    )
    return screen, with_startup


def file_weights(
    mode: Mode,
    discovery: Discovery,
    counts: dict[str, int],
    durations: dict[str, float],
    *,
    sharded: bool,
) -> dict[str, int]:
    """Each file's weight, in tests: its collected tests (`counts`), each case of one that
    compiles a kernel counted as many, where the order of its files goes by weight
    (parallel, threads) and some file has no time yet
    (`gpuci.run.sched.source_tests.weigh_collected`). Not a shard's: every shard must plan
    alike, and what the source says within its read budget may differ between machines."""
    if sharded or mode not in (Mode.PARALLEL, Mode.THREADS) or durations.keys() >= counts.keys():
        return counts
    return weigh_collected(discovery.rootdir, {f: discovery.tests.get(f, ()) for f in counts})


def _side_by_side(
    schedule: Schedule,
    serial: frozenset[str],
    requested: int | None,
    gpus: tuple[str, ...],
    per_slot: int | None,
) -> tuple[Schedule, str]:
    """Isolated's files side by side, as many at once as the parallel screen (admitted by
    device memory), every slot seeing every GPU as plain pytest and the strict runs do; a
    file of `serial` (gpu_serial, as in parallel, or likely to fail) one at a time after the
    others, once. The schedule, and why."""
    workers, why = pool_workers(requested, gpus, per_slot, len(schedule.pool))
    planned = replace(
        schedule,
        pool=tuple(f for f in schedule.pool if f not in serial),
        serial=tuple(f for f in schedule.pool if f in serial),
        workers=workers,
        slot_gpus=schedule.slot_gpus * workers,
    )
    return planned, f"{workers} side by side ({why}), admitted by device memory"


def run_options(
    options: ModeOptions,
    mode: Mode,
    *,
    out: Path,
    shard: tuple[int, int] | None,
    gpus: tuple[str, ...],
    per_slot: int | None,
    resume: ModeRun | None,
) -> RunOptions:
    """What the command line asks of this mode's interpreters, as planned, for run.json."""
    return RunOptions(
        mode=mode,
        out=out,
        pytest_args=options.pytest_args,
        threads=threads_of(options, mode),
        timeout=options.timeout,
        reruns=options.reruns,
        python=options.python,
        command=("gpuci", *sys.argv[1:]) if sys.argv[1:] else ("gpuci",),
        shard=shard,
        gpus=gpus,
        gpus_per_slot=per_slot,
        paths=given_paths(options.paths),
        poison=options.poison,
        resume=resume,
        run_id=options.run_id,
        settings=mode_settings(options.settings, options.mode_plan, mode),
        peaks=earlier_peaks(options.durations, history_of(options)),
        randomly_seed=options.randomly_seed,
        shuffle_seed=options.shuffle_seed if mode is Mode.SHUFFLED else None,
        pace=earlier_pace(options.durations, history_of(options)) if mode is Mode.SUITE else None,
    )


def pool_workers(
    requested: int | None, gpus: tuple[str, ...], per_slot: int | None, files: int
) -> tuple[int, str]:
    """The parallel mode's slots (and the screens' pool): --workers, or from CPUs and GPUs."""
    slots = len(gpus) // per_slot if per_slot else len(gpus)
    return choose_workers(requested, cpus=cpu_count(), gpus=slots, files=files)


def say(text: str, *, level: int = 0) -> None:
    """A line of the check's progress on stderr, where the verbosity shows `level`."""
    say_on(sys.stderr, text, level=level)


def discover(options: ModeOptions) -> Discovery:
    """pytest's collection of PATHS, with the suite's own configuration; notes what it left.
    Where pytest itself ended the session there (`CollectionEnded`), or deselected every
    test (a `UsageError`), plain pytest runs none and ends red: so does this, at once."""
    timeout = max(options.timeout or 0, 600)
    # the held suite interpreter's collection where there is one (it started first, fresh)
    held = held_collection(timeout)
    discovery = (
        discovered(options.paths, held)
        if held is not None
        else discover_tests(
            options.paths,
            options.pytest_args,
            python=options.python,
            timeout=timeout,
        )
    )
    for file in discovery.deselected:
        say(f"{file}: every test deselected by the pytest arguments; not run")
    return discovery


def _restrict(discovery: Discovery, files: list[str]) -> Discovery:
    """The discovery of a whole suite's interpreter: only the shard's files, in the order
    it runs them (collection order, reversed, shuffled)."""
    keep = set(discovery.files)
    return replace(discovery, files=tuple(f for f in files if f in keep))


def _order_text(mode: Mode, seed: int | None) -> str:
    """What the plan line says of a latent order."""
    if mode is Mode.REVERSED:
        return " in reverse collection order"
    if mode is Mode.SHUFFLED:
        return f" shuffled by seed {seed} ({order_label(mode, seed)})"
    return ""
