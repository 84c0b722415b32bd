"""Priorities: which suspects run alone, how often, and in what order.

The alone-runs themselves (how many each suspect needs, running them beside each other
and confirming a failure alone) are `gpuci.evidence.alone`'s; this module orders them.

Isolation suspects (a test whose outcome differs between modes) come first: they are
what a check is for. Tests that failed the same way in every mode come after, grouped by
fingerprint: a group of two or more runs one representative alone; where it fails alone
the same way, the others are `failed`, inferred from it, without a run of their own.
Where it passes alone, a second representative (from another file where the group spans
several) runs: where that one fails the same way, the others are inferred from it and
the first is a suspect of its own; otherwise (or where the first failed differently) the
group splits, and every member runs alone.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TextIO

from gpuci.evidence.alone import CUT_BY_BUDGET, more_alone
from gpuci.evidence.fingerprints import (
    STICKY_ERROR,
    FailureGroup,
    consistent_failures,
    fingerprint,
    group_failures,
)
from gpuci.evidence.probe import Prober, prepare_next
from gpuci.evidence.results import ModeResults
from gpuci.model import NOT_PASSING, Mode, Outcome, TestEvidence
from gpuci.run.proc.discover import file_of
from gpuci.run.sched.progress import say


@dataclass(frozen=True, slots=True, kw_only=True)
class Priorities:
    """The suspects in the order their evidence runs: isolation suspects, then tests that
    failed the same way everywhere, alone or as groups."""

    isolation: dict[str, int]  # alone-runs wanted, by id
    # isolation suspects that failed in every interpreter of their own file: their alone-run
    # will likely fail too, and a failure beside others would need a run with none anyway
    likely_failing: frozenset[str] = frozenset()
    consistent: dict[str, int]  # failed the same way in every mode, not in a large group
    groups: tuple[FailureGroup, ...]  # large groups of consistent failures


def prioritize(results: Mapping[Mode, ModeResults], wanted: Mapping[str, int]) -> Priorities:
    """Split the suspects: isolation suspects first, then consistent failures by group."""
    failures = consistent_failures({mode: r.run.tests for mode, r in results.items()}, list(wanted))
    groups = group_failures({i: t for i, t in failures.items() if t.message.strip()})
    large = tuple(g for g in groups if len(g.members) > 1)
    grouped = {m for g in large for m in g.members}
    isolation = {i: n for i, n in wanted.items() if i not in failures}
    return Priorities(
        isolation=isolation,
        likely_failing=_failed_in_own_files(results, isolation),
        consistent={i: n for i, n in wanted.items() if i in failures and i not in grouped},
        groups=large,
    )


def _failed_in_own_files(
    results: Mapping[Mode, ModeResults], suspects: Mapping[str, int]
) -> frozenset[str]:
    """The suspects that did not pass in any interpreter of their own file that ran them
    (parallel, isolated: not taken from another mode), and ran in at least one."""
    seen: dict[str, bool] = {}
    for mode in (Mode.PARALLEL, Mode.ISOLATED):
        for test in results[mode].run.tests if mode in results else ():
            if test.id in suspects and not test.inferred and test.outcome is not Outcome.NOT_RUN:
                seen[test.id] = seen.get(test.id, True) and test.outcome in NOT_PASSING
    return frozenset(i for i, failed in seen.items() if failed)


def first_alone(
    prober: Prober,
    wanted: Mapping[str, int],
    found: Mapping[str, TestEvidence],
    progress: TextIO,
    *,
    likely_failing: frozenset[str] = frozenset(),
    passed_likely: Callable[[str], None] | None = None,
) -> tuple[dict[str, TestEvidence], dict[str, int]]:
    """One alone-run each; a second at once for a test that failed its first (it tells a
    flaky test from a real failure before any culprit is searched for). The evidence, and
    the runs each test has had of those it wanted. The `likely_failing` run with nothing
    beside them from the start; `passed_likely` hears of each that passed."""
    first = {i: min(n, 1) for i, n in wanted.items()}
    merged = more_alone(prober, first, found, progress, likely_failing=likely_failing)
    for test_id in likely_failing & first.keys():  # passed: not the failure it looked
        if passed_likely and test_id in merged and Outcome.PASSED in merged[test_id].alone:
            passed_likely(test_id)  # what was started for it as one, ended
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
    """Each group's representative alone once (a second where the first passes); the rest
    inferred from the one that failed alone the same way. The evidence, and the members
    that run alone as any other suspect: a representative that passed, or every member of
    a group that split."""
    merged = dict(found)
    split: list[str] = []
    for index, group in enumerate(groups):
        if index + 1 < len(groups):  # the next group's first start-up while this one runs
            after, current = groups[index + 1].representatives[0], group.representatives[0]
            prepare_next(prober, after, current, strict=True)
        say(
            progress,
            f"evidence: {len(group.members)} tests failed the same way everywhere;"
            f" running one of them alone: {group.fingerprint}",
        )
        if prober.exhausted() or prober.stopping():
            for member in group.members:
                merged[member] = TestEvidence(id=member, cut=CUT_BY_BUDGET)
            continue
        tried: list[str] = []
        kept = ""  # the representative that failed alone the same way
        for rep in group.representatives:
            # a failure decides the group's category: nothing beside it
            ran = prober.run(
                [rep], phase="alone", label=f"alone (for its group): {rep}", strict=True
            )
            outcome = ran.outcome(rep)
            result = ran.results.get(rep)
            alike = (
                result is not None
                and outcome is Outcome.FAILED
                and fingerprint(rep, result.message, result.where) == group.fingerprint
            )
            tried.append(rep)
            merged[rep] = TestEvidence(id=rep, alone=(outcome,), fingerprint=group.fingerprint)
            say(progress, f"  {rep}: alone: {outcome.value}{'' if alike else ' (differs)'}")
            if alike:
                kept = rep
            if alike or outcome is not Outcome.PASSED or prober.exhausted():
                break  # a second only where the first passed
        rest = [m for m in group.members if m not in tried]
        if kept:
            # a sticky CUDA error poisons the context: after the representative in its
            # file, the same error may be the representative's doing, not the test's own
            later = poisoned_after(group, kept)
            split += later
            rest = [m for m in rest if m not in later]
            for member in rest:
                merged[member] = TestEvidence(
                    id=member, fingerprint=group.fingerprint, inferred_from=(kept,)
                )
            split += [r for r in tried if r != kept]
            say(progress, f"  the other {len(rest)}: failed, inferred from it")
        else:
            split += [*tried, *rest]
            say(progress, f"  the group splits: its other {len(rest)} run alone each")
    return merged, split


def poisoned_after(group: FailureGroup, kept: str) -> list[str]:
    """The members of a group whose failure is a sticky CUDA error that ran after `kept`
    in its file: they may fail by its error, so each runs alone (a cascade's victims)."""
    if not STICKY_ERROR.search(group.fingerprint):
        return []
    start = group.members.index(kept)
    return [m for m in group.members[start + 1 :] if file_of(m) == file_of(kept)]


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
