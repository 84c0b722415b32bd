"""Classify every test from its outcomes across modes and its alone-reruns: `verdict.json`.

`gpuci diff OUT [--baseline VERDICT.json] [-o FILE]`. A pure function of the files under
OUT: no GPU, no subprocesses. `load_results` reads every mode's `run.json` (shards
merged), `classify_test` decides one test's category, `diff_results` builds the whole
verdict, `format_summary` prints it for a terminal, `write_verdict` writes it.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from gpuci.model import (
    ISOLATION_CATEGORIES,
    NOT_PASSING,
    SUITE_UNIT,
    Category,
    GpuciError,
    InputError,
    Mode,
    ModeRun,
    Outcome,
    TestResult,
    TestVerdict,
    UsageError,
    Verdict,
    printable,
    read_mode_run,
    read_verdict,
    verdict_to_json,
    write_json_atomic,
)

RUN_NAME = "run.json"
SHARD_DIR = re.compile(r"shard-(\d+)-of-(\d+)")
PYTEST = ("python", "-m", "pytest", "-p", "no:randomly")
MAX_LISTED = 25  # tests format_summary lists, two lines each
MAX_PRECEDING = 50  # tests or files a reproduce command puts before the test
MAX_BESIDE = 7  # files a concurrency reproduce command runs beside the test
RESTARTING = frozenset({Outcome.CRASHED, Outcome.TIMED_OUT})  # the next test gets a new interpreter
# When one mode holds one id twice (overlapping shards), the worse outcome is kept.
OUTCOME_RANK = {
    o: i
    for i, o in enumerate(
        (
            Outcome.NOT_RUN,
            Outcome.SKIPPED,
            Outcome.PASSED,
            Outcome.FAILED,
            Outcome.TIMED_OUT,
            Outcome.CRASHED,
        )
    )
}
DEFAULT_FAIL_ON = ISOLATION_CATEGORIES | {Category.FAILED, Category.CRASHED, Category.TIMED_OUT}
DEFAULT_WARN_ON = frozenset({Category.FLAKY, Category.NOT_RUN})
KNOWN = "known"  # --allow's word for isolation regressions the baseline already had
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
LISTED = ISOLATION_CATEGORIES | {
    Category.FAILED,
    Category.CRASHED,
    Category.TIMED_OUT,
    Category.FLAKY,
}


# --- reading a results directory ------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeResults:
    """One mode's results: its shards merged, and which shards were found or missing."""

    run: ModeRun  # shards merged; `shard` is None
    parts: tuple[ModeRun, ...]  # the shards as read (one part when not sharded)
    part_shards: tuple[int, ...]  # each part's shard index (1 when not sharded)
    total_shards: int  # N of "shard I of N"; 1 when not sharded
    missing_shards: tuple[int, ...] = ()


def load_results(out: Path) -> dict[Mode, ModeRun]:
    """Every mode under `out` as one ModeRun, its shards merged."""
    return {mode: results.run for mode, results in load_mode_results(out).items()}


def load_mode_results(out: Path) -> dict[Mode, ModeResults]:
    """Every mode under `out`, shards merged, with the shards found and missing."""
    if not out.is_dir():
        raise UsageError(f"{out}: no such directory; give the --out directory of `gpuci run`")
    found = {
        mode: _load_mode(out / mode.value, mode) for mode in Mode if (out / mode.value).is_dir()
    }
    if not found:
        names = ", ".join(f"{m.value}/" for m in Mode)
        raise UsageError(
            f"{out}: holds no mode directory ({names}); run `gpuci run --mode MODE --out {out}`"
        )
    return found


