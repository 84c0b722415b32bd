"""Check: the modes of `gpuci run` and `gpuci check` planned from the command line, in order.

`gpuci check` runs suite, then parallel ordered longest first by the suite's per-file
times, then threads (where the suite asks for it: `gpuci.modes`), then isolated only for the
files that did not pass in parallel or threads (the rest inferred from parallel; after
threads without parallel, every file: a threads pass stands in for nothing), then gathers the
evidence once for the whole check, within a budget that defaults to what its suspects
need (`gpuci.budget`).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuci.budget import default_budget
from gpuci.discover import Discovery, child_env, discover_tests
from gpuci.evidence import gather_evidence, rerun_mode_suspects
from gpuci.forkserver import current as current_fork_server
from gpuci.forkserver import serve as serve_forks
from gpuci.gpumem import earlier_peaks
from gpuci.gpus import detect_gpus
from gpuci.model import GpuciError, InputError, Mode, ModeRun, UsageError, printable
from gpuci.modes import (
    AskedModes,
    asked_modes,
    choose_modes,
    mode_settings,
    require_run_parallel,
    runs_or_not,
    threads_from_suite,
)
from gpuci.outdir import check_run_id, forget_replaced, new_run_id, prepare_out, replace_earlier
from gpuci.plan import (
    choose_workers,
    cpu_count,
    files_to_confirm,
    parse_gpus_per_slot,
    parse_shard,
    parse_workers,
    plan_schedule,
    read_durations,
    shard_files,
    shard_from_env,
)
from gpuci.preloads import parse_preload
from gpuci.results import load_mode_results
from gpuci.resume import (
    check_extra_modes,
    earlier_run,
    given_paths,
    has_results,
    was_interrupted,
)
from gpuci.run import RunOptions, run_mode
from gpuci.sanitizer import choose_sanitizer

# a lazy isolated pass after these runs only the files that did not pass in them
CONFIRMED_BY = (Mode.PARALLEL, Mode.THREADS)
# ... but only a parallel pass stands in for isolated: a pass in threads does not (fresh
# worker threads see no earlier test's thread-local state; pytest-run-parallel 0.10 passes
# a test that fails by a warning), so threads alone never makes isolated lazy
INFERRED_FROM = Mode.PARALLEL


def run_check(args: argparse.Namespace, asked: AskedModes) -> dict[Mode, ModeRun]:
    """The modes asked for (from check_options) or chosen, in order, then the evidence."""
    sanitize: bool | None = args.sanitize
    discovery = discover(args)  # once: every mode runs the same collected tests
    modes, why = choose_modes(asked, discovery)
    args.mode_plan = (modes, why)
    threads_from_suite(args, discovery)
    earlier = _resumed_check(args, modes) if args.resume else {}  # refused, nothing touched
    if not args.resume:  # only now: a suite that cannot be collected replaces nothing
        _replace_earlier(args)
    start_fork_server(args, discovery.rootdir, discovery.files, args.paths)
    shown = [*modes, *(m for m in Mode if m not in modes)]
    _say("modes: " + "; ".join(f"{m.value} {runs_or_not(m in modes)} ({why[m]})" for m in shown))
    # isolated after parallel or threads runs lazily: only the files that did not pass there
    before = modes[: modes.index(Mode.ISOLATED)] if Mode.ISOLATED in modes else []
    lazy = [m for m in CONFIRMED_BY if m in before] if INFERRED_FROM in before else []
    runs: dict[Mode, ModeRun] = {}
    for mode in modes:
        prior = earlier.get(mode)
        if prior is not None and not prior.interrupted:
            _say(f"{mode.value}: finished earlier, kept ({_mode_dir(args, mode)})")
            runs[mode] = prior
        elif mode is Mode.ISOLATED and lazy:
            runs[mode] = run_one_mode(
                args,
                mode,
                discovery,
                only=files_to_confirm(*(runs[m] for m in lazy)),
                inferred_from=runs[INFERRED_FROM],
                resume=prior,
            )
        else:
            timed_by = runs.get(Mode.SUITE) if mode is Mode.PARALLEL else None
            runs[mode] = run_one_mode(args, mode, discovery, timed_by=timed_by, resume=prior)
    forget_replaced(args.out)  # the check has results of its own now
    budget = _budget(args)
    gather_evidence(
        args.out,
        runs=args.reruns,
        budget_s=budget,
        timeout=args.timeout,
        python=args.python,
        sanitize=sanitize,
    )
    return runs


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
    """--evidence-budget, else what the suspects of OUT's modes need (gpuci.budget)."""
    if args.evidence_budget is not None:
        given: float = args.evidence_budget
        return given
    estimate = default_budget(load_mode_results(args.out), args.reruns)
    _say(estimate.text())
    return estimate.seconds


