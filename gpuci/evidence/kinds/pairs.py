"""Pairs: which co-running file does a concurrency victim fail beside? Each victim started
beside each file that ran with it in the parallel screen (`gpuci.evidence.pairs`), one
victim at a time with nothing else running, after the round's culprit searches; a test of
that file that failed the victim's way beside it is its partner, and names it (contention
is symmetric), so a victim shown as a partner is not paired again."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import ClassVar

from gpuci.evidence.claims import Claim, alone_outcomes, named_outcomes
from gpuci.evidence.classify import Classified
from gpuci.evidence.context import Context
from gpuci.evidence.kinds.kind import Round
from gpuci.evidence.notes import NOT_SEARCHED
from gpuci.evidence.pairs import (
    PHASE,
    Partnerable,
    first_pair_requests,
    pair_order,
    pair_victim,
    partner_note,
)
from gpuci.evidence.requests import Request
from gpuci.evidence.victims import Task, plan_searches
from gpuci.model import Category, Mode, Probe, TestEvidence
from gpuci.run.sched.progress import say


class PairSearches:
    """The round's concurrency victims, each paired with the files beside it in the screen;
    each contention's first pair starts while the poisoned runs go on."""

    name: ClassVar[str] = "pairs"
    phase: ClassVar[str] = PHASE
    owns: ClassVar[frozenset[str]] = frozenset({"culprits", "search", "probes", "pair_gpu"})
    in_rounds: ClassVar[bool] = True
    beside: ClassVar[bool] = False

    def ahead(self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]) -> list[Request]:
        parallel = ctx.results.get(Mode.PARALLEL)
        if state.classified is None or parallel is None or self.name in state.offered:
            return []
        state.offered.add(self.name)
        if not ctx.prober.hides_start_ups:
            return []
        peaks = ctx.prober.admission.peaks
        tasks = _tasks(ctx, state.classified, found, state.now.keys())
        searches = [(t.victim, pair_order(t.candidates, t.kind, peaks), t.kind) for t in tasks]
        return first_pair_requests(parallel, searches)  # the likeliest contender's

    def conclude(
        self, ctx: Context, state: Round, found: Mapping[str, TestEvidence]
    ) -> dict[str, TestEvidence]:
        if state.classified is None:
            return dict(found)
        return search_pairs_of(
            ctx, state.classified, found, only=state.now.keys(), searched=state.searched
        )

    def claim(self, evidence: TestEvidence) -> Claim | None:
        """The pair command's runs (a run where only the other side failed the victim's way
        shows the contention too), against the victim without its partner: its alone-runs,
        or a partner's run without its victim."""
        return Claim(
            victim=evidence.id, failing=named_outcomes(evidence), other=alone_outcomes(evidence)
        )


def _tasks(
    ctx: Context,
    classified: Mapping[str, Classified],
    found: Mapping[str, TestEvidence],
    only: Collection[str] | None,
) -> list[Task]:
    return plan_searches(ctx, classified, found, category=Category.CONCURRENCY, only=only)


def search_pairs_of(
    ctx: Context,
    classified: Mapping[str, Classified],
    found: Mapping[str, TestEvidence],
    *,
    only: Collection[str] | None = None,
    searched: set[str] | None = None,
) -> dict[str, TestEvidence]:
    """The partner file of every concurrency victim (of those `only`, where given) that no
    search of this round (`searched`, which hears of those it adds) answered, added to the
    evidence by test id, and each partner test it shows, which names its victim."""
    parallel = ctx.results.get(Mode.PARALLEL)
    done = searched if searched is not None else set()
    tasks = [t for t in _tasks(ctx, classified, found, only) if t.victim not in done]
    merged = dict(found)
    if parallel is None or not tasks:
        return merged
    say(ctx.progress, f"pairs: pairing {len(tasks)} victim(s)")
    partnerable = Partnerable.of(classified)
    for task in sorted(tasks, key=lambda t: t.rank):
        # one at a time, with nothing beside them: a victim shown as a partner is done
        if task.victim in done or ctx.prober.stopping():
            continue
        done.add(task.victim)
        if ctx.prober.exhausted():
            say(ctx.progress, f"  {task.victim}: culprits: {NOT_SEARCHED}")
            merged[task.victim] = _with(merged, task.victim, only, search=NOT_SEARCHED)
            continue
        pair = pair_victim(ctx.prober, parallel, task, partnerable)
        shown = ", ".join(pair.culprits) or "-"
        say(ctx.progress, f"  {task.victim}: culprits: {shown} ({pair.note})")
        merged[task.victim] = _with(
            merged,
            task.victim,
            only,
            culprits=pair.culprits,
            search=pair.note,
            probes=tuple(pair.probes),
            pair_gpu=pair.gpu,
        )
        for partner in (p for p in pair.partners if p not in done):
            # contention is symmetric: it fails beside the victim, in its command
            done.add(partner)
            note = partner_note(task.victim, len(pair.probes))
            merged[partner] = _with(
                merged,
                partner,
                only,
                culprits=(task.victim,),
                search=note,
                probes=pair.partner_runs.get(partner, ()),
                pair_gpu=pair.gpu,  # its command is the victim's pair's
            )
            say(ctx.progress, f"  {partner}: culprits: {task.victim} ({note})")
    return merged


def _with(
    found: Mapping[str, TestEvidence],
    test_id: str,
    only: Collection[str] | None,
    *,
    search: str,
    culprits: tuple[str, ...] = (),
    probes: tuple[Probe, ...] = (),
    pair_gpu: str | None = None,
) -> TestEvidence:
    """`test_id`'s evidence with a pair search's answer; a partner outside `only` that an
    earlier round searched keeps its own search's runs."""
    before = found.get(test_id, TestEvidence(id=test_id))
    if only is not None and test_id not in only and before.search:
        return before
    return dataclasses.replace(
        before,
        culprits=culprits,
        search=search,
        probes=probes,
        steps=None,
        pair_gpu=pair_gpu,
    )