def _load_mode(directory: Path, mode: Mode) -> ModeResults:
    shard_dirs: dict[int, Path] = {}
    totals: set[int] = set()
    for entry in directory.iterdir():
        match = SHARD_DIR.fullmatch(entry.name)
        if match and entry.is_dir():
            index, total = int(match[1]), int(match[2])
            if not 1 <= index <= total:
                raise InputError(f"{entry}: shard {index} of {total} does not exist")
            shard_dirs[index] = entry
            totals.add(total)
    single = directory / RUN_NAME
    if single.is_file():
        if shard_dirs:
            raise InputError(
                f"{directory}: holds both {RUN_NAME} and shard directories;"
                " results of two different runs are mixed, remove one of them"
            )
        run = _read_run(single, mode)
        return ModeResults(run=_without_shard(run), parts=(run,), part_shards=(1,), total_shards=1)
    if len(totals) > 1:
        raise InputError(
            f"{directory}: mixes shards of {' and '.join(map(str, sorted(totals)))};"
            " results of two different runs are mixed, keep the shards of one"
        )
    parts = [
        (index, _read_run(path / RUN_NAME, mode, shard=index))
        for index, path in sorted(shard_dirs.items())
        # A shard whose job died before it wrote run.json counts as missing.
        if (path / RUN_NAME).is_file()
    ]
    if not parts:
        raise InputError(
            f"{directory / RUN_NAME}: no such file, and no shard-I-of-N/{RUN_NAME} either;"
            f" rerun `gpuci run --mode {mode.value}` or remove {directory}"
        )
    total = totals.pop()
    have = {index for index, _ in parts}
    return ModeResults(
        run=_merge_shards([run for _, run in parts]),
        parts=tuple(run for _, run in parts),
        part_shards=tuple(index for index, _ in parts),
        total_shards=total,
        missing_shards=tuple(i for i in range(1, total + 1) if i not in have),
    )


def _read_run(path: Path, mode: Mode, *, shard: int | None = None) -> ModeRun:
    run = read_mode_run(path)
    if run.mode is not mode:
        raise InputError(
            f"{path}: says mode {run.mode.value!r} but lies in {mode.value}/;"
            " move it where it belongs"
        )
    if shard is not None and run.shard is not None and run.shard[0] != shard:
        raise InputError(
            f"{path}: says shard {run.shard[0]} of {run.shard[1]} but lies in another shard's"
            " directory; move it where it belongs"
        )
    return run


def _without_shard(run: ModeRun) -> ModeRun:
    return replace(run, shard=None) if run.shard is not None else run


def _merge_shards(parts: Sequence[ModeRun]) -> ModeRun:
    """One ModeRun for all shards: files and tests united, wall time the longest shard's."""
    first = parts[0]
    tests: dict[str, TestResult] = {}
    for part in parts:
        for test in part.tests:
            _keep_worse(tests, test)
    gpus = dict.fromkeys(g for part in parts for g in part.gpus)
    started = [p.started_at for p in parts if p.started_at]
    return ModeRun(
        mode=first.mode,
        command=first.command,
        pytest_args=first.pytest_args,
        rootdir=first.rootdir,
        workers=max(p.workers for p in parts),
        gpus=tuple(gpus),
        shard=None,
        timeout=first.timeout,
        reruns=first.reruns,
        wall_s=max(p.wall_s for p in parts),
        started_at=min(started) if started else "",
        interrupted=any(p.interrupted for p in parts),
        environment=first.environment,
        files=tuple(f for part in parts for f in part.files),
        tests=tuple(tests.values()),
    )


def _keep_worse(tests: dict[str, TestResult], test: TestResult) -> None:
    held = tests.get(test.id)
    if held is None or OUTCOME_RANK[test.outcome] > OUTCOME_RANK[held.outcome]:
        tests[test.id] = test


# --- one test -------------------------------------------------------------------------


