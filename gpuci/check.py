"""Check: `gpuci check` as its stages in order: the modes, the evidence, the verdict, the report.

It runs its screens at once, in one pool of slots on the same GPUs: the suite
interpreter first, then the parallel files (longest first by an earlier run's times) and
the threads files (where the suite asks for threads: `gpuci.run.sched.modes`). Then isolated,
only for the files that did not pass in parallel (the rest inferred from it; after threads
without parallel, every file: a threads pass stands in for nothing) and whose failures were
not alike in every screen: side by side in the check's slots, admitted by device memory,
each file that did not pass then again alone (its strict run counts; one that failed fresh
in parallel alone from the start: `gpuci.lazy_isolated`), then the evidence once
for the whole check, within a budget that defaults to what its suspects need
(`gpuci.evidence.budget`). `--serial-modes` runs the modes one after another instead, as
gpuci did before the screens.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from gpuci.evidence.budget import default_budget
from gpuci.evidence.early import EarlyEvidence
from gpuci.evidence.kinds.engine import gather_evidence
from gpuci.evidence.mode_reruns import rerun_mode_suspects
from gpuci.evidence.results import load_mode_results
from gpuci.evidence.sanitizer import choose_sanitizer
from gpuci.judge import write_verdict
from gpuci.lazy_isolated import CONFIRMED_BY, INFERRED_FROM, IsolatedAhead, lazy_isolated
from gpuci.model import WHOLE_SUITE_MODES, InputError, Mode, ModeRun, UsageError
from gpuci.options import EvidenceOptions, Options
from gpuci.run.disk.durations import write_durations
from gpuci.run.disk.outdir import check_run_id, forget_replaced, new_run_id, replace_earlier
from gpuci.run.disk.resume import check_extra_modes, earlier_run, has_results
from gpuci.run.disk.side_outputs import refuse_side_outputs
from gpuci.run.proc.discover import CollectionEnded, Discovery
from gpuci.run.proc.gpus import detect_gpus
from gpuci.run.sched.beside import held_beside_discovery, held_for_the_check
from gpuci.run.sched.modes import (
    AskedModes,
    asked_modes,
    choose_modes,
    draw_seed,
    order_label,
    require_run_parallel,
    runs_or_not,
    threads_from_suite,
)
from gpuci.run.sched.options import ModeOptions
from gpuci.run.sched.pace import PlainPace, earlier_pace
from gpuci.run.sched.plan import (
    parse_gpus_per_slot,
    parse_workers,
    read_durations,
)
from gpuci.run.sched.plan_mode import (
    discover,
    mode_dir_of,
    plan_mode,
    pool_workers,
    run_one_mode,
    say,
    shard_of,
    threads_of,
)
from gpuci.run.sched.screens import SCREEN_ORDER, run_screens
from gpuci.run.sched.views import screen_gpus
from gpuci.terminal import QUIET

Isolating = Callable[[int], None]  # told the screens' slots as they end, before isolated


def run_check(options: Options, asked: AskedModes) -> tuple[int, Path, Path]:
    """`gpuci check`'s stages in order; its exit code and its report's and comment's paths."""
    opts, evidence = _stages(options)
    verdict_path = opts.out / "verdict.json"
    # the evidence's first interpreters start as the screens end, while isolated runs
    early = EarlyEvidence(opts.out, evidence.reruns, evidence.python, evidence.timeout)
    earlier = earlier_pace(opts.durations, opts.out)  # read before OUT's results are replaced
    try:
        workers = _run_modes(opts, options, asked, isolating=early.start)
    except CollectionEnded as ended:  # plain pytest runs no test and ends red: no mode runs
        say(str(ended), level=QUIET)  # pytest's own words on why it ran nothing
        write_verdict(options, verdict_path, ended=str(ended), ended_code=ended.exit_code)
        code = ended.exit_code  # plain pytest's
    else:
        _write_durations(opts.out, earlier)  # before the evidence: a failing check has it too
        budget = _budget(opts.out, evidence)
        gather_evidence(
            opts.out,
            runs=evidence.reruns,
            budget_s=budget,
            timeout=evidence.timeout,
            python=evidence.python,
            sanitize=evidence.sanitize,
            workers=workers,
            started=early,
        )
        code = write_verdict(options, verdict_path)
    finally:
        early.close()  # stopped before the evidence took them: ended
    from gpuci.report.render import write_reports  # jinja2: only where a report is written

    html, markdown = write_reports(
        verdict_path, html=None, markdown=None, environ=os.environ, secrets=options.secrets
    )
    return code, html, markdown


