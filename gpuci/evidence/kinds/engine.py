"""Evidence: what gpuci runs after the main passes to tell a polluted test from a broken one.

The engine is the ordered list of the kinds of evidence (`KINDS`, each a module or
subpackage of `gpuci.evidence.kinds` behind `gpuci.evidence.kinds.kind.Kind`), most telling
first, so that a tight budget (`--evidence-budget`, one for the whole check) cuts what
matters least. The kinds asked of the suspects go in rounds: the first alone-runs, the tests
that failed alike everywhere and their groups' representatives, poisoned runs, culprit
searches with the provider searches beside them (a kind may conclude `beside` the one
before it: their runs share the slots), and the concurrency victims' pairs, where the later
victims of one interpreter wait for its first victim's culprits and are answered together
by group runs; those the group runs did not answer go round again. Then, once,
compute-sanitizer on the roots, the thread-unsafe tests alone in threads and the remaining
alone-runs. Before a kind concludes, the runs it and every later kind will make, as far as
known, are declared to the one runner, which starts them ahead where a start-up is worth
hiding; after it, a claim it made that its runs do not show both ways is not recorded
(`gpuci.evidence.kinds.kind.refused`). These are the strict runs: nothing else runs on
their GPUs, but passing alone-runs, which may run beside each other, and memcheck beside
the searches. What the budget cuts is recorded per test, never silently classified.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TextIO

from gpuci.evidence.account import RUNS_FILE
from gpuci.evidence.alone import alone_runs_wanted, unstable_note
from gpuci.evidence.classify import classify_results, together_outcomes
from gpuci.evidence.context import Context
from gpuci.evidence.early import EarlyEvidence, evidence_prober
from gpuci.evidence.kinds.consistent import Consistent
from gpuci.evidence.kinds.culprit_search.kind import CulpritSearch
from gpuci.evidence.kinds.first_alone import FirstAlone
from gpuci.evidence.kinds.groups import GroupRuns, next_round, waiting_victims
from gpuci.evidence.kinds.kind import Kind, Round, claimed, refused, screens_alone
from gpuci.evidence.kinds.memcheck_roots import MemcheckRoots
from gpuci.evidence.kinds.more_alone import MoreAlone
from gpuci.evidence.kinds.pairs import PairSearches
from gpuci.evidence.kinds.poisoned_runs import PoisonedRuns
from gpuci.evidence.kinds.provider_search.kind import ProviderSearch
from gpuci.evidence.kinds.representatives import Representatives
from gpuci.evidence.kinds.threads import Threaded
from gpuci.evidence.mode_reruns import say_strays
from gpuci.evidence.orders import interpreter_order
from gpuci.evidence.requests import added_up
from gpuci.evidence.results import load_mode_results
from gpuci.evidence.sanitizer import Sanitizing, choose_sanitizer
from gpuci.evidence_file import evidence_to_json
from gpuci.formats import (
    EVIDENCE_DIR,
    EVIDENCE_FILE,
    write_json_atomic,
)
from gpuci.model import (
    NOT_PASSING,
    Evidence,
    TestEvidence,
)
from gpuci.run.proc.discover import file_of
from gpuci.run.proc.reports import out_of_device_memory
from gpuci.run.sched.session import Interrupted
from gpuci.state.left import read_ledger

# The kinds of evidence, in the order they are asked: the one place they are listed.
KINDS: tuple[Kind, ...] = (
    FirstAlone(),
    Consistent(),
    Representatives(),
    PoisonedRuns(),
    CulpritSearch(),
    ProviderSearch(),  # beside the culprit search
    PairSearches(),
    GroupRuns(),
    MemcheckRoots(),
    Threaded(),
    MoreAlone(),
)


def gather_evidence(
    out: Path,
    *,
    runs: int,
    budget_s: float | None,
    timeout: float | None,
    python: str = sys.executable,
    progress: TextIO = sys.stderr,
    pytest_args: tuple[str, ...] | None = None,
    sanitize: bool | None = None,
    workers: int = 1,
    started: EarlyEvidence | None = None,
) -> Evidence:
    """The evidence of a results directory, written to `OUT/evidence/evidence.json`.

    In order, within one budget: alone-runs (they decide the categories), poisoned runs of
    order-dependent victims, culprit searches, then compute-sanitizer on the roots
    (`sanitize`: None runs it where it is found; True where it is not is a UsageError).
    `workers`: how many evidence runs may go at once (the check's slots); strict ones
    run with nothing beside them. `started`: the prober started while the isolated pass
    ran (`gpuci.evidence.early`), taken over where it holds one.
    """
    tool = choose_sanitizer(sanitize)
    results = load_mode_results(out)
    directory = out / EVIDENCE_DIR
    taken = started.take(results, budget_s) if started is not None else None
    prober = taken or evidence_prober(
        out,
        results,
        python=python,
        timeout=timeout,
        budget_s=budget_s,
        workers=workers,
        pytest_args=pytest_args,
    )
    supervisor = prober.interpreters.supervisor
    # a test that ran out of device memory in a screen: its file's peak there is too small
    prober.admission.ran_out(
        file_of(t.id)
        for r in results.values()
        for t in r.run.tests
        if t.outcome in NOT_PASSING and out_of_device_memory(t.message)
    )
    found: dict[str, TestEvidence] = {}
    try:
        with supervisor.handling_signals():
            ctx = Context(
                prober=prober,
                results=results,
                orders={mode: interpreter_order(results[mode]) for mode in results},  # once
                progress=progress,
                ledger=read_ledger(out),
            )
            found = _gather(ctx, runs, sanitize=sanitize, tool=tool)
    finally:
        prober.close()
    say_strays(prober, progress, "evidence")
    evidence = Evidence(
        gpu=prober.gpu,
        budget_s=budget_s,
        spent_s=prober.spent() if prober.account.runs else 0.0,
        runs=prober.account.runs,
        phases=prober.account.phase_json(),
        concurrency=prober.concurrency(),
        tests=with_lane_views(found.values(), prober.lane_views()),
        leftovers={f: tuple(x) for f, x in prober.leftovers.items()},
        strangers={f: tuple(x) for f, x in prober.strangers.items()},
        notes=(*prober.notes, *unstable_note(prober.unstable)),
    )
    write_json_atomic(directory / EVIDENCE_FILE, evidence_to_json(evidence))
    prober.account.write_timeline(directory / RUNS_FILE)
    if prober.stopping():
        raise Interrupted(f"interrupted; the evidence gathered so far is in {directory}")
    return evidence


def with_lane_views(
    found: Iterable[TestEvidence], views: Mapping[str, str]
) -> tuple[TestEvidence, ...]:
    """Each test's evidence with the view its file's strict runs saw, where not the serial."""
    return tuple(
        dataclasses.replace(t, gpu=views[file_of(t.id)]) if file_of(t.id) in views else t
        for t in found
    )


def _gather(
    ctx: Context, runs: int, *, sanitize: bool | None, tool: str | None
) -> dict[str, TestEvidence]:
    """Each kind of `KINDS` in turn: those asked in rounds while suspects are pending,
    then the others once (see the module's docstring)."""
    results, orders = ctx.results, ctx.orders
    wanted = alone_runs_wanted(results, runs) if runs else {}
    found: dict[str, TestEvidence] = {}
    pending = dict(wanted)
    with Sanitizing(ctx.prober, tool if sanitize is not False else None) as sanitizing:
        state = Round(wanted=dict(wanted), sanitizing=sanitizing, sanitize=sanitize, tool=tool)
        rounds = [k for k in KINDS if k.in_rounds]
        once = [k for k in KINDS if not k.in_rounds]
        claims: dict[str, Kind] = {}  # by test: the kind whose claim its culprits are
        while pending:
            waiting = waiting_victims(ctx, pending)
            held = {m for w in waiting for m in w.members}
            state = state.next(pending, {i: n for i, n in pending.items() if i not in held})
            found = _each(ctx, rounds, state, found, claims, then=once)
            pending = next_round(state.left, state.wanted, found)
        sanitized = sanitizing.finish()
    state = state.next({}, {})
    state.sanitized = sanitized
    state.classified = classify_results(
        results, {i: t.alone for i, t in found.items()}, orders, together=together_outcomes(found)
    )
    had = state.had
    state.rest = {i: n - had.get(i, 0) for i, n in state.wanted.items() if n > had.get(i, 0)}
    found = _each(ctx, once, state, found, claims)
    # every claim once more on all its victim's runs: a later alone-run that failed too
    # shows the victim failing without what its claim names
    return refused(claims, {}, found, screens_alone(results))


def _each(
    ctx: Context,
    kinds: Sequence[Kind],
    state: Round,
    found: dict[str, TestEvidence],
    claims: dict[str, Kind],
    *,
    then: Sequence[Kind] = (),
) -> dict[str, TestEvidence]:
    """`kinds` in their order, a kind `beside` the one before it concluding with it: before
    each concludes, the runs it and every later one (and those of `then`, asked later) will
    make are declared to the runner; after, the claims its runs do not show both ways are
    refused, and those that stand kept in `claims`."""
    for at, together in _beside(kinds):
        # each kind counts the interpreters its own runs need: theirs add up per file
        declared = [later.ahead(ctx, state, found) for later in (*kinds[at:], *then)]
        ctx.prober.start_ahead(added_up(*declared))
        made: dict[str, Kind] = {}
        concluded = dict(found)
        for kind, answered in zip(together, _conclude(ctx, together, state, found), strict=True):
            made |= claimed(kind, found, answered)
            # where two answered one test, the later's (a victim's own search over a
            # partner's entry another search made)
            concluded |= {i: e for i, e in answered.items() if e is not found.get(i)}
        found = refused(made, found, concluded, screens_alone(ctx.results))
        claims |= {i: k for i, k in made.items() if found[i].culprits}
    return found


def _beside(kinds: Sequence[Kind]) -> list[tuple[int, list[Kind]]]:
    """`kinds` in turns, each kind `beside` the one before it in that one's turn; each turn
    with where it begins in `kinds`."""
    turns: list[tuple[int, list[Kind]]] = []
    for at, kind in enumerate(kinds):
        if kind.beside and turns:
            turns[-1][1].append(kind)
        else:
            turns.append((at, [kind]))
    return turns


def _conclude(
    ctx: Context, kinds: Sequence[Kind], state: Round, found: dict[str, TestEvidence]
) -> list[dict[str, TestEvidence]]:
    """What each of `kinds` concluded from `found`, side by side where several."""
    if len(kinds) == 1:
        return [kinds[0].conclude(ctx, state, found)]
    with ThreadPoolExecutor(max_workers=len(kinds), thread_name_prefix="gpuci-kind") as pool:
        futures = [pool.submit(kind.conclude, ctx, state, found) for kind in kinds]
        return [f.result() for f in futures]