def classify_test(  # noqa: PLR0911, PLR0912 -- a precedence table reads best in one place
    outcomes: Mapping[Mode, Outcome],
    reruns: Sequence[Outcome],
    *,
    first_in_file: bool = False,
) -> Category:
    """One test's category from its outcome in each mode and its alone-reruns.

    `first_in_file` says that nothing ran before the test in its isolated interpreter (it
    is its file's first test, or the first after a crash): isolated then ran it under the
    same conditions as an alone-rerun, so a difference between the two is chance.

    Precedence, first match wins:

    1. Outcomes `not-run` are ignored (a mode, or a mode's shard, that did not run it);
       when every outcome is `not-run` the test is `not-run`.
    2. `crashed` in any mode, then `timed-out` in any mode: the interpreter died, or was
       killed, while the test ran. This holds even when only `suite` saw it: the outcomes
       per mode in verdict.json show where, and a crash outranks any comparison.
    3. All remaining outcomes `skipped`: `skipped`. Otherwise a skip says nothing.
    4. No failure in any mode nor any rerun: `passed`.
    5. Reruns that both passed and did not pass (failed, crashed or timed out): `flaky`.
    6. Failed in `isolated` but passed in `parallel`: the order in the file is the same,
       only chance differs: `flaky`.
    7. Alone it fails (every rerun): `depends-on-others` if it passed somewhere other
       tests ran before it in its interpreter (`suite`; `isolated` or `parallel` unless
       `first_in_file`); `flaky` if it passed only where nothing ran before it (identical
       conditions); `failed` if it passed nowhere.
    8. Alone it passes: `flaky` if it failed in `isolated` with `first_in_file` (identical
       conditions); `order-dependent` if it failed in `suite` or `isolated`;
       `concurrency` if it failed only in `parallel`.

    Without reruns (`--reruns 0`, or the mode that failed it was interrupted) the isolated
    outcome stands in for "alone": it is the closest to it, a fresh interpreter with only
    the test's own file before it. Without that either, "alone" is taken to pass when
    some mode passed and to fail otherwise.
    """
    ran = {m: o for m, o in outcomes.items() if o is not Outcome.NOT_RUN}
    if not ran:
        return Category.NOT_RUN
    if Outcome.CRASHED in ran.values():
        return Category.CRASHED
    if Outcome.TIMED_OUT in ran.values():
        return Category.TIMED_OUT
    decided = {m: o for m, o in ran.items() if o is not Outcome.SKIPPED}
    if not decided:
        return Category.SKIPPED
    failed = {m for m, o in decided.items() if o is Outcome.FAILED}
    passed = {m for m, o in decided.items() if o is Outcome.PASSED}
    rerun_passed = Outcome.PASSED in reruns
    rerun_failed = any(r in NOT_PASSING for r in reruns)
    if not failed and not rerun_failed:
        return Category.PASSED
    if rerun_passed and rerun_failed:
        return Category.FLAKY
    if Mode.ISOLATED in failed and Mode.PARALLEL in passed:
        return Category.FLAKY

    if rerun_failed or rerun_passed:
        alone_passes = rerun_passed
    elif Mode.ISOLATED in decided:
        alone_passes = decided[Mode.ISOLATED] is Outcome.PASSED
    else:
        alone_passes = bool(passed)

    if not alone_passes:
        after_others = {Mode.SUITE} if first_in_file else {Mode.SUITE, Mode.ISOLATED, Mode.PARALLEL}
        if passed & after_others:
            return Category.DEPENDS_ON_OTHERS
        return Category.FLAKY if passed else Category.FAILED
    if Mode.ISOLATED in failed and first_in_file:
        return Category.FLAKY
    if failed & {Mode.SUITE, Mode.ISOLATED}:
        return Category.ORDER_DEPENDENT
    return Category.CONCURRENCY


# --- the policy -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Which categories fail the verdict, which only warn, and whether known ones count."""

    fail_on: frozenset[Category] = DEFAULT_FAIL_ON
    warn_on: frozenset[Category] = DEFAULT_WARN_ON
    allow_known: bool = False  # isolation regressions the baseline already had never fail

    def fails(self, test: TestVerdict) -> bool:
        """Whether this test alone would fail the verdict."""
        if test.category not in self.fail_on:
            return False
        return not (self.allow_known and test.new is False)

    def warns(self, test: TestVerdict) -> bool:
        """Whether this test alone would make a passing verdict a warning."""
        return test.category in self.warn_on


