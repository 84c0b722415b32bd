"""Diff: classify every test of a results directory and decide the verdict: `verdict.json`.

`gpuci diff OUT [--baseline VERDICT.json] [-o FILE]`. A pure function of the files under
OUT: no GPU, no subprocesses. `diff_results` reads every mode (`gpuci.evidence.results`),
classifies each test (`gpuci.evidence.classify`), adds its reproduce command
(`gpuci.evidence.reproduce`), and decides the verdict under a `Policy`.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuci.evidence.classify import classify_results, ran_outcomes, together_outcomes
from gpuci.evidence.fingerprints import first_fingerprint
from gpuci.evidence.latent import found_in, latent_note
from gpuci.evidence.orders import interpreter_order
from gpuci.evidence.reproduce import finding_commands
from gpuci.evidence.results import ModeResults, load_mode_results, mask_results
from gpuci.evidence.strict import confirm_strictly
from gpuci.evidence_file import read_evidence
from gpuci.formats import (
    EVIDENCE_DIR,
    EVIDENCE_FILE,
    read_verdict,
    verdict_to_json,
    write_json_atomic,
)
from gpuci.model import (
    FOUND_ONLY_BY,
    ISOLATION_CATEGORIES,
    NOT_PASSING,
    Category,
    Evidence,
    GpuciError,
    InputError,
    Mode,
    Outcome,
    TestEvidence,
    TestResult,
    TestVerdict,
    Verdict,
)
from gpuci.run.disk.masking import mask_secrets
from gpuci.run.sched.progress import say_counts
from gpuci.state.left import read_ledger
from gpuci.verdict.causes import contention_note, group_roots, isolation_headline
from gpuci.verdict.describe import describe_checked, describe_evidence, describe_mode
from gpuci.verdict.left_behind import explain_roots, files_left_behind
from gpuci.verdict.policy import Policy
from gpuci.verdict.skips import nothing_ran, nothing_ran_reason

PYTESTS_OWN = frozenset({"error", "xfailed", "xpassed"})  # pytest's words no outcome has

DEFAULT_POLICY = Policy()  # what counts where no --fail-on or --allow says otherwise

UNINITIALIZED = "reads uninitialized device memory (fails alone with poisoned allocations)"
FINGERPRINTED = ISOLATION_CATEGORIES | {Category.FAILED, Category.FLAKY}  # grouped in reports
DEPENDS = Category.DEPENDS_ON_OTHERS  # its culprits are its providers
# verdict.json's test order: what needs attention first.
CATEGORY_GROUP = {
    Category.FAILED: 2,
    Category.CRASHED: 3,
    Category.TIMED_OUT: 4,
    Category.FLAKY: 5,
    Category.NOT_RUN: 6,
    Category.SKIPPED: 7,
    Category.PASSED: 8,
}


# --- the whole verdict ----------------------------------------------------------------


def read_baseline(path: Path) -> Verdict:
    """Read a baseline `verdict.json` (the target branch's)."""
    try:
        return read_verdict(path)
    except InputError as exc:
        raise InputError(
            f"--baseline: {exc} (give the verdict.json of the target branch)"
        ) from None


def write_verdict(verdict: Verdict, path: Path, secrets: Sequence[str] = ()) -> None:
    """Write `verdict.json` atomically (a reader never sees half of it), `secrets` masked
    wherever a test's output brought one in."""
    data = verdict_to_json(verdict)
    text = json.dumps(data, ensure_ascii=False)
    masked = mask_secrets(text, secrets)
    if masked != text:
        data = json.loads(masked)
    try:
        write_json_atomic(path, data)
    except OSError as exc:
        raise GpuciError(f"{path}: cannot write the verdict ({exc.strerror or exc})") from None


def diff_results(  # -- each TestVerdict is built in one place, field by field
    out: Path, *, baseline: Verdict | None, policy: Policy, secrets: Sequence[str] = ()
) -> Verdict:
    """Classify every test under `out` and decide the verdict, `secrets` masked first."""
    results = mask_results(load_mode_results(out), secrets)
    evidence = _read_evidence(out)
    ledger = read_ledger(out)  # what each test and file left behind (the state ledger)
    found = {t.id: t for t in evidence.tests} if evidence is not None else {}
    modes = [m for m in Mode if m in results]
    orders = {mode: interpreter_order(results[mode]) for mode in modes}
    alone = {i: t.alone for i, t in found.items()}
    known = (
        {t.id for t in baseline.tests if t.category in ISOLATION_CATEGORIES}
        if baseline is not None
        else set()
    )
    verdicts = []
    together = together_outcomes(found)
    for test_id, test in classify_results(results, alone, orders, together=together).items():
        ev = found.get(test_id)
        strict = confirm_strictly(test, ev, results)  # a screen's finding, confirmed or not
        category = strict.category
        new = None
        if baseline is not None and category in ISOLATION_CATEGORIES:
            new = test_id not in known
        latent = found_in(category, ran_outcomes(test.outcomes, test.results), results)
        commands = finding_commands(
            test_id,
            category,
            searched=test.category,
            evidence=ev,
            outcomes=test.outcomes,
            reruns=test.reruns,
            results=results,
            orders=orders,
        )
        verdicts.append(
            TestVerdict(
                id=test_id,
                file=test.seen[0].file,
                category=category,
                outcomes={m.value: o.value for m, o in test.outcomes.items()},
                pytest={m.value: t.counted for m, t in test.results.items() if t.counted},
                reruns=tuple(r.value for r in test.reruns),
                new=new,
                message=_first_failure(test.seen),
                log=_crash_log(test.seen, category),
                reproduce=commands.reproduce,
                inferred=tuple(m.value for m, t in test.results.items() if t.inferred),
                notes=latent_note(latent, category)
                + test.notes
                + _isolated_note(category, ran_outcomes(test.outcomes, test.results))
                + ((strict.note,) if strict.note else ())
                + contention_note(category, test.seen[0].file, ev.culprits if ev else (), results),
                with_provider=commands.with_provider,
                passes_alone=commands.passes_alone,
                fingerprint=first_fingerprint(test.seen) if test.category in FINGERPRINTED else "",
                cut=ev.cut if ev else next((t.cut for t in test.seen if t.cut), ""),
                **(_evidence_fields(ev, category) if ev else _run_fields(test.seen, category)),
                strict=strict.strict,
                found_in=latent,
            )
        )
    verdicts.sort(key=_sort_key)
    summary = {
        c.value: 0 for c in Category if c not in FOUND_ONLY_BY or FOUND_ONLY_BY[c] in results
    }
    for verdict in verdicts:
        summary[verdict.category.value] = summary.get(verdict.category.value, 0) + 1
    outcome, reasons = _decide(
        verdicts, results, policy, with_baseline=baseline is not None, evidence=evidence
    )
    environment_from = results.get(Mode.ISOLATED) or results[modes[0]]
    return Verdict(
        roots=explain_roots(group_roots(verdicts), results, ledger),
        left_behind=files_left_behind(ledger),
        verdict=outcome,
        reasons=tuple(reasons),
        summary=summary,
        modes={m.value: describe_mode(results[m]) for m in modes},
        checked=describe_checked(results),
        environment=dict(environment_from.run.environment),
        evidence=describe_evidence(evidence, verdicts),
        tests=tuple(verdicts),
    )


ISOLATED_NOTE = (
    "isolated runs a fresh interpreter per file: the tests before it in its file ran first"
)


def _isolated_note(category: Category, outcomes: Mapping[Mode, Outcome]) -> tuple[str, ...]:
    """Why an order-dependent victim failed in `isolated`, which sounds like "alone"."""
    if category is Category.ORDER_DEPENDENT and outcomes.get(Mode.ISOLATED) is Outcome.FAILED:
        return (ISOLATED_NOTE,)
    return ()


def _run_fields(seen: Sequence[TestResult], category: Category) -> dict[str, Any]:
    """What a `gpuci run` job's own reruns add where no evidence ran: the representatives a
    failure of a storm was inferred from."""
    inferred = next((t.inferred_from for t in seen if t.inferred_from), ())
    return {"inferred_from": inferred} if inferred and category is Category.FAILED else {}


def _evidence_fields(found: TestEvidence, category: Category) -> dict[str, Any]:
    """What the evidence runs add to a test's verdict: culprits, poisoning, sanitizer."""
    fields: dict[str, Any] = {
        "culprits": found.culprits if category in ISOLATION_CATEGORIES - {DEPENDS} else (),
        "providers": found.culprits if category is DEPENDS else (),
        "search": found.search if category in ISOLATION_CATEGORIES else "",
        "probes": found.probes if category in ISOLATION_CATEGORIES else (),
        "sanitizer": found.sanitizer,
        "inferred_from": found.inferred_from if category is Category.FAILED else (),
    }
    if found.poisoned is not None:
        fields["poisoned"] = found.poisoned.value
    if found.threaded is not None:
        fields["threaded"] = found.threaded.value
    if _diagnosed(found, category):
        fields["diagnosis"] = UNINITIALIZED  # its own bug, whoever ran before it
    return fields


def _diagnosed(found: TestEvidence | None, category: Category) -> bool:
    """Whether it passes alone but fails alone once its allocations are poisoned."""
    poisoned = found.poisoned if found is not None else None
    return poisoned in NOT_PASSING and category is Category.ORDER_DEPENDENT


def _read_evidence(out: Path) -> Evidence | None:
    """The check's evidence runs, if `gpuci check` or `gpuci explain` gathered any."""
    path = out / EVIDENCE_DIR / EVIDENCE_FILE
    return read_evidence(path) if path.is_file() else None


def _first_failure(seen: Iterable[TestResult]) -> str:
    """The first failure's first line; for a test no mode ran, why it did not run; for a
    test skipped everywhere, why it was skipped."""
    seen = list(seen)
    unrun = all(t.outcome is Outcome.NOT_RUN for t in seen)
    skipped = all(t.outcome is Outcome.SKIPPED for t in seen)
    for test in seen:
        if (unrun or skipped or test.outcome in NOT_PASSING) and test.message.strip():
            return test.message.strip().splitlines()[0]
    return ""


def _crash_log(seen: Iterable[TestResult], category: Category) -> str:
    if category is Category.CRASHED or category is Category.TIMED_OUT:
        wanted = Outcome(category.value)
        for test in seen:
            if test.outcome is wanted and test.log:
                return test.log
    return ""


def _sort_key(test: TestVerdict) -> tuple[int, str]:
    if test.category in ISOLATION_CATEGORIES:
        group = 1 if test.new is False else 0
    else:
        group = CATEGORY_GROUP[test.category]
    return group, test.id


def _decide(
    tests: Sequence[TestVerdict],
    results: Mapping[Mode, ModeResults],
    policy: Policy,
    *,
    with_baseline: bool,
    evidence: Evidence | None = None,
) -> tuple[str, list[str]]:
    """The verdict and its reasons: what fails it first, then what makes it a warning, then
    what the policy allowed (what the default policy would have counted): a verdict never
    reads as if there were nothing where `--allow` let something pass."""
    failing: dict[str, list[TestVerdict]] = {}
    warning: dict[str, list[TestVerdict]] = {}
    allowed: dict[str, list[TestVerdict]] = {}
    for test in tests:
        key = _reason_key(test, with_baseline=with_baseline)
        counted = failing if policy.fails(test) else warning if policy.warns(test) else allowed
        if counted is not allowed or DEFAULT_POLICY.fails(test) or DEFAULT_POLICY.warns(test):
            counted.setdefault(key, []).append(test)
    reasons = [_reason(key, n) for key, n in sorted(failing.items(), key=_reason_order)]
    if not policy.allow_skipped and nothing_ran(t.category for t in tests):
        skips = [t.message for t in tests if t.category is Category.SKIPPED]
        reasons.insert(0, nothing_ran_reason(skips))  # tested nothing: never a pass
    warnings = [_reason(key, n) for key, n in sorted(warning.items(), key=_reason_order)]
    for mode, mode_results in results.items():
        total = mode_results.total_shards
        for index in mode_results.missing_shards:
            warnings.append(f"{mode.value}: shard {index} of {total} missing")
        if mode_results.run.interrupted:
            warnings.append(f"{mode.value}: interrupted before every test ran")
    cut = sum(1 for t in tests if t.cut)
    if cut:
        warnings.append(f"{cut} test{'s' if cut != 1 else ''} not rerun: budget")
    left = sum(len(f.leftovers) for r in results.values() for p in r.parts for f in p.files)
    left += sum(len(x) for x in evidence.leftovers.values()) if evidence is not None else 0
    if left:  # a test-isolation bug of its own: each is named in the notes
        warnings.append(f"{left} process{'es' if left != 1 else ''} left running by tests")
    others = sum(len(f.strangers) for r in results.values() for p in r.parts for f in p.files)
    others += sum(len(x) for x in evidence.strangers.values()) if evidence is not None else 0
    if others:  # its memory may be what another test ran out of
        warnings.append(
            f"{others} process{'es' if others != 1 else ''} not started by gpuci held GPU memory"
        )
    allowances = [_allowed(key, n) for key, n in sorted(allowed.items(), key=_reason_order)]
    if reasons:
        return "fail", reasons + warnings + allowances
    if warnings:
        return "warn", warnings + allowances
    return "pass", allowances


def _allowed(key: str, tests: Sequence[TestVerdict]) -> str:
    """`1 known isolation problem allowed — 1 polluter — in 1 test`, `2 failed tests allowed`."""
    head, dash, causes = _reason(key, tests).partition(" — ")
    return f"{head} allowed{dash}{causes}"


def _reason_key(test: TestVerdict, *, with_baseline: bool) -> str:
    if test.category in ISOLATION_CATEGORIES:
        latent = "latent " if test.latent else ""  # found only in an order pytest did not run
        if not with_baseline:
            return f"{latent}isolation"
        return f"known {latent}isolation" if test.new is False else f"new {latent}isolation"
    if test.latent:
        return f"latent {test.category.value}"
    return test.category.value


REASON_ORDER = (
    "new isolation",
    "known isolation",
    "isolation",
    "new latent isolation",
    "known latent isolation",
    "latent isolation",
    *(c.value for c in Category if c not in ISOLATION_CATEGORIES),
    *(f"latent {c.value}" for c in (Category.CRASHED, Category.TIMED_OUT)),
)


def _reason_order(item: tuple[str, list[TestVerdict]]) -> int:
    return REASON_ORDER.index(item[0])


def _reason(key: str, tests: Sequence[TestVerdict]) -> str:
    # Without a baseline nothing regressed: findings are problems; with one, new ones
    # are regressions and known ones problems the target branch has too; counted by cause.
    n = len(tests)
    if "isolation" in key:
        regression = key.startswith("new ")
        what = f"{key} regression" if regression else f"{key} problem"
        return isolation_headline(what, tests) + _found_in(tests)
    if key.startswith("latent "):  # a latent crash or hang
        return f"{n} {key} test{'s' if n != 1 else ''}{_found_in(tests)}"
    if key == Category.NOT_RUN.value:
        return f"{n} test{'s' if n != 1 else ''} not run"
    said = _in_pytests_words(tests)
    return f"{n} {key} test{'s' if n != 1 else ''}" + (f" ({said})" if said else "")


def _found_in(tests: Sequence[TestVerdict]) -> str:
    """Where latent findings were found: ` (found in the reversed order, which plain pytest
    did not run)`."""
    orders = list(dict.fromkeys(t.found_in for t in tests if t.found_in))
    if not orders:
        return ""
    named = " and ".join(orders) + (" orders" if len(orders) > 1 else " order")
    return f" (found in the {named}, which plain pytest did not run)"


def _in_pytests_words(tests: Sequence[TestVerdict]) -> str:
    """`1 failed, 4 errors`: what plain pytest's summary counted for these tests (in the
    suite mode, else the first mode that ran each), where it has words of its own for some."""
    counts: Counter[str] = Counter()
    for test in tests:
        ran = [m for m, o in test.outcomes.items() if o != Outcome.NOT_RUN.value]
        mode = "suite" if "suite" in ran else next(iter(ran), "")
        counts.update(test.pytest.get(mode) or (test.outcomes.get(mode, ""),))
    return say_counts(counts) if set(counts) & PYTESTS_OWN else ""
