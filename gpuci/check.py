"""Check: the modes of `gpuci check`, planned from the command line, then the evidence.

`gpuci check` runs its screens at once, in one pool of slots on the same GPUs: the suite
interpreter first, then the parallel files (longest first by an earlier run's times) and
the threads files (where the suite asks for threads: `gpuci.run.modes`). Then isolated,
strict (one at a time), only for the files that did not pass in parallel (the rest
inferred from it; after threads without parallel, every file: a threads pass stands in
for nothing), then the evidence once for the whole check, within a budget that defaults
to what its suspects need (`gpuci.evidence.budget`). `--serial-modes` runs the modes one after
another instead, as gpuci did before the screens.
"""

from __future__ import annotations

import argparse
import os
import shutil
from pathlib import Path

from gpuci.evidence.budget import default_budget
from gpuci.evidence.engine import gather_evidence, rerun_mode_suspects
from gpuci.evidence.results import load_mode_results
from gpuci.evidence.sanitizer import choose_sanitizer
from gpuci.model import InputError, Mode, ModeRun, UsageError
from gpuci.run.discover import Discovery
from gpuci.run.gpus import detect_gpus
from gpuci.run.modes import (
    AskedModes,
    asked_modes,
    choose_modes,
    require_run_parallel,
    runs_or_not,
    threads_from_suite,
)
from gpuci.run.outdir import check_run_id, forget_replaced, new_run_id, replace_earlier
from gpuci.run.plan import files_to_confirm, parse_gpus_per_slot, parse_workers, visible_gpus
from gpuci.run.plan_mode import (
    discover,
    mode_dir_of,
    plan_mode,
    pool_workers,
    run_one_mode,
    say,
    shard_of,
    start_fork_server,
    threads_of,
)
from gpuci.run.resume import check_extra_modes, earlier_run, has_results
from gpuci.run.screens import run_screens

# a lazy isolated pass after these runs only the files that did not pass in them
CONFIRMED_BY = (Mode.PARALLEL, Mode.THREADS)
# ... but only a parallel pass stands in for isolated: a pass in threads does not (fresh
# worker threads see no earlier test's thread-local state; pytest-run-parallel 0.10 passes
# a test that fails by a warning), so threads alone never makes isolated lazy
INFERRED_FROM = Mode.PARALLEL


def run_check(args: argparse.Namespace, asked: AskedModes) -> dict[Mode, ModeRun]:
    """The modes asked for (check_options) or chosen, screened at once or one after another,
    then the evidence; the runs as written."""
    discovery = discover(args)  # once: every mode runs the same collected tests
    modes, why = choose_modes(asked, discovery)
    args.mode_plan = (modes, why)
    threads_from_suite(args, discovery)
    earlier = _resumed_check(args, modes) if args.resume else {}  # refused, nothing touched
    if not args.resume:  # only now: a suite that cannot be collected replaces nothing
        _replace_earlier(args)
    start_fork_server(args, discovery.rootdir, discovery.files, args.paths)
    shown = [*modes, *(m for m in Mode if m not in modes)]
    say("modes: " + "; ".join(f"{m.value} {runs_or_not(m in modes)} ({why[m]})" for m in shown))
    # isolated after parallel runs lazily: only the files that did not pass in the screens
    before = modes[: modes.index(Mode.ISOLATED)] if Mode.ISOLATED in modes else []
    lazy = [m for m in CONFIRMED_BY if m in before] if INFERRED_FROM in before else []
    if args.serial_modes:
        runs, workers = _run_serially(args, modes, lazy, earlier, discovery), 1
    else:
        runs, workers = _run_screened(args, modes, lazy, earlier, discovery)
    forget_replaced(args.out)  # the check has results of its own now
    gather_evidence(
        args.out,
        runs=args.reruns,
        budget_s=_budget(args),
        timeout=args.timeout,
        python=args.python,
        sanitize=args.sanitize,
        workers=workers,
    )
    return runs


