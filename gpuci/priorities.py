"""Priorities: which suspects run alone, how often, and in what order.

The alone-runs: each test that did not pass in some mode runs by itself in a fresh
interpreter, K times (default 2) for the whole check, one at a time, with the same GPUs
as every other interpreter of the check. A test whose isolated run was the first of its
interpreter was already seen alone once; a test that timed out gets one alone run at
most. What the budget cuts is recorded per test, never silently classified.

Isolation suspects (a test whose outcome differs between modes) come first: they are
what a check is for. Tests that failed the same way in every mode come after, grouped by
fingerprint: a group of more than REPRESENTATIVES gets one alone-run for each of a few
representatives, spread over its files; when each fails alone the same way, the others
are `failed`, inferred from them, without a run of their own. A representative that
passes alone (or fails differently) splits its group: every member then runs alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from gpuci.fingerprints import (
    REPRESENTATIVES,
    FailureGroup,
    consistent_failures,
    fingerprint,
    group_failures,
)
from gpuci.interpreter import EXIT_ID
from gpuci.model import NOT_PASSING, Mode, Outcome, TestEvidence, TestResult, printable
from gpuci.probe import Prober
from gpuci.reproduce import first_in_interpreter, interpreter_order
from gpuci.results import ModeResults

CUT_BY_BUDGET = "not rerun: budget"  # no alone-run ran


@dataclass(frozen=True, slots=True, kw_only=True)
class Priorities:
    """The suspects in the order their evidence runs: isolation suspects, then tests that
    failed the same way everywhere, alone or as groups."""

    isolation: dict[str, int]  # alone-runs wanted, by id
    consistent: dict[str, int]  # failed the same way in every mode, not in a large group
    groups: tuple[FailureGroup, ...]  # large groups of consistent failures


def is_suspect(test: TestResult) -> bool:
    """A real test (not a pseudo test for an interpreter's death) that did not pass."""
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


def prioritize(results: Mapping[Mode, ModeResults], wanted: Mapping[str, int]) -> Priorities:
    """Split the suspects: isolation suspects first, then consistent failures by group."""
    failures = consistent_failures({mode: r.run.tests for mode, r in results.items()}, list(wanted))
    groups = group_failures({i: t for i, t in failures.items() if t.message.strip()})
    large = tuple(g for g in groups if len(g.members) > REPRESENTATIVES)
    grouped = {m for g in large for m in g.members}
    return Priorities(
        isolation={i: n for i, n in wanted.items() if i not in failures},
        consistent={i: n for i, n in wanted.items() if i in failures and i not in grouped},
        groups=large,
    )


def run_alone(
    prober: Prober, wanted: Mapping[str, int], *, progress: TextIO
) -> dict[str, TestEvidence]:
    """Every suspect's alone-runs, round by round, so a cut budget spreads evenly."""
    alone: dict[str, list[Outcome]] = {i: [] for i in wanted}
    cut: set[str] = set()
    _say(
        progress,
        f"evidence: running {sum(1 for n in wanted.values() if n)} test(s) alone,"
        f" {sum(wanted.values())} run(s){_budget(prober)}",
    )
    for round_ in range(max(wanted.values(), default=0)):
        for test_id, n in wanted.items():
            if n <= round_ or prober.stopping():
                continue
            if prober.exhausted():
                cut.add(test_id)
                continue
            ran = prober.run([test_id], phase="alone", label=f"alone: {test_id}")
            alone[test_id].append(ran.outcome(test_id))
    found = {
        i: TestEvidence(id=i, alone=tuple(o), cut=CUT_BY_BUDGET if i in cut else "")
        for i, o in alone.items()
    }
    for test in found.values():
        outcomes = ", ".join(o.value for o in test.alone) or "-"
        _say(progress, f"  {test.id}: alone: {outcomes}{f' ({test.cut})' if test.cut else ''}")
    return found


def more_alone(
    prober: Prober, wanted: Mapping[str, int], found: Mapping[str, TestEvidence], progress: TextIO
) -> dict[str, TestEvidence]:
    """More alone-runs of `wanted`, added to what was found."""
    merged = dict(found)
    if not any(wanted.values()):
        return merged
    for test_id, extra in run_alone(prober, wanted, progress=progress).items():
        before = merged.get(test_id, TestEvidence(id=test_id))
        merged[test_id] = dataclasses.replace(
            before, alone=before.alone + extra.alone, cut=before.cut or extra.cut
        )
    return merged


def first_alone(
    prober: Prober, wanted: Mapping[str, int], found: Mapping[str, TestEvidence], progress: TextIO
) -> tuple[dict[str, TestEvidence], dict[str, int]]:
    """One alone-run each; a second at once for a test that failed its first (it tells a
    flaky test from a real failure before any culprit is searched for). The evidence, and
    the runs each test has had of those it wanted."""
    first = {i: min(n, 1) for i, n in wanted.items()}
    merged = more_alone(prober, first, found, progress)
    again = {
        i: n - 1
        for i, n in wanted.items()
        if n > 1 and i in merged and Outcome.PASSED not in merged[i].alone and not merged[i].cut
    }
    merged = more_alone(prober, again, merged, progress)
    return merged, {i: n + again.get(i, 0) for i, n in first.items()}


def run_representatives(
    prober: Prober,
    groups: Sequence[FailureGroup],
    found: Mapping[str, TestEvidence],
    *,
    progress: TextIO,
) -> tuple[dict[str, TestEvidence], list[str]]:
    """Each group's representatives alone once; the rest inferred from them where each
    failed alone the same way. The evidence, and the members of the groups that split."""
    merged = dict(found)
    split: list[str] = []
    for group in groups:
        reps = group.representatives
        _say(
            progress,
            f"evidence: {len(group.members)} tests failed the same way everywhere;"
            f" running {len(reps)} of them alone: {group.fingerprint}",
        )
        if prober.exhausted() or prober.stopping():
            for member in group.members:
                merged[member] = TestEvidence(id=member, cut=CUT_BY_BUDGET)
            continue
        same = True
        for rep in reps:
            ran = prober.run([rep], phase="alone", label=f"alone (for its group): {rep}")
            outcome = ran.outcome(rep)
            result = ran.results.get(rep)
            alike = (
                result is not None
                and outcome is Outcome.FAILED
                and fingerprint(rep, result.message, result.where) == group.fingerprint
            )
            same = same and alike
            merged[rep] = TestEvidence(id=rep, alone=(outcome,), fingerprint=group.fingerprint)
            _say(progress, f"  {rep}: alone: {outcome.value}{'' if alike else ' (differs)'}")
        rest = [m for m in group.members if m not in reps]
        if same:
            for member in rest:
                merged[member] = TestEvidence(
                    id=member, fingerprint=group.fingerprint, inferred_from=reps
                )
            _say(progress, f"  the other {len(rest)}: failed, inferred from them")
        else:
            split += rest
            _say(progress, f"  the group splits: its other {len(rest)} run alone each")
    return merged, split


def describe_cuts(
    found: Mapping[str, TestEvidence], wanted: Mapping[str, int]
) -> dict[str, TestEvidence]:
    """Each cut said as what ran: none (`not rerun: budget`), or how many of how many."""
    described = dict(found)
    for test_id, test in found.items():
        want = wanted.get(test_id, 0)
        if test.cut and test.alone and want > len(test.alone):
            missing = want - len(test.alone)
            described[test_id] = dataclasses.replace(
                test, cut=f"the budget cut {missing} of {want} alone-runs"
            )
    return described


def _budget(prober: Prober) -> str:
    left = prober.left()
    return "" if left is None else f", budget left {left:.0f}s"


def _say(progress: TextIO, text: str) -> None:
    print(printable(f"gpuci: {text}"), file=progress, flush=True)
