"""Poisoned runs: does an order-dependent victim read memory it never wrote? Each alone
again with every fresh device allocation filled with 0xFF (`gpuci.evidence.poisoned`),
telling a victim that reads memory it never wrote (its own bug) from one its culprit broke."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import ClassVar

from gpuci.evidence.claims import Claim
from gpuci.evidence.classify import classify_results
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.notes import NOT_REPRODUCED, SAME_RUN_BOTH_WAYS
from gpuci.evidence.poisoned import poisonable, poisoned_ahead, worth_poisoning
from gpuci.evidence.probe import Prober, ProbeRun
from gpuci.evidence.requests import Request
from gpuci.model import NOT_PASSING, Category, Outcome, TestEvidence
from gpuci.run.proc.discover import POISON_ENV
from gpuci.run.sched.progress import say


class PoisonedRuns:
    """The round's order-dependent victims alone, poisoned (none in a --poison check, whose
    every run was poisoned already)."""

    name: ClassVar[str] = "poisoned"
    phase: ClassVar[str] = "poisoned"
    owns: ClassVar[frozenset[str]] = frozenset({"poisoned", "search"})
    in_rounds: ClassVar[bool] = True
    beside: ClassVar[bool] = False

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        # again before each kind: those whose first alone-runs passed since start now
        return poisoned_requests(ctx, found, only=state.now.keys())

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        if ctx.prober.poisoned or state.classified is None:
            return dict(found)
        victims = [
            t.id
            for t in state.classified.values()
            if t.category is Category.ORDER_DEPENDENT and t.id in state.now
        ]
        return run_poisoned(ctx, worth_poisoning(ctx.results, victims), found)

    def claim(self, evidence: TestEvidence) -> Claim | None:
        return None  # it names no other test


def poisoned_requests(
    ctx: Context, found: Mapping[str, TestEvidence], *, only: Collection[str]
) -> list[Request]:
    """The poisoned runs of the suspects (`only`) that passed their first alone-run and are
    order-dependent victims, to start ahead while the other alone-runs go on (the poisoned
    runs start at once after them, beside each other, and would otherwise start cold).
    Again after each stage: one started already counts."""
    if not ctx.prober.hides_start_ups or ctx.prober.poisoned:
        return []
    alone = {i: t.alone for i, t in found.items() if t.alone}
    classified = classify_results(ctx.results, alone, ctx.orders)
    victims = [
        t.id
        for t in classified.values()
        if t.category is Category.ORDER_DEPENDENT and t.id in only and Outcome.PASSED in t.reruns
    ]
    return poisoned_ahead(ctx, victims)


def run_poisoned(
    ctx: Context, victims: Sequence[str], found: Mapping[str, TestEvidence]
) -> dict[str, TestEvidence]:
    """Each order-dependent victim alone once more, every fresh allocation filled with 0xFF:
    one that fails so twice reads memory it never wrote (its own bug, not its culprit's).
    The victims' first runs go side by side; a failure runs again with nothing beside it
    (twice where that passes: the first failure may have been the load's). One whose runs
    with nothing beside them went both ways under identical conditions is flaky (its
    search says so, and none is made)."""
    prober, progress = ctx.prober, ctx.progress
    merged = dict(found)
    if victims and not poisonable(prober):
        say(progress, "poisoned allocations: skipped (neither CuPy nor PyTorch is importable)")
        return merged
    if victims:
        say(progress, f"poisoned allocations: running {len(victims)} victim(s) alone")

    def poisoned(test_id: str) -> tuple[list[Outcome], bool]:
        if prober.exhausted() or prober.stopping():
            return [], False
        first = _poisoned_run(prober, test_id)
        outcomes = [first.outcome(test_id)]
        if outcomes[0] in NOT_PASSING and not prober.exhausted():  # chance, or its bug?
            outcomes.append(_poisoned_run(prober, test_id, strict=True).outcome(test_id))
            if first.beside and outcomes[1] is Outcome.PASSED and not prober.exhausted():
                # the first failed beside others: the load, or chance? Once more, strictly
                outcomes.append(_poisoned_run(prober, test_id, strict=True).outcome(test_id))
        return outcomes, first.beside

    with ThreadPoolExecutor(max_workers=max(1, prober.admission.slots)) as pool:
        done = list(pool.map(poisoned, victims))
    for test_id, (outcomes, beside) in zip(victims, done, strict=True):
        if not outcomes:
            continue
        before = merged.get(test_id, TestEvidence(id=test_id))
        strict = outcomes[1:] if beside else outcomes  # the runs with nothing beside them
        if Outcome.PASSED in strict and any(o in NOT_PASSING for o in strict):
            merged[test_id] = dataclasses.replace(
                before,
                search=f"{NOT_REPRODUCED}: poisoned, it failed, then not ({SAME_RUN_BOTH_WAYS})",
            )
        elif outcomes[0] in NOT_PASSING and len(outcomes) == 1:  # unconfirmed: the budget
            merged[test_id] = before
        else:  # a failure beside others that passed alone counts as its strict pass
            merged[test_id] = dataclasses.replace(before, poisoned=outcomes[-1])
        say(progress, f"  {test_id}: poisoned: {', '.join(o.value for o in outcomes)}")
    return merged


def _poisoned_run(prober: Prober, test_id: str, *, strict: bool = False) -> ProbeRun:
    return prober.run(
        [test_id],
        phase="poisoned",
        label=f"poisoned: {test_id}",
        env={POISON_ENV: "1"},
        strict=strict,
    )