def _finished(
    args: argparse.Namespace, modes: list[Mode], earlier: dict[Mode, ModeRun]
) -> dict[Mode, ModeRun]:
    """The modes an interrupted check finished (--resume): kept as they are, and said so."""
    runs: dict[Mode, ModeRun] = {}
    for mode in modes:
        prior = earlier.get(mode)
        if prior is not None and not prior.interrupted:
            say(f"{mode.value}: finished earlier, kept ({mode_dir_of(args, mode)})")
            runs[mode] = prior
    return runs


def _run_serially(
    args: argparse.Namespace,
    modes: list[Mode],
    lazy: list[Mode],
    earlier: dict[Mode, ModeRun],
    discovery: Discovery,
) -> dict[Mode, ModeRun]:
    """--serial-modes: each mode on its own, one after the other, in the order given."""
    runs = _finished(args, modes, earlier)
    for mode in modes:
        if mode in runs:
            continue
        prior = earlier.get(mode)
        if mode is Mode.ISOLATED and lazy:
            runs[mode] = _lazy_isolated(args, discovery, runs, lazy, prior)
        else:
            timed_by = runs.get(Mode.SUITE) if mode is Mode.PARALLEL else None
            runs[mode] = run_one_mode(args, mode, discovery, timed_by=timed_by, resume=prior)
    return runs


def _run_screened(
    args: argparse.Namespace,
    modes: list[Mode],
    lazy: list[Mode],
    earlier: dict[Mode, ModeRun],
    discovery: Discovery,
) -> tuple[dict[Mode, ModeRun], int]:
    """The screens at once in one pool (isolated, strict, before them when it comes first in
    --modes, else lazily after them); the runs, and the pool's slots."""
    runs = _finished(args, modes, earlier)
    if Mode.ISOLATED in modes and not lazy and Mode.ISOLATED not in runs:
        runs[Mode.ISOLATED] = run_one_mode(
            args, Mode.ISOLATED, discovery, resume=earlier.get(Mode.ISOLATED)
        )
    gpus = detect_gpus(args.gpus, os.environ)
    per_slot = parse_gpus_per_slot(args.gpus_per_slot, gpus)
    screened = [m for m in modes if m is not Mode.ISOLATED and m not in runs]
    # parallel's slots, and one more for the suite interpreter, which holds its slot from
    # start to end: the parallel files still run W at a time; never more than the units
    units = sum(1 if m is Mode.SUITE else len(discovery.files) for m in screened)
    workers, _ = pool_workers(parse_workers(args.workers), gpus, per_slot, units)
    if Mode.SUITE in screened and len(screened) > 1:
        workers = min(workers + 1, units)
    screens = [
        plan_mode(args, mode, discovery, resume=earlier.get(mode), pool=workers)[0]
        for mode in screened
    ]
    if screens:
        slot_gpus = visible_gpus(gpus, workers, per_slot)
        runs.update(run_screens(screens, workers=workers, slot_gpus=slot_gpus))
    if Mode.ISOLATED in modes and lazy and Mode.ISOLATED not in runs:
        runs[Mode.ISOLATED] = _lazy_isolated(
            args, discovery, runs, lazy, earlier.get(Mode.ISOLATED)
        )
    return {m: runs[m] for m in modes}, workers


def _lazy_isolated(
    args: argparse.Namespace,
    discovery: Discovery,
    runs: dict[Mode, ModeRun],
    lazy: list[Mode],
    prior: ModeRun | None,
) -> ModeRun:
    """Isolated, strict, for the files that did not pass in `lazy`; the rest inferred."""
    return run_one_mode(
        args,
        Mode.ISOLATED,
        discovery,
        only=files_to_confirm(*(runs[m] for m in lazy)),
        inferred_from=runs[INFERRED_FROM],
        resume=prior,
    )


def explain_results(args: argparse.Namespace) -> None:
    """`gpuci explain`: the evidence of a results directory whose modes ran elsewhere (CI)."""
    sanitize: bool | None = args.sanitize
    choose_sanitizer(sanitize)  # --sanitize without the tool: refused before anything runs
    results = load_mode_results(args.out)
    first = next(iter(results.values())).run
    if not Path(first.rootdir).is_dir():
        raise InputError(
            f"{args.out}: its tests ran in {first.rootdir}, which is not a directory here;"
            " run gpuci explain where the suite is checked out at the same path"
        )
    start_fork_server(args, Path(first.rootdir), [f.file for f in first.files], first.paths)
    budget = _budget(args)
    shutil.rmtree(args.out / "evidence", ignore_errors=True)  # about earlier runs, if any
    gather_evidence(
        args.out,
        runs=args.reruns,
        budget_s=budget,
        timeout=args.timeout if args.timeout is not None else first.timeout,
        python=args.python,
        pytest_args=args.pytest_args or None,
        sanitize=sanitize,
    )


