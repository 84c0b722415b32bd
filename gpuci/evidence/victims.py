"""Victims: whose culprits to search for, and where (the interpreter with the fewest tests
before the victim, or the files that ran beside it)."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from gpuci.evidence.beside import beside_suite_test, co_runners
from gpuci.evidence.classify import Classified
from gpuci.evidence.context import Context
from gpuci.evidence.fingerprints import failure_kind
from gpuci.evidence.notes import SAME_RUN_BOTH_WAYS
from gpuci.evidence.orders import tests_before
from gpuci.evidence.probe import withdraw_each
from gpuci.model import (
    LATENT_ORDERS,
    NOT_PASSING,
    Category,
    Mode,
    Outcome,
    TestEvidence,
    TestResult,
)
from gpuci.run.proc.reports import out_of_device_memory, pool_limited

SEARCHED = (Category.ORDER_DEPENDENT, Category.DEPENDS_ON_OTHERS, Category.CONCURRENCY)
# a search's runs started ahead, by victim: each run's ids, and how many of it
Prepared = dict[str, list[tuple[list[str], int]]]


@dataclass(frozen=True, slots=True, kw_only=True)
class Task:
    """One victim's search: the tests (or files) to search among, in the order they ran."""

    victim: str
    category: Category
    candidates: tuple[str, ...]
    rank: tuple[int, int]  # (kind, place in the suite's order): earlier victims first
    pairs: tuple[str, ...] = ()  # files to pair it with where a screen's replay shows nothing
    kind: str = ""  # its failure's kind in the screens (fingerprints.failure_kind)
    strict: bool = False  # every run with nothing beside it (a redone search)
    # it failed in the parallel screen, where only its own file ran before it: other
    # interpreters beside it (two of it at once, too) may fail it, so its search splits
    # in halves, whose failing beside each other sends them to strict runs
    loadable: bool = False
    hinted: tuple[str, ...] = ()  # of the candidates, those its failure points at
    hint: str = ""  # what pointed at them: the state ledger, or the suite's source
    # its failures say another process held the device memory (out of memory, no pool
    # limit in any message: a limit is the process's own state): pairs may show it
    device_oom: bool = False
    pool_oom: bool = False  # out of memory under a pool limit: in-process, never a pair's


def plan_searches(
    ctx: Context,
    classified: Mapping[str, Classified],
    found: Mapping[str, TestEvidence],
    *,
    category: Category | None = None,
    only: Collection[str] | None = None,
) -> list[Task]:
    """Every victim's search, where it has one to search: of one `category` (a kind's own
    victims), of those `only`, where given."""
    # victims in the order they ran in one interpreter, so that an early victim's culprit
    # is found first and tried on the later ones (a cascade)
    reference = ctx.results.get(Mode.SUITE) or next(iter(ctx.results.values()))
    place = {t.id: i for i, t in enumerate(reference.run.tests)}
    tasks: list[Task] = []
    for test in classified.values():
        if test.category in SEARCHED and not diagnosed(found.get(test.id)):
            task = _plan(ctx, test, place.get(test.id, len(place)))
            if task is not None:
                tasks.append(task)
    return [
        t
        for t in tasks
        if (category is None or t.category is category) and (only is None or t.victim in only)
    ]


def diagnosed(evidence: TestEvidence | None) -> bool:
    """Whether its poisoned runs left it nothing to search for: it fails alone when
    poisoned (it reads uninitialized memory: its own bug), or they went both ways (flaky)."""
    return evidence is not None and (
        evidence.poisoned in NOT_PASSING or SAME_RUN_BOTH_WAYS in evidence.search
    )


def withdraw_diagnosed(ctx: Context, prepared: Prepared, found: Mapping[str, TestEvidence]) -> None:
    """The runs a search started ahead for a victim its poisoned runs diagnosed (it reads
    memory it never wrote, or went both ways): it has no search, they are ended."""
    for victim, runs in prepared.items():
        if diagnosed(found.get(victim)):
            withdraw_each(ctx.prober, runs)


