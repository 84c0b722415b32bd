"""Alone-runs: which suspects run by themselves in a fresh interpreter, how often, in what
order, and the runs themselves (K times for the whole check).

Isolation suspects (a test whose outcome differs between modes) come first: they are
what a check is for. Tests that failed the same way in every mode come after, grouped by
fingerprint: a group of two or more runs one representative alone; where it fails alone
the same way, the others are `failed`, inferred from it, without a run of their own.
Where it passes alone, a second representative (from another file where the group spans
several) runs: where that one fails the same way, the others are inferred from it and
the first is a suspect of its own; otherwise (or where the first failed differently) the
group splits, and every member runs alone.

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
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from gpuci.evidence.context import Context
from gpuci.evidence.fingerprints import (
    STICKY_ERROR,
    FailureGroup,
    consistent_failures,
    fingerprint,
    group_failures,
)
from gpuci.evidence.orders import first_in_interpreter, interpreter_order
from gpuci.evidence.probe import Prober
from gpuci.evidence.requests import Request, next_alone
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
    ctx: Context,
    wanted: Mapping[str, int],
    *,
    again: bool = False,  # they ran alone before: the line says so, not the same twice
    failed: frozenset[str] = frozenset(),  # tests that failed an earlier alone-run
) -> dict[str, TestEvidence]:
    """Every suspect's alone-runs, round by round, so a cut budget spreads evenly; where
    the prober has more than one slot a round's runs go beside each other, and a failing
    one is confirmed alone before it counts. A test that failed an earlier alone-run runs
    strictly at once: its failure, likely again, would need that run anyway."""
    prober, progress = ctx.prober, ctx.progress
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
                prober.start_ahead([next_alone(tests[index + 1], test_id, strict=strict)])
            ran = prober.run([test_id], phase="alone", label=f"alone: {test_id}", strict=strict)
            done[test_id] = ran.outcome(test_id)
            if ran.beside:
                beside.add(test_id)
                if done[test_id] in NOT_PASSING:  # its strict confirmation's start-up, now
                    prober.start_ahead([Request(ids=(test_id,), strict=True)])
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
    ctx: Context,
    wanted: Mapping[str, int],
    found: Mapping[str, TestEvidence],
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
    ran = run_alone(ctx, wanted, again=again, failed=failed)
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
    ctx: Context,
    wanted: Mapping[str, int],
    found: Mapping[str, TestEvidence],
    *,
    likely_failing: frozenset[str] = frozenset(),
    passed_likely: Callable[[str], None] | None = None,
) -> tuple[dict[str, TestEvidence], dict[str, int]]:
    """One alone-run each; a second at once for a test that failed its first (it tells a
    flaky test from a real failure before any culprit is searched for). The evidence, and
    the runs each test has had of those it wanted. The `likely_failing` run with nothing
    beside them from the start; `passed_likely` hears of each that passed."""
    first = {i: min(n, 1) for i, n in wanted.items()}
    merged = more_alone(ctx, first, found, likely_failing=likely_failing)
    for test_id in likely_failing & first.keys():  # passed: not the failure it looked
        if passed_likely and test_id in merged and Outcome.PASSED in merged[test_id].alone:
            passed_likely(test_id)  # what was started for it as one, ended
    again = {
        i: n - 1
        for i, n in wanted.items()
        if n > 1 and i in merged and Outcome.PASSED not in merged[i].alone and not merged[i].cut
    }
    merged = more_alone(ctx, again, merged)
    return merged, {i: n + again.get(i, 0) for i, n in first.items()}


def run_representatives(
    ctx: Context,
    groups: Sequence[FailureGroup],
    found: Mapping[str, TestEvidence],
    *,
    where: str = "everywhere",  # the modes they failed alike in, said
) -> tuple[dict[str, TestEvidence], list[str]]:
    """Each group's representative alone once (a second where the first passes); the rest
    inferred from the one that failed alone the same way. The evidence, and the members
    that run alone as any other suspect: a representative that passed, or every member of
    a group that split."""
    prober, progress = ctx.prober, ctx.progress
    merged = dict(found)
    split: list[str] = []
    for index, group in enumerate(groups):
        if index + 1 < len(groups):  # the next group's first start-up while this one runs
            after, current = groups[index + 1].representatives[0], group.representatives[0]
            prober.start_ahead([next_alone(after, current, strict=True)])
        say(
            progress,
            f"evidence: {len(group.members)} tests failed the same way {where};"
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
