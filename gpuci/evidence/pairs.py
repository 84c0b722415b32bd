"""Pairs: a suspect started beside each file that ran with it in the screens; the pair
search the pairs kind makes of each concurrency victim (`gpuci.evidence.kinds.pairs`), and
the culprit search of an order-dependent one whose replay showed nothing, or that ran the
device out of memory with nothing before it pointed at.

The victim runs alone in one interpreter and the partner file in another, both held at
their first tests until both got there (`Prober.run_together`); then beside all of them
at once. Contention is symmetric: where two tests need more of the device than it has,
whichever asks second fails. So a pair shows the finding where the victim fails, or where
a test of the partner file fails the victim's way (`fingerprints.same_kind`) and is
not a failure of its own (it passes with nothing beside it). That test is the victim's
partner: it fails beside the victim, and the pair's command shows it too.

Which GPUs each side sees: its own parallel view (the slot it ran in), unless the victim
ran the device out of memory. Then every side sees the victim's view: the finding is about
two interpreters asking one device for more than it has, and with several GPUs the parallel
slots' rotated views put each side on a different first device, where they never meet
(two memory hogs' pair runs then never reproduce). The shared view is the
search's `gpu`, so that the printed command runs every side with it too.

A pair names its partner file only where it shows the finding twice in a row (in one
run the victim failing, in the next a partner test that passes without it: whichever asks
second fails, so a scratch file two files take for their whole run fails each side in turn);
a pair that showed it once, then not, ends the search: flaky. A pair run whose sides never all
reached their first tests together, or whose victim never ran, asked nothing: it runs once
more, as it was, and counts neither way. A partner test is named only where it failed
the victim's way in two runs of one pair command and passes without the victim
(`gpuci.evidence.claims`): its own file alone in the isolated screen, where its file was
the one other side, or else the pair's other sides run once together without the victim
(a pool limit's victim beside two memory hogs was `concurrency`: the hogs failed its way
beside it, and were named its partners; they fail beside each other without it).
Where the victim was the one that failed both times, and a test of the partner file failed
its way in the parallel screen (contention seen both ways, like two hogs), the pair runs up
to PARTNER_TRIES more times to see which of the partner file's tests it was contending
with. Where none did (a scratch file one side overwrites, read by the other), those runs
would only show the victim fail again: on 2 cores boltons' planted contention spent 2 of
its 4 pair runs so.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuci.evidence.claims import REPEATS, shown_twice
from gpuci.evidence.classify import Classified
from gpuci.evidence.fingerprints import failure_kind, same_kind
from gpuci.evidence.notes import (
    NOT_REPRODUCED,
    NOT_SEARCHED,
    OTHER_SIDE_FAILED,
    PAIRED,
    SAME_RUN_BOTH_WAYS,
    UNASKED,
)
from gpuci.evidence.probe import Prober, ProbeRun
from gpuci.evidence.reproduce import gpu_of
from gpuci.evidence.requests import Request, side_requests
from gpuci.evidence.results import ModeResults
from gpuci.evidence.victims import Task
from gpuci.model import NOT_PASSING, PROBE_SHOWN, Category, Mode, Outcome, Probe, TestResult
from gpuci.run.proc.discover import file_of
from gpuci.run.proc.reports import out_of_device_memory, pool_limited
from gpuci.run.sched.views import first_gpus_note

PHASE = "culprits"  # the account's phase of a pair's runs, as of a culprit search's
PARTNER_OF = "the partner of "  # a partner's search: `pair: the partner of <victim>: ...`
PARTNER_TRIES = 2  # more runs of a confirmed pair, to see which partner test failed
ASKS = 2  # a pair run that asked nothing (`notes.UNASKED`) runs once more, as it was
WITHOUT_VICTIM = "without the victim"  # a partner's run with the victim taken out


# a pair's partner must not fail on its own: these pass with nothing beside them
PARTNERABLE = frozenset({Category.PASSED, Category.ORDER_DEPENDENT, Category.CONCURRENCY})


@dataclass(frozen=True, slots=True, kw_only=True)
class Partnerable:
    """The tests that may be a pair's partner, and those known to pass without the victim
    (in their own file alone): a partner's claim needs both halves (`gpuci.evidence.claims`)."""

    tests: frozenset[str]
    passed_alone: frozenset[str]

    @classmethod
    def of(cls, classified: Mapping[str, Classified]) -> Partnerable:
        """A round's, from its categories."""
        return cls(
            tests=partnerable_tests(classified), passed_alone=passed_in_its_file_alone(classified)
        )