def parse_policy(fail_on: str | None, allow: str | None) -> Policy:
    """The policy of `--fail-on` and `--allow` (comma lists of category names)."""
    fail = DEFAULT_FAIL_ON
    if fail_on is not None:
        fail, _ = _parse_categories("--fail-on", fail_on, words=())
    allowed: frozenset[Category] = frozenset()
    allow_known = False
    if allow is not None:
        allowed, words = _parse_categories("--allow", allow, words=(KNOWN,))
        allow_known = KNOWN in words
    return Policy(
        fail_on=fail - allowed,
        warn_on=DEFAULT_WARN_ON - allowed - fail,
        allow_known=allow_known,
    )


def _parse_categories(
    option: str, text: str, *, words: tuple[str, ...]
) -> tuple[frozenset[Category], frozenset[str]]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    valid = [c.value for c in Category]
    unknown = [n for n in names if n not in valid and n not in words]
    if unknown:
        raise UsageError(
            f"{option} {text!r}: unknown {', '.join(map(repr, unknown))};"
            f" choose from {', '.join([*valid, *words])}"
        )
    return (
        frozenset(Category(n) for n in names if n in valid),
        frozenset(n for n in names if n in words),
    )


# --- the whole verdict ----------------------------------------------------------------


def read_baseline(path: Path) -> Verdict:
    """Read a baseline `verdict.json` (the target branch's)."""
    try:
        return read_verdict(path)
    except InputError as exc:
        raise InputError(
            f"--baseline: {exc} (give the verdict.json of the target branch)"
        ) from None


def write_verdict(verdict: Verdict, path: Path) -> None:
    """Write `verdict.json` atomically: a reader never sees half of it."""
    try:
        write_json_atomic(path, verdict_to_json(verdict))
    except OSError as exc:
        raise GpuciError(f"{path}: cannot write the verdict ({exc.strerror or exc})") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class _Order:
    """Who ran before whom in one mode's interpreters."""

    segments: list[list[TestResult]]  # one per interpreter, in the order they ran
    blocks: list[list[tuple[str, int]]]  # per segment: (file, position of its first test)
    mid_file: list[bool]  # per segment: it began in the middle of a file, after a crash
    where: dict[str, tuple[int, int, int]]  # test id -> (segment, position, block)


def diff_results(out: Path, *, baseline: Verdict | None, policy: Policy) -> Verdict:
    """Classify every test under `out` and decide the verdict."""
    results = load_mode_results(out)
    modes = [m for m in Mode if m in results]
    by_id: dict[Mode, dict[str, TestResult]] = {}
    for mode in modes:
        tests: dict[str, TestResult] = {}
        for test in results[mode].run.tests:
            _keep_worse(tests, test)
        by_id[mode] = tests
    orders = {mode: _order(results[mode]) for mode in modes}
    reference = next((orders[m] for m in (Mode.ISOLATED, Mode.PARALLEL) if m in orders), None)
    known = (
        {t.id for t in baseline.tests if t.category in ISOLATION_CATEGORIES}
        if baseline is not None
        else set()
    )

    ids = dict.fromkeys(i for mode in modes for i in by_id[mode])
    verdicts = []
    for test_id in ids:
        seen = [by_id[m][test_id] for m in modes if test_id in by_id[m]]
        outcomes = {
            m: by_id[m][test_id].outcome if test_id in by_id[m] else Outcome.NOT_RUN for m in modes
        }
        reruns = tuple(r for t in seen for r in t.reruns)
        first = reference is not None and _first_in_interpreter(reference, test_id)
        category = classify_test(outcomes, reruns, first_in_file=first)
        new = None
        if baseline is not None and category in ISOLATION_CATEGORIES:
            new = test_id not in known
        verdicts.append(
            TestVerdict(
                id=test_id,
                file=seen[0].file,
                category=category,
                outcomes={m.value: o.value for m, o in outcomes.items()},
                reruns=tuple(r.value for r in reruns),
                new=new,
                message=_first_failure(seen),
                log=_crash_log(seen, category),
                reproduce=_reproduce(
                    test_id,
                    category,
                    outcomes=outcomes,
                    reruns=reruns,
                    results=results,
                    orders=orders,
                ),
            )
        )
    verdicts.sort(key=_sort_key)
    summary = {c.value: 0 for c in Category}
    for verdict in verdicts:
        summary[verdict.category.value] += 1
    outcome, reasons = _decide(verdicts, results, policy, with_baseline=baseline is not None)
    environment_from = results.get(Mode.ISOLATED) or results[modes[0]]
    return Verdict(
        verdict=outcome,
        reasons=tuple(reasons),
        summary=summary,
        modes={m.value: _describe_mode(results[m]) for m in modes},
        environment=dict(environment_from.run.environment),
        tests=tuple(verdicts),
    )


