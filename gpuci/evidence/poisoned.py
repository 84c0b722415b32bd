"""Poisoned runs, as every kind that starts one ahead sees them: a victim alone with every
fresh device allocation filled with 0xFF (`POISONED`), for the victims it may tell something
of (`worth_poisoning`: not one that only ran the device out of memory), where the suite can
be poisoned at all (`poisonable`). The runs themselves, and what they tell, are the kind's
(`gpuci.evidence.kinds.poisoned_runs`)."""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

from gpuci.evidence.context import Context
from gpuci.evidence.probe import Prober
from gpuci.evidence.requests import Request
from gpuci.evidence.results import ModeResults
from gpuci.model import NOT_PASSING, Mode
from gpuci.run.proc.discover import POISON_ENV
from gpuci.run.proc.reports import out_of_device_memory

POISONED = ((POISON_ENV, "1"),)  # a poisoned run's environment (`gpuci.evidence.poison`)


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


def poisoned_ahead(ctx: Context, ids: Sequence[str]) -> list[Request]:
    """The poisoned runs of `ids` worth one, as requests to start ahead; none where the
    suite's interpreter can import no library the plugin poisons."""
    worth = worth_poisoning(ctx.results, ids)
    if not worth or not poisonable(ctx.prober):
        return []
    return [Request(ids=(test_id,), env=POISONED) for test_id in worth]
