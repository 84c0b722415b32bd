"""The first alone-runs: does an isolation suspect fail with nothing before it, in a fresh
interpreter? (`gpuci.evidence.alone`, in its order: the likely failing with nothing
beside them, a second run at once for one that fails.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from gpuci.evidence.alone import first_alone, prioritize
from gpuci.evidence.claims import Claim
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.likely import likely_requests, withdraw_unlikely
from gpuci.evidence.requests import Request
from gpuci.model import TestEvidence


class FirstAlone:
    """The suspects' first alone-runs; theirs start ahead (`gpuci.evidence.likely`), and
    what a later kind started for a likely failing suspect that passes is ended."""

    name: ClassVar[str] = "alone"
    phase: ClassVar[str] = "alone"
    owns: ClassVar[frozenset[str]] = frozenset({"alone", "cut"})
    in_rounds: ClassVar[bool] = True
    beside: ClassVar[bool] = False

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        if state.plan is not None:
            return []
        state.plan = prioritize(ctx.results, state.now)
        return likely_requests(ctx, state.plan)

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        ctx.prober.start_ahead(self.ahead(ctx, state, found))  # where not asked before
        assert state.plan is not None
        merged, had = first_alone(
            ctx,
            state.plan.isolation,
            found,
            likely_failing=state.plan.likely_failing,
            passed_likely=lambda test_id: withdraw_unlikely(ctx.prober, test_id, state.unlikely),
        )
        state.had |= had
        return merged

    def claim(self, evidence: TestEvidence) -> Claim | None:
        return None  # it names no other test