def partnerable_tests(classified: Mapping[str, Classified]) -> frozenset[str]:
    """The tests that may be a pair's partner: none fails on its own, nor in its own file's
    order (a pair runs the partner's whole file: an order-dependent test that failed in the
    isolated screen, its file alone, fails there by itself, beside anything or nothing)."""
    return frozenset(
        t.id
        for t in classified.values()
        if t.category in PARTNERABLE
        and not _fails_in_its_file_alone(t)
        # out of memory under a limit its own process set: beside anything or nothing
        and not any(pool_limited(r.message) for r in t.seen)
    )


def passed_in_its_file_alone(classified: Mapping[str, Classified]) -> frozenset[str]:
    """The tests that passed in the isolated screen's real runs (their file alone, fresh):
    a pair's partner among them is known to pass without the victim."""
    return frozenset(
        t.id
        for t in classified.values()
        if (r := t.results.get(Mode.ISOLATED)) is not None
        and not r.inferred
        and r.outcome is Outcome.PASSED
    )


def _fails_in_its_file_alone(test: Classified) -> bool:
    result = test.results.get(Mode.ISOLATED)
    return result is not None and not result.inferred and result.outcome in NOT_PASSING


def pair_order(candidates: Sequence[str], kind: str, peaks: Mapping[str, int]) -> list[str]:
    """The order to pair the victim with `candidates` (longest overlap in the screens
    first): where it ran the device out of memory, the file that held the most there first
    (its likeliest contender; a hog beside it is what a short overlap hides)."""
    if not out_of_device_memory(kind):
        return list(candidates)
    return sorted(candidates, key=lambda f: -peaks.get(f, 0))


@dataclass(slots=True)
class PairSearch:
    """One victim's pair runs: the files it fails beside, and their tests that failed its
    way beside it (its partners)."""

    probes: list[Probe]
    culprits: tuple[str, ...] = ()
    partners: tuple[str, ...] = ()
    note: str = ""
    gpu: str | None = None  # the view every side of its runs saw (None: each side its own)
    killed: int = 0  # partner tests whose failure beside it their run without it showed too
    # each partner's runs: its outcomes under the pair command, then without the victim
    partner_runs: dict[str, tuple[Probe, ...]] = field(default_factory=dict)