def _plan(ctx: Context, test: Classified, place: int) -> Task | None:
    """Where to search: the interpreter with the fewest tests before the victim; for a file
    that could not be collected alone, the files collected before it (no test runs before
    pytest has imported every file: `gpuci.evidence.kinds.provider_search.collected`)."""
    results, orders = ctx.results, ctx.orders
    if "::" not in test.id:
        if test.category is not Category.DEPENDS_ON_OTHERS:
            return None
        return Task(victim=test.id, category=test.category, candidates=(), rank=(1, place))
    if test.category is Category.CONCURRENCY:
        parallel = results.get(Mode.PARALLEL)
        if parallel is None:
            return None
        return Task(
            victim=test.id,
            category=test.category,
            candidates=co_runners(results, test.results[Mode.PARALLEL].file),
            rank=(2, place),
            kind=failure_kind(test.seen),
            device_oom=ran_device_out(test.seen),
        )
    parallel = results.get(Mode.PARALLEL)
    pairs: tuple[str, ...] = ()
    loadable = False  # a depends-on-others victim shows by passing: the load cannot
    if parallel is not None and parallel.run.beside and test.category is Category.ORDER_DEPENDENT:
        # a screen's failure: maybe beside a file, not after one
        if test.outcomes.get(Mode.PARALLEL) in NOT_PASSING:
            pairs = co_runners(results, test.results[Mode.PARALLEL].file)
            loadable = True
        elif test.outcomes.get(Mode.SUITE) in NOT_PASSING:
            pairs = beside_suite_test(results, test.id)
    wanted: set[Outcome] = (
        set(NOT_PASSING) if test.category is Category.ORDER_DEPENDENT else {Outcome.PASSED}
    )
    # a latent order's victim is searched among the tests before it there (reversed)
    modes: tuple[Mode, ...] = (Mode.ISOLATED, Mode.SUITE, *LATENT_ORDERS)
    isolated = test.results.get(Mode.ISOLATED)
    if test.category is Category.DEPENDS_ON_OTHERS or (isolated is not None and isolated.inferred):
        # parallel ran its file as isolated would have, fresh: the fewest tests before it
        # where a lazy isolated pass left the file to it
        modes = (Mode.ISOLATED, Mode.PARALLEL, Mode.SUITE, *LATENT_ORDERS)
    best: Task | None = None
    for mode in modes:
        if mode not in orders or test.outcomes.get(mode) not in wanted:
            continue
        before = tests_before(orders[mode], test.id)
        candidates = tuple(i for i in before if _selectable(i))
        if candidates and (best is None or len(candidates) < len(best.candidates)):
            rank = (0 if test.category is Category.ORDER_DEPENDENT else 1, place)
            best = Task(
                victim=test.id,
                category=test.category,
                candidates=candidates,
                rank=rank,
                pairs=pairs,
                kind=failure_kind(test.seen) if pairs else "",
                loadable=loadable,
                device_oom=ran_device_out(test.seen),
                pool_oom=any(pool_limited(t.message) for t in test.seen),
            )
    if best is None and test.category is Category.DEPENDS_ON_OTHERS:
        # no test ran before it where it passed: only the files pytest imported with it can
        # have (`gpuci.evidence.kinds.provider_search.collected`)
        return Task(victim=test.id, category=test.category, candidates=(), rank=(1, place))
    return best


def ran_device_out(seen: Sequence[TestResult]) -> bool:
    """Whether its failures say the device ran out of memory, none of them under a pool
    limit the process set (CuPy's "limit set to"): only then may another process be why.
    Its failure kind cannot tell: it ends where the message lists particulars, the limit
    among them."""
    messages = [t.message for t in seen if t.outcome in NOT_PASSING and t.message]
    return bool(messages) and all(out_of_device_memory(m) for m in messages)


def _selectable(test_id: str) -> bool:
    """A real test pytest can select (not a stand-in for an interpreter's death)."""
    file, _, name = test_id.partition("::")
    return bool(file) and bool(name) and not name.startswith("[")
