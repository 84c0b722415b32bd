"""Alone-runs: each suspect by itself in a fresh interpreter, K times for the whole check.

A test whose isolated run was the first of its interpreter was already seen alone once; a
test that timed out gets one alone run at most. Alone-runs may run beside each other, up
to the check's slots (a pass answers the question: it passed with more going on, not
less); a failing one is confirmed alone, with nothing else running, before it counts, and
a test that failed an alone-run runs its next ones that way from the start.
`--evidence-budget` caps the seconds spent; what it cuts is recorded per test ("not rerun:
budget"), never silently classified.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import TextIO

from gpuci.evidence.orders import first_in_interpreter, interpreter_order
from gpuci.evidence.probe import Prober, prepare_next
from gpuci.evidence.results import ModeResults
from gpuci.model import NOT_PASSING, PROBE_SHOWN, Mode, Outcome, TestEvidence, TestResult
from gpuci.run.proc.discover import file_of
from gpuci.run.proc.endings import EXIT_ID
from gpuci.run.proc.journal import uncollectable
from gpuci.run.sched.progress import say

CUT_BY_BUDGET = "not rerun: budget"  # no alone-run ran


def is_suspect(test: TestResult) -> bool:
    """A real test (not a pseudo test for an interpreter's death) that did not pass, or a
    file that could not be collected: its import runs alone as a test would."""
    if uncollectable(test):
        return True
    return test.outcome in NOT_PASSING and not test.id.endswith(EXIT_ID) and "::" in test.id


def alone_runs_wanted(results: Mapping[Mode, ModeResults], runs: int) -> dict[str, int]:
    """How many alone-runs each suspect of these modes needs, in the order found."""
    isolated = results.get(Mode.ISOLATED)
    order = interpreter_order(isolated) if isolated is not None else None
    iso_by_id = {t.id: t for t in isolated.run.tests} if isolated is not None else {}
    seen: dict[str, TestResult] = {}
    timed_out: set[str] = set()
    done: dict[str, int] = {}  # alone-runs a `gpuci run` job already did in its mode
    for mode_results in results.values():
        for test in mode_results.run.tests:
            if is_suspect(test):
                seen.setdefault(test.id, test)
                if test.outcome is Outcome.TIMED_OUT:
                    timed_out.add(test.id)
            if test.reruns:
                done[test.id] = max(done.get(test.id, 0), len(test.reruns))
    wanted: dict[str, int] = {}
    for test_id in seen:
        iso = iso_by_id.get(test_id)
        # isolated ran it first in a fresh interpreter: the same conditions as alone
        seen_alone = (
            order is not None
            and iso is not None
            and not iso.inferred
            and iso.outcome is not Outcome.NOT_RUN
            and first_in_interpreter(order, test_id)
        )
        n = runs - (1 if seen_alone else 0)
        n = min(n, 1) if test_id in timed_out else n
        wanted[test_id] = max(0, n - done.get(test_id, 0))
    return wanted


def run_alone(
    prober: Prober,
    wanted: Mapping[str, int],
    *,
    progress: TextIO,
    again: bool = False,  # they ran alone before: the line says so, not the same twice
    failed: frozenset[str] = frozenset(),  # tests that failed an earlier alone-run
) -> dict[str, TestEvidence]:
    """Every suspect's alone-runs, round by round, so a cut budget spreads evenly; where
    the prober has more than one slot a round's runs go beside each other, and a failing
    one is confirmed alone before it counts. A test that failed an earlier alone-run runs
    strictly at once: its failure, likely again, would need that run anyway."""
    alone: dict[str, list[Outcome]] = {i: [] for i in wanted}
    failing = set(failed)
    cut: set[str] = set()
    say(
        progress,
        f"evidence: running {sum(1 for n in wanted.values() if n)} test(s) alone"
        f"{' again' if again else ''},"
        f" {sum(wanted.values())} run(s){_budget(prober)}",
    )
    for round_ in range(max(wanted.values(), default=0)):
        todo = [i for i, n in wanted.items() if n > round_]
        for test_id, outcome in _alone_round(prober, todo, cut, failing).items():
            alone[test_id].append(outcome)
            if outcome in NOT_PASSING:
                failing.add(test_id)
    found = {
        i: TestEvidence(id=i, alone=tuple(o), cut=CUT_BY_BUDGET if i in cut else "")
        for i, o in alone.items()
    }
    for test in found.values():
        outcomes = ", ".join(o.value for o in test.alone) or "-"
        say(progress, f"  {test.id}: alone: {outcomes}{f' ({test.cut})' if test.cut else ''}")
    return found


def _alone_round(
    prober: Prober, todo: list[str], cut: set[str], failing: set[str]
) -> dict[str, Outcome]:
    """One alone-run of each of `todo`; the outcomes that count, strict ones for failures
    (and for the `failing`, which run strictly from the start)."""

    def one_by_one(tests: list[str], *, strict: bool = False) -> dict[str, Outcome]:
        done: dict[str, Outcome] = {}
        for index, test_id in enumerate(tests):
            if prober.stopping():
                break
            if prober.exhausted():
                cut.add(test_id)
                continue
            if index + 1 < len(tests):  # the next one's start-up while this one runs
                prepare_next(prober, tests[index + 1], test_id, strict=strict)
            ran = prober.run([test_id], phase="alone", label=f"alone: {test_id}", strict=strict)
            done[test_id] = ran.outcome(test_id)
            if ran.beside:
                beside.add(test_id)
                if done[test_id] in NOT_PASSING:  # its strict confirmation's start-up, now
                    prober.prepare([test_id], strict=True)
        return done

    def file_by_file(tests: list[str], *, strict: bool = False) -> dict[str, Outcome]:
        # the tests of one file run one after the other (one slot, or one GPU, each file)
        by_file: dict[str, list[str]] = {}
        for test_id in tests:
            by_file.setdefault(file_of(test_id), []).append(test_id)
        if prober.admission.slots <= 1 or len(by_file) <= 1:
            return one_by_one(tests, strict=strict)
        with ThreadPoolExecutor(max_workers=min(prober.admission.slots, len(by_file))) as pool:
            rounds = list(pool.map(lambda t: one_by_one(t, strict=strict), by_file.values()))
        return {i: o for done in rounds for i, o in done.items()}

    beside: set[str] = set()  # ran with another evidence run beside it
    loose = [i for i in todo if i not in failing]
    outcomes = file_by_file(loose)
    # a pass beside others answers the question; a failure may be the others': again,
    # with nothing else running on its GPUs, and that run is the one that counts (with
    # several GPUs, strict runs of files that stay on one GPU run at once, a GPU each)
    confirm = [i for i in loose if outcomes.get(i) in NOT_PASSING and i in beside]
    strict_ids = [*confirm, *(i for i in todo if i in failing)]
    at_once = file_by_file if prober.admission.devices > 1 else one_by_one
    strict = at_once(strict_ids, strict=True)
    for test_id in confirm:
        if test_id not in strict:  # its confirmation was cut: a failure beside others
            outcomes.pop(test_id, None)  # does not count
    return outcomes | strict


def _budget(prober: Prober) -> str:
    left = prober.left()
    return "" if left is None else f", budget left {left:.0f}s"


def more_alone(
    prober: Prober,
    wanted: Mapping[str, int],
    found: Mapping[str, TestEvidence],
    progress: TextIO,
    *,
    likely_failing: frozenset[str] = frozenset(),
) -> dict[str, TestEvidence]:
    """More alone-runs of `wanted`, added to what was found; a test that failed an earlier
    one, or is `likely_failing`, runs with nothing beside it from the start."""
    merged = dict(found)
    if not any(wanted.values()):
        return merged
    again = any(found[i].alone for i, n in wanted.items() if n and i in found)
    failed = frozenset(
        i for i in wanted if i in found and any(o in NOT_PASSING for o in found[i].alone)
    ) | (likely_failing & wanted.keys())
    ran = run_alone(prober, wanted, progress=progress, again=again, failed=failed)
    for test_id, extra in ran.items():
        before = merged.get(test_id, TestEvidence(id=test_id))
        merged[test_id] = dataclasses.replace(
            before, alone=before.alone + extra.alone, cut=before.cut or extra.cut
        )
    return merged


def unstable_note(ids: set[str]) -> list[str]:
    """Once, the tests evidence could not run by id: each interpreter computes their id anew
    (a parameter made at import: `datetime.now()`, a random value, an object's address)."""
    if not ids:
        return []
    shown = ", ".join(sorted(ids)[:PROBE_SHOWN])
    more = f" and {len(ids) - PROBE_SHOWN} more" if len(ids) > PROBE_SHOWN else ""
    return [
        f"{len(ids)} test(s) could not run alone: their id differs in every interpreter (a"
        f" parameter computed at import), so no run can name them: {shown}{more}"
    ]
