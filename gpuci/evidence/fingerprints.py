"""Fingerprints: non-passing tests grouped by how they failed.

A fingerprint is the failure's message (its exception type and words) with what differs
between tests that fail the same way taken out: numbers, hex addresses, temporary paths,
the test's own parameter ids; then the innermost frame in the suite's own code. 288
parametrized tests that error in setup on one deprecation share one fingerprint, so the
evidence runs one of them alone instead of all, and the reports show them as one row.

The message is untrusted and may be huge or hold undecodable bytes: a fingerprint is
always short, printable text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuci.model import Mode, ModeRun, Outcome, TestResult, printable
from gpuci.run.proc.endings import EXIT_ID

MAX_INPUT = 2_000  # characters of a message looked at: the rest cannot change the group
MAX_FINGERPRINT = 240  # characters of a fingerprint
# a group of consistent failures runs its first representative alone, the second only where
# the first passes; they are spread over its files
REPRESENTATIVES = 2
# CUDA errors that poison the context: every later CUDA call in the process fails alike
STICKY_ERROR = re.compile(
    r"illegal (memory )?access|illegal address|misaligned address|unspecified launch failure"
    r"|device-side assert|IllegalAddress|MisalignedAddress|LaunchFailure|ILLEGAL_ADDRESS"
    r"|MISALIGNED_ADDRESS|LAUNCH_FAILED|error 700|error 716|error 719",
    re.IGNORECASE,
)
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_TEMP = re.compile(
    r"(?:/private)?(?:/tmp|/var/folders|/var/tmp|/dev/shm)/[^\s'\":,;)\]]*"
    r"|[A-Za-z]:\\[^\s'\":]*\\Temp\\[^\s'\":,;)\]]*"
    r"|\S*pytest-of-[^\s'\":,;)\]]*"
)
_NUMBER = re.compile(r"(?<![A-Za-z0-9_])[-+]?\d+(?:[.,_]\d+)*(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")
_CLAUSE_END = re.compile(r"\(|\.\s|;\s")  # where a message starts listing particulars
_RAISED_AS = re.compile(r"^[A-Za-z_][\w.]*: ")  # `fakegpu.OutOfMemoryError: `, `AssertionError: `
MIN_KIND_CHARS = 16  # a shorter kind ("assert N == N") says too little to match another by


@dataclass(frozen=True, slots=True, kw_only=True)
class FailureGroup:
    """Tests that failed the same way in every mode, under one fingerprint."""

    fingerprint: str
    members: tuple[str, ...]  # in the order first seen
    representatives: tuple[str, ...]  # the few that run alone for all of them


def fingerprint(test_id: str, message: str, where: str = "") -> str:
    """The failure's fingerprint: the message normalized, then ` @ ` its own frame."""
    # the first line names the failure (what the diff shows as its message)
    text = next(iter(message[:MAX_INPUT].strip().splitlines()), "")
    text = text.encode("utf-8", "replace").decode("utf-8")
    for param in _param_ids(test_id):
        text = text.replace(param, "<param>")
    text = _TEMP.sub("<tmp>", text)
    text = _HEX.sub("<hex>", text)
    text = _NUMBER.sub("N", text)
    text = _SPACE.sub(" ", printable(text)).strip()
    frame = printable(_frame(where[:MAX_INPUT]).encode("utf-8", "replace").decode("utf-8"))
    found = f"{text} @ {frame}" if frame else text
    if len(found) > MAX_FINGERPRINT:
        found = found[: MAX_FINGERPRINT - 1] + "…"
    return found


def first_fingerprint(seen: Iterable[TestResult]) -> str:
    """The fingerprint of the first failure among a test's results ("" where none failed
    with a message: a crash or a timeout says nothing the others share)."""
    for test in seen:
        if test.outcome is Outcome.FAILED and test.message.strip():
            return fingerprint(test.id, test.message, test.where)
    return ""


def failure_kind(seen: Iterable[TestResult]) -> str:
    """The first failure's kind: its normalized message up to its first clause's end, no
    frame. Two tests that ran one device out of memory together share it though each names
    its own line and the driver lists who held what ("" where none failed with a message)."""
    for test in seen:
        if test.outcome is Outcome.FAILED and test.message.strip():
            text = fingerprint(test.id, test.message)
            return _CLAUSE_END.split(text, maxsplit=1)[0].strip() or text
    return ""


def same_kind(first: str, second: str) -> bool:
    """Whether two failure kinds are one failure: the words of one within the other's, the
    exception's name aside (a test's own assertion may wrap the error it caught, or count
    the steps that hit it: `AssertionError: N/N steps: out of device memory ...`)."""
    short, long = sorted((_RAISED_AS.sub("", first), _RAISED_AS.sub("", second)), key=len)
    return len(short) >= MIN_KIND_CHARS and short in long


