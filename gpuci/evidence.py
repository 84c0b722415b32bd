"""Evidence: what gpuci runs after the main passes to tell a polluted test from a broken one.

The alone-runs: each test that did not pass in some mode runs by itself in a fresh
interpreter, K times (default 2) for the whole check, one at a time, with the same GPUs
as every other interpreter of the check. A test whose isolated run was the first of its
interpreter was already seen alone once; a test that timed out gets one alone run at
most. `--evidence-budget` caps the seconds spent; what it cuts is recorded per test
("not rerun: budget"), never silently classified.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from gpuci.discover import child_env
from gpuci.formats import (
    EVIDENCE_DIR,
    EVIDENCE_FILE,
    evidence_to_json,
    mode_run_to_json,
    write_json_atomic,
)
from gpuci.interpreter import EXIT_ID, Interpreters, Launch, pytest_target
from gpuci.model import (
    NOT_PASSING,
    SUITE_UNIT,
    Evidence,
    FileRun,
    Leftover,
    Mode,
    ModeRun,
    Outcome,
    Stranger,
    TestEvidence,
    TestResult,
    printable,
)
from gpuci.reproduce import first_in_interpreter, interpreter_order, serial_gpu
from gpuci.results import ModeResults, load_mode_results
from gpuci.run import Interrupted
from gpuci.strays import leftover_line, stranger_line
from gpuci.supervisor import Supervisor

CUT_BY_BUDGET = "not rerun: budget"


def is_suspect(test: TestResult) -> bool:
    """A real test (not a pseudo test for an interpreter's death) that did not pass."""
    return test.outcome in NOT_PASSING and not test.id.endswith(EXIT_ID) and "::" in test.id


def alone_runs_wanted(results: Mapping[Mode, ModeResults], runs: int) -> dict[str, int]:
    """How many alone-runs each suspect of these modes needs, in the order found."""
    isolated = results.get(Mode.ISOLATED)
    order = interpreter_order(isolated) if isolated is not None else None
    seen: dict[str, TestResult] = {}
    timed_out: set[str] = set()
    for mode_results in results.values():
        for test in mode_results.run.tests:
            if is_suspect(test):
                seen.setdefault(test.id, test)
                if test.outcome is Outcome.TIMED_OUT:
                    timed_out.add(test.id)
    wanted: dict[str, int] = {}
    for test_id in seen:
        iso = _isolated_result(isolated, test_id)
        # isolated ran it first in a fresh interpreter: the same conditions as alone
        seen_alone = (
            order is not None
            and iso is not None
            and not iso.inferred
            and iso.outcome is not Outcome.NOT_RUN
            and first_in_interpreter(order, test_id)
        )
        n = runs - (1 if seen_alone else 0)
        wanted[test_id] = max(0, min(n, 1) if test_id in timed_out else n)
    return wanted


def _isolated_result(isolated: ModeResults | None, test_id: str) -> TestResult | None:
    if isolated is None:
        return None
    return next((t for t in isolated.run.tests if t.id == test_id), None)


@dataclass(slots=True)
class _AloneRuns:
    """Runs tests alone, serially, until the budget is spent."""

    interpreters: Interpreters
    rootdir: Path
    gpu: str | None
    budget_s: float | None
    zero: float = field(default_factory=time.monotonic)
    runs: int = 0
    leftovers: dict[str, list[Leftover]] = field(default_factory=dict)  # by file
    strangers: dict[str, list[Stranger]] = field(default_factory=dict)  # by file

    def spent(self) -> float:
        return time.monotonic() - self.zero

    def exhausted(self) -> bool:
        return self.budget_s is not None and self.spent() >= self.budget_s

    def run(self, test_id: str) -> Outcome:
        """Run one test by itself in a fresh interpreter."""
        file = test_id.split("::", 1)[0]
        self.runs += 1
        attempt = self.interpreters.run(
            Launch(
                key=file,
                ids=(test_id,),
                targets=(pytest_target(self.rootdir, file),),
                slot=0,
                gpu=self.gpu,
                attempt=0,
                junit=None,
                label=f"alone: {test_id}",
            )
        )
        if attempt.leftovers:
            self.leftovers.setdefault(file, []).extend(attempt.leftovers)
        if attempt.strangers:
            self.strangers.setdefault(file, []).extend(attempt.strangers)
        return next((r.outcome for r in attempt.results if r.id == test_id), Outcome.NOT_RUN)

    def run_all(self, wanted: Mapping[str, int], supervisor: Supervisor) -> dict[str, TestEvidence]:
        """Every suspect's alone-runs, round by round, so a cut budget spreads evenly."""
        alone: dict[str, list[Outcome]] = {i: [] for i in wanted}
        cut: set[str] = set()
        for round_ in range(max(wanted.values(), default=0)):
            for test_id, n in wanted.items():
                if n <= round_ or supervisor.stopping.is_set():
                    continue
                if self.exhausted():
                    cut.add(test_id)
                    continue
                alone[test_id].append(self.run(test_id))
        return {
            i: TestEvidence(id=i, alone=tuple(o), cut=CUT_BY_BUDGET if i in cut else "")
            for i, o in alone.items()
        }


def _interpreters(
    out: Path, run: ModeRun, python: str, timeout: float | None, supervisor: Supervisor
) -> Interpreters:
    environ = child_env(os.environ)
    environ["GPUCI_MODE"] = EVIDENCE_DIR
    return Interpreters(
        out=out,
        python=python,
        pytest_args=run.pytest_args,
        timeout=timeout,
        environ=environ,
        clock_zero=time.monotonic(),
        supervisor=supervisor,
    )


def _say(progress: TextIO, text: str) -> None:
    print(printable(f"gpuci: {text}"), file=progress, flush=True)


def _run_alone(
    out: Path,
    run: ModeRun,
    wanted: Mapping[str, int],
    *,
    budget_s: float | None,
    python: str,
    timeout: float | None,
    what: str,
    progress: TextIO,
) -> tuple[dict[str, TestEvidence], _AloneRuns, bool]:
    """Alone-runs of `wanted` in `out`: their evidence, the runner, whether interrupted."""
    budget = "" if budget_s is None else f", budget {budget_s:.0f}s"
    _say(
        progress,
        f"{what}: running {sum(1 for n in wanted.values() if n)} test(s) alone,"
        f" {sum(wanted.values())} run(s){budget}",
    )
    supervisor = Supervisor()
    interpreters = _interpreters(out, run, python, timeout, supervisor)
    runner = _AloneRuns(interpreters, Path(run.rootdir), serial_gpu(run), budget_s)
    try:
        with supervisor.handling_signals():
            found = runner.run_all(wanted, supervisor)
    finally:
        interpreters.close()
    for test in found.values():
        outcomes = ", ".join(o.value for o in test.alone) or "-"
        _say(progress, f"  {test.id}: alone: {outcomes}{f' ({test.cut})' if test.cut else ''}")
    for file, left in runner.leftovers.items():
        for leftover in left:
            _say(progress, f"warning: {leftover_line(file, leftover, where=what)}")
    for file, strangers in runner.strangers.items():
        for stranger in strangers:
            _say(progress, f"warning: {stranger_line(file, stranger, where=what)}")
    return found, runner, supervisor.stopping.is_set()


def gather_evidence(
    out: Path,
    *,
    runs: int,
    budget_s: float | None,
    timeout: float | None,
    python: str = sys.executable,
    progress: TextIO = sys.stderr,
) -> Evidence:
    """The evidence of a check's results directory, written to `OUT/evidence/evidence.json`."""
    results = load_mode_results(out)
    wanted = alone_runs_wanted(results, runs) if runs else {}
    first = next(iter(results.values())).run
    directory = out / EVIDENCE_DIR
    found: dict[str, TestEvidence] = {}
    runner_runs, spent, interrupted = 0, 0.0, False
    leftovers: dict[str, list[Leftover]] = {}
    strangers: dict[str, list[Stranger]] = {}
    if any(wanted.values()):
        found, runner, interrupted = _run_alone(
            directory,
            first,
            wanted,
            budget_s=budget_s,
            python=python,
            timeout=timeout,
            what="evidence",
            progress=progress,
        )
        runner_runs, spent = runner.runs, runner.spent()
        leftovers, strangers = runner.leftovers, runner.strangers
    evidence = Evidence(
        gpu=serial_gpu(first),
        budget_s=budget_s,
        spent_s=spent,
        runs=runner_runs,
        tests=tuple(found.values()),
        leftovers={f: tuple(x) for f, x in leftovers.items()},
        strangers={f: tuple(x) for f, x in strangers.items()},
    )
    write_json_atomic(directory / EVIDENCE_FILE, evidence_to_json(evidence))
    if interrupted:
        raise Interrupted(f"interrupted; the evidence gathered so far is in {directory}")
    return evidence


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
    found, runner, interrupted = _run_alone(
        out,
        run,
        wanted,
        budget_s=budget_s,
        python=python,
        timeout=run.timeout,
        what=run.mode.value,
        progress=progress,
    )
    run = dataclasses.replace(
        run,
        interrupted=run.interrupted or interrupted,
        tests=tuple(_with_reruns(t, found) for t in run.tests),
        files=tuple(_with_strays(f, runner, run.mode) for f in run.files),
    )
    write_json_atomic(out / "run.json", mode_run_to_json(run))
    if interrupted:
        raise Interrupted(f"interrupted; what finished is in {out}")
    return run


def _with_strays(file_run: FileRun, runner: _AloneRuns, mode: Mode) -> FileRun:
    """The file's run with what its alone-reruns left behind (suite: all of them)."""
    files = list(runner.leftovers) + list(runner.strangers)
    if mode is Mode.SUITE:
        keys = dict.fromkeys(files) if file_run.file == SUITE_UNIT else {}
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
    return dataclasses.replace(test, reruns=evidence.alone, cut=evidence.cut)
