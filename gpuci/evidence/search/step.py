"""A search's record and its one step (a culprit's or a provider's): `[before..., victim]`
run in a fresh interpreter (the files among `before` collected, none of their tests run),
whether the victim shows its finding (fails; for depends-on-others, passes), recorded as a
`Probe`; and the request that declares such a run to the runner before its turn
(`step_request`). The halvings (`gpuci.evidence.search.bisect`,
`gpuci.evidence.search.checked`) and the searches over collected files
(`gpuci.evidence.kinds.provider_search.collected`) are made of these steps.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from gpuci.evidence.notes import NOT_REPRODUCED
from gpuci.evidence.pairs import PHASE
from gpuci.evidence.probe import Handed, Prober, ProbeRun
from gpuci.evidence.requests import Request
from gpuci.evidence.victims import Task
from gpuci.model import NOT_PASSING, PROBE_SHOWN, Category, Outcome, Probe
from gpuci.steps import Steps

SHOWN = {c: "passed" if c is Category.DEPENDS_ON_OTHERS else "failed" for c in Category}
COLLECTED = "collected"  # a probe with files collected, none of their tests run
LOADED = "a run beside others"  # what a contradicted search's steps were


@dataclass(slots=True)
class Search:
    """One victim's runs so far."""

    probes: list[Probe]
    culprits: tuple[str, ...] = ()
    note: str = ""
    partners: tuple[str, ...] = ()  # a pair's: its partner file's tests that failed its way
    partner_runs: dict[str, tuple[Probe, ...]] = field(default_factory=dict)  # each's runs
    pair_gpu: str | None = None  # a pair's view shared by every side (`PairSearch.gpu`)
    loaded: bool = False  # a run that showed it by failing had another run beside it
    whole: bool = False  # every candidate's replay ran beside the halving's first wave
    contradicted: str = ""  # what a strict run did not confirm: LOADED runs
    steps: Steps | None = None  # its runs against its bound, once the halving ended
    waves: int = 0  # the halving's waves of speculated runs
    in_waves: int = 0  # the runs counted from them
    ahead: int = 0  # runs started before the level above them answered, held ones too
    losers: int = 0
    killed: int = 0
    checked: int = 0  # its checked stage's bound, where one ran (`culprit_search.by_files`)


def never_shown(task: Task, search: Search) -> str:
    """The note of a search whose replays never showed the victim's finding."""
    what, runs = SHOWN[task.category], len(search.probes)
    return f"{NOT_REPRODUCED}: it never {what} after the tests before it ({runs} runs)"


def shows(task: Task, outcome: Outcome) -> bool | None:
    """Whether the victim's outcome shows the finding; None where it did not run."""
    if outcome in (Outcome.NOT_RUN, Outcome.SKIPPED):
        return None
    if task.category is Category.DEPENDS_ON_OTHERS:
        return outcome is Outcome.PASSED
    return outcome in NOT_PASSING


def probe_after(
    prober: Prober,
    task: Task,
    search: Search,
    before: Sequence[str],
    kind: str = "",
    *,
    strict: bool = False,
) -> bool:
    """Run `[before..., victim]`; whether the victim shows the finding."""
    return record(task, search, *run_step(prober, task, before, kind, strict=strict))


def run_step(
    prober: Prober,
    task: Task,
    before: Sequence[str],
    kind: str = "",
    *,
    strict: bool = False,
    cancel: threading.Event | None = None,
    handed: Handed | None = None,
) -> tuple[Probe, ProbeRun]:
    """One run of the search, not yet recorded (halves of a level run at once; a speculated
    one with its `cancel`; one whose interpreter the runner `handed` it). A file among
    `before` is collected (imported) with none of its tests run (a provider search's
    collected files: `gpuci.evidence.kinds.provider_search.collected`)."""
    collect = [b for b in before if "::" not in b]
    kind = kind or (COLLECTED if collect else "")
    ran = prober.run(
        [*(b for b in before if "::" in b), task.victim],
        collect=collect,
        phase=PHASE,
        label=f"culprits of {task.victim}: "
        + (f"{len(collect)} file(s) {COLLECTED}" if collect else f"after {len(before)} test(s)"),
        strict=strict or task.strict,
        cancel=cancel,
        handed=handed,
    )
    outcome = ran.outcome(task.victim)
    probe = Probe(count=len(before), shown=tuple(before[-PROBE_SHOWN:]), outcome=outcome, kind=kind)
    return probe, ran


def step_request(task: Task, before: Sequence[str], *, copies: int = 1) -> Request:
    """`run_step`'s run of `[before..., victim]`, declared to the runner ahead of it
    (`copies` of it, for as many runs: a run and its confirmation); a file among `before`
    collected, as `run_step` runs it."""
    collect = [b for b in before if "::" not in b]
    ids = [*(b for b in before if "::" in b), task.victim]
    return Request(ids=tuple(ids), collect=tuple(collect), strict=True, copies=copies)


def record(task: Task, search: Search, probe: Probe, ran: ProbeRun) -> bool:
    """Add one run to the search; whether the victim showed the finding."""
    search.probes.append(probe)
    showing = bool(shows(task, probe.outcome))
    # a failure beside another run may be the other's doing: the strict confirmation decides
    search.loaded = search.loaded or (showing and ran.beside and probe.outcome in NOT_PASSING)
    return showing
