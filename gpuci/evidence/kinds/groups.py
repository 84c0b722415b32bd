"""Groups: the victims of one culprit answered together, by two runs for all of them.

A polluter that breaks 31 later tests is one root with 31 victims; each victim's own
alone-runs and its own confirmation of the culprit are runs that tell nothing the group does
not. So the later victims of one interpreter that failed alike (the same category and
exception) wait while its first victim is searched
(`gpuci.evidence.kinds.culprit_search.culprits`); then its culprits answer all of them at
once, the first victim among them:

- its culprits before all of them, fresh (order-dependent: they fail; depends-on-others,
  its providers before them: they pass);
- all of them without the culprits, fresh (order-dependent: they pass; depends-on-others:
  they fail).

A run that decides by failing runs with nothing beside it; a run that decides by passing
may run beside others (it passed with more going on, not less). A victim both runs agree
on is blamed only once the run that shows it failing ran again, the same command, and
failed again (`gpuci.evidence.claims`): then its culprits are the first victim's, its
commands those runs exactly as they ran, and it needs no alone-run. One whose repeat
went the other way is `flaky`, whatever the first two runs said. One whose runs disagree
(another culprit's victim) gets the evidence of its own: alone-runs, then a search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar

from gpuci.evidence.claims import Claim, Standing, judge
from gpuci.evidence.classify import GROUP_WITH, GROUP_WITHOUT, classify_results
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.notes import NOT_REPRODUCED, SAME_RUN_BOTH_WAYS
from gpuci.evidence.probe import Prober, ProbeRun
from gpuci.evidence.requests import Request
from gpuci.evidence.results import ModeResults
from gpuci.evidence.victims import Task, plan_searches
from gpuci.model import (
    NOT_PASSING,
    PROBE_SHOWN,
    Category,
    Mode,
    Outcome,
    Probe,
    TestEvidence,
    TestResult,
)
from gpuci.run.proc.discover import file_of
from gpuci.run.sched.progress import say

GROUPED = (Category.ORDER_DEPENDENT, Category.DEPENDS_ON_OTHERS)
PHASE = "groups"


@dataclass(frozen=True, slots=True, kw_only=True)
class Waiting:
    """The later victims of one interpreter that wait for its first victim's culprits."""

    first: str
    category: Category
    members: tuple[str, ...]  # the others, in the order they ran


def waiting_victims(ctx: Context, suspects: Collection[str]) -> list[Waiting]:
    """The `suspects` that wait: those the screens alone make order-dependent or
    depends-on-others, grouped by the interpreter they are searched in and the exception
    they failed by; each group's first is searched, the rest wait for its culprits."""
    screens = classify_results(ctx.results, {}, ctx.orders)  # no evidence yet: the screens
    tentative = {i: c for i, c in screens.items() if i in suspects and c.category in GROUPED}
    groups: dict[tuple[Category, str, str], list[Task]] = {}
    for task in sorted(plan_searches(ctx, tentative, {}), key=lambda t: t.rank):
        raised = _raised(tentative[task.victim].seen)
        key = (task.category, task.candidates[0] if task.candidates else "", raised)
        groups.setdefault(key, []).append(task)
    return [
        Waiting(first=g[0].victim, category=g[0].category, members=tuple(t.victim for t in g[1:]))
        for g in groups.values()
        if len(g) > 1
    ]


def _raised(seen: Sequence[TestResult]) -> str:
    """The exception its first failure's message names (`AssertionError`), "" where none."""
    message = next((t.message for t in seen if t.outcome in NOT_PASSING and t.message), "")
    head = next(iter(message.strip().splitlines()), "")
    name, colon, _ = head.partition(":")
    return name if colon and name.replace(".", "").replace("_", "").isalnum() else ""


def next_round(
    left: Sequence[str], wanted: Mapping[str, int], found: Mapping[str, TestEvidence]
) -> dict[str, int]:
    """The waiting victims that go round again, with the alone-runs each wants: those their
    group runs left, but not one that another's search answered (a pair's partner: its
    own search would ask again what its victim's pair runs showed); its alone-runs come
    with the rest at the end."""
    return {i: wanted[i] for i in left if not (i in found and found[i].culprits)}


