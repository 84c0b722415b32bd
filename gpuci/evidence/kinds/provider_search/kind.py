"""Provider searches, as the engine lists them: which earlier test (or collected file) a test
that depends on others needs (`gpuci.evidence.kinds.provider_search.providers`: hints
first, then the suite's other files collected, then a bisection), and the claims they stand
on, the culprit's halves reversed: without the provider the victim fails, with it it
passes. Its searches go beside the culprit search's: they share no culprit and no wave."""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from gpuci.evidence.claims import Claim, alone_outcomes, named_outcomes
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round, screens_alone, standing
from gpuci.evidence.kinds.provider_search.prepared import (
    likely_searches,
    search_requests,
    withdraw_likely,
)
from gpuci.evidence.kinds.provider_search.providers import search_providers
from gpuci.evidence.pairs import PHASE
from gpuci.evidence.requests import Request
from gpuci.evidence.search.repeat import repeated
from gpuci.evidence.victims import withdraw_diagnosed
from gpuci.model import NOT_PASSING, Category, Outcome, TestEvidence


class ProviderSearch:
    """The round's depends-on-others victims' searches, beside the culprit search's; their
    first runs start with the alone-runs of the suspects likely to fail alone (ended for
    one that passes), and those of a victim its poisoned runs diagnosed are ended."""

    name: ClassVar[str] = "provider search"
    phase: ClassVar[str] = PHASE  # a search's runs, as the culprit search's are counted
    owns: ClassVar[frozenset[str]] = frozenset({"culprits", "search", "probes", "steps"})
    in_rounds: ClassVar[bool] = True
    beside: ClassVar[bool] = True

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        if state.classified is None:
            return self._likely(ctx, state, found)
        if self.name in state.searches:
            return []
        state.searches[self.name], requests = search_requests(
            ctx, state.classified, found, only=state.now.keys()
        )
        # a victim that failed alone once: where its search names a provider, its claim
        # needs that alone-run again (`_repeated`)
        once = [
            t.id
            for t in state.classified.values()
            if t.id in state.now
            and t.category is Category.DEPENDS_ON_OTHERS
            and Outcome.PASSED not in t.reruns
            and sum(1 for o in t.reruns if o in NOT_PASSING) == 1
        ]
        return requests + [Request(ids=(i,), strict=True) for i in once]

    def _likely(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> list[Request]:
        """Before the round's alone-runs, once: the searches its likely failing suspects
        would need, were they to fail alone, started with the alone-runs; ended for one
        that passes (`Round.unlikely`)."""
        if state.plan is None or self.name in state.offered:
            return []
        state.offered.add(self.name)
        likely, requests = likely_searches(ctx, state.plan, found)
        if likely:
            state.unlikely.append(lambda test_id: withdraw_likely(ctx, likely, test_id))
        return requests

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        if state.classified is None:
            return dict(found)
        withdraw_diagnosed(ctx, state.searches.get(self.name, {}), found)
        searched = search_providers(
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
        """`evidence` with the victim's run alone, the failing half of its new providers'
        claim, made as often as the claim needs (`gpuci.evidence.search.repeat`)."""
        new = evidence.culprits and (before is None or before.culprits != evidence.culprits)
        if not new:
            return evidence
        return repeated(
            ctx,
            evidence,
            before_it=(),
            standing=lambda e: standing(self, e, earlier),
            phase=self.phase,
        )

    def claim(self, evidence: TestEvidence) -> Claim | None:
        """The victim's runs alone (`alone_outcomes`: its alone-runs, and its search's run
        of it alone) are the failing half; its runs with exactly what it names, where it
        passed, the other (a failure there beside others may be the load's, as its search
        found: the search confirmed the pass)."""
        passed = tuple(o for o in named_outcomes(evidence) if o is Outcome.PASSED)
        return Claim(victim=evidence.id, failing=alone_outcomes(evidence), other=passed)