def search_pairs(  # noqa: PLR0915 -- the pairs in turn, each confirmed, and the note that tells it
    prober: Prober,
    parallel: ModeResults,
    *,
    victim: str,
    candidates: Sequence[str],
    kind: str,
    partnerable: Collection[str],
    passed_alone: Collection[str] = (),
) -> PairSearch:
    """The victim beside each file of `candidates` in turn, then beside all of them.

    `kind` is the victim's failure kind in the screens ("": only its own failure counts);
    `partnerable` the tests that may be its partners (none fails without others beside it);
    `passed_alone` those that passed in their own file alone (the isolated screen's real
    runs): a pair with one file needs no run of that file without the victim for them.
    """
    search = PairSearch([])
    # out of device memory: every side on the victim's device, where the contention was
    shared = gpu_of(parallel, file_of(victim)) if out_of_device_memory(kind) else None
    apart = 0  # pair runs whose interpreters did not all start their tests together
    devices = ""  # the last pair run's GPUs (`first_gpus_note`)
    groups: list[Sequence[str]] = [[c] for c in candidates]
    if len(candidates) > 1:
        groups.append(list(candidates))
    ids_of = _ids_by_file(parallel)  # read once: every pair run's sides come from it

    def sides(beside: Sequence[str]) -> list[tuple[list[str], str | None]]:
        return pair_sides(parallel, victim, kind, beside, ids_of=ids_of)

    def pair_shows(beside: Sequence[str]) -> tuple[bool | None, list[str]]:
        """Whether the pair run showed the finding (None: it asked nothing, twice), and the
        partner tests that failed the victim's way in it."""
        nonlocal apart, devices
        search.gpu = shared  # what its runs saw, once one ran
        started = sides(beside)
        devices = first_gpus_note([gpu for _, gpu in started])
        for _ in range(ASKS):
            done, met = prober.run_together(
                started,
                phase=PHASE,
                label=f"culprits of {victim}: beside {len(beside)} file(s)",
            )
            outcome = done[0].outcome(victim)
            # one never reached its first test (no overlap), or the victim never ran: the
            # run asked nothing, and counts neither way
            asked = met == len(started) and outcome is not Outcome.NOT_RUN
            partners = _failed_its_way(done[1:], kind, partnerable) if asked and kind else []
            search.probes.append(
                Probe(
                    count=len(beside),
                    shown=tuple(beside[:PROBE_SHOWN]),
                    outcome=outcome,
                    kind=UNASKED
                    if not asked
                    else OTHER_SIDE_FAILED
                    if partners and outcome not in NOT_PASSING
                    else "",
                )
            )
            if asked:
                # the victim's and each other test's outcome: a partner's failing half
                seen.append((outcome, {r.id: r.outcome for run in done[1:] for r in _results(run)}))
                shown_by.append((outcome, partners))
                return outcome in NOT_PASSING or bool(partners), partners
            apart += 1
            if cut():
                break
        return None, []

    def cut() -> bool:
        return prober.exhausted() or prober.stopping()

    for index, beside in enumerate(groups):
        if cut():
            search.note = NOT_SEARCHED if not search.probes else "search cut by budget"
            return search
        # the sides' start-ups while the runs before them go on: this pair's run and its
        # confirmation, and the next pair's run
        prober.start_ahead(side_requests(sides(beside), copies=2))
        if index + 1 < len(groups):
            prober.start_ahead(side_requests(sides(groups[index + 1])))
        seen: list[tuple[Outcome, dict[str, Outcome]]] = []  # this pair command's asked runs
        shown_by: list[tuple[Outcome, list[str]]] = []  # each: the victim's, partners failing
        shows, partners = pair_shows(beside)
        if not shows:
            continue
        if cut():
            search.note = "search cut by budget before the pair was confirmed twice"
            return search
        again, more = pair_shows(beside)  # the command the report prints
        if again is None:
            continue  # never asked again: seen once, no claim
        if not again:
            # the same pair, started the same way, went both ways: flaky, like a replay
            shown = ", ".join(beside[:PROBE_SHOWN])
            search.note = (
                f"{NOT_REPRODUCED}: beside {shown} it failed, then not ({SAME_RUN_BOTH_WAYS})"
            )
            return search
        failed = Counter([*partners, *more])  # each partner test's failures its way
        seen_both_ways = _failed_its_way([parallel], kind, partnerable, files=beside)
        for _ in range(PARTNER_TRIES if seen_both_ways else 0):
            if _twice(failed) or cut():
                break
            shows, more = pair_shows(beside)
            if not shows:  # confirmed twice already: this run names no partner, no more
                break
            failed.update(more)
        twice = _twice(failed)
        alone = passed_alone if len(beside) == 1 else ()  # its own file was the other side
        without = _standing_partners(prober, sides(beside), twice, alone)
        found = [t for t in twice if without.get(t) is Outcome.PASSED]
        search.killed += len(twice) - len(found)
        if not found and not _shown_twice(prober, sides(beside), shown_by, without, alone):
            # its partners' failures were their own (they fail without the victim too),
            # and the pair showed the contention at most once: this pair shows nothing
            continue
        search.culprits = tuple(beside)
        search.partners = tuple(found)
        # a partner's run without the victim: the one made for it, or its file's run alone in
        # the isolated screen, which this search took for that run (`_standing_partners`):
        # its claim's other half, as the victim's alone-runs are the victim's (without it,
        # a partner whose own alone-runs had not come yet was searched all over again)
        search.partner_runs = {t: _partner_runs(victim, t, seen, without[t]) for t in found}
        search.note = (
            f"{PAIRED}{len(search.probes)} run(s), confirmed twice"
            + (f"; only all {len(beside)} together" if len(beside) > 1 else "")
            + (f"; {', '.join(found)} failed its way beside it" if found else "")
            + (f"; {devices}" if devices else "")
        )
        return search
    search.note = (
        f"{NOT_REPRODUCED}: no pair showed it twice ({len(search.probes)} runs"
        + (f"; {apart} did not overlap" if apart else "")
        + (
            f"; {search.killed} test(s) that failed its way beside it fail without it too"
            if search.killed
            else ""
        )
        + (f"; {devices}" if devices else "")
        + ")"
        if search.probes
        else "no file ran beside it"
    )
    return search


