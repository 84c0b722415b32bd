"""Culprits: which test broke which, found by replaying the failing interpreter in pieces.

- order-dependent: the tests before the victim where it failed are halved, keeping a half
  after which it still fails, down to the smallest set
  (`gpuci.evidence.kinds.culprit_search.bisect`).
- cascades: a culprit set found for one victim is tried first on the later victims of its
  interpreter (a sticky CUDA error, a leaked pool limit: one root with its victims).
- depends-on-others: first the suite's other files collected with it, none of their tests
  run: where it passes so, the files whose import it needs
  (`gpuci.evidence.kinds.culprit_search.collected`); else the same halving, keeping a half
  after which it passes.
- concurrency: the victim started with each file that overlapped it
  (`gpuci.evidence.pairs`); a test of that file that failed the
  victim's way beside it is its partner, and names it.

Different interpreters' victims are searched side by side (their runs share the check's
slots); pairs run with nothing beside them. Every answer is confirmed by a second identical
run; where that run goes the other way, the victim is flaky and nothing is named, unless
the steps were beside others: then the search runs again, strictly.
Every run counts against the budget and is kept as a `Probe`; a search the budget cut
says so.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from gpuci.evidence.classify import Classified
from gpuci.evidence.context import Context
from gpuci.evidence.fingerprints import same_kind
from gpuci.evidence.kinds.culprit_search.bisect import bisect, cascade
from gpuci.evidence.kinds.culprit_search.collected import collected_first, withdraw_collected
from gpuci.evidence.kinds.culprit_search.hinted import hint_tasks, hinted_first
from gpuci.evidence.kinds.culprit_search.search import LOADED, Search
from gpuci.evidence.notes import NOT_REPRODUCED, NOT_SEARCHED, SAME_RUN_BOTH_WAYS
from gpuci.evidence.pairs import Partnerable, pair_victim, partner_note
from gpuci.evidence.probe import Prober
from gpuci.evidence.results import ModeResults
from gpuci.evidence.victims import Task, plan_searches
from gpuci.model import Category, Mode, TestEvidence
from gpuci.run.proc.discover import file_of
from gpuci.run.sched.progress import say


def search_culprits(
    ctx: Context,
    classified: Mapping[str, Classified],
    found: Mapping[str, TestEvidence],
    *,
    only: Collection[str] | None = None,
    searched: set[str] | None = None,
) -> dict[str, TestEvidence]:
    """The culprits of every order-dependent and depends-on-others victim (of those `only`,
    where given), added to the evidence by test id; the tests the victim's failure points
    at (in the state ledger, or in the suite's source) tried first
    (`gpuci.evidence.kinds.culprit_search.hinted`). A concurrency victim's pairs are the
    pairs kind's (`gpuci.evidence.kinds.pairs`). `searched` hears of every test searched
    (a pair's partner too)."""
    prober, progress = ctx.prober, ctx.progress
    planned = plan_searches(ctx, classified, found)
    tasks = hint_tasks(
        ctx,
        [
            t
            for t in planned
            if t.category is not Category.CONCURRENCY and (only is None or t.victim in only)
        ],
    )
    if not tasks:
        return dict(found)
    say(progress, f"culprits: searching for {len(tasks)} victim(s)")
    partnerable = Partnerable.of(classified)

    slots = max(1, prober.admission.slots)

    def search_in_waves(group: Sequence[Task], width: int) -> dict[str, Search]:
        """One interpreter's victims in order: the first alone, then `width` at a time, each
        trying the culprits found in earlier waves first (a cascade)."""
        roots: list[tuple[str, ...]] = []  # culprit sets found so far, in order
        searches: dict[str, Search] = {}
        for wave in _waves(group, width):
            # an earlier victim's pair runs may have shown it as a partner: done
            todo = [t for t in wave if t.victim not in searches]
            if prober.stopping() or not todo:
                continue
            known = list(roots)  # what this wave tries: the same for each of its victims
            with ThreadPoolExecutor(max_workers=len(todo)) as pool:
                futures = [pool.submit(_search_once, ctx, t, known, partnerable) for t in todo]
                done = [f.result() for f in futures]
            for task, search in zip(todo, done, strict=True):
                searches[task.victim] = search
                if search.culprits and search.culprits not in roots:
                    roots.append(search.culprits)
                for partner in search.partners:
                    # contention is symmetric: it fails beside the victim, in its command
                    if partner not in searches:
                        note = partner_note(task.victim, len(search.probes))
                        searches[partner] = Search(
                            list(search.partner_runs.get(partner, ())),
                            culprits=(task.victim,),
                            note=note,
                            pair_gpu=search.pair_gpu,  # its command is the victim's pair's
                        )
                        say(progress, f"  {partner}: culprits: {task.victim} ({note})")
        return searches

    interpreters = _by_interpreter(sorted(tasks, key=lambda t: t.rank))
    # different interpreters' victims answer different questions: side by side
    with ThreadPoolExecutor(max_workers=min(slots, max(1, len(interpreters)))) as pool:
        done = list(pool.map(lambda group: search_in_waves(group, slots), interpreters))
    searches: dict[str, Search] = {}
    for group in done:
        for victim, search in group.items():
            if victim not in searches or not searches[victim].probes:  # its own search first
                searches[victim] = search
    if searched is not None:
        searched.update(searches)
    return _with_searches(found, searches, only)


def _with_searches(
    found: Mapping[str, TestEvidence],
    searches: Mapping[str, Search],
    only: Collection[str] | None,
) -> dict[str, TestEvidence]:
    """The evidence with each search's answer; a partner outside `only` that an earlier
    round searched keeps its own search's runs."""
    merged = dict(found)
    for victim, search in searches.items():
        before = merged.get(victim, TestEvidence(id=victim))
        if only is not None and victim not in only and before.search:
            continue
        merged[victim] = dataclasses.replace(
            before,
            culprits=search.culprits,
            search=search.note,
            probes=tuple(search.probes),
            steps=search.steps,
            pair_gpu=search.pair_gpu,
        )
    return merged


def _by_interpreter(tasks: Sequence[Task]) -> list[list[Task]]:
    """The replayed victims grouped by the interpreter they failed in (their candidates
    begin with its first test), in order, with the groups of two victims that may contend
    joined."""
    groups: dict[str, list[Task]] = {}
    for task in tasks:
        key = task.candidates[0] if task.candidates else ""
        joined = {k for k, g in groups.items() if any(_may_contend(task, t) for t in g)}
        merged = [t for k in groups if k in joined | {key} for t in groups[k]]
        for k in joined | {key}:
            groups.pop(k, None)
        groups[key] = [*merged, task]
    return [sorted(g, key=lambda t: t.rank) for g in groups.values()]


def _may_contend(one: Task, other: Task) -> bool:
    """Whether two victims failed the same way while their files ran side by side in a
    screen (two tests asking one device for more than it has): searched at once, each
    would fail beside the other's runs."""
    beside = file_of(other.victim) in one.pairs or file_of(one.victim) in other.pairs
    return beside and bool(one.kind) and same_kind(one.kind, other.kind)


def _waves(group: Sequence[Task], width: int) -> list[list[Task]]:
    """The victims of one interpreter in waves: its first order-dependent victim beside
    the others, which try no earlier culprits (its culprit may be every later victim's: a
    cascade), then its later order-dependent victims up to `width` at once; a wave ends
    before a victim that may contend with one already in it."""
    cascading = [t for t in group if t.category is Category.ORDER_DEPENDENT]
    head = [t for t in group if t not in cascading[1:]]
    waves: list[list[Task]] = []
    for batch, limit in ((head, len(head)), (cascading[1:], width)):
        wave: list[Task] = []
        for task in batch:
            if len(wave) == limit or any(_may_contend(task, t) for t in wave):
                waves.append(wave)
                wave = []
            wave.append(task)
        if wave:
            waves.append(wave)
    return waves


def _search_once(
    ctx: Context, task: Task, roots: list[tuple[str, ...]], partnerable: Partnerable
) -> Search:
    """One victim's search, redone strictly where a strict run contradicted it."""
    prober, progress = ctx.prober, ctx.progress
    if prober.exhausted():
        say(progress, f"  {task.victim}: culprits: {NOT_SEARCHED}")
        return Search([], note=NOT_SEARCHED)
    search = _search(ctx, task, roots, partnerable)
    # the one cause of doubt, the load, removed once
    if LOADED in search.contradicted and not task.strict and not prober.stopping():
        task = dataclasses.replace(task, strict=True)
        say(progress, f"  {task.victim}: a strict run contradicted {LOADED}; again, strictly")
        earlier = search.probes  # kept: every run is evidence, the doubted ones first
        search = _search(ctx, task, roots, partnerable)
        search.probes[:0] = earlier
        search.note += f"; again after {len(earlier)} run(s) a strict run contradicted"
    shown = ", ".join(search.culprits) or "-"
    say(progress, f"  {task.victim}: culprits: {shown} ({search.note})")
    return search


def _search(
    ctx: Context, task: Task, roots: list[tuple[str, ...]], partnerable: Partnerable
) -> Search:
    prober, results = ctx.prober, ctx.results
    if "::" not in task.victim:  # a file's import: only other files' imports come before it
        return collected_first(ctx, task, lambda: Search([], note=NOT_REPRODUCED))
    if task.category is Category.DEPENDS_ON_OTHERS and task.hinted:
        # its failure names what a few earlier tests' source writes: those before all else
        unhinted = dataclasses.replace(task, hinted=(), hint="")
        found = hinted_first(
            prober, task, roots, rest=lambda: _search(ctx, unhinted, roots, partnerable)
        )
        if found is not None:
            if found.culprits:  # the hint's runs answered: none with the files collected
                withdraw_collected(ctx, task.victim)
            return found
    # a file's import may be what it needs: the suite's other files collected first, a
    # run that costs no test of theirs
    return collected_first(
        ctx,
        task,
        lambda: _replay(prober, results.get(Mode.PARALLEL), task, roots, partnerable),
    )


def _replay(
    prober: Prober,
    parallel: ModeResults | None,
    task: Task,
    roots: list[tuple[str, ...]],
    partnerable: Partnerable,
) -> Search:
    """An interpreter's victim: known culprits first, then halving; where the replay never
    showed it, the files that ran beside it in the parallel screen (those first where it
    ran the device out of memory there with nothing before it pointed at)."""
    if (
        parallel is not None
        and task.loadable
        and task.pairs
        and task.device_oom
        and not any(file_of(t) == file_of(task.victim) for t in task.hinted)
    ):
        # out of device memory in the parallel screen, after its own file's tests only, where
        # none of them left memory held or a limit set (the ledger points at none of them;
        # a hint at another file's test can explain only the suite interpreter's failure):
        # another interpreter held it, so its pairs come first, its replay after them
        paired = _paired_with_co_runners(prober, parallel, task, partnerable)
        if paired.culprits or SAME_RUN_BOTH_WAYS in paired.note:
            return paired
        replay = _replayed(prober, task, roots)
        replay.probes[:0] = paired.probes
        replay.note = f"{replay.note}; first {paired.note}"
        return replay
    search = _replayed(prober, task, roots)
    # a replay that went both ways made it flaky: no pair can say otherwise; nor can one
    # where it ran out of memory under a pool limit (its process's own state)
    if (
        parallel is not None
        and task.pairs
        and not task.pool_oom
        and search.note.startswith(NOT_REPRODUCED)
        and SAME_RUN_BOTH_WAYS not in search.note
    ):
        return _paired_instead(prober, parallel, task, search, partnerable)
    return search


def _replayed(prober: Prober, task: Task, roots: list[tuple[str, ...]]) -> Search:
    """The failing interpreter's tests replayed before the victim: what its failure points
    at first (it names this victim's own culprit, where a cascade guesses an earlier
    victim's), then the earlier victims' culprits, then the halving."""
    return hinted_first(prober, task, roots) or cascade(prober, task, roots) or bisect(prober, task)


def _paired_instead(
    prober: Prober,
    parallel: ModeResults,
    task: Task,
    replay: Search,
    partnerable: Partnerable,
) -> Search:
    """A screen's order-dependent suspect whose replay showed nothing, paired instead with
    what ran beside it in the parallel screen: a pair that fails makes it concurrency."""
    paired = _paired_with_co_runners(prober, parallel, task, partnerable)
    if not paired.culprits:
        paired.note = f"{replay.note}; {paired.note}"
    paired.probes = replay.probes + paired.probes
    return paired


def _paired_with_co_runners(
    prober: Prober, parallel: ModeResults, task: Task, partnerable: Partnerable
) -> Search:
    """A screen's suspect paired with the files that ran beside it in the parallel screen
    (its task's `pairs`), not the tests before it."""
    return _pairs(prober, parallel, dataclasses.replace(task, candidates=task.pairs), partnerable)


def _pairs(prober: Prober, parallel: ModeResults, task: Task, partnerable: Partnerable) -> Search:
    """The victim beside the files that ran with it (`gpuci.evidence.pairs`)."""
    found = pair_victim(prober, parallel, task, partnerable)
    return Search(
        found.probes,
        culprits=found.culprits,
        note=found.note,
        partners=found.partners,
        partner_runs=found.partner_runs,
        pair_gpu=found.gpu,
    )
