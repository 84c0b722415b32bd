"""Mode reruns: `gpuci run`'s alone-reruns inside one mode, with the check's rules (a
check's evidence is `gpuci.evidence.kinds.engine`'s); what its runs left behind, said."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TextIO

from gpuci.evidence.alone import (
    alone_runs_wanted,
    describe_cuts,
    more_alone,
    prioritize,
    run_representatives,
)
from gpuci.evidence.context import Context
from gpuci.evidence.orders import interpreter_order
from gpuci.evidence.probe import Prober, start_prober
from gpuci.evidence.results import ModeResults
from gpuci.formats import mode_run_to_json, write_json_atomic
from gpuci.model import FileRun, Mode, ModeRun, TestEvidence, TestResult, unit_of
from gpuci.run.proc.strays import leftover_line, stranger_line
from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.progress import say
from gpuci.run.sched.session import Interrupted
from gpuci.state.left import Ledger


def say_strays(prober: Prober, progress: TextIO, where: str) -> None:
    """Warn of every process the evidence runs left behind or found on the GPU."""
    for file, left in prober.leftovers.items():
        for leftover in left:
            say(progress, f"warning: {leftover_line(file, leftover, where=where)}")
    for file, strangers in prober.strangers.items():
        for stranger in strangers:
            say(progress, f"warning: {stranger_line(file, stranger, where=where)}")


def rerun_mode_suspects(
    run: ModeRun,
    out: Path,
    *,
    runs: int,
    budget_s: float | None,
    python: str,
    progress: TextIO = sys.stderr,
) -> ModeRun:
    """`gpuci run`'s alone-reruns inside one mode, with the check's rules; rewrites run.json."""
    results = {run.mode: ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)}
    wanted = alone_runs_wanted(results, runs) if runs else {}
    if not any(wanted.values()):
        return run
    supervisor = Supervisor()
    prober = start_prober(
        out,
        run,
        python=python,
        timeout=run.timeout,
        budget_s=budget_s,
        supervisor=supervisor,
        mode_name=run.mode.value,
    )
    ctx = Context(
        prober=prober,
        results=results,
        orders={run.mode: interpreter_order(results[run.mode])},
        progress=progress,
        ledger=Ledger(),  # alone-runs read no hint
    )
    try:
        with supervisor.handling_signals():
            found = describe_cuts(_alone_or_by_group(ctx, wanted), wanted)
    finally:
        prober.close()
    say_strays(prober, progress, run.mode.value)
    interrupted = prober.stopping()
    run = dataclasses.replace(
        run,
        interrupted=run.interrupted or interrupted,
        tests=tuple(_with_reruns(t, found) for t in run.tests),
        files=tuple(_with_strays(f, prober, run.mode) for f in run.files),
    )
    write_json_atomic(out / "run.json", mode_run_to_json(run))
    if interrupted:
        raise Interrupted(f"interrupted; what finished is in {out}")
    return run


def _alone_or_by_group(ctx: Context, wanted: Mapping[str, int]) -> dict[str, TestEvidence]:
    """The alone-reruns, with the check's rule for a storm: a group of tests that failed
    alike runs one representative alone (a second where it passes); where it fails alone
    the same way the rest are inferred from it, where not they run alone as any other."""
    groups = prioritize(ctx.results, wanted).groups
    where = f"in {'/'.join(m.value for m in ctx.results)}"
    found, split = run_representatives(ctx, groups, {}, where=where) if groups else ({}, [])
    grouped = {m for g in groups for m in g.members}
    rest = {
        i: n - len(found[i].alone) if i in found else n
        for i, n in wanted.items()
        if i not in grouped or i in split
    }
    return more_alone(ctx, {i: n for i, n in rest.items() if n > 0}, found)


def _with_strays(file_run: FileRun, runner: Prober, mode: Mode) -> FileRun:
    """The file's run with what its alone-reruns left behind (suite: all of them)."""
    files = list(runner.leftovers) + list(runner.strangers)
    if unit_of(mode) is not None:
        keys = dict.fromkeys(files) if file_run.file == unit_of(mode) else {}
    else:
        keys = {file_run.file: None}
    leftovers = tuple(x for k in keys for x in runner.leftovers.get(k, ()))
    strangers = tuple(x for k in keys for x in runner.strangers.get(k, ()))
    if not leftovers and not strangers:
        return file_run
    return dataclasses.replace(
        file_run,
        leftovers=file_run.leftovers + leftovers,
        strangers=file_run.strangers + strangers,
    )


def _with_reruns(test: TestResult, found: Mapping[str, TestEvidence]) -> TestResult:
    evidence = found.get(test.id)
    if evidence is None:
        return test
    return dataclasses.replace(
        test, reruns=evidence.alone, cut=evidence.cut, inferred_from=evidence.inferred_from
    )
