"""The default evidence budget: the seconds the suspects' evidence should take, estimated
from the main passes, within a cap.

A budget taken from the main passes' wall starves a polluted suite (many findings, a short
suite) and overfeeds a failure storm (one finding, a long suite). This one follows the
work. Each interpreter costs its start-up (the main passes' per-file interpreters: their
wall less their tests' time, the median) plus the tests it runs (their longest
time in any mode). Then, for each isolation suspect (its outcome differs between modes):
its alone-runs; a poisoned run where it failed after others in one interpreter; a culprit
search over the n tests before it where it failed (for one that failed in isolated too,
where it passed: its providers are there): its bound, ceil(log2 n)+3 runs, twice the n tests'
time, and two confirmations of the culprit's replay (and, where it passed in the
suite, a run with the suite's other files collected first); for a failure only in
parallel, one pair per file beside it and one with them all, and the pair's
confirmation; one compute-sanitizer block per distinct CUDA fault; one run in threads
where it failed only there. For the tests that failed the same way everywhere: their
alone-runs, but 3 per large group, and the searches above for one whose file the lazy
isolated pass left out (its failures alike in every screen: it may pass alone). The sum,
times SLACK (estimates are rough, and a budget not spent costs nothing), is capped at
CAP_S.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from gpuci.evidence.alone import alone_runs_wanted, prioritize
from gpuci.evidence.fingerprints import fingerprint
from gpuci.evidence.memcheck import is_cuda_fault
from gpuci.evidence.orders import (
    MAX_BESIDE,
    Order,
    collected_files,
    interpreter_order,
    ran_beside,
    tests_before,
)
from gpuci.evidence.results import ModeResults
from gpuci.evidence.sanitizer import MIN_RUN_S
from gpuci.model import NOT_PASSING, Mode, Outcome, TestResult
from gpuci.steps import CONFIRMING

CAP_S = 1800.0  # at most 30 minutes of evidence, however many suspects
SLACK = 1.5
START_S = 2.0  # an interpreter's start-up where the main passes cannot tell
SANITIZER_SLOWDOWN = 5.0  # memcheck runs a test this many times slower, about
PER_FILE = (Mode.ISOLATED, Mode.PARALLEL, Mode.THREADS)  # a fresh interpreter per file


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """The default budget and what it is made of (seconds)."""

    seconds: float
    start_s: float  # one fresh interpreter's start-up
    parts: dict[str, float]  # alone, poisoned, culprits, sanitizer, threads, consistent
    suspects: int  # isolation suspects
    capped: bool

    def text(self) -> str:
        """One line: the budget and how it was reached."""
        made = ", ".join(f"{k} {v:.0f}s" for k, v in self.parts.items() if v)
        cap = f", capped at {CAP_S:.0f}s" if self.capped else ""
        return (
            f"evidence budget {self.seconds:.0f}s, from {self.suspects} isolation suspect(s)"
            f" ({made or 'nothing to run'}; {self.start_s:.1f}s start-up per run;"
            f" x{SLACK}{cap})"
        )


def _collected_search_s(results: Mapping[Mode, ModeResults], test_id: str, start: float) -> float:
    """A file that could not be collected alone: one run with the files collected before
    it in the suite, then their halving (`gpuci.evidence.kinds.provider_search.collected`); 0
    for a test."""
    files = collected_files(results, test_id) if "::" not in test_id else ()
    if not files:
        return 0.0
    return (math.ceil(math.log2(len(files))) + CONFIRMING + 1) * start


def default_budget(results: Mapping[Mode, ModeResults], runs: int) -> Estimate:
    """The budget the suspects of `results` need, with `runs` alone-runs each."""
    start = start_up(results)
    longest = _longest(results)

    def cost(ids: list[str]) -> float:
        return start + sum(longest.get(i, 0.0) for i in ids)

    def tests_s(ids: list[str]) -> float:
        return sum(longest.get(i, 0.0) for i in ids)

    wanted = alone_runs_wanted(results, runs) if runs else {}
    plan = prioritize(results, wanted)
    parts = dict.fromkeys(("alone", "poisoned", "culprits", "sanitizer", "threads"), 0.0)
    parts["consistent"] = 0.0
    orders = {mode: interpreter_order(r) for mode, r in results.items()}
    faults: set[str] = set()

    def search(test_id: str, seen: Mapping[Mode, TestResult]) -> None:
        """A poisoned run and a culprit search where it failed after others; pairs where
        it failed only in parallel; a run in threads where it failed only there."""
        failed = {m for m, t in seen.items() if t.outcome in NOT_PASSING and not t.inferred}
        before = _before(orders, test_id, failed)
        parts["culprits"] += _collected_search_s(results, test_id, start)
        if before:
            parts["poisoned"] += cost([test_id])
            steps = math.ceil(math.log2(len(before))) + CONFIRMING  # a search's bound
            victim = tests_s([test_id])
            parts["culprits"] += steps * (start + victim) + 2 * tests_s(before)
            parts["culprits"] += 2 * (start + victim + tests_s(before) / 2)  # confirmations
            suite = seen.get(Mode.SUITE)
            if suite is not None and suite.outcome is Outcome.PASSED:
                # passed in the suite: first one run with its other files collected
                parts["culprits"] += start + victim
        parallel = results.get(Mode.PARALLEL)
        if failed == {Mode.PARALLEL} and parallel is not None:
            beside = ran_beside(parallel, seen[Mode.PARALLEL].file)
            pairs = len(beside[:MAX_BESIDE]) + (1 if len(beside) > 1 else 0)
            pair_s = cost([test_id]) + _file_s(results, beside)
            parts["culprits"] += (pairs + 1) * pair_s  # and the pair's confirmation
        if failed == {Mode.THREADS}:
            parts["threads"] += cost([test_id])

    for test_id, n in plan.isolation.items():
        seen = {m: t for m, r in results.items() for t in r.run.tests if t.id == test_id}
        parts["alone"] += n * cost([test_id])
        search(test_id, seen)
        faults |= _faults(test_id, seen.values())
    for test_id, n in plan.consistent.items():
        parts["consistent"] += n * cost([test_id])
        seen = {m: t for m, r in results.items() for t in r.run.tests if t.id == test_id}
        if any(t.inferred for t in seen.values()):
            # the lazy isolated pass left its file out (alike in every screen): isolated
            # did not say whether it fails alone, so it may pass there and need a search
            search(test_id, seen)
        faults |= _faults(test_id, seen.values())
    for group in plan.groups:
        for rep in group.representatives:
            parts["consistent"] += cost([rep])
            seen = {m: t for m, r in results.items() for t in r.run.tests if t.id == rep}
            if any(t.inferred for t in seen.values()):
                search(rep, seen)  # as a consistent failure's above: it may pass alone
    parts["sanitizer"] = len(faults) * (MIN_RUN_S + SANITIZER_SLOWDOWN * start)
    total = SLACK * sum(parts.values())
    return Estimate(
        seconds=round(min(total, CAP_S), 1),
        start_s=start,
        parts=parts,
        suspects=len(plan.isolation),
        capped=total > CAP_S,
    )


def start_up(results: Mapping[Mode, ModeResults], *, otherwise: float = START_S) -> float:
    """One interpreter's start-up: the median over the main passes' per-file interpreters
    of their wall less their tests' time (`otherwise` where none ran)."""
    overheads = []
    for mode in PER_FILE:
        if mode not in results:
            continue
        run = results[mode].run
        spent: dict[str, float] = {}
        for test in run.tests:
            if not test.inferred:
                spent[test.file] = spent.get(test.file, 0.0) + test.duration
        for file_run in run.files:
            its = file_run.interpreters
            if file_run.inferred or not its:
                continue
            wall = file_run.duration - spent.get(file_run.file, 0.0)
            overheads.append(max(0.0, wall) / len(its))
    return round(statistics.median(overheads), 3) if overheads else otherwise


