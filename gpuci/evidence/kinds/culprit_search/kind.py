"""Culprit searches, as the engine lists them: which earlier test makes an order-dependent
victim fail, which one a test that depends on others needs
(`gpuci.evidence.kinds.culprit_search.culprits`: hints first, then a bisection; the files
that ran beside it where a replay shows nothing), and the claims they stand on."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import ClassVar

from gpuci.evidence.claims import REPEATS, Claim, Standing, alone_outcomes, named_outcomes
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.culprit_search.culprits import search_culprits
from gpuci.evidence.kinds.culprit_search.prepared import (
    likely_searches,
    search_requests,
    withdraw_diagnosed,
    withdraw_likely,
)
from gpuci.evidence.kinds.kind import Round, screens_alone, standing
from gpuci.evidence.notes import PAIRED
from gpuci.evidence.requests import Request
from gpuci.model import NOT_PASSING, PROBE_SHOWN, Category, Outcome, Probe, TestEvidence


class CulpritSearch:
    """The round's victims' searches; their first runs start while the poisoned runs go
    on, and those of a victim its poisoned runs diagnosed are ended."""

    name: ClassVar[str] = "culprit search"
    phase: ClassVar[str] = "culprits"
    owns: ClassVar[frozenset[str]] = frozenset(
        {"culprits", "search", "probes", "steps", "pair_gpu"}
    )
    in_rounds: ClassVar[bool] = True

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        if state.classified is None:
            return self._likely(ctx, state, found)
        if state.searches is not None:
            return []
        state.searches, requests = search_requests(
            ctx, state.classified, found, only=state.now.keys()
        )
        # a test that depends on others and failed alone once: where its search names a
        # provider, its claim needs that alone-run again (`_repeated`)
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
        withdraw_diagnosed(ctx, state.searches or {}, found)
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
        """`evidence` with the run its new claim rests on made as often as the claim needs
        (`gpuci.evidence.claims.REPEATS`), strictly, where the search made it fewer times:
        the victim after exactly its culprits, or, for one that fails alone, the victim
        alone. Only that run, and only where the runs already made of it did not go both
        ways (then the gate finds the victim flaky); a pair repeats its own (`pairs`)."""
        new = evidence.culprits and (before is None or before.culprits != evidence.culprits)
        if not new or evidence.search.startswith(PAIRED):
            return evidence
        for _ in range(REPEATS):  # a run that never reaches the victim shows neither way
            if standing(self, evidence, earlier) is not Standing.UNREPEATED:
                return evidence
            if ctx.prober.exhausted() or ctx.prober.stopping():
                return evidence
            with_earlier = dataclasses.replace(evidence, alone=earlier + evidence.alone)
            before_it = () if _depends(with_earlier) else evidence.culprits
            ran = ctx.prober.run(  # a file among them collected, none of its tests run
                [*(c for c in before_it if "::" in c), evidence.id],
                collect=[c for c in before_it if "::" not in c],
                phase=self.phase,
                label=f"culprits of {evidence.id}: after {len(before_it)} test(s), again",
                strict=True,
            )
            again = Probe(
                count=len(before_it),
                shown=tuple(before_it[-PROBE_SHOWN:]),
                outcome=ran.outcome(evidence.id),
            )
            evidence = dataclasses.replace(evidence, probes=(*evidence.probes, again))
        return evidence

    def claim(self, evidence: TestEvidence) -> Claim | None:
        """The runs of the one command its culprits were named on (the victim after, or
        beside, exactly what it names: `named_outcomes`), against the victim without them (its
        alone-runs; a partner's run without its victim: `alone_outcomes`). A victim that passes
        with what it names depends on it: its runs alone are the failing half, those with
        it the other, where it passed (a failure there beside others may be the load's, as
        its search found)."""
        named, alone = named_outcomes(evidence), alone_outcomes(evidence)
        if _depends(evidence):
            passed = tuple(o for o in named if o is Outcome.PASSED)
            return Claim(victim=evidence.id, failing=alone, other=passed)
        return Claim(victim=evidence.id, failing=named, other=alone)


def _depends(evidence: TestEvidence) -> bool:
    """Whether the claim is that the victim needs what it names: it passed with it, and
    failed alone (or, where that command went both ways too, failed in every run alone). A
    pair's claim never is: a side that fails without the other fails by itself."""
    if evidence.search.startswith(PAIRED):
        return False
    named, alone = named_outcomes(evidence), alone_outcomes(evidence)
    if Outcome.PASSED not in named:
        return False
    failed = [o for o in alone if o in NOT_PASSING]
    mixed = any(o in NOT_PASSING for o in named)
    return bool(failed) and (not mixed or len(failed) == len(_ran(alone)))


def _ran(outcomes: tuple[Outcome, ...]) -> tuple[Outcome, ...]:
    return tuple(o for o in outcomes if o in NOT_PASSING or o is Outcome.PASSED)