def _order(results: ModeResults) -> _Order:
    """Split a mode's tests into interpreters: per file (but in suite), and at crashes."""
    order = _Order(segments=[], blocks=[], mid_file=[], where={})
    per_file = results.run.mode is not Mode.SUITE
    for part in results.parts:
        current: list[TestResult] = []
        blocks: list[tuple[str, int]] = []
        previous: TestResult | None = None
        for test in part.tests:
            if test.outcome is Outcome.NOT_RUN:
                continue  # it did not run, so it ran before nothing
            # The runner resumes in a fresh interpreter after a crash or a timeout.
            after_crash = previous is not None and previous.outcome in RESTARTING
            same_file = previous is not None and previous.file == test.file
            if previous is None or after_crash or (per_file and not same_file):
                current, blocks = [], []
                order.segments.append(current)
                order.blocks.append(blocks)
                order.mid_file.append(after_crash and same_file)
            if not blocks or blocks[-1][0] != test.file:
                blocks.append((test.file, len(current)))
            order.where.setdefault(
                test.id, (len(order.segments) - 1, len(current), len(blocks) - 1)
            )
            current.append(test)
            previous = test
    return order


def _first_in_interpreter(order: _Order, test_id: str) -> bool:
    place = order.where.get(test_id)
    return place is not None and place[1] == 0


def _selectable(test_id: str) -> str:
    """What pytest is given to run the test: its id, or its file for a pseudo test."""
    file, _, name = test_id.partition("::")
    # No real test's name starts with "[": such an id is the runner's stand-in for an
    # interpreter that died between tests, and only its file can be run.
    if name.startswith("["):
        return "" if file == SUITE_UNIT else file
    return test_id


def _ran_before(order: _Order, test_id: str, *, by_file: bool) -> tuple[list[str], int]:
    """What ran before the test in its interpreter, nearest last, and how many were cut.

    Test ids, or in suite mode the files before the test's own (shorter, and what a plain
    `pytest` run does); the nearest MAX_PRECEDING are kept, the likeliest polluters.
    """
    place = order.where.get(test_id)
    if place is None:
        return [], 0
    segment, position, block = place
    tests = order.segments[segment]
    if not by_file or block == 0:
        start = max(0, position - MAX_PRECEDING)
        return [t.id for t in tests[start:position]], start
    blocks = order.blocks[segment]
    start = max(0, block - MAX_PRECEDING)
    args = [file for file, _ in blocks[start:block]]
    if start == 0 and order.mid_file[segment]:
        # The interpreter began in the middle of the first file (after a crash there):
        # only that file's later tests ran in it, so name them instead of the file.
        end = blocks[1][1]
        head = max(0, end - MAX_PRECEDING)
        return [t.id for t in tests[head:end]] + args[1:], head
    return args, start