def _run_modes(
    opts: ModeOptions, options: Options, asked: AskedModes, *, isolating: Isolating
) -> int:
    """The modes asked for (check_options) or chosen, screened at once or one after
    another, as the check decides them; the slots they ran in. `isolating` hears of the
    screens' end (their slots) where a lazy isolated pass follows them."""
    held = held_for_the_check(opts, asked, serial=options.serial_modes, resume=options.resume)
    with held as seeded:  # a shuffle's seed drawn, where it named none
        return _discover_and_run(opts, options, seeded, isolating)


def _discover_and_run(
    opts: ModeOptions, options: Options, asked: AskedModes, isolating: Isolating
) -> int:
    try:
        discovery = discover(opts)  # once: every mode runs the same collected tests
    except CollectionEnded:
        if not options.resume:  # its verdict is this check's: no earlier mode beside it
            _replace_earlier(opts)
        raise
    modes, why = choose_modes(asked, discovery, len(detect_gpus(opts.gpus, os.environ)))
    opts = replace(opts, mode_plan=(tuple(modes), why), randomly_seed=discovery.randomly_seed)
    threads = threads_from_suite(opts.settings, discovery)
    if threads is not None:
        opts = replace(opts, threads=threads.value, settings={**opts.settings, "threads": threads})
    if options.resume:  # refused, nothing touched
        run_id, earlier = _resumed_check(opts, modes)
        opts = replace(opts, run_id=run_id)
    else:  # only now: a suite that cannot be collected replaces nothing
        opts, earlier = _replace_earlier(opts), {}
    if Mode.SHUFFLED in modes:  # an interrupted shuffle resumes in its own order
        prior = earlier.get(Mode.SHUFFLED)
        seed, drawn = (asked.seed, asked.drawn) if prior is None else (prior.shuffle_seed, False)
        opts = _shuffled(opts, seed, drawn=drawn)
    shown = [*modes, *(m for m in Mode if m not in modes)]
    say("modes: " + "; ".join(f"{m.value} {runs_or_not(m in modes)} ({why[m]})" for m in shown))
    # isolated after parallel runs lazily: only the files that did not pass in the screens
    before = modes[: modes.index(Mode.ISOLATED)] if Mode.ISOLATED in modes else []
    lazy = [m for m in CONFIRMED_BY if m in before] if INFERRED_FROM in before else []
    # the runs are written to OUT, where the evidence and the diff read them
    if options.serial_modes:
        _run_serially(opts, modes, lazy, earlier, discovery)
        workers = 1
    else:
        _, workers = _run_screened(opts, modes, lazy, earlier, discovery, isolating=isolating)
    forget_replaced(opts.out)  # the check has results of its own now
    return workers


def _shuffled(opts: ModeOptions, seed: int | None, *, drawn: bool = False) -> ModeOptions:
    """The options with the shuffled mode's seed: the one asked for (shuffled:SEED), or
    drawn (`drawn`: before discovery, else here), printed so that the order can be asked
    for again."""
    drawn = drawn or seed is None
    seed = seed if seed is not None else draw_seed()
    by = ", drawn by gpuci" if drawn else ""
    say(f"shuffled: seed {seed}{by} ({order_label(Mode.SHUFFLED, seed)} runs this order again)")
    return replace(opts, shuffle_seed=seed)


def _stages(options: Options) -> tuple[ModeOptions, EvidenceOptions]:
    """The modes' options and the evidence's, which `run` and `check` always have."""
    assert options.modes is not None and options.evidence is not None, options.command
    return options.modes, options.evidence


def _finished(
    opts: ModeOptions, modes: list[Mode], earlier: dict[Mode, ModeRun]
) -> dict[Mode, ModeRun]:
    """The modes an interrupted check finished (--resume): kept as they are, and said so."""
    runs: dict[Mode, ModeRun] = {}
    for mode in modes:
        prior = earlier.get(mode)
        if prior is not None and not prior.interrupted:
            say(f"{mode.value}: finished earlier, kept ({mode_dir_of(opts, mode)})")
            runs[mode] = prior
    return runs