def _budget(args: argparse.Namespace) -> float:
    """--evidence-budget, else what the suspects of OUT's modes need (gpuci.evidence.budget)."""
    if args.evidence_budget is not None:
        given: float = args.evidence_budget
        return given
    estimate = default_budget(load_mode_results(args.out), args.reruns)
    say(estimate.text())
    return estimate.seconds


def _replace_earlier(args: argparse.Namespace) -> None:
    """A fresh check: move OUT's earlier results aside, under a new run id (`args.run_id`)."""
    args.run_id = new_run_id()
    replaced, aside = replace_earlier(args.out, args.run_id)
    args.history = aside if replaced else None  # the earlier check: its files' times
    if replaced:
        say(
            f"replacing the earlier results in {args.out}: {', '.join(replaced)}"
            " (--resume continues an interrupted check instead)"
        )


def _resumed_check(args: argparse.Namespace, modes: list[Mode]) -> dict[Mode, ModeRun]:
    """--resume: the runs of the interrupted check (its run id's, no other's); sets
    `args.run_id` to its id."""
    out: Path = args.out
    run_id = check_run_id(out)
    if run_id is None:
        raise UsageError(
            f"--resume: {out} holds no check that gpuci started (no {out}/.gpuci/check.json);"
            " run without --resume to start one"
        )
    args.run_id = run_id
    check_extra_modes(out, modes)
    found: dict[Mode, ModeRun] = {}
    for mode in modes:
        run = _earlier(args, mode)
        if run is not None and run.run_id != run_id:
            say(
                f"{mode.value}: its results in {mode_dir_of(args, mode)} are another run's"
                f" ({run.run_id or 'no run id'}), not the interrupted check's; running it again"
            )
        elif run is not None:
            found[mode] = run
    return found


def _earlier(args: argparse.Namespace, mode: Mode) -> ModeRun | None:
    return earlier_run(
        mode_dir_of(args, mode),
        paths=args.paths,
        pytest_args=args.pytest_args,
        threads=threads_of(args, mode),
        poison=args.poison,
    )


def run_mode_with_reruns(args: argparse.Namespace, mode: Mode) -> ModeRun:
    """`gpuci run`: one mode, then its own alone-reruns (a CI job has no later evidence)."""
    mode_dir = mode_dir_of(args, mode)
    prior = None
    args.run_id = new_run_id()
    if args.resume:
        prior = _earlier(args, mode)
        if prior is not None and not prior.interrupted:
            say(f"{mode.value}: finished earlier, nothing to resume ({mode_dir})")
            return prior
        if prior is not None:
            args.run_id = prior.run_id or args.run_id  # the run it continues
    elif has_results(mode_dir):
        say(
            f"replacing the earlier {mode.value} results in {mode_dir}"
            " (--resume continues an interrupted run instead)"
        )
    run = run_one_mode(args, mode, resume=prior)
    return rerun_mode_suspects(
        run,
        mode_dir_of(args, mode),
        runs=args.reruns,
        budget_s=args.evidence_budget,
        python=args.python,
    )


def check_options(args: argparse.Namespace, mode: Mode | None = None) -> AskedModes:
    """The modes `gpuci run --mode` (`mode`) or `gpuci check` asks for; what is malformed
    or missing is refused here, before OUT is touched and collection starts."""
    parse_workers(args.workers)
    shard_of(args)
    parse_gpus_per_slot(args.gpus_per_slot, detect_gpus(args.gpus, os.environ))
    if mode is not None:
        if mode is Mode.THREADS:
            require_run_parallel(args.python, "--mode threads")
        return AskedModes(modes=[mode], asker=f"--mode {mode.value}")
    choose_sanitizer(args.sanitize)  # --sanitize without the tool
    return asked_modes(args)