def _replace_earlier(args: argparse.Namespace) -> None:
    """A fresh check: move OUT's earlier results aside, under a new run id (`args.run_id`)."""
    args.run_id = new_run_id()
    replaced = replace_earlier(args.out, args.run_id)
    if replaced:
        _say(
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
            _say(
                f"{mode.value}: its results in {_mode_dir(args, mode)} are another run's"
                f" ({run.run_id or 'no run id'}), not the interrupted check's; running it again"
            )
        elif run is not None:
            found[mode] = run
    return found


def _earlier(args: argparse.Namespace, mode: Mode) -> ModeRun | None:
    return earlier_run(
        _mode_dir(args, mode),
        paths=args.paths,
        pytest_args=args.pytest_args,
        threads=_threads(args, mode),
        poison=args.poison,
    )


def _threads(args: argparse.Namespace, mode: Mode) -> int | None:
    """How many threads each test of `mode` runs in: --threads in threads mode, else None."""
    threads: int = args.threads
    return threads if mode is Mode.THREADS else None


def run_mode_with_reruns(args: argparse.Namespace, mode: Mode) -> ModeRun:
    """`gpuci run`: one mode, then its own alone-reruns (a CI job has no later evidence)."""
    mode_dir = _mode_dir(args, mode)
    prior = None
    args.run_id = new_run_id()
    if args.resume:
        prior = _earlier(args, mode)
        if prior is not None and not prior.interrupted:
            _say(f"{mode.value}: finished earlier, nothing to resume ({mode_dir})")
            return prior
        if prior is not None:
            args.run_id = prior.run_id or args.run_id  # the run it continues
    elif has_results(mode_dir):
        _say(
            f"replacing the earlier {mode.value} results in {mode_dir}"
            " (--resume continues an interrupted run instead)"
        )
    run = run_one_mode(args, mode, resume=prior)
    return rerun_mode_suspects(
        run,
        _mode_dir(args, mode),
        runs=args.reruns,
        budget_s=args.evidence_budget,
        python=args.python,
    )


def check_options(args: argparse.Namespace, mode: Mode | None = None) -> AskedModes:
    """The modes `gpuci run --mode` (`mode`) or `gpuci check` asks for; what is malformed
    or missing is refused here, before OUT is touched and collection starts."""
    parse_workers(args.workers)
    _shard(args)
    parse_gpus_per_slot(args.gpus_per_slot, detect_gpus(args.gpus, os.environ))
    if mode is not None:
        if mode is Mode.THREADS:
            require_run_parallel(args.python, "--mode threads")
        return AskedModes(modes=[mode], asker=f"--mode {mode.value}")
    choose_sanitizer(args.sanitize)  # --sanitize without the tool
    return asked_modes(args)


def _shard(args: argparse.Namespace) -> tuple[int, int] | None:

    return parse_shard(args.shard) if args.shard else shard_from_env(os.environ)


def _mode_dir(args: argparse.Namespace, mode: Mode) -> Path:
    shard = _shard(args)
    mode_dir: Path = args.out / mode.value
    return mode_dir / f"shard-{shard[0]}-of-{shard[1]}" if shard else mode_dir


def _durations(
    args: argparse.Namespace, mode: Mode, discovery: Discovery, timed_by: ModeRun | None
) -> tuple[dict[str, float], bool]:
    """What to order files by: --durations, else an earlier run in OUT, else this check's
    suite pass (its tests' times per file), else tests per file.

    Isolated never reads its own OUT: a sharded isolated run that read its sibling shards'
    results would plan differently from them.
    """

    if args.durations is not None:
        return read_durations(args.durations), True
    if mode is not Mode.ISOLATED:
        for earlier in (Mode.ISOLATED, Mode.PARALLEL):
            directory = args.out / earlier.value
            if (directory / "run.json").exists() or any(directory.glob("shard-*/run.json")):
                with contextlib.suppress(GpuciError):  # unreadable: order by the proxy
                    return read_durations(directory), True
    if timed_by is not None:
        # Without start-up, but what longest-first needs: a file that compiles for 10 s
        # with 2 tests is long here, where its number of tests would call it short.
        per_file: dict[str, float] = {}
        for test in timed_by.tests:
            per_file[test.file] = per_file.get(test.file, 0.0) + test.duration
        if per_file:
            return per_file, True
    # no earlier run: a file's number of tests stands in for its length
    return {f: float(len(ids)) for f, ids in discovery.tests.items()}, False


def run_one_mode(
    args: argparse.Namespace,
    mode: Mode,
    discovery: Discovery | None = None,
    *,
    only: set[str] | None = None,
    inferred_from: ModeRun | None = None,
    timed_by: ModeRun | None = None,
    resume: ModeRun | None = None,
) -> ModeRun:
    """Discover, plan and run one mode; the shared body of `run` and `check`."""

    requested_workers = parse_workers(args.workers)
    shard = _shard(args)
    mode_dir = _mode_dir(args, mode)
    gpus = detect_gpus(args.gpus, os.environ)
    per_slot = parse_gpus_per_slot(args.gpus_per_slot, gpus)
    if discovery is None:
        discovery = discover(args)
        start_fork_server(args, discovery.rootdir, discovery.files, args.paths)
    durations, in_seconds = _durations(args, mode, discovery, timed_by)
    files = list(discovery.files)
    if shard:
        files = shard_files(files, durations, *shard)
    if only is not None:
        files = [f for f in files if f in only]
    workers, why = (1, "one at a time")
    threads = _threads(args, mode)
    if threads:
        why += f", each test in {threads} threads"
    if mode is Mode.PARALLEL:
        slots = len(gpus) // per_slot if per_slot else len(gpus)
        workers, why = choose_workers(
            requested_workers, cpus=cpu_count(), gpus=slots, files=len(files)
        )
    schedule = plan_schedule(
        files,
        mode=mode,
        durations=durations,
        serial=discovery.serial,
        workers=workers,
        gpus=gpus,
        gpus_per_slot=per_slot,
    )
    prepare_out(mode_dir, keep=resume is not None)
    shutil.rmtree(args.out / "evidence", ignore_errors=True)  # it was about the old runs
    if mode is Mode.SUITE:
        discovery = _restrict(discovery, files)
    tests = sum(len(discovery.tests.get(f, ())) for f in files)
    where = f"shard {shard[0]}/{shard[1]}, " if shard else ""
    gpu_text = f"GPUs {schedule.slot_gpus[0]}" if gpus else "no GPU pinning"
    lazy = f" (the rest inferred from {inferred_from.mode.value})" if inferred_from else ""
    kept = (
        sum(1 for t in resume.tests if not t.inferred and not was_interrupted(t)) if resume else 0
    )
    resuming = f", resuming: {kept} finished earlier" if resume else ""
    _say(
        f"{mode.value}: {where}{len(files)} files{lazy}, {tests} tests{resuming}, workers {why},"
        f" {gpu_text} -> {mode_dir}"
    )
    options = RunOptions(
        mode=mode,
        out=mode_dir,
        pytest_args=args.pytest_args,
        threads=threads,
        timeout=args.timeout,
        reruns=args.reruns,
        python=args.python,
        command=("gpuci", *sys.argv[1:]) if sys.argv[1:] else ("gpuci",),
        shard=shard,
        gpus=gpus,
        gpus_per_slot=per_slot,
        paths=given_paths(args.paths),
        poison=args.poison,
        resume=resume,
        run_id=args.run_id,
        settings=mode_settings(args, mode),
        peaks=earlier_peaks(args.durations, args.out),
    )
    estimates = durations if in_seconds else {}
    return run_mode(discovery, schedule, options, estimates=estimates, inferred_from=inferred_from)


def start_fork_server(
    args: argparse.Namespace, rootdir: Path, files: Sequence[str], paths: Sequence[str]
) -> None:
    """Let the interpreters of this command fork from a pre-imported parent (the test files'
    imports, or --preload's), unless --no-preload."""
    if getattr(args, "no_preload", False) or current_fork_server(args.python) is not None:
        return
    named: str | None = getattr(args, "preload", None)
    configured = args.config.preload if hasattr(args, "config") else None  # [tool.gpuci]
    serve_forks(
        python=args.python,
        environ=child_env(os.environ),
        rootdir=rootdir,
        files=files,
        paths=paths,
        preload=parse_preload(named) if named is not None else configured,
    )


def _say(text: str) -> None:
    print(printable(f"gpuci: {text}"), file=sys.stderr, flush=True)


def discover(args: argparse.Namespace) -> Discovery:
    """pytest's collection of PATHS, with the suite's own configuration; notes what it left."""
    discovery = discover_tests(
        args.paths, args.pytest_args, python=args.python, timeout=max(args.timeout or 0, 600)
    )
    for file in discovery.deselected:
        _say(f"{file}: every test deselected by the pytest arguments; not run")
    return discovery


def _restrict(discovery: Discovery, files: list[str]) -> Discovery:
    """The discovery of a shard: suite mode runs only the shard's files."""
    from dataclasses import replace

    keep = set(files)
    return replace(discovery, files=tuple(f for f in discovery.files if f in keep))