def run_groups(
    ctx: Context, waiting: Sequence[Waiting], found: Mapping[str, TestEvidence]
) -> tuple[dict[str, TestEvidence], list[str]]:
    """Each group answered by its first victim's culprits: the evidence, and the members
    whose runs disagreed (or that no run answered: no culprits, a cut budget)."""
    prober, results, progress = ctx.prober, ctx.results, ctx.progress
    merged = dict(found)
    left: list[str] = []
    place = {t.id: i for i, t in enumerate(_reference(results).run.tests)}
    for group in waiting:
        first = merged.get(group.first, TestEvidence(id=group.first))
        culprits = first.culprits
        if group.category is Category.ORDER_DEPENDENT and any("::" not in c for c in culprits):
            culprits = ()  # files it failed beside (a pair), not tests it ran after
        # a member in a culprit's file that ran before it cannot follow it in one run
        members = [
            m for m in (group.first, *group.members) if culprits and _after(m, culprits, place)
        ]
        left += [m for m in group.members if m not in members]
        if len(members) < 2 or prober.exhausted() or prober.stopping():
            left += [m for m in members if m != group.first]
            continue
        answered = _answer(prober, group, culprits, sorted(members, key=place.__getitem__))
        for member, evidence in answered.items():
            before = merged.get(member, TestEvidence(id=member))
            if evidence is None:
                if member != group.first:
                    left.append(member)
                continue
            # a flaky member (its repeated group run went both ways) names no culprits, and
            # a first victim's own search note says so too
            blamed = bool(evidence.culprits)
            merged[member] = dataclasses.replace(
                before,
                culprits=evidence.culprits,
                search=(
                    before.search or evidence.search
                    if blamed
                    else "; ".join(filter(None, (before.search, evidence.search)))
                ),
                probes=before.probes + evidence.probes,
                group=evidence.group,
            )
        told = sum(1 for m, e in answered.items() if e is not None)
        say(progress, f"  {told} of {len(members)} answered by group runs of {group.first}'s")
    return merged, left


def _reference(results: Mapping[Mode, ModeResults]) -> ModeResults:
    return results.get(Mode.SUITE) or next(iter(results.values()))


def _after(member: str, culprits: Sequence[str], place: Mapping[str, int]) -> bool:
    """Whether a run of the culprits, then `member`, runs them in that order: its file is no
    culprit file (collected, none of its tests run), nor holds a culprit after it."""
    mine = place.get(member)
    for culprit in culprits:
        if file_of(culprit) != file_of(member):
            continue
        if "::" not in culprit or mine is None or place.get(culprit, mine) >= mine:
            return False
    return mine is not None


def _answer(
    prober: Prober, group: Waiting, culprits: Sequence[str], members: Sequence[str]
) -> dict[str, TestEvidence | None]:
    """Each member's evidence where the two group runs agree on it and the run that shows
    it failing, repeated, agrees again (`_judged`); None where not. Where some disagreed,
    the two runs once more with only those that agreed: the printed commands are the runs
    of the victims they name, and show each of them."""
    answered: dict[str, TestEvidence | None] = {}
    earlier: dict[str, tuple[Probe, ...]] = {}  # the first pair's, where it ran again
    while len(members) > 1 and not prober.exhausted() and not prober.stopping():
        agreed = _pair(prober, group, culprits, members)
        answered |= {m: None for m in members if m not in agreed}
        if len(agreed) == len(members) or earlier:
            runs = 4 if earlier else 2
            return answered | _judged(
                prober, group, culprits, members, agreed, earlier=earlier, runs=runs
            )
        members, earlier = list(agreed), agreed
    return answered | dict.fromkeys(members)


def _judged(
    prober: Prober,
    group: Waiting,
    culprits: Sequence[str],
    members: Sequence[str],
    agreed: Mapping[str, tuple[Probe, ...]],
    *,
    earlier: Mapping[str, tuple[Probe, ...]],
    runs: int,
) -> dict[str, TestEvidence | None]:
    """The members the last two group runs (of `members`) agreed on (`agreed`: their runs),
    each judged once the run that shows it failing ran again, the same command
    (`gpuci.evidence.claims`): one that failed both times is answered with the first
    victim's culprits; one that went both ways is flaky, whatever the group runs said; one
    unrepeated (a cut budget), None."""
    if prober.exhausted() or prober.stopping():
        return dict.fromkeys(agreed)
    polluted = group.category is Category.ORDER_DEPENDENT
    again = _run_half(prober, group, culprits, members, failing=True)
    failing_kind = GROUP_WITH if polluted else GROUP_WITHOUT
    verbs = ("fail", "pass") if polluted else ("pass", "fail")
    answered: dict[str, TestEvidence | None] = {}
    for member, last in agreed.items():
        repeat = next(p for p in last if p.kind == failing_kind)  # the command it repeats
        repeat = dataclasses.replace(repeat, outcome=again.outcome(member))
        claim = Claim(
            victim=member,
            failing=(*(p.outcome for p in last if p.kind == failing_kind), repeat.outcome),
            other=tuple(p.outcome for p in last if p.kind != failing_kind),
        )
        standing = judge(claim)
        if standing is Standing.STANDS:
            search = (
                f"group: {len(members)} victims {verbs[0]} after the culprits of {group.first}"
                f" and {verbs[1]} without them, {runs + 1} runs for all"
            )
        elif standing is Standing.FLAKY:
            search = f"group: {NOT_REPRODUCED}: its group run went both ways ({SAME_RUN_BOTH_WAYS})"
        else:
            answered[member] = None
            continue
        answered[member] = TestEvidence(
            id=member,
            culprits=tuple(culprits) if standing is Standing.STANDS else (),
            search=search,
            probes=(*earlier.get(member, ()), *last, repeat),
            group=tuple(members),
        )
    return answered


