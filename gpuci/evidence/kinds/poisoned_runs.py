"""Poisoned runs: does an order-dependent victim read memory it never wrote? Alone again,
every fresh device allocation filled (`gpuci.evidence.poisoned`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from gpuci.evidence.ahead import Request
from gpuci.evidence.claims import Claim
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.likely import poisoned_requests
from gpuci.evidence.poisoned import run_poisoned, worth_poisoning
from gpuci.model import Category, TestEvidence


class PoisonedRuns:
    """The round's order-dependent victims alone, poisoned (none in a --poison check, whose
    every run was poisoned already)."""

    name: ClassVar[str] = "poisoned"
    phase: ClassVar[str] = "poisoned"
    owns: ClassVar[frozenset[str]] = frozenset({"poisoned", "search"})
    in_rounds: ClassVar[bool] = True

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