def _run_serially(
    opts: ModeOptions,
    modes: list[Mode],
    lazy: list[Mode],
    earlier: dict[Mode, ModeRun],
    discovery: Discovery,
) -> dict[Mode, ModeRun]:
    """--serial-modes: each mode on its own, one after the other, in the order given."""
    runs = _finished(opts, modes, earlier)
    for mode in modes:
        if mode in runs:
            continue
        prior = earlier.get(mode)
        if mode is Mode.ISOLATED and lazy:
            runs[mode] = lazy_isolated(opts, discovery, runs, lazy, prior)
        else:
            timed_by = runs.get(Mode.SUITE) if mode is Mode.PARALLEL else None
            runs[mode] = run_one_mode(opts, mode, discovery, timed_by=timed_by, resume=prior)
    return runs


def _run_screened(
    opts: ModeOptions,
    modes: list[Mode],
    lazy: list[Mode],
    earlier: dict[Mode, ModeRun],
    discovery: Discovery,
    *,
    isolating: Isolating,
) -> tuple[dict[Mode, ModeRun], int]:
    """The screens at once in one pool (isolated, strict, before them when it comes first in
    --modes, else lazily after them); the runs, and the pool's slots."""
    runs = _finished(opts, modes, earlier)
    if Mode.ISOLATED in modes and not lazy and Mode.ISOLATED not in runs:
        runs[Mode.ISOLATED] = run_one_mode(
            opts, Mode.ISOLATED, discovery, resume=earlier.get(Mode.ISOLATED)
        )
    gpus = detect_gpus(opts.gpus, os.environ)
    per_slot = parse_gpus_per_slot(opts.gpus_per_slot, gpus)
    screened = [m for m in modes if m is not Mode.ISOLATED and m not in runs]
    # W slots for each screen of files (the parallel files still run W at a time, the
    # threads files W of their own beside them), and one for each whole suite's
    # interpreter (the suite's, reversed, shuffled), which holds its slot from start to
    # end; never more than the units
    whole = [m for m in SCREEN_ORDER if m in WHOLE_SUITE_MODES and m in screened]
    units = sum(1 if m in whole else len(discovery.files) for m in screened)
    per_screen, _ = pool_workers(parse_workers(opts.workers), gpus, per_slot, units)
    of_files = len(screened) - len(whole)
    workers = min(per_screen * of_files + len(whole), units) if of_files else len(whole)
    suite = Mode.SUITE in screened
    slot_gpus = screen_gpus(gpus, workers, per_slot, suite=suite, orders=len(whole) - suite)
    screens = [
        plan_mode(
            opts,
            mode,
            discovery,
            resume=earlier.get(mode),
            pool=slot_gpus,
            slot=whole.index(mode) if mode in whole else 0,
        )[0]
        for mode in screened
    ]
    # the isolated pass's first files start while the screens go on
    ahead = IsolatedAhead(opts, discovery.rootdir, lazy) if Mode.ISOLATED in modes else None
    if screens:
        done = ahead.file_done if ahead is not None and lazy else None
        runs.update(run_screens(screens, workers=workers, slot_gpus=slot_gpus, file_done=done))
    if Mode.ISOLATED in modes and lazy and Mode.ISOLATED not in runs:
        isolating(workers)
        runs[Mode.ISOLATED] = lazy_isolated(opts, discovery, runs, lazy, earlier.get(Mode.ISOLATED))
    return {m: runs[m] for m in modes}, workers


def explain_results(options: Options) -> None:
    """`gpuci explain`: the evidence of a results directory whose modes ran elsewhere (CI)."""
    evidence, out = options.evidence, options.out
    assert evidence is not None and out is not None, options.command
    choose_sanitizer(evidence.sanitize)  # --sanitize without the tool: refused before anything
    results = load_mode_results(out)
    first = next(iter(results.values())).run
    if not Path(first.rootdir).is_dir():
        raise InputError(
            f"{out}: its tests ran in {first.rootdir}, which is not a directory here;"
            " run gpuci explain where the suite is checked out at the same path"
        )
    budget = _budget(out, evidence)
    shutil.rmtree(out / "evidence", ignore_errors=True)  # about earlier runs, if any
    _write_durations(out)  # the mode jobs' times, for the next pipeline's
    gather_evidence(
        out,
        runs=evidence.reruns,
        budget_s=budget,
        timeout=evidence.timeout if evidence.timeout is not None else first.timeout,
        python=evidence.python,
        pytest_args=evidence.pytest_args or None,
        sanitize=evidence.sanitize,
        workers=max(r.run.workers for r in results.values()),  # the mode jobs' slots
    )


def _write_durations(out: Path, earlier: PlainPace | None = None) -> None:
    """OUT/durations.json, for a later check's --durations (the suite's pace held to `earlier`)."""
    path = write_durations(out, earlier.seconds if earlier else None)
    if path is not None:
        say(f"durations: {path} (a later check starts its longest files first: --durations)")


