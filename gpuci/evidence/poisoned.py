"""Poisoned runs: each order-dependent victim alone with every fresh device allocation
filled with 0xFF, telling a victim that reads memory it never wrote (its own bug) from one
its culprit broke; not one that only ran the device out of memory (`worth_poisoning`)."""

from __future__ import annotations

import dataclasses
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from gpuci.evidence.context import Context
from gpuci.evidence.pairs import NOT_REPRODUCED, SAME_RUN_BOTH_WAYS
from gpuci.evidence.probe import Prober, ProbeRun
from gpuci.evidence.results import ModeResults
from gpuci.model import NOT_PASSING, Mode, Outcome, TestEvidence
from gpuci.run.proc.discover import POISON_ENV
from gpuci.run.proc.reports import out_of_device_memory
from gpuci.run.sched.progress import say


def worth_poisoning(results: Mapping[Mode, ModeResults], victims: Sequence[str]) -> list[str]:
    """The victims a poisoned run may tell something of: not one whose every failure in
    the screens ran the device out of memory (filling fresh allocations changes no size,
    and such a run needs the whole GPU for as long as the hog holds it)."""
    failures: dict[str, list[str]] = {}
    for mode_results in results.values():
        for test in mode_results.run.tests:
            if test.id in victims and test.outcome in NOT_PASSING and not test.inferred:
                failures.setdefault(test.id, []).append(test.message)
    return [
        v
        for v in victims
        if not failures.get(v) or not all(out_of_device_memory(m) for m in failures[v])
    ]


def poisonable(prober: Prober) -> bool:
    """Whether the suite's interpreter can import a library the plugin poisons: without one
    a poisoned run is an alone-run again, and its cost is wasted."""
    probe = "import importlib.util as u; print(any(u.find_spec(m) for m in ('cupy', 'torch')))"
    try:
        found = subprocess.run(
            [prober.interpreters.python, "-c", probe],
            cwd=prober.rootdir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return True  # cannot tell: poison, and let the run say
    return found.stdout.strip() != "False"


def run_poisoned(
    ctx: Context, victims: Sequence[str], found: Mapping[str, TestEvidence]
) -> dict[str, TestEvidence]:
    """Each order-dependent victim alone once more, every fresh allocation filled with 0xFF:
    one that fails so twice reads memory it never wrote (its own bug, not its culprit's).
    The victims' first runs go side by side; a failure runs again with nothing beside it
    (twice where that passes: the first failure may have been the load's). One whose runs
    with nothing beside them went both ways under identical conditions is flaky (its
    search says so, and none is made)."""
    prober, progress = ctx.prober, ctx.progress
    merged = dict(found)
    if victims and not poisonable(prober):
        say(progress, "poisoned allocations: skipped (neither CuPy nor PyTorch is importable)")
        return merged
    if victims:
        say(progress, f"poisoned allocations: running {len(victims)} victim(s) alone")

    def poisoned(test_id: str) -> tuple[list[Outcome], bool]:
        if prober.exhausted() or prober.stopping():
            return [], False
        first = _poisoned_run(prober, test_id)
        outcomes = [first.outcome(test_id)]
        if outcomes[0] in NOT_PASSING and not prober.exhausted():  # chance, or its bug?
            outcomes.append(_poisoned_run(prober, test_id, strict=True).outcome(test_id))
            if first.beside and outcomes[1] is Outcome.PASSED and not prober.exhausted():
                # the first failed beside others: the load, or chance? Once more, strictly
                outcomes.append(_poisoned_run(prober, test_id, strict=True).outcome(test_id))
        return outcomes, first.beside

    with ThreadPoolExecutor(max_workers=max(1, prober.admission.slots)) as pool:
        done = list(pool.map(poisoned, victims))
    for test_id, (outcomes, beside) in zip(victims, done, strict=True):
        if not outcomes:
            continue
        before = merged.get(test_id, TestEvidence(id=test_id))
        strict = outcomes[1:] if beside else outcomes  # the runs with nothing beside them
        if Outcome.PASSED in strict and any(o in NOT_PASSING for o in strict):
            merged[test_id] = dataclasses.replace(
                before,
                search=f"{NOT_REPRODUCED}: poisoned, it failed, then not ({SAME_RUN_BOTH_WAYS})",
            )
        elif outcomes[0] in NOT_PASSING and len(outcomes) == 1:  # unconfirmed: the budget
            merged[test_id] = before
        else:  # a failure beside others that passed alone counts as its strict pass
            merged[test_id] = dataclasses.replace(before, poisoned=outcomes[-1])
        say(progress, f"  {test_id}: poisoned: {', '.join(o.value for o in outcomes)}")
    return merged


def _poisoned_run(prober: Prober, test_id: str, *, strict: bool = False) -> ProbeRun:
    return prober.run(
        [test_id],
        phase="poisoned",
        label=f"poisoned: {test_id}",
        env={POISON_ENV: "1"},
        strict=strict,
    )
