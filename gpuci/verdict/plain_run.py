"""The plain run's exit status: a check's is at least as red as the suite interpreter's.

The suite interpreter is the user's plain pytest run, and `gpuci check` replaces that job:
where it exits 2, 3, 4 or 5 (interrupted, an INTERNALERROR, a usage error, no tests ran),
the check exits with that code; where it exits 1 (a failed test, `--cov-fail-under`, a
plugin that failed the session), the check does not exit 0, even where every test's
category passes; 0 only where the plain run exited 0 and the verdict passes. The verdict
says why first, in pytest's own words (the lines it ended with), then what gpuci found;
it fails with it, unless the plain run's 1 came from its tests' failures, which the diff
judged already (a category gpuci proved may explain them, and the policy allow it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

from gpuci.formats import read_mode_run
from gpuci.model import SUITE_UNIT, GpuciError, Mode, Outcome, Verdict

# pytest's exit codes, as its ExitCode names them
MEANINGS = {
    1: "tests failed, or the session did",
    2: "interrupted",
    3: "internal error",
    4: "usage error",
    5: "no tests ran",
}
PASSED_THROUGH = (2, 3, 4, 5)  # a check exits with these as plain pytest did
_BANNER = re.compile(r"^!{3,} (.+?) !{3,}$")  # `!!!! Interrupted: 1 error during collection !!!!`
_FRAMED = re.compile(r"^={3,} (.+?) ={3,}$")  # `==== 2 passed in 0.1s ====`
_SUMMARY = re.compile(r"^(?:no tests ran|\d+ [a-z]+(?:, \d+ [a-z]+)*) in [\d.]+s\b")  # -q's
_WORDS = ("ERROR: ", "FAIL ", "Coverage failure")  # a usage error; pytest-cov's fail-under
INTERNAL_PREFIX = "INTERNALERROR>"
GPUCI_LINE = "=== gpuci:"  # the header gpuci writes atop each interpreter's log
MAX_WORDS = 4  # lines of pytest's quoted, at most


@dataclass(frozen=True, slots=True)
class PlainRun:
    """How the plain pytest run (the check's suite interpreter) ended."""

    exit_code: int
    words: str  # what pytest said last: its banners, errors and summary line
    tests_failed: bool = False  # some of its tests did not pass (the diff judged those)

    @property
    def judged_by_diff(self) -> bool:
        """Its 1 came from its tests, whose categories the verdict already gives."""
        return self.exit_code == 1 and self.tests_failed

    def reason(self) -> str:
        """The verdict's first reason: the exit status, its meaning, pytest's words."""
        said = f": {self.words}" if self.words else ""
        return f"plain pytest exited {self.exit_code} ({MEANINGS[self.exit_code]}){said}"


def read_plain_run(out: Path) -> PlainRun | None:
    """How OUT's suite interpreter (`OUT/suite`, not a shard's) ended, where it exited
    non-zero by itself; None where it passed, died by a signal (its tests say so), or no
    suite mode ran."""
    with contextlib.suppress(GpuciError, OSError):
        run = read_mode_run(out / Mode.SUITE.value / "run.json")
        suite = next((f for f in run.files if f.file == SUITE_UNIT), None)
        if suite is None or not suite.interpreters:
            return None
        first = suite.interpreters[0]  # the plain run; any later one resumed after it died
        if first.exit_code not in MEANINGS:
            return None
        log = out / Mode.SUITE.value / first.log if first.log else None
        failed = any(t.outcome not in (Outcome.PASSED, Outcome.SKIPPED) for t in run.tests)
        return PlainRun(first.exit_code, pytest_words(_read(log)), tests_failed=failed)
    return None


def pytest_words(log: str) -> str:
    """What pytest said as it ended: its banners (`Interrupted: ...`), its errors, the last
    INTERNALERROR line, pytest-cov's failure, and its summary line (the last)."""
    lines = [line.rstrip() for line in log.splitlines() if not line.startswith(GPUCI_LINE)]
    words: list[str] = []
    internal = [line.removeprefix(INTERNAL_PREFIX).strip() for line in lines]
    internal = [i for i, line in zip(internal, lines, strict=True) if line.startswith("INTERNAL")]
    if internal:
        words.append(internal[-1])
    for line in lines:
        banner = _BANNER.match(line)
        if banner:
            words.append(banner[1])
        elif line.startswith(_WORDS):
            words.append(line.strip())
    # its summary line: framed, or bare under -q; what a hook printed to stderr after it
    # at exit (`Error in sys.excepthook:`) is not pytest's word
    summary = next((_FRAMED.match(line) for line in reversed(lines) if _FRAMED.match(line)), None)
    bare = next((line for line in reversed(lines) if _SUMMARY.match(line)), "")
    last = next((line for line in reversed(lines) if line.strip()), "")
    if summary is not None:
        words.append(summary[1])
    elif bare or (last and not last.startswith(INTERNAL_PREFIX)):
        words.append((bare or last).strip())
    unique = list(dict.fromkeys(w for w in words if w))
    return "; ".join(unique[-MAX_WORDS:])


def at_least_as_red(verdict: Verdict, plain: PlainRun | None) -> Verdict:
    """`verdict`, failed and saying why first where the plain run exited non-zero; as it
    is where that was its 1 for tests that did not pass: the diff judged those."""
    if plain is None or plain.judged_by_diff:
        return verdict
    return dataclasses.replace(verdict, verdict="fail", reasons=(plain.reason(), *verdict.reasons))


def check_exit_code(verdict_code: int, plain: PlainRun | None) -> int:
    """The command's exit status: pytest's 2-5 as themselves, never 0 after its 1."""
    if plain is None:
        return verdict_code
    if plain.exit_code in PASSED_THROUGH:
        return plain.exit_code
    return verdict_code or 1


def _read(log: Path | None) -> str:
    if log is None:
        return ""
    try:
        return log.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
