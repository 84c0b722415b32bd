"""compute-sanitizer: the tool, which roots run under it, and one run of a root under it
(the kernel behind an illegal address, named by memcheck); the kind that asks it of the
roots is `gpuci.evidence.kinds.memcheck_roots`.

An illegal address poisons the CUDA context: the test fails (or its interpreter dies)
and every later CUDA call raises, but nothing says which kernel wrote where. Each root
that crashed, or failed with a CUDA error, runs alone once more under
`compute-sanitizer --tool memcheck`; the first error block it prints (the kind of
access, the kernel, the thread, the address, the launching host frames) goes into the
evidence. Roots are the tests that fail alone (`failed`, `crashed`) and the culprits
the search named. Each run has its own timeout, within the evidence budget; what the
budget cuts says so (`not run (budget)`).

memcheck's output is untrusted text, kept as data: the report escapes it.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from gpuci.evidence.classify import Classified
from gpuci.evidence.memcheck import Memcheck, cap_lines, is_cuda_fault, parse_memcheck
from gpuci.evidence.probe import Prober
from gpuci.model import Category, Outcome, TestEvidence, TestResult, UsageError
from gpuci.run.proc.endings import EXIT_ID

PHASE = "sanitizer"
TOOL = "compute-sanitizer"
CUDA_HOME_VARS = ("CUDA_HOME", "CUDA_PATH")  # toolkit roots, as CuPy and PyTorch read them
CUDA_DEFAULT = Path("/usr/local/cuda/bin") / TOOL  # where the CUDA toolkit puts it
TIMEOUT_S = 300.0  # one memcheck run, never more than the budget left
NOT_RUN = "not run (budget)"
MIN_RUN_S = 15.0  # less budget left than this: not started (cut half way, it tells nothing)
# boost-style `--opt=value`: one argument each. No --error-exitcode: an exit code other
# than pytest's own would read as an interpreter dying after pytest finished.
OPTIONS = (
    "--tool=memcheck",
    "--target-processes=all",  # the interpreter may start others (a launcher, a worker)
    "--print-limit=20",  # errors after the first few repeat it, one per thread
    "--launch-timeout=120",  # seconds for a slow start to connect to the tool
    "--check-exit-code=no",  # a failing test's exit code 1 is not a memcheck error
)


def find_sanitizer(environ: Mapping[str, str] | None = None) -> str | None:
    """compute-sanitizer on PATH, else in $CUDA_HOME/bin or $CUDA_PATH/bin, else CUDA's default."""
    env = os.environ if environ is None else environ
    found = shutil.which(TOOL, path=env.get("PATH", os.defpath))
    if found:
        return found
    candidates = [Path(env[v]) / "bin" / TOOL for v in CUDA_HOME_VARS if env.get(v)]
    for path in (*candidates, CUDA_DEFAULT):
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def choose_sanitizer(sanitize: bool | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The tool to run roots under: None when off, or auto (None) and not found."""
    if sanitize is False:
        return None
    tool = find_sanitizer(environ)
    if tool is None and sanitize:
        raise UsageError(
            f"--sanitize: {TOOL} is not on PATH, nor in $CUDA_HOME/bin, $CUDA_PATH/bin or"
            f" {CUDA_DEFAULT.parent};"
            " add the CUDA toolkit's bin directory to PATH, or pass --no-sanitize"
        )
    return tool


# how a crash message names a signal a faulting native call dies of (endings.describe_exit)
NATIVE_CRASH = re.compile(r"killed by SIG(?:SEGV|BUS|ABRT|ILL|FPE)\b")


def _gpu_fault(result: TestResult) -> bool:
    """A CUDA fault in its message or crash log, or a native crash (a segfault in a driver
    call); a plain SIGKILL or exit code says nothing about the GPU unless its log does."""
    if is_cuda_fault(result.message) or is_cuda_fault(result.log):
        return True
    return result.outcome is Outcome.CRASHED and NATIVE_CRASH.search(result.message) is not None


def sanitizer_roots(
    classified: Mapping[str, Classified], found: Mapping[str, TestEvidence]
) -> list[str]:
    """Roots that crashed or failed with a CUDA fault, in the order the tests were first seen.

    A root fails alone (`failed`, `crashed`) or was named a culprit; a victim of a
    poisoned context shows the same CUDA error but is not where the fault is.
    """
    culprits = {c for t in found.values() for c in t.culprits if "::" in c}
    roots = []
    for test in classified.values():
        if "::" not in test.id or test.id.endswith(EXIT_ID):
            continue
        if test.category not in (Category.FAILED, Category.CRASHED) and test.id not in culprits:
            continue
        if any(_gpu_fault(r) for r in test.seen):
            roots.append(test.id)
    return roots


class Sanitizing:
    """compute-sanitizer on the roots known before the searches (tests that failed alone
    with a CUDA fault), in a thread of its own while the poisoned runs and the searches go
    on (`start`); the kind (`gpuci.evidence.kinds.memcheck_roots`) takes what it found
    (`finish`) and runs the roots named later: a memcheck run is slow, and beside the
    searches it no longer comes at the end with nothing beside it. Beside other runs its
    report is still the root's own: memcheck follows the root's process tree only."""

    def __init__(self, prober: Prober, tool: str | None) -> None:
        self.prober = prober
        self.tool = tool
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuci-sanitizer")
        self._texts: dict[str, Future[str]] = {}

    def __enter__(self) -> Sanitizing:
        return self

    def __exit__(self, *exc: object) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def start(
        self, classified: Mapping[str, Classified], found: Mapping[str, TestEvidence]
    ) -> None:
        """Memcheck on each root known now, one after the other, beside the other runs."""
        if self.tool is None:
            return
        for test_id in sanitizer_roots(classified, found):
            if test_id not in self._texts:
                self._texts[test_id] = self._pool.submit(self._memcheck, test_id, self.tool)

    def _memcheck(self, test_id: str, tool: str) -> str:
        if self.prober.stopping() or starved(self.prober):
            return NOT_RUN
        return run_memcheck(self.prober, test_id, tool)

    def finish(self) -> dict[str, str]:
        """What each root started here showed, once all ended."""
        self._pool.shutdown(wait=True)
        return {i: f.result() for i, f in self._texts.items() if not f.cancelled()}


def starved(prober: Prober) -> bool:
    """Whether the budget left cannot finish a memcheck run (one killed half way tells
    nothing)."""
    left = prober.left()
    return prober.exhausted() or (left is not None and left < MIN_RUN_S)


def run_memcheck(prober: Prober, test_id: str, tool: str, *, strict: bool = False) -> str:
    """One run of `test_id` under memcheck (`strict`: with nothing beside it, as at the end
    of the evidence, where no run waits for it); what it found, in a few lines."""
    left = prober.left()
    limit = TIMEOUT_S if left is None else min(TIMEOUT_S, left)
    shown = f"{limit:.0f}s" if limit >= 1 else f"{limit:.1f}s"
    if limit < TIMEOUT_S:
        shown += " (the evidence budget left)"
    ran = prober.run(
        [test_id],
        phase=PHASE,
        label=f"{PHASE}: {test_id}",
        wrapper=(tool, *OPTIONS),
        timeout=limit,
        strict=strict,
    )
    timed_out = Outcome.TIMED_OUT in ran.outcomes.values()
    out = prober.interpreters.out
    where = str(ran.log.relative_to(out.parent) if ran.log.is_relative_to(out.parent) else ran.log)
    report = parse_memcheck(ran.output())
    outcome = ran.outcome(test_id)
    return describe(report, outcome, timed_out=timed_out, limit=shown, where=where)


def describe(report: Memcheck, outcome: Outcome, *, timed_out: bool, limit: str, where: str) -> str:
    """The evidence text of one memcheck run: its first error block, or why there is none.

    `limit` is the run's timeout as shown ("300s"); `where`, the log it wrote.
    """
    if report.block:
        notes = []
        if report.errors is not None:  # 0 too: the tool's own error, no device one
            notes.append(f"ERROR SUMMARY: {report.errors} error{'s' if report.errors != 1 else ''}")
        if timed_out:
            notes.append(f"(then no progress for {limit}: gpuci killed it)")
        return cap_lines(report.block, notes)
    if timed_out:
        return f"{TOOL} did not finish within {limit} (no progress); gpuci killed it"
    if report.errors == 0:
        return f"no memcheck error (ERROR SUMMARY: 0 errors); the test {outcome.value} under {TOOL}"
    if report.errors:
        return f"memcheck counted {report.errors} error(s) but printed none; see {where}"
    return f"no report from {TOOL} (the test {outcome.value}); its output is in {where}"
