"""A fingerprint group's representative: does one of the tests that failed alike run alone
for them all? Its members' answers are inferred from it where it fails alone the same
way; where it passes (a sticky error's cascade), they run alone as any other suspect."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from gpuci.evidence.alone import first_alone, run_representatives
from gpuci.evidence.claims import Claim
from gpuci.evidence.classify import classify_results, together_outcomes
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.poisoned import poisoned_ahead
from gpuci.evidence.requests import Request
from gpuci.model import TestEvidence


class Representatives:
    """Each group's representative alone; the members of a group split run alone; then
    the round's categories, which the later kinds ask on."""

    name: ClassVar[str] = "group representatives"
    phase: ClassVar[str] = "alone"
    owns: ClassVar[frozenset[str]] = frozenset({"alone", "cut", "inferred_from"})
    in_rounds: ClassVar[bool] = True
    beside: ClassVar[bool] = False

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        return []  # asked for with the first alone-runs (`gpuci.evidence.likely`)

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        assert state.plan is not None
        merged, split = run_representatives(ctx, state.plan.groups, found)
        for group in state.plan.groups:
            for member in (m for m in group.members if m not in split):
                # a representative's one run, or the others' none, is all a kept group needs
                inferred = bool(merged[member].inferred_from)
                state.wanted[member] = 0 if inferred else min(state.now[member], 1)
                state.had[member] = len(merged[member].alone)  # not run again at the end
        # the cascade's later victims likely pass alone: their poisoned runs start with them
        # (known only now: handed to the runner at once)
        ctx.prober.start_ahead(_cascade_requests(ctx, split))
        merged, more = first_alone(ctx, {i: state.now[i] for i in split}, merged)
        # a representative that passed alone counts that run among its own
        state.had |= more | {
            i: len(merged[i].alone) for i in split if i in merged and merged[i].alone
        }
        state.classified = classify_results(
            ctx.results,
            {i: t.alone for i, t in merged.items()},
            ctx.orders,
            together=together_outcomes(merged),
        )
        return merged

    def claim(self, evidence: TestEvidence) -> Claim | None:
        return None  # it names no other test


def _cascade_requests(ctx: Context, split: list[str]) -> list[Request]:
    """A sticky error's later victims in its file (a group split) run alone now, and likely
    pass (the cascade's): their poisoned runs, to start with them."""
    if ctx.prober.hides_start_ups and not ctx.prober.poisoned:
        return poisoned_ahead(ctx, split)
    return []
