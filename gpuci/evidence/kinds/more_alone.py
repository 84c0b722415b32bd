"""The remaining alone-runs: how often does a suspect pass alone? The runs each test still
wants once every other kind had its turn (what a tight budget cuts first)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from gpuci.evidence.alone import describe_cuts, more_alone
from gpuci.evidence.claims import Claim
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.notes import PAIRED
from gpuci.evidence.requests import Request
from gpuci.model import TestEvidence


class MoreAlone:
    """The alone-runs left; what the budget cut of them is described per test."""

    name: ClassVar[str] = "more alone-runs"
    phase: ClassVar[str] = "alone"
    owns: ClassVar[frozenset[str]] = frozenset({"alone", "cut"})
    in_rounds: ClassVar[bool] = False
    beside: ClassVar[bool] = False

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        if state.rest is None or self.name in state.offered:
            return []
        state.offered.add(self.name)
        return [Request(ids=(test_id,), strict=True) for test_id in state.rest]

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        # two tests a pair showed contending fail beside each other: their runs go strictly
        contending = frozenset(i for i, t in found.items() if t.search.startswith(PAIRED))
        more = more_alone(ctx, state.rest or {}, found, likely_failing=contending)
        return describe_cuts(more, state.wanted)

    def claim(self, evidence: TestEvidence) -> Claim | None:
        return None  # it names no other test
