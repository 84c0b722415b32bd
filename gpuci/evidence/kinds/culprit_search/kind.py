"""Culprit searches, as the engine lists them: which earlier test makes an order-dependent
victim fail (`gpuci.evidence.kinds.culprit_search.culprits`: hints first, then a
bisection; the files that ran beside it where a replay shows nothing), and the claims they
stand on: with the culprit the victim fails, without it it passes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from gpuci.evidence.claims import Claim, alone_outcomes, named_outcomes
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.culprit_search.culprits import search_culprits
from gpuci.evidence.kinds.culprit_search.prepared import likely_searches, search_requests
from gpuci.evidence.kinds.kind import Round, screens_alone, standing
from gpuci.evidence.notes import PAIRED
from gpuci.evidence.pairs import PHASE
from gpuci.evidence.requests import Request
from gpuci.evidence.search.repeat import repeated
from gpuci.evidence.victims import withdraw_diagnosed
from gpuci.model import Outcome, TestEvidence


class CulpritSearch:
    """The round's order-dependent victims' searches; their first runs start while the
    poisoned runs go on, and those of a victim its poisoned runs diagnosed are ended."""

    name: ClassVar[str] = "culprit search"
    phase: ClassVar[str] = PHASE
    owns: ClassVar[frozenset[str]] = frozenset(
        {"culprits", "search", "probes", "steps", "pair_gpu"}
    )
    in_rounds: ClassVar[bool] = True
    beside: ClassVar[bool] = False

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        if state.classified is None:
            if state.plan is None or self.name in state.offered:
                return []
            state.offered.add(self.name)  # before the round's alone-runs, once
            return likely_searches(ctx, state.plan, found)
        if self.name in state.searches:
            return []
        state.searches[self.name], requests = search_requests(
            ctx, state.classified, found, only=state.now.keys()
        )
        return requests

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        if state.classified is None:
            return dict(found)
        withdraw_diagnosed(ctx, state.searches.get(self.name, {}), found)
        searched = search_culprits(
            ctx, state.classified, found, only=state.now.keys(), searched=state.searched
        )
        earlier = screens_alone(ctx.results)
        return {
            i: self._repeated(ctx, e, found.get(i), earlier.get(i, ())) for i, e in searched.items()
        }

    def _repeated(
        self,
        ctx: Context,
        evidence: TestEvidence,
        before: TestEvidence | None,
        earlier: tuple[Outcome, ...],
    ) -> TestEvidence:
        """`evidence` with the victim's run after exactly its new culprits made as often as
        its claim needs (`gpuci.evidence.search.repeat`); a pair repeats its own
        (`gpuci.evidence.pairs`)."""
        new = evidence.culprits and (before is None or before.culprits != evidence.culprits)
        if not new or evidence.search.startswith(PAIRED):
            return evidence
        return repeated(
            ctx,
            evidence,
            before_it=evidence.culprits,
            standing=lambda e: standing(self, e, earlier),
            phase=self.phase,
        )

    def claim(self, evidence: TestEvidence) -> Claim | None:
        """The runs of the one command its culprits were named on (the victim after, or
        beside, exactly what it names: `named_outcomes`), against the victim without them
        (its alone-runs; a partner's run without its victim: `alone_outcomes`)."""
        return Claim(
            victim=evidence.id, failing=named_outcomes(evidence), other=alone_outcomes(evidence)
        )
