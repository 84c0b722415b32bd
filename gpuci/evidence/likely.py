"""Likely runs: the evidence runs known before the alone-runs begin, started ahead where a
start-up is worth hiding (`Prober.hides_start_ups`).

Strict runs go one after another, and each fresh interpreter pays its start-up while the
GPU idles (CuPy: 3-4 s on an H100 machine, against a test of 0.4 s: a CuPy section's
eight evidence runs took 25 s, six of them started cold). So these start at once, held
after their collection (`gpuci.evidence.ahead`), in the order they will run:
- each isolation suspect's first alone-run, and where it failed in every interpreter of
  its own file its second (the first will likely fail, and the test wants two);
- each test that failed the same way everywhere, and each group's representative;
- a likely failing suspect that passed in the suite: its run with the suite's other files
  collected, the first of a depends-on-others search, and the halving's first wave
  (`gpuci.evidence.collected`);
- where start-ups are expensive (PyTorch's 15-20 s), every suspect's runs it may need:
  its second alone-run, its poisoned run, its hinted culprits' runs.

An interpreter serves any run of its files, so a file gets as many as its runs in a row
(one per run, counted over its tests). Those not taken are killed at the end; a guess
costs idle cores, never a result.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuci.evidence.classify import classify_results
from gpuci.evidence.collected import prepare_collected
from gpuci.evidence.hinted import hint_tasks, prepare_hinted
from gpuci.evidence.orders import Order
from gpuci.evidence.priorities import Priorities
from gpuci.evidence.probe import Prober
from gpuci.evidence.results import ModeResults
from gpuci.evidence.victims import plan_searches
from gpuci.model import Mode, Outcome, TestEvidence
from gpuci.run.proc.discover import POISON_ENV, file_of
from gpuci.state.left import Ledger


def prepare_likely(
    prober: Prober,
    results: Mapping[Mode, ModeResults],
    plan: Priorities,
    wanted: Mapping[str, int],
    found: Mapping[str, TestEvidence],
    *,
    orders: Mapping[Mode, Order],
    ledger: Ledger,
) -> None:
    """Start ahead the runs `plan` will make first (one per test where start-ups are cheap
    but worth hiding, more where they are expensive), in the order they will run."""
    if not prober.hides_start_ups:
        return
    in_a_row: dict[str, int] = {}  # by file: the interpreters its runs so far need

    def offer(test_id: str, runs: int) -> None:
        file = file_of(test_id)
        in_a_row[file] = in_a_row.get(file, 0) + runs
        prober.prepare([test_id], strict=True, copies=in_a_row[file])

    for test_id, n in plan.isolation.items():
        twice = test_id in plan.likely_failing or prober.expensive
        offer(test_id, min(2, n) if twice else min(1, n))
    for test_id in plan.consistent:
        offer(test_id, 1)
    for group in plan.groups:
        offer(group.representatives[0], 1)
    for test_id in sorted(plan.likely_failing):  # where it passed in the suite
        prepare_collected(prober, results, test_id)
    if not prober.expensive:
        return
    for test_id in plan.isolation:
        if not prober.poisoned:  # its poisoned run, where it turns out order-dependent
            prober.prepare([test_id], strict=True, env={POISON_ENV: "1"})
    # its culprit search's hinted runs, where it turns out order-dependent
    passing = dict.fromkeys(plan.isolation, (Outcome.PASSED,))
    likely = plan_searches(results, classify_results(results, passing, orders), found, orders)
    prepare_hinted(prober, hint_tasks(likely, results, ledger))