def _budget(out: Path, evidence: EvidenceOptions) -> float:
    """--evidence-budget, else what the suspects of OUT's modes need (gpuci.evidence.budget)."""
    if evidence.budget_s is not None:
        return evidence.budget_s
    estimate = default_budget(load_mode_results(out), evidence.reruns)
    say(estimate.text())
    return estimate.seconds


def _replace_earlier(opts: ModeOptions) -> ModeOptions:
    """A fresh check: move OUT's earlier results aside, under a new run id; the options
    with that id and the earlier check's results (their files' times order the new)."""
    run_id = new_run_id()
    replaced, aside = replace_earlier(opts.out, run_id)
    if replaced:
        say(
            f"replacing the earlier results in {opts.out}: {', '.join(replaced)}"
            " (--resume continues an interrupted check instead)"
        )
    return replace(opts, run_id=run_id, history=aside if replaced else None)


def _resumed_check(opts: ModeOptions, modes: list[Mode]) -> tuple[str, dict[Mode, ModeRun]]:
    """--resume: the interrupted check's run id, and its runs (that id's, no other's)."""
    out = opts.out
    run_id = check_run_id(out)
    if run_id is None:
        raise UsageError(
            f"--resume: {out} holds no check that gpuci started (no {out}/.gpuci/check.json);"
            " run without --resume to start one"
        )
    check_extra_modes(out, modes)
    found: dict[Mode, ModeRun] = {}
    for mode in modes:
        run = _earlier(opts, mode)
        if run is not None and run.run_id != run_id:
            say(
                f"{mode.value}: its results in {mode_dir_of(opts, mode)} are another run's"
                f" ({run.run_id or 'no run id'}), not the interrupted check's; running it again"
            )
        elif run is not None:
            found[mode] = run
    return run_id, found


def _earlier(opts: ModeOptions, mode: Mode) -> ModeRun | None:
    return earlier_run(
        mode_dir_of(opts, mode),
        paths=opts.paths,
        pytest_args=opts.pytest_args,
        threads=threads_of(opts, mode),
        poison=opts.poison,
    )


def run_mode_with_reruns(options: Options, mode: Mode) -> ModeRun:
    """`gpuci run`: one mode, then its own alone-reruns (a CI job has no later evidence)."""
    opts, evidence = _stages(options)
    mode_dir = mode_dir_of(opts, mode)
    prior = None
    run_id = new_run_id()
    if options.resume:
        prior = _earlier(opts, mode)
        if prior is not None and not prior.interrupted:
            say(f"{mode.value}: finished earlier, nothing to resume ({mode_dir})")
            return prior
        if prior is not None:
            run_id = prior.run_id or run_id  # the run it continues
    elif has_results(mode_dir):
        say(
            f"replacing the earlier {mode.value} results in {mode_dir}"
            " (--resume continues an interrupted run instead)"
        )
    if mode is Mode.SHUFFLED:  # gpuci run --mode shuffled: the interrupted run's, or drawn
        opts = _shuffled(opts, prior.shuffle_seed if prior is not None else None)
    with held_beside_discovery(opts, suite=mode is Mode.SUITE and prior is None, files=False):
        run = run_one_mode(replace(opts, run_id=run_id), mode, resume=prior)
    return rerun_mode_suspects(
        run, mode_dir, runs=evidence.reruns, budget_s=evidence.budget_s, python=evidence.python
    )


def check_options(options: Options, mode: Mode | None = None) -> AskedModes:
    """The modes `gpuci run --mode` (`mode`) or `gpuci check` asks for; what is malformed
    or missing is refused here, before OUT is touched and collection starts."""
    opts, evidence = _stages(options)
    parse_workers(opts.workers)
    shard_of(opts)
    if opts.durations is not None:
        read_durations(opts.durations)  # a missing or malformed file: refused before OUT
    parse_gpus_per_slot(opts.gpus_per_slot, detect_gpus(opts.gpus, os.environ))
    if mode is not None:
        if mode is Mode.THREADS:
            require_run_parallel(opts.python, "--mode threads")
        asked = AskedModes(modes=[mode], asker=f"--mode {mode.value}")
    else:
        choose_sanitizer(evidence.sanitize)  # --sanitize without the tool
        asked = asked_modes(options.asked_modes, opts.settings, opts.python)
    suite = asked.modes is None or Mode.SUITE in asked.modes
    refuse_side_outputs(opts.pytest_args, suite=suite, asker=asked.asker)
    return asked
