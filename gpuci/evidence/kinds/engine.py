"""Evidence: what gpuci runs after the main passes to tell a polluted test from a broken one.

One budget (`--evidence-budget`) for the whole check, spent most telling first
(`gpuci.evidence.priorities` says who runs alone, how often, in what order): the isolation
suspects' alone-runs (`gpuci.evidence.alone`), poisoned runs and culprit searches (each failing
interpreter's earlier tests replayed, or the pair with a co-running file), where the later
victims of one interpreter wait for its first victim's culprits and are answered together
by group runs (`gpuci.evidence.kinds.groups`); then the tests that failed the same way
everywhere, one representative of each fingerprint's group; compute-sanitizer on the roots
(those known before the searches run beside them: `gpuci.evidence.sanitizer.Sanitizing`);
the thread-unsafe tests alone in threads; the remaining alone-runs. These are the strict
runs: nothing else runs on their GPUs, but passing alone-runs, which may run beside each
other, and memcheck beside the searches. What the budget cuts is recorded per test, never
silently classified.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TextIO

from gpuci.evidence.account import RUNS_FILE
from gpuci.evidence.alone import alone_runs_wanted, more_alone, unstable_note
from gpuci.evidence.classify import classify_results, together_outcomes
from gpuci.evidence.culprits import search_culprits
from gpuci.evidence.early import EarlyEvidence, evidence_prober
from gpuci.evidence.kinds.groups import next_round, run_groups, waiting_victims
from gpuci.evidence.kinds.threads import prepare_threaded, run_threaded, thread_unsafe
from gpuci.evidence.likely import (
    prepare_cascade,
    prepare_likely,
    prepare_poisoned,
    prepare_searches,
    withdraw_diagnosed,
    withdraw_unlikely,
)
from gpuci.evidence.mode_reruns import say_strays
from gpuci.evidence.orders import Order, interpreter_order
from gpuci.evidence.pairs import PAIRED
from gpuci.evidence.poisoned import run_poisoned, worth_poisoning
from gpuci.evidence.priorities import describe_cuts, first_alone, prioritize, run_representatives
from gpuci.evidence.probe import Prober
from gpuci.evidence.results import ModeResults, load_mode_results
from gpuci.evidence.sanitizer import Sanitizing, choose_sanitizer, sanitize_roots
from gpuci.evidence_file import evidence_to_json
from gpuci.formats import (
    EVIDENCE_DIR,
    EVIDENCE_FILE,
    write_json_atomic,
)
from gpuci.model import (
    NOT_PASSING,
    Category,
    Evidence,
    Mode,
    TestEvidence,
)
from gpuci.run.proc.discover import file_of
from gpuci.run.proc.reports import out_of_device_memory
from gpuci.run.sched.session import Interrupted
from gpuci.state.left import Ledger, read_ledger


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
            found = _gather(
                prober,
                results,
                runs,
                progress,
                sanitize=sanitize,
                tool=tool,
                ledger=read_ledger(out),
            )
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
    prober: Prober,
    results: Mapping[Mode, ModeResults],
    runs: int,
    progress: TextIO,
    *,
    sanitize: bool | None,
    tool: str | None,
    ledger: Ledger,
) -> dict[str, TestEvidence]:
    """Each kind of evidence in turn, most telling first, so that a tight budget cuts what
    matters least: the suspects' first alone-runs, poisoned runs and culprit searches
    (`_suspects`), where the later victims of one interpreter that failed alike wait for
    its first victim's culprits, which then answer them all by two group runs
    (`gpuci.evidence.kinds.groups`); those the group runs did not answer go round again, a
    group's first at a time; compute-sanitizer on the roots; each thread-unsafe test alone
    in threads; then the remaining alone-runs."""
    wanted = alone_runs_wanted(results, runs) if runs else {}
    orders = {mode: interpreter_order(results[mode]) for mode in results}  # built once
    found: dict[str, TestEvidence] = {}
    had: dict[str, int] = {}
    pending = dict(wanted)
    with Sanitizing(prober, tool if sanitize is not False else None) as sanitizing:
        while pending:
            waiting = waiting_victims(results, orders, pending)
            held = {m for w in waiting for m in w.members}
            now = {i: n for i, n in pending.items() if i not in held}
            found, more, revised = _suspects(
                prober,
                results,
                now,
                found,
                orders=orders,
                progress=progress,
                ledger=ledger,
                sanitizing=sanitizing,
            )
            had |= more
            wanted |= revised
            found, left = run_groups(prober, results, waiting, found, progress=progress)
            for answered in held - set(left):
                wanted[answered] = 0  # its group runs answered what its alone-runs would
            pending = next_round(left, wanted, found)
        sanitized = sanitizing.finish()
    classified = classify_results(
        results, {i: t.alone for i, t in found.items()}, orders, together=together_outcomes(found)
    )
    rest = {i: n - had.get(i, 0) for i, n in wanted.items() if n > had.get(i, 0)}
    unsafe, threads = thread_unsafe(results, classified)
    # offered already as the searches began, where known then (an offer waiting counts);
    # these start-ups go on while the sanitizer runs on the roots the searches named
    prepare_threaded(prober, unsafe, threads)
    for test_id in rest:
        prober.prepare([test_id], strict=True)
    if sanitize is not False:  # the kernel of a root before the rest
        found = sanitize_roots(
            prober, classified, found, tool=tool, progress=progress, done=sanitized
        )
    if unsafe:
        found = run_threaded(
            prober, unsafe, threads, found, progress=progress, order=orders.get(Mode.THREADS)
        )
    # two tests a pair showed contending fail beside each other: their runs go strictly
    contending = frozenset(i for i, t in found.items() if t.search.startswith(PAIRED))
    return describe_cuts(
        more_alone(prober, rest, found, progress, likely_failing=contending), wanted
    )


def _suspects(
    prober: Prober,
    results: Mapping[Mode, ModeResults],
    wanted: Mapping[str, int],
    found: Mapping[str, TestEvidence],
    *,
    orders: Mapping[Mode, Order],
    progress: TextIO,
    ledger: Ledger,
    sanitizing: Sanitizing,
) -> tuple[dict[str, TestEvidence], dict[str, int], dict[str, int]]:
    """`wanted`'s first alone-runs (a second at once for one that fails), one alone-run of
    each test that failed the same way everywhere but a representative of each group (a
    victim of a sticky error fails in every mode, yet passes alone: the cascade's first
    victim); then poisoned runs and culprit searches for the order-dependent among them.
    The evidence, the runs each had of those it wanted, and the alone-runs a group's
    members want now (none where inferred from its representative)."""
    plan = prioritize(results, wanted)
    # the runs known now start ahead where start-ups are worth hiding
    likely = prepare_likely(prober, results, plan, wanted, found, orders=orders, ledger=ledger)
    found, had = first_alone(
        prober,
        plan.isolation,
        found,
        progress,
        likely_failing=plan.likely_failing,
        passed_likely=lambda test_id: withdraw_unlikely(prober, likely, test_id),
    )
    # the poisoned runs of those that passed, while the rest run alone (after each stage)
    prepare_poisoned(prober, results, found, orders, only=wanted.keys())
    once = {i: min(n, 1) for i, n in plan.consistent.items()}
    # failed the same way everywhere: likely again, so with nothing beside it from the start
    found = more_alone(prober, once, found, progress, likely_failing=frozenset(once))
    had |= once
    prepare_poisoned(prober, results, found, orders, only=wanted.keys())
    found, split = run_representatives(prober, plan.groups, found, progress=progress)
    revised: dict[str, int] = {}
    for group in plan.groups:
        for member in (m for m in group.members if m not in split):
            # a representative's one run, or the others' none, is all a kept group needs
            revised[member] = 0 if found[member].inferred_from else min(wanted[member], 1)
            had[member] = len(found[member].alone)  # not run again among the remaining
    prepare_cascade(prober, results, split)
    found, more = first_alone(prober, {i: wanted[i] for i in split}, found, progress)
    # a representative that passed alone counts that run among its own
    had |= more | {i: len(found[i].alone) for i in split if i in found and found[i].alone}
    classified = classify_results(
        results, {i: t.alone for i, t in found.items()}, orders, together=together_outcomes(found)
    )
    victims = [
        t.id
        for t in classified.values()
        if t.category is Category.ORDER_DEPENDENT and t.id in wanted
    ]
    # memcheck on the roots known now while the poisoned runs and the searches go on; the
    # runs in threads at the end start ahead (on the H100 the first started cold after
    # the searches, 4 s, where memcheck's 5.7 s had hidden it)
    sanitizing.start(classified, found)
    prepare_threaded(prober, *thread_unsafe(results, classified))
    # the searches' first runs start while the poisoned runs go on
    searches = prepare_searches(
        prober, results, classified, found, orders=orders, ledger=ledger, only=wanted.keys()
    )
    if not prober.poisoned:  # a --poison check ran everything poisoned already
        found = run_poisoned(prober, worth_poisoning(results, victims), found, progress=progress)
    withdraw_diagnosed(prober, searches, found)
    found = search_culprits(
        prober,
        results,
        classified,
        found,
        orders=orders,
        progress=progress,
        ledger=ledger,
        only=wanted.keys(),
    )
    return found, had, revised