def _shown_twice(
    prober: Prober,
    sides: Sequence[tuple[list[str], str | None]],
    shown_by: Sequence[tuple[Outcome, list[str]]],
    known: Mapping[str, Outcome],
    passed_alone: Collection[str],
) -> bool:
    """Whether the pair command's runs showed the contention twice: in each, the victim
    failed or a partner test failed its way that passes without the victim. Whichever side
    asks second fails, so a contention may fail one side in one run and the other in the
    next (two files taking one scratch file for their whole run): each run showed it, as the
    claim reads the runs (`gpuci.evidence.claims.named_outcomes`). A partner test that failed
    once needs its run without the victim too (`_standing_partners`), made only here."""
    victims = [outcome for outcome, _ in shown_by]
    once = sorted({t for _, partners in shown_by for t in partners} - known.keys())
    if shown_twice(victims) or not once:
        standing = {t for t, o in known.items() if o is Outcome.PASSED}
    else:
        without = _standing_partners(prober, sides, once, passed_alone)
        standing = {t for t, o in {**known, **without}.items() if o is Outcome.PASSED}
    showings = [
        Outcome.FAILED if standing.intersection(partners) else outcome
        for outcome, partners in shown_by
    ]
    return shown_twice(showings)


def _twice(failed: Counter[str]) -> list[str]:
    """The partner tests that failed the victim's way in two runs of one pair command (the
    failing half of their claim, repeated)."""
    return [test for test, n in failed.items() if n >= REPEATS]


def _partner_runs(
    victim: str,
    partner: str,
    seen: Sequence[tuple[Outcome, Mapping[str, Outcome]]],
    alone: Outcome | None,
) -> tuple[Probe, ...]:
    """A partner's runs as its own claim reads them: its outcome in each asked run of the
    pair command (beside the victim, which failed where it passed: `OTHER_SIDE_FAILED`),
    then its outcome in the run without the victim, where one ran."""
    beside = tuple(
        Probe(
            count=1,
            shown=(victim,),
            outcome=runs[partner],
            kind=OTHER_SIDE_FAILED
            if runs[partner] not in NOT_PASSING and victims in NOT_PASSING
            else "",
        )
        for victims, runs in seen
        if partner in runs
    )
    if alone is None:
        return beside
    return (*beside, Probe(count=0, shown=(), outcome=alone, kind=WITHOUT_VICTIM))


def _standing_partners(
    prober: Prober,
    sides: Sequence[tuple[list[str], str | None]],
    failed: Sequence[str],
    passed_alone: Collection[str],
) -> dict[str, Outcome]:
    """The tests that failed the victim's way twice beside it, each with its outcome without
    the victim (the other half of its claim, `gpuci.evidence.claims`; a partner's claim
    stands where it passed): one known to pass in its own file alone needs no such run
    where its file was the only other side; otherwise the pair's other sides run once,
    started as they were, for all of them. Not run (a cut budget): `not-run`."""
    without = {t: Outcome.PASSED for t in failed if t in passed_alone}
    unknown = [t for t in failed if t not in passed_alone]
    if not unknown:
        return without
    if prober.exhausted() or prober.stopping():
        return without | dict.fromkeys(unknown, Outcome.NOT_RUN)  # unasked: not blamed
    runs, _ = prober.run_together(sides[1:], phase=PHASE, label="partners, without the victim")
    for test in unknown:
        without[test] = next(
            (o for o in (r.outcome(test) for r in runs) if o is not Outcome.NOT_RUN),
            Outcome.NOT_RUN,
        )
    return without