def _ran_alone_in_its_group(first: TestEvidence | None) -> bool:
    """Whether the group's first victim, blamed by its group runs, passed first in their run
    without the culprits: a fresh interpreter, nothing before it, its outcome decided before
    the next test began. That is an alone-run that passed (one beside others answers
    "passes"), so the one it still wanted at the end is not asked again."""
    if first is None or not first.culprits or not first.group:
        return False
    return any(
        p.kind == GROUP_WITHOUT and p.count == 0 and p.outcome is Outcome.PASSED
        for p in first.probes
    )


def _run_half(
    prober: Prober,
    group: Waiting,
    culprits: Sequence[str],
    members: Sequence[str],
    *,
    failing: bool,
) -> ProbeRun:
    """One group run: the members after the culprits (`failing` for order-dependent
    victims), or without them. The run that decides by failing has nothing beside it."""
    polluted = group.category is Category.ORDER_DEPENDENT
    label = f"{len(members)} victims of {culprits[0]}"
    if failing is polluted:
        before = [c for c in culprits if "::" in c]
        collect = [c for c in culprits if "::" not in c]  # provider files: imported, not run
        return prober.run(
            [*before, *members],
            collect=collect,
            phase=PHASE,
            label=f"group: {label}, after it",
            strict=polluted,
        )
    return prober.run(
        list(members), phase=PHASE, label=f"group: {label}, without it", strict=not polluted
    )


def _pair(
    prober: Prober,
    group: Waiting,
    culprits: Sequence[str],
    members: Sequence[str],
) -> dict[str, tuple[Probe, ...]]:
    """The two group runs; the runs of each member they agree on."""
    polluted = group.category is Category.ORDER_DEPENDENT
    with_them = _run_half(prober, group, culprits, members, failing=polluted)
    without = _run_half(prober, group, culprits, members, failing=not polluted)
    agreed: dict[str, tuple[Probe, ...]] = {}
    for index, member in enumerate(members):
        after, alone = with_them.outcome(member), without.outcome(member)
        agree = (
            after in NOT_PASSING and alone is Outcome.PASSED
            if polluted
            else after is Outcome.PASSED and alone in NOT_PASSING
        )
        if not agree:
            continue
        others = tuple(members[:index])
        agreed[member] = (
            Probe(
                count=len(culprits) + index,
                shown=(*culprits, *others)[-PROBE_SHOWN:],
                outcome=after,
                kind=GROUP_WITH,
            ),
            Probe(count=index, shown=others[-PROBE_SHOWN:], outcome=alone, kind=GROUP_WITHOUT),
        )
    return agreed


class GroupRuns:
    """The later victims of one interpreter that failed alike, answered by their first
    victim's culprits in two group runs (with them, without them), the run that shows
    each victim failing repeated (`gpuci.evidence.claims`)."""

    name: ClassVar[str] = "group runs"
    phase: ClassVar[str] = PHASE
    owns: ClassVar[frozenset[str]] = frozenset({"culprits", "search", "probes", "group"})
    in_rounds: ClassVar[bool] = True
    beside: ClassVar[bool] = False

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        return []  # which runs it makes turns on the first victim's culprits, found just before

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        waiting = waiting_victims(ctx, state.pending)
        merged, left = run_groups(ctx, waiting, found)
        for answered in {m for w in waiting for m in w.members} - set(left):
            state.wanted[answered] = 0  # its group runs answered what its alone-runs would
        for group in waiting:
            if _ran_alone_in_its_group(merged.get(group.first)):
                state.had[group.first] = state.had.get(group.first, 0) + 1
        state.left = left
        return merged

    def claim(self, evidence: TestEvidence) -> Claim | None:
        """The group runs that show the victim failing (after its culprits, or without its
        providers), against the others; where none was recorded, None."""
        with_them = tuple(p.outcome for p in evidence.probes if p.kind == GROUP_WITH)
        without = tuple(p.outcome for p in evidence.probes if p.kind == GROUP_WITHOUT)
        if not with_them and not without:
            return None
        polluted = any(o in NOT_PASSING for o in with_them)
        failing, other = (with_them, without) if polluted else (without, with_them)
        return Claim(victim=evidence.id, failing=failing, other=other)
