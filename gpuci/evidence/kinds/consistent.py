"""The tests that failed the same way in every screen: does each fail alone too? One
alone-run each, with nothing beside it from the start (it likely fails again)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from gpuci.evidence.alone import more_alone
from gpuci.evidence.claims import Claim
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.requests import Request
from gpuci.model import TestEvidence


class Consistent:
    """One alone-run of each test that failed alike everywhere (not a group's members:
    `Representatives` runs one of each group for them)."""

    name: ClassVar[str] = "failed alike everywhere"
    phase: ClassVar[str] = "alone"
    owns: ClassVar[frozenset[str]] = frozenset({"alone", "cut"})
    in_rounds: ClassVar[bool] = True
    beside: ClassVar[bool] = False

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        return []  # asked for with the first alone-runs (`gpuci.evidence.likely`)

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        assert state.plan is not None
        once = {i: min(n, 1) for i, n in state.plan.consistent.items()}
        merged = more_alone(ctx, once, found, likely_failing=frozenset(once))
        state.had |= once
        return merged

    def claim(self, evidence: TestEvidence) -> Claim | None:
        return None  # it names no other test
