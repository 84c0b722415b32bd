"""JUnit XML of a mode: one file per scheduled unit, then the mode's `junit.xml`.

pytest's own JUnit is kept where an interpreter wrote one; where it died before writing,
the file is rebuilt from the journal, and crashed, timed-out and not-run tests are added
as cases of their own so that GitLab shows them too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from junitparser import Error, Failure, JUnitXml, Skipped, TestCase, TestSuite
from junitparser.junitparser import JUnitXmlError

from gpuci.model import SUITE_UNIT, Outcome, TestResult
from gpuci.run.disk.side_outputs import write_plain_junit
from gpuci.run.proc.launch import Attempt, unit_stem


def kept_junit(path: Path, ids: Iterable[str]) -> list[TestCase]:
    """The cases for `ids` in an earlier JUnit file of the unit, which --resume keeps."""
    wanted = {_case_key(_case(i, Outcome.PASSED.value, 0.0, "")) for i in ids}
    return [case for case in _read_part(path) or () if _case_key(case) in wanted]


def write_file_junit(
    path: Path,
    key: str,
    attempts: list[Attempt],
    results: list[TestResult],
    *,
    kept: Sequence[TestCase] = (),
    plain: Path | None = None,
) -> None:
    """One JUnit file per scheduled unit: pytest's own where it wrote one, else the journal's.

    `kept`: the cases of tests an interrupted run finished, first (--resume). `plain`: the
    user's --junitxml, of the suite alone: where one interpreter ran it all, the plain
    pytest run wrote it itself, and it is left as it is; else the suite's merged cases.
    """
    plain = plain if key == SUITE_UNIT else None  # no other interpreter writes it
    whole = attempts[0].junit_part if len(attempts) == 1 and not kept else None
    by_pytest = plain is not None and whole is not None and _read_part(whole) is not None
    suite = TestSuite(key)
    written: set[str] = set()
    for case in kept:
        suite.append(case)
        written.add(_case_key(case))
    for attempt in attempts:
        cases = _read_part(attempt.junit_part)
        if cases is None:  # the interpreter died before pytest wrote its JUnit
            cases = [
                _case(
                    e["id"],
                    e.get("outcome", "failed"),
                    float(e.get("duration", 0)),
                    str(e.get("message", "")),
                    tuple(str(w) for w in e.get("pytest", ())),
                )
                for e in attempt.finished
            ]
            # the files it could not collect, or that skipped themselves, as pytest has them
            cases += [
                _case(r.id, r.outcome.value, 0.0, r.message, r.counted)
                for r in attempt.results
                if "::" not in r.id
            ]
        for case in cases:
            suite.append(case)
            written.add(_case_key(case))
        if attempt.junit_part is not None:
            attempt.junit_part.unlink(missing_ok=True)
    for result in results:
        if result.outcome in (Outcome.CRASHED, Outcome.TIMED_OUT, Outcome.NOT_RUN):
            case = _case(result.id, result.outcome.value, result.duration, result.message)
            if _case_key(case) not in written:
                suite.append(case)
    xml = JUnitXml()
    xml.append(suite)  # counts once below: add_testcase would recount per case
    xml.update_statistics()
    path.parent.mkdir(parents=True, exist_ok=True)
    xml.write(str(path))
    if plain is not None and not by_pytest:  # plain pytest would have written none: merged
        write_plain_junit(plain, path)


def _read_part(path: Path | None) -> list[TestCase] | None:
    if path is None or not path.exists() or path.stat().st_size == 0:
        return None
    try:
        xml = JUnitXml.fromfile(str(path))
    except (JUnitXmlError, OSError, SyntaxError, ValueError):
        return None  # malformed: rebuilt from the journal instead
    suites = [xml] if isinstance(xml, TestSuite) else list(xml)
    return [case for suite in suites for case in suite]


def _case_key(case: TestCase) -> str:
    return f"{case.classname}::{case.name}"


def _case(
    test_id: str, outcome: str, duration: float, message: str, words: Sequence[str] = ()
) -> TestCase:
    """A JUnit test case named the way pytest names it (classname from the path), of the
    kind pytest's own JUnit gives it: an error in setup, teardown or collection an error,
    a failure a failure (`words`: what pytest's summary counted for it)."""
    file, _, rest = test_id.partition("::")
    parts = rest.split("::") if rest else [file]
    module = file.removesuffix(".py").replace("/", ".")
    classname = ".".join([module, *parts[:-1]])
    # a file's own case (collection error, module-level skip): pytest names it by module
    case = TestCase(parts[-1], classname, duration) if rest else TestCase(module, "", duration)
    if outcome in (Outcome.SKIPPED.value, Outcome.NOT_RUN.value):
        case.result = [Skipped(message or outcome)]
    elif outcome == Outcome.FAILED.value and "error" not in words:
        case.result = [Failure(message or outcome, outcome)]
    elif outcome != Outcome.PASSED.value:
        case.result = [Error(message or outcome, "error" if "error" in words else outcome)]
    return case


def write_mode_junit(out: Path, keys: Sequence[str]) -> None:
    """The mode's `junit.xml`: every unit's suite, counts recomputed once."""
    merged = JUnitXml()
    for key in keys:
        path = out / "junit" / f"{unit_stem(key)}.xml"
        if path.exists():
            for suite in JUnitXml.fromfile(str(path)):
                merged.append(suite)  # names are unique per file: no merging search
    merged.update_statistics()
    merged.write(str(out / "junit.xml"))