def _first_failure(seen: Iterable[TestResult]) -> str:
    for test in seen:
        if test.outcome in NOT_PASSING and test.message.strip():
            return test.message.strip().splitlines()[0]
    return ""


def _crash_log(seen: Iterable[TestResult], category: Category) -> str:
    if category is Category.CRASHED or category is Category.TIMED_OUT:
        wanted = Outcome(category.value)
        for test in seen:
            if test.outcome is wanted and test.log:
                return test.log
    return ""


def _reproduce(
    test_id: str,
    category: Category,
    *,
    outcomes: Mapping[Mode, Outcome],
    reruns: Sequence[Outcome],
    results: Mapping[Mode, ModeResults],
    orders: Mapping[Mode, _Order],
) -> str:
    """A shell command that shows the finding: the failing order, or the test alone."""
    if category in (Category.PASSED, Category.SKIPPED):
        return ""
    mode = Mode.ISOLATED if Mode.ISOLATED in results else next(iter(results))
    before: list[str] = []
    omitted = 0
    wanted = _shown_only_in_order(category, outcomes, reruns)
    for failing in (Mode.ISOLATED, Mode.SUITE):
        if wanted is not None and outcomes.get(failing) is wanted:
            by_file = failing is Mode.SUITE
            before, omitted = _ran_before(orders[failing], test_id, by_file=by_file)
            if before:
                mode = failing
                break
    run = results[mode].run
    target = _selectable(test_id)
    if not target:
        return ""
    if category is Category.CONCURRENCY and Mode.PARALLEL in results:
        beside = _ran_beside(results[Mode.PARALLEL], target.partition("::")[0])
        if beside:
            return _run_together(results[Mode.PARALLEL].run, [target, *beside])
    command = shlex.join([*PYTEST, *run.pytest_args, *before, target])
    if run.rootdir:
        command = f"{shlex.join(['cd', run.rootdir])} && {command}"
    if omitted:
        command += f"  # {omitted} earlier in the {mode.value} order left out, see its run.json"
    return command


def _ran_beside(results: ModeResults, file: str) -> list[str]:
    """The files whose interpreters overlapped this file's in the parallel run."""
    for part in results.parts:
        mine = next((f for f in part.files if f.file == file), None)
        if mine is not None:
            return [
                f.file
                for f in part.files
                if f.file != file and f.start < mine.end and mine.start < f.end
            ][:MAX_BESIDE]
    return []


def _run_together(run: ModeRun, targets: Sequence[str]) -> str:
    """A command that runs each target in its own interpreter, all at once, as gpuci did."""
    each = " & ".join(shlex.join([*PYTEST, *run.pytest_args, target]) for target in targets)
    command = f"({each} & wait)"
    if run.rootdir:
        command = f"{shlex.join(['cd', run.rootdir])} && {command}"
    return command


def _shown_only_in_order(
    category: Category, outcomes: Mapping[Mode, Outcome], reruns: Sequence[Outcome]
) -> Outcome | None:
    """The outcome that only the failing order shows, when running it alone would not."""
    if category is Category.ORDER_DEPENDENT:
        return Outcome.FAILED
    if category in (Category.CRASHED, Category.TIMED_OUT):
        # A crash that alone-reruns and isolated mode did not repeat happened after
        # other tests: the test alone would just pass.
        outcome = Outcome(category.value)
        if outcome not in reruns and outcomes.get(Mode.ISOLATED) is not outcome:
            return outcome
    return None


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
) -> tuple[str, list[str]]:
    """The verdict and its reasons: what fails it first, then what makes it a warning."""
    failing: dict[str, int] = {}
    warning: dict[str, int] = {}
    for test in tests:
        if policy.fails(test):
            key = _reason_key(test, with_baseline=with_baseline)
            failing[key] = failing.get(key, 0) + 1
        elif policy.warns(test):
            key = _reason_key(test, with_baseline=with_baseline)
            warning[key] = warning.get(key, 0) + 1
    reasons = [_reason(key, n) for key, n in sorted(failing.items(), key=_reason_order)]
    warnings = [_reason(key, n) for key, n in sorted(warning.items(), key=_reason_order)]
    for mode, mode_results in results.items():
        total = mode_results.total_shards
        for index in mode_results.missing_shards:
            warnings.append(f"{mode.value}: shard {index} of {total} missing")
        if mode_results.run.interrupted:
            warnings.append(f"{mode.value}: interrupted before every test ran")
    if reasons:
        return "fail", reasons + warnings
    if warnings:
        return "warn", warnings
    return "pass", []


