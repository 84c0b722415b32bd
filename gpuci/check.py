"""Check: the modes of `gpuci run` and `gpuci check` planned from the command line, in order.

`gpuci check` runs suite, then parallel ordered longest first by the suite's per-file
times, then threads (where pytest-run-parallel is installed), then isolated only for the
files that did not pass in parallel or threads (the rest is inferred), then gathers the
evidence once for the whole check, within a budget that defaults to the main passes'
wall time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import sys
from pathlib import Path

from gpuci.discover import Discovery, can_import, discover_tests
from gpuci.evidence import gather_evidence, rerun_mode_suspects
from gpuci.gpus import detect_gpus
from gpuci.model import GpuciError, InputError, Mode, ModeRun, UsageError, printable
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
from gpuci.results import load_mode_results
from gpuci.resume import (
    check_extra_modes,
    earlier_results,
    earlier_run,
    given_paths,
    has_results,
    was_interrupted,
)
from gpuci.run import RunOptions, prepare_out, run_mode
from gpuci.sanitizer import choose_sanitizer

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
                inferred_from=runs[lazy[0]],
                resume=prior,
            )
        else:
            timed_by = runs.get(Mode.SUITE) if mode is Mode.PARALLEL else None
            runs[mode] = run_one_mode(args, mode, discovery, timed_by=timed_by, resume=prior)
    main_s = sum(run.wall_s for run in runs.values())
    budget = args.evidence_budget if args.evidence_budget is not None else main_s
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
        _say(
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
    if mode is Mode.THREADS:
        require_run_parallel(args.python, "--mode threads")
    mode_dir = _mode_dir(args, mode)
    prior = None
    if args.resume:
        prior = _earlier(args, mode)
        if prior is not None and not prior.interrupted:
            _say(f"{mode.value}: finished earlier, nothing to resume ({mode_dir})")
            return prior
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


def _shard(args: argparse.Namespace) -> tuple[int, int] | None:

    return parse_shard(args.shard) if args.shard else shard_from_env(os.environ)


def _mode_dir(args: argparse.Namespace, mode: Mode) -> Path:
    shard = _shard(args)
    mode_dir: Path = args.out / mode.value
    return mode_dir / f"shard-{shard[0]}-of-{shard[1]}" if shard else mode_dir


def _durations(
    args: argparse.Namespace, mode: Mode, discovery: Discovery, timed_by: ModeRun | None
) -> tuple[dict[str, float], bool, bool]:
    """What to order files by: --durations, else an earlier run in OUT, else this check's
    suite pass (its tests' times per file), else tests per file; whether they are seconds,
    and whether they include interpreter start-up (only an earlier run's file times do).

    Isolated never reads its own OUT: a sharded isolated run that read its sibling shards'
    results would plan differently from them.
    """

    if args.durations is not None:
        return read_durations(args.durations), True, True
    if mode is not Mode.ISOLATED:
        for earlier in (Mode.ISOLATED, Mode.PARALLEL):
            directory = args.out / earlier.value
            if (directory / "run.json").exists() or any(directory.glob("shard-*/run.json")):
                with contextlib.suppress(GpuciError):  # unreadable: order by the proxy
                    return read_durations(directory), True, True
    if timed_by is not None:
        # Without start-up, but what longest-first needs: a file that compiles for 10 s
        # with 2 tests is long here, where its number of tests would call it short.
        per_file: dict[str, float] = {}
        for test in timed_by.tests:
            per_file[test.file] = per_file.get(test.file, 0.0) + test.duration
        if per_file:
            return per_file, True, False
    # no earlier run: a file's number of tests stands in for its length
    return {f: float(len(ids)) for f, ids in discovery.tests.items()}, False, True


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
    durations, in_seconds, with_startup = _durations(args, mode, discovery, timed_by)
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
    )
    estimates = durations if in_seconds else {}
    return run_mode(
        discovery,
        schedule,
        options,
        estimates=estimates,
        with_startup=with_startup,
        inferred_from=inferred_from,
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
