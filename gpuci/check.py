"""Check: `gpuci check` (and `gpuci run`'s one mode) from the command line, in order.

`gpuci check` runs its screens at once, in one pool of slots on the same GPUs: the suite
interpreter first, then the parallel files (longest first by an earlier run's times) and
the threads files (where pytest-run-parallel is installed). Then isolated, strict (one at a
time), only for the files that did not pass in parallel or threads (the rest is
inferred), then the evidence once for the whole check, within a budget that defaults to
the screens' wall time. `--serial-modes` runs the modes one after another instead, as
gpuci did before the screens: parallel then orders by the suite pass's per-file times.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

from gpuci.discover import Discovery, can_import
from gpuci.evidence import gather_evidence, rerun_mode_suspects
from gpuci.gpus import detect_gpus
from gpuci.model import InputError, Mode, ModeRun, UsageError
from gpuci.plan_mode import (
    discover,
    mode_dir_of,
    plan_mode,
    pool_workers,
    run_one_mode,
    say,
    threads_of,
)
from gpuci.plan import (
    files_to_confirm,
    parse_gpus_per_slot,
    parse_workers,
    visible_gpus,
)
from gpuci.results import load_mode_results
from gpuci.resume import (
    check_extra_modes,
    earlier_results,
    earlier_run,
    has_results,
)
from gpuci.sanitizer import choose_sanitizer
from gpuci.screens import run_screens

DEFAULT_MODES = (Mode.SUITE, Mode.PARALLEL, Mode.THREADS, Mode.ISOLATED)
RUN_PARALLEL = "pytest_run_parallel"  # what runs each test in threads (threads mode)
# a lazy isolated pass after these runs only the files that did not pass in them
CONFIRMED_BY = (Mode.PARALLEL, Mode.THREADS)


def run_check(args: argparse.Namespace) -> dict[Mode, ModeRun]:
    """Every mode of `--modes`, in order, then the evidence; the runs as written."""
    modes = check_modes(args.modes, args.python)
    sanitize: bool | None = getattr(args, "sanitize", None)
    choose_sanitizer(sanitize)  # --sanitize without the tool: refused before anything runs
    # isolated after parallel or threads runs lazily: only the files that did not pass there
    before = modes[: modes.index(Mode.ISOLATED)] if Mode.ISOLATED in modes else []
    lazy = [m for m in CONFIRMED_BY if m in before]
    earlier = _earlier_check(args, modes)  # refused before anything is touched
    discovery = discover(args)  # once: every mode runs the same collected tests
    started = time.monotonic()
    if args.serial_modes:
        runs = _run_serially(args, modes, lazy, earlier, discovery)
        main_s, workers = sum(run.wall_s for run in runs.values()), 1
    else:
        runs, workers = _run_screened(args, modes, lazy, earlier, discovery)
        main_s = time.monotonic() - started
    budget = args.evidence_budget if args.evidence_budget is not None else main_s
    gather_evidence(
        args.out,
        runs=args.reruns,
        budget_s=budget,
        timeout=args.timeout,
        python=args.python,
        sanitize=sanitize,
        workers=workers,
    )
    return runs


def _run_serially(
    args: argparse.Namespace,
    modes: list[Mode],
    lazy: list[Mode],
    earlier: dict[Mode, ModeRun],
    discovery: Discovery,
) -> dict[Mode, ModeRun]:
    """--serial-modes: each mode on its own, one after the other, in the order given."""
    runs: dict[Mode, ModeRun] = {}
    for mode in modes:
        prior = earlier.get(mode)
        if prior is not None and not prior.interrupted:
            say(f"{mode.value}: finished earlier, kept ({mode_dir_of(args, mode)})")
            runs[mode] = prior
        elif mode is Mode.ISOLATED and lazy:
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
    runs: dict[Mode, ModeRun] = {}
    for mode in modes:
        prior = earlier.get(mode)
        if prior is not None and not prior.interrupted:
            say(f"{mode.value}: finished earlier, kept ({mode_dir_of(args, mode)})")
            runs[mode] = prior
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
        inferred_from=runs[lazy[0]],
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
    main_s = sum(r.run.wall_s for r in results.values())
    budget = args.evidence_budget if args.evidence_budget is not None else main_s
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


def _earlier_check(args: argparse.Namespace, modes: list[Mode]) -> dict[Mode, ModeRun]:
    """With --resume, the runs of an interrupted check; without, say what it replaces."""
    out: Path = args.out
    if args.resume:
        check_extra_modes(out, modes)
        found = {m: _earlier(args, m) for m in modes}
        return {m: run for m, run in found.items() if run is not None}
    replaced = earlier_results(out)
    if replaced:
        say(
            f"replacing the earlier results in {out}: {', '.join(replaced)}"
            " (--resume continues an interrupted check instead)"
        )
    for mode in Mode:  # a mode this check does not run would be diffed with it
        if mode not in modes and has_results(out / mode.value):
            shutil.rmtree(out / mode.value, ignore_errors=True)
    for name in ("verdict.json", "report.html", "comment.md"):
        (out / name).unlink(missing_ok=True)
    return {}


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
    if mode is Mode.THREADS:
        require_run_parallel(args.python, "--mode threads")
    mode_dir = mode_dir_of(args, mode)
    prior = None
    if args.resume:
        prior = _earlier(args, mode)
        if prior is not None and not prior.interrupted:
            say(f"{mode.value}: finished earlier, nothing to resume ({mode_dir})")
            return prior
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


def check_modes(text: str | None, python: str) -> list[Mode]:
    """The modes of `--modes`; by default every mode, but threads where `python` cannot
    import pytest-run-parallel."""
    if text is None:
        threads = can_import(python, RUN_PARALLEL)
        return [m for m in DEFAULT_MODES if threads or m is not Mode.THREADS]
    modes = parse_modes(text)
    if Mode.THREADS in modes:
        require_run_parallel(python, f"--modes {text}")
    return modes


def require_run_parallel(python: str, asked: str) -> None:
    """Refuse threads mode, in one line, where `python` cannot import pytest-run-parallel."""
    if not can_import(python, RUN_PARALLEL):
        raise UsageError(
            f"{asked}: threads mode needs pytest-run-parallel, which {python} cannot import;"
            " pip install pytest-run-parallel where the suite runs, or leave threads out"
        )


def parse_modes(text: str) -> list[Mode]:
    """The modes of `--modes`, in the order given."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    valid = [m.value for m in Mode]
    unknown = [m for m in names if m not in valid]
    if unknown or not names or len(set(names)) != len(names):
        raise UsageError(f"--modes {text!r}: choose each at most once from {', '.join(valid)}")
    return [Mode(m) for m in names]