def _reason_key(test: TestVerdict, *, with_baseline: bool) -> str:
    if test.category in ISOLATION_CATEGORIES:
        if not with_baseline:
            return "isolation"
        return "known isolation" if test.new is False else "new isolation"
    return test.category.value


REASON_ORDER = (
    "new isolation",
    "known isolation",
    "isolation",
    *(c.value for c in Category if c not in ISOLATION_CATEGORIES),
)


def _reason_order(item: tuple[str, int]) -> int:
    return REASON_ORDER.index(item[0])


def _reason(key: str, n: int) -> str:
    if "isolation" in key:
        return f"{n} {key} regression{'s' if n != 1 else ''}"
    if key == Category.NOT_RUN.value:
        return f"{n} test{'s' if n != 1 else ''} not run"
    return f"{n} {key} test{'s' if n != 1 else ''}"


def _describe_mode(results: ModeResults) -> dict[str, Any]:
    """verdict.json's entry for one mode."""
    run = results.run
    files = {f.file for f in run.files if f.file != SUITE_UNIT} | {t.file for t in run.tests}
    return {
        "wall_s": round(run.wall_s, 3),
        "files": len(files),
        "tests": len(run.tests),
        "workers": run.workers,
        "gpus": list(run.gpus),
        "shards": results.total_shards,
        "missing_shards": list(results.missing_shards),
        "interrupted": run.interrupted,
        "file_runs": [
            {
                "file": f.file,
                "status": f.status.value,
                "slot": f.slot,
                "gpu": f.gpu,
                "start": round(f.start, 3),
                "end": round(f.end, 3),
                "duration": round(f.duration, 3),
                "shard": shard,
                "exit_codes": [i.exit_code for i in f.interpreters if i.exit_code is not None],
                "signals": [i.signal for i in f.interpreters if i.signal is not None],
            }
            for part, shard in zip(results.parts, results.part_shards, strict=True)
            for f in part.files
        ],
    }


# --- the terminal ---------------------------------------------------------------------


def format_summary(verdict: Verdict) -> str:
    """The terminal summary: counts, each finding with its evidence, then the verdict."""
    counts = [f"{n} {c.value}" for c in Category if (n := verdict.summary.get(c.value, 0))]
    lines = [", ".join(counts) if counts else "no tests"]
    listed = [t for t in verdict.tests if t.category in LISTED]
    for test in listed[:MAX_LISTED]:
        tag = "" if test.new is None else ("new" if test.new else "known")
        evidence = " ".join(f"{mode}={outcome}" for mode, outcome in test.outcomes.items())
        if test.reruns:
            evidence += f" reruns={','.join(test.reruns)}"
        lines.append(printable(f"{test.category.value:<17} {tag:<5} {test.id}  {evidence}"))
        if test.reproduce:
            lines.append(printable(f"    reproduce: {test.reproduce}"))
    if len(listed) > MAX_LISTED:
        lines.append(f"... and {len(listed) - MAX_LISTED} more (see verdict.json)")
    why = f" ({'; '.join(verdict.reasons)})" if verdict.reasons else ""
    lines.append(printable(f"verdict: {verdict.verdict}{why}"))
    return "\n".join(lines)
