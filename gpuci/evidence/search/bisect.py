"""Bisection: the smallest set of earlier tests after which a victim shows its finding.

The tests before the victim where it failed are halved: a level runs the first half before
the victim and keeps it where the victim shows the finding (fails; for depends-on-others,
passes), else the second half, inferred: ceil(log2 n) runs, in waves of speculated levels
where slots are idle (`gpuci.evidence.search.waves`: a wave's runs start
together, the losers are killed and never counted). The last single candidate is run once
where it was inferred, then confirmed; where a start-up is worth hiding, the last
candidates' confirmations start ahead, held (a single candidate's run and its confirmation,
prepared). Where the run of an inferred candidate refutes the inference (the finding needs
tests of both halves, or the victim is flaky) the halving starts again checked
(`gpuci.evidence.search.checked`). A culprit set found for an earlier victim
of the same interpreter is tried first (a cascade). Each search states its runs against its
bound (`Steps`, ceil(log2 n) + CONFIRMING) in evidence.json. Its steps are
`gpuci.evidence.search.step`'s.

Every step is a fresh interpreter; steps may share the GPUs. The answer is confirmed by a
second identical run, with nothing beside it where it shows a failure. Where that run goes
the other way after steps that were beside others, it runs once more, strictly: where that
one shows the finding the victim is flaky (one command went both ways), otherwise
`contradicted` says so and the caller redoes the search. After strict steps a
confirmation that goes the other way makes the victim flaky. Either way nothing is named.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from collections.abc import Sequence

from gpuci.evidence.notes import NOT_REPRODUCED, NOT_SEARCHED, SAME_RUN_BOTH_WAYS
from gpuci.evidence.pairs import PHASE
from gpuci.evidence.probe import Handed, Prober, ProbeRun
from gpuci.evidence.search.by_files import (
    Files,
    FileStage,
    by_file,
    checked_by_files,
    halve_files,
    searched_wave,
)
from gpuci.evidence.search.checked import checked_halving
from gpuci.evidence.search.step import (
    LOADED,
    SHOWN,
    Search,
    never_shown,
    probe_after,
    record,
    run_step,
    step_request,
)
from gpuci.evidence.search.waves import Step
from gpuci.evidence.victims import Task
from gpuci.model import NOT_PASSING, Category, Probe
from gpuci.steps import CONFIRMING, Steps

CASCADE = "cascade"  # a probe that tried an earlier victim's culprits
MAX_CASCADE_TRIES = 3  # known culprit sets tried on a victim before it gets its own search
# where a start-up is worth hiding, the last wave over this many candidates or fewer starts
# each one's confirmation ahead, held after its collection (the losers killed)
MAX_HELD = 4
REFUTED = "the inferred halving was refuted; checked halving"


def cascade(prober: Prober, task: Task, roots: Sequence[tuple[str, ...]]) -> Search | None:
    """A culprit set found for an earlier victim, confirmed on this one in two runs."""
    if task.category is not Category.ORDER_DEPENDENT:
        return None
    candidates = set(task.candidates)
    tried = 0
    search = Search([])
    for culprits in roots:
        if tried == MAX_CASCADE_TRIES or prober.exhausted():
            break
        if not set(culprits) <= candidates:
            continue
        tried += 1
        ordered = [c for c in task.candidates if c in set(culprits)]
        if probe_after(prober, task, search, ordered, CASCADE):
            if _confirmed_again(prober, task, search, ordered):
                search.culprits = tuple(ordered)
                search.note = (
                    "cascade: the culprit of an earlier victim, confirmed twice in"
                    f" {len(search.probes)} run(s)"
                )
            return search
    if not search.probes:
        return None
    return bisect(prober, task, search)


def _confirmed_again(
    prober: Prober, task: Task, search: Search, current: list[str], handed: Handed | None = None
) -> bool:
    """The run that just showed the finding, once more (the command the report prints): a
    flaky victim would otherwise hand the search a culprit by chance (then the note says
    `SAME_RUN_BOTH_WAYS`). Where the steps were beside others and this run goes the other
    way, a third, strict, tells a flaky victim (it shows the finding again) from a load's
    doing (`contradicted`: the search is redone)."""
    suspect = LOADED if search.loaded else ""
    # a failure decides a category only with nothing beside it; a pass answers under load
    strict = task.category is not Category.DEPENDS_ON_OTHERS
    cut = f"search cut by budget before {len(current)} test(s) were confirmed twice"
    if prober.exhausted():
        search.note = cut
        return False
    probe, ran = run_step(prober, task, current, strict=strict, handed=handed)
    if record(task, search, probe, ran):
        return True
    loaded = ran.beside and probe.outcome in NOT_PASSING  # a failure that does not count
    # before the search is redone for the load's doing: the same run once more, with
    # nothing beside it. Where it shows the finding now, the first failed
    # by the load, or the command went both ways (the victim is flaky)
    if (
        (suspect or loaded)
        and not prober.exhausted()
        and probe_after(prober, task, search, current, strict=True)
    ):
        if loaded:
            return True
        search.note = (
            f"{NOT_REPRODUCED}: it {SHOWN[task.category]} after {len(current)}"
            f" test(s), then not, then again ({SAME_RUN_BOTH_WAYS})"
        )
        return False
    if (suspect or loaded) and prober.exhausted():  # the run that would decide was cut
        search.note = cut
        return False
    search.contradicted = suspect
    search.note = (
        f"{NOT_REPRODUCED}: it {SHOWN[task.category]} after {len(current)} test(s),"
        f" then not ({SAME_RUN_BOTH_WAYS})"
    )
    return False


def bisect(
    prober: Prober, task: Task, search: Search | None = None, *, shown: bool = False
) -> Search:
    """Halve the candidates, keeping a half that shows the finding; then confirm. Tests of
    several files are halved by files first, then inside the one kept
    (`gpuci.evidence.search.by_files`). `shown`: a run of `search` ran exactly
    the candidates and showed it (not run again). The search ends with its `steps`: its runs
    since it began against its bound."""
    search = search or Search([])
    tries = len(search.probes)
    held: dict[str, Handed] = {}  # confirmations started ahead, by candidate, until taken
    files = None if shown else by_file(task.candidates)
    stage: FileStage | None = None
    inner = task
    try:
        if files is None:
            _halve(prober, task, search, held, shown=shown)
        else:
            stage = halve_files(prober, task, files, search)
            if stage is not None and not stage.cut:
                # the whole replay beside the first wave, where a screen's failure that files
                # beside it may explain, ran with the files' halving: not again
                kept = files.tests[stage.files[0]]
                inner = dataclasses.replace(task, candidates=kept, pairs=())
                _halve(prober, inner, search, held, shown=stage.confirmed, by=(task, files, stage))
    finally:
        for candidate, interpreter in held.items():
            label = f"culprits of {task.victim}: held for {candidate}"
            prober.let_go(interpreter, phase=PHASE, label=label)
            search.losers += 1
            search.killed += 1
    n = len(task.candidates)
    runs = len(search.probes) - tries
    in_file = 0
    if files is not None:
        left = stage.files if stage is not None else files.names
        in_file = (
            len(inner.candidates) if inner is not task else max(len(files.tests[f]) for f in left)
        )
        bound = (
            _levels(len(files.names))
            + _levels(in_file)
            + CONFIRMING
            + search.whole
            + search.checked
        )
    else:
        bound = _levels(n) + CONFIRMING + search.whole
    search.steps = Steps(
        n=n,
        bound=bound,
        runs=runs,
        waves=search.waves + runs - search.in_waves,  # every run outside a wave is one
        ahead=search.ahead,
        losers=search.losers,
        killed=search.killed,
        tries=tries,
        files=len(files.names) if files is not None else 0,
        in_file=in_file,
        checked=search.checked,
    )
    return search


def _levels(n: int) -> int:
    return math.ceil(math.log2(max(n, 1)))


def _halve(
    prober: Prober,
    task: Task,
    search: Search,
    held: dict[str, Handed],
    *,
    shown: bool,
    by: tuple[Task, Files, FileStage] | None = None,
) -> None:
    """The inferred halving in waves, its last candidate run where inferred, confirmed; the
    checked halving where that run refutes it. Where a start-up is worth hiding the last wave
    starts each candidate's confirmation ahead, into `held` (it takes its own). `by`: the
    tests of the file a halving of files kept (the whole search's task, its files, what the
    halving of files left): a refutation is checked over the files."""
    current = list(task.candidates)
    confirmed = shown  # whether a probe ran exactly `current` and showed it
    refuted = False
    # a strict search, or one the load may fail (runs beside each other would fail it by
    # the load, unevenly), runs one level at a time; any other speculates on the slots idle
    # as its wave starts (other searches' runs keep theirs: a loser must not delay them)
    speculates = not task.strict and not task.loadable
    # a screen's failure that files beside it may explain (`task.pairs`): the whole replay
    # runs in the first wave, so that where it never fails so the pairs come after one wave
    doubted = speculates and bool(task.pairs) and not shown
    while len(current) > 1 and not refuted:
        if prober.exhausted() or prober.stopping():
            # a narrowed set is not a culprit until a run confirms it: none is named
            search.note = (
                f"search cut by budget after {len(search.probes)} run(s),"
                f" down to {len(current)} of {len(task.candidates)} tests"
            )
            return
        if prober.hides_start_ups and speculates and not held and len(current) <= MAX_HELD:
            # each confirmation, declared as this level knows it: its interpreter handed over
            label = f"culprits of {task.victim}: after 1 test(s)"
            for candidate in current:
                held[candidate] = prober.hand(step_request(task, [candidate]), label=label)
            search.ahead += len(current)
        width = max(1, prober.admission.idle()) if speculates else 1
        wave = searched_wave(
            prober,
            task,
            search,
            current,
            width,
            whole=doubted and width > 1,
            step=_step(prober, task),
        )
        doubted = False
        if wave is None:  # the whole replay never showed it: nothing to halve
            return
        current, confirmed, refuted = wave.current, wave.confirmed, wave.refuted
    if not confirmed and not refuted:
        if prober.exhausted():
            search.note = NOT_SEARCHED if not search.probes else "search cut by budget"
            return
        if prober.hides_start_ups and len(current) == 1 and current[0] not in held:
            # this run, then its confirmation, declared as the halving knows them
            prober.start_ahead([step_request(task, current, copies=2)])
        refuted = not probe_after(prober, task, search, current)
        confirmed = not refuted
    several = False
    if refuted and (by is not None or len(task.candidates) > 1):
        found = _checked(prober, task, search, shown=shown, by=by)
        if found is None:
            return
        current, several = found
    elif not confirmed:
        search.note = never_shown(task, search)
        return
    ahead = held.pop(current[0], None) if len(current) == 1 else None
    if not _confirmed_again(prober, task, search, current, ahead):
        return
    search.culprits = tuple(current)
    search.note = (
        f"bisection: {len(search.probes)} run(s)"
        + ("; by files, then tests" if by is not None else "")
        + (f"; needs all {len(current)} together" if several else "")
        + ("; " + REFUTED if refuted else "")
    )


def _checked(
    prober: Prober,
    task: Task,
    search: Search,
    *,
    shown: bool,
    by: tuple[Task, Files, FileStage] | None,
) -> tuple[list[str], bool] | None:
    """Where the run of the inferred last candidate refuted the halving: the checked one,
    over the files where files were halved first (bounded,
    `gpuci.evidence.search.by_files`)."""
    if by is None:
        return checked_halving(prober, task, search, whole_shown=shown or search.whole)
    outer, files, stage = by
    # the file kept showed it alone: the refutation is inside it; else over every file. A
    # run that showed it beside others may have shown the load's doing: run again, strictly
    units = stage.files if stage.confirmed else list(files.names)
    shown_alone = stage.confirmed and not search.loaded
    return checked_by_files(prober, outer, files, units, search, shown=shown_alone)


def _step(prober: Prober, task: Task) -> Step:
    def step(part: Sequence[str], cancel: threading.Event | None) -> tuple[Probe, ProbeRun]:
        return run_step(prober, task, part, cancel=cancel)

    return step