def fastest_start_up(results: Mapping[Mode, ModeResults]) -> float:
    """The quickest start-up (its start to its collection) of the main passes' per-file
    interpreters that started in their turn (one started ahead shows only what was not
    hidden, if anything): what one
    interpreter needs where others do not crowd the machine. The screens start many at
    once, each slowed by the others, so their median is the crowd's; an import that is
    expensive (PyTorch's) is so in every one."""
    seen = [
        i.startup_s
        for mode in PER_FILE
        if mode in results
        for file_run in results[mode].run.files
        for i in file_run.interpreters
        if i.startup_s and not i.ahead
    ]
    return min(seen) if seen else start_up(results)


def _longest(results: Mapping[Mode, ModeResults]) -> dict[str, float]:
    """Each test's longest time in any mode."""
    longest: dict[str, float] = {}
    for mode_results in results.values():
        for test in mode_results.run.tests:
            longest[test.id] = max(longest.get(test.id, 0.0), test.duration)
    return longest


def _before(orders: Mapping[Mode, Order], test_id: str, failed: set[Mode]) -> list[str]:
    """The tests a culprit search looks among: those before it where it failed (the
    fewest), or, for one that failed in isolated too (it may fail alone), where it passed
    (its providers are among them)."""
    where_failed: list[list[str]] = []
    where_passed: list[list[str]] = []
    for mode, order in orders.items():
        earlier = tests_before(order, test_id)
        if earlier:
            (where_failed if mode in failed else where_passed).append(earlier)
    if not failed:
        return []
    if Mode.ISOLATED in failed and where_passed:
        return min(where_passed, key=len)
    return min(where_failed or where_passed, key=len, default=[])


def _file_s(results: Mapping[Mode, ModeResults], files: list[str]) -> float:
    """The longest parallel run of any of `files` (a pair replays the whole file)."""
    parallel = results[Mode.PARALLEL].run
    return max((f.duration for f in parallel.files if f.file in files), default=0.0)


def _faults(test_id: str, seen: Iterable[TestResult]) -> set[str]:
    """The fingerprint of a CUDA fault or crash among its results (one sanitizer block
    serves every victim of one root)."""
    found: set[str] = set()
    for test in seen:
        if test.outcome is Outcome.CRASHED or is_cuda_fault(test.message):
            found.add(fingerprint(test_id, test.message, test.where) or test.file)
    return found
