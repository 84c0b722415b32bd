"""Likely runs: the alone-runs known before they begin, as requests to the runner
(`gpuci.evidence.requests.Request`), which starts them ahead where a start-up is worth hiding
(`Prober.hides_start_ups`).

Strict runs go one after another, and each fresh interpreter pays its start-up while the
GPU idles (CuPy's start-up can be many times a short test's run). So these start at once, held
after their collection (`gpuci.evidence.ahead`), in the order they will run:
- each isolation suspect's first alone-run, and where it failed in every interpreter of
  its own file its second (the first will likely fail, and the test wants two);
- each test that failed the same way everywhere, and each group's representative;
- where start-ups are expensive (PyTorch's), every suspect's second alone-run and its
  poisoned run.
The later kinds declare theirs beside these (a likely failing suspect's depends-on-others
search: `gpuci.evidence.kinds.provider_search.prepared`). Once a suspect passed its first
alone-run, what was started for it as a likely failure is ended (`withdraw_unlikely`:
held, they would take the places of the confirmations after them, which would start cold).

An interpreter serves any run of its files, so a file gets as many as its runs in a row
(one per run, counted over its tests). Those not taken are killed at the end; a guess
costs idle cores, never a result.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from gpuci.evidence.alone import Priorities, poisoned_after
from gpuci.evidence.context import Context
from gpuci.evidence.poisoned import POISONED
from gpuci.evidence.probe import Prober
from gpuci.evidence.requests import Request
from gpuci.run.proc.discover import file_of


def likely_requests(ctx: Context, plan: Priorities) -> list[Request]:
    """The alone-runs `plan` will make first (one per test where start-ups are cheap but
    worth hiding, more where they are expensive), in the order they will run."""
    prober = ctx.prober
    if not prober.hides_start_ups:
        return []
    in_a_row: dict[str, int] = {}  # by file: the interpreters its runs so far need
    requests: list[Request] = []

    def offer(test_id: str, runs: int) -> None:
        file = file_of(test_id)
        in_a_row[file] = in_a_row.get(file, 0) + runs
        requests.append(Request(ids=(test_id,), strict=True, copies=in_a_row[file]))

    for test_id, n in plan.isolation.items():
        twice = test_id in plan.likely_failing or prober.expensive
        offer(test_id, min(2, n) if twice else min(1, n))
    for test_id in plan.consistent:
        offer(test_id, 1)
    for group in plan.groups:
        offer(group.representatives[0], 1)
        for member in poisoned_after(group, group.representatives[0]):  # likely split
            offer(member, 1)
    if prober.expensive and not prober.poisoned:
        # its poisoned run, where it turns out order-dependent
        requests += [Request(ids=(i,), strict=True, env=POISONED) for i in plan.isolation]
    return requests


def withdraw_unlikely(
    prober: Prober, test_id: str, started: Iterable[Callable[[str], None]] = ()
) -> None:
    """A likely failing suspect passed its first alone-run: what the later kinds started
    for it as a failure (`started`, each ends its own) is ended first, then its second
    alone-run, which comes at the end, if at all: ending a copy frees a place, which the
    next offer queued takes."""
    for end in started:
        end(test_id)
    prober.withdraw([test_id], strict=True)
