"""A round's searches of one kind's victims: interpreter by interpreter, side by side, and
inside one interpreter in waves, the culprits found first tried first on the later victims
(a cascade: a sticky CUDA error, a leaked pool limit, one root with its victims).

Different interpreters' victims answer different questions and are searched side by side
(their runs share the check's slots). One interpreter's victims go in waves: its first
order-dependent victim beside the victims that try no earlier culprits, then its later
order-dependent victims up to the slots at once, each trying what the earlier waves found;
a wave ends before a victim that may contend with one already in it. A search whose steps
ran beside others and that a strict run contradicted is redone once, strictly. A test that
a search showed failing its victim's way beside it (a pair's partner) names the victim.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from gpuci.evidence.context import Context
from gpuci.evidence.fingerprints import same_kind
from gpuci.evidence.notes import NOT_SEARCHED
from gpuci.evidence.pairs import partner_note
from gpuci.evidence.search.step import LOADED, Search
from gpuci.evidence.victims import Task
from gpuci.model import Category, TestEvidence
from gpuci.run.proc.discover import file_of
from gpuci.run.sched.progress import say

# one victim's search, handed the culprit sets its interpreter's earlier waves found
SearchOne = Callable[[Task, list[tuple[str, ...]]], Search]


def search_in_waves(
    ctx: Context, tasks: Sequence[Task], search: SearchOne, *, what: str
) -> dict[str, Search]:
    """Every victim of `tasks` searched (`search`), by victim, with the partners a pair
    showed; `what` the search finds, as the progress lines say it."""
    prober, progress = ctx.prober, ctx.progress
    say(progress, f"{what}: searching for {len(tasks)} victim(s)")
    slots = max(1, prober.admission.slots)

    def one_interpreter(group: Sequence[Task], width: int) -> dict[str, Search]:
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
                futures = [pool.submit(_search_once, ctx, t, known, search, what) for t in todo]
                done = [f.result() for f in futures]
            for task, found in zip(todo, done, strict=True):
                searches[task.victim] = found
                if found.culprits and found.culprits not in roots:
                    roots.append(found.culprits)
                for partner in found.partners:
                    # contention is symmetric: it fails beside the victim, in its command
                    if partner not in searches:
                        note = partner_note(task.victim, len(found.probes))
                        searches[partner] = Search(
                            list(found.partner_runs.get(partner, ())),
                            culprits=(task.victim,),
                            note=note,
                            pair_gpu=found.pair_gpu,  # its command is the victim's pair's
                        )
                        say(progress, f"  {partner}: {what}: {task.victim} ({note})")
        return searches

    interpreters = _by_interpreter(sorted(tasks, key=lambda t: t.rank))
    with ThreadPoolExecutor(max_workers=min(slots, max(1, len(interpreters)))) as pool:
        done = list(pool.map(lambda group: one_interpreter(group, slots), interpreters))
    searches: dict[str, Search] = {}
    for group in done:
        for victim, found in group.items():
            if victim not in searches or not searches[victim].probes:  # its own search first
                searches[victim] = found
    return searches


def with_searches(
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
    ctx: Context, task: Task, roots: list[tuple[str, ...]], search: SearchOne, what: str
) -> Search:
    """One victim's search, redone strictly where a strict run contradicted it."""
    prober, progress = ctx.prober, ctx.progress
    if prober.exhausted():
        say(progress, f"  {task.victim}: {what}: {NOT_SEARCHED}")
        return Search([], note=NOT_SEARCHED)
    found = search(task, roots)
    # the one cause of doubt, the load, removed once
    if LOADED in found.contradicted and not task.strict and not prober.stopping():
        task = dataclasses.replace(task, strict=True)
        say(progress, f"  {task.victim}: a strict run contradicted {LOADED}; again, strictly")
        earlier = found.probes  # kept: every run is evidence, the doubted ones first
        found = search(task, roots)
        found.probes[:0] = earlier
        found.note += f"; again after {len(earlier)} run(s) a strict run contradicted"
    shown = ", ".join(found.culprits) or "-"
    say(progress, f"  {task.victim}: {what}: {shown} ({found.note})")
    return found