def _param_ids(test_id: str) -> list[str]:
    """The parts of a parametrized test's id (`test_x[float16-3]`: float16, 3), longest
    first so that one id's part inside another's is not replaced half way."""
    name = test_id.rpartition("::")[2]
    if not name.endswith("]") or "[" not in name:
        return []
    inner = name[name.index("[") + 1 : -1]
    # a number is normalized as any other; a one-letter id would replace parts of words
    parts = {p for p in (inner, *inner.split("-")) if len(p) > 1 and not _NUMBER.fullmatch(p)}
    return sorted(parts, key=len, reverse=True)


def _frame(where: str) -> str:
    """`path:line` with a temporary folder taken out (the suite may run from one)."""
    return _TEMP.sub("<tmp>", where)


def consistent_failures(
    results: Mapping[Mode, Sequence[TestResult]], suspects: Iterable[str]
) -> dict[str, TestResult]:
    """The suspects that failed (not crashed nor timed out) in every mode that ran them,
    each with its first result; a test whose outcome differs between modes is not here,
    nor a file that could not be collected in one mode and whose tests ran in another."""
    by_mode = {mode: {t.id: t for t in tests} for mode, tests in results.items()}
    found: dict[str, TestResult] = {}
    for test_id in suspects:
        seen = [tests[test_id] for tests in by_mode.values() if test_id in tests]
        ran = [t for t in seen if t.outcome is not Outcome.NOT_RUN]
        collected = "::" not in test_id and any(
            test_id not in tests and _ran_tests_of(test_id, tests.values())
            for tests in by_mode.values()
        )
        if ran and all(t.outcome is Outcome.FAILED for t in ran) and not collected:
            found[test_id] = ran[0]
    return found


def _ran_tests_of(file: str, tests: Iterable[TestResult]) -> bool:
    """Whether some test of `file` ran among `tests`: the file was collected there."""
    return any(t.file == file and "::" in t.id and t.outcome is not Outcome.NOT_RUN for t in tests)


def group_failures(failures: Mapping[str, TestResult]) -> list[FailureGroup]:
    """Consistent failures by fingerprint, in the order first seen; every group, single
    members included, with its representatives spread over its files."""
    groups: dict[str, list[TestResult]] = {}
    for test in failures.values():
        groups.setdefault(fingerprint(test.id, test.message, test.where), []).append(test)
    return [
        FailureGroup(
            fingerprint=key,
            members=tuple(t.id for t in members),
            representatives=spread(members, REPRESENTATIVES),
        )
        for key, members in groups.items()
    ]


def spread(members: Sequence[TestResult], count: int) -> tuple[str, ...]:
    """`count` members, one per file in turn, the first, the last and the middle of each
    file's first: a group over several files is tried in each of them."""
    by_file: dict[str, list[str]] = {}
    for test in members:
        by_file.setdefault(test.file, []).append(test.id)
    queues = [_ends_first(ids) for ids in by_file.values()]
    chosen: list[str] = []
    while len(chosen) < count and any(queues):
        for queue in queues:
            if queue and len(chosen) < count:
                chosen.append(queue.pop(0))
    return tuple(chosen)


def _ends_first(ids: Sequence[str]) -> list[str]:
    """The first, the last, the middle, then the rest in order."""
    picks = dict.fromkeys([ids[0], ids[-1], ids[len(ids) // 2], *ids])
    return list(picks)


def files_failing_alike(screens: Sequence[ModeRun]) -> set[str]:
    """The files whose every test that did not pass failed the same way in every screen:
    failed, with one fingerprint, in each of `screens`. A lazy isolated pass leaves them
    out (their alone-runs decide); a crash, a time-out, a pass or a skip in one screen, a
    test one screen did not run or a fingerprint that differs keeps a file in."""
    by_screen = [{t.id: t for t in run.tests if not t.inferred} for run in screens]
    ok = (Outcome.PASSED, Outcome.SKIPPED)
    suspects = {t.id: t.file for tests in by_screen for t in tests.values() if t.outcome not in ok}
    alike = set(suspects.values())
    for test_id, file in suspects.items():
        seen = [tests.get(test_id) for tests in by_screen]
        failed = [t for t in seen if t is not None and t.outcome is Outcome.FAILED]
        prints = {fingerprint(test_id, t.message, t.where) for t in failed}
        said = all(t.message.strip() for t in failed)  # a failure without words is like none
        # a pseudo test (an interpreter that died between tests) has no alone-run to decide
        real = "::" in test_id and not test_id.endswith(EXIT_ID)
        if not (real and said and len(failed) == len(seen) and len(prints) == 1):
            alike.discard(file)
    return alike