def pair_sides(
    parallel: ModeResults,
    victim: str,
    kind: str,
    beside: Sequence[str],
    *,
    ids_of: Mapping[str, list[str]],
) -> list[tuple[list[str], str | None]]:
    """A pair run's sides: the victim, and each file of `beside` with the tests it ran in
    the parallel screen (`ids_of`, `_ids_by_file`'s), each seeing the GPUs it saw there
    (where the victim ran the device out of memory, every side the victim's: where the
    contention was)."""
    shared = gpu_of(parallel, file_of(victim)) if out_of_device_memory(kind) else None
    runs = [([victim], gpu_of(parallel, file_of(victim)))]
    runs += [
        (ids_of.get(f, []), shared if shared is not None else gpu_of(parallel, f)) for f in beside
    ]
    return [(ids, gpu) for ids, gpu in runs if ids]


def first_pair_requests(
    parallel: ModeResults, searches: Sequence[tuple[str, Sequence[str], str]]
) -> list[Request]:
    """The sides of each pair search's (victim, candidates in pair order, failure kind)
    first run and its confirmation, to start ahead before the searches begin
    (`search_pairs` starts the rest as it goes: a pair's first round started cold pays
    both sides' start-ups). Two files paired already count once (the other side's own
    search, which its partner's answers); a file several searches pair with, once each."""
    met: set[frozenset[str]] = set()
    copies: dict[tuple[tuple[str, ...], str | None], int] = {}
    ids_of = _ids_by_file(parallel)
    requests = []
    for victim, candidates, kind in searches:
        pair = frozenset({file_of(victim), *candidates[:1]})
        if not candidates or pair in met:
            continue
        met.add(pair)
        for ids, gpu in pair_sides(parallel, victim, kind, candidates[:1], ids_of=ids_of):
            key = (tuple(dict.fromkeys(file_of(i) for i in ids)), gpu)
            copies[key] = copies.get(key, 0) + 2
            requests.append(Request(ids=tuple(ids), side=True, side_gpu=gpu, copies=copies[key]))
    return requests


def pair_victim(
    prober: Prober, parallel: ModeResults, task: Task, partnerable: Partnerable
) -> PairSearch:
    """`task`'s victim beside the files of its candidates (`search_pairs`), the likeliest
    contender first (`pair_order`)."""
    return search_pairs(
        prober,
        parallel,
        victim=task.victim,
        candidates=pair_order(task.candidates, task.kind, prober.admission.peaks),
        kind=task.kind,
        partnerable=partnerable.tests - {task.victim},
        passed_alone=partnerable.passed_alone,
    )


def partner_note(victim: str, runs: int) -> str:
    """A partner's search: found by its victim's pair runs, not by its own."""
    return f"{PAIRED}{PARTNER_OF}{victim}: failed its way beside it ({runs} run(s))"


def _failed_its_way(
    runs: Sequence[ProbeRun | ModeResults],
    kind: str,
    partnerable: Collection[str],
    *,
    files: Collection[str] | None = None,
) -> list[str]:
    """The tests of the partner runs (or of the screen's `files`) that failed with the
    victim's failure kind."""
    return [
        result.id
        for run in runs
        for result in _results(run)
        if result.id in partnerable
        and (files is None or file_of(result.id) in files)
        and result.outcome is Outcome.FAILED
        and same_kind(failure_kind([result]), kind)
    ]


def _results(run: ProbeRun | ModeResults) -> Iterable[TestResult]:
    return run.run.tests if isinstance(run, ModeResults) else run.results.values()


def _ids_by_file(parallel: ModeResults) -> dict[str, list[str]]:
    """Each file's tests as the parallel run ran them (what a co-runner replays)."""
    ids: dict[str, list[str]] = {}
    for test in parallel.run.tests:
        if test.outcome is not Outcome.NOT_RUN and _selectable(test.id):
            ids.setdefault(test.file, []).append(test.id)
    return ids


def _selectable(test_id: str) -> bool:
    """A real test pytest can select (not a stand-in for an interpreter's death)."""
    file, _, name = test_id.partition("::")
    return bool(file) and bool(name) and not name.startswith("[")
