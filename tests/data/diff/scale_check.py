"""Scale check of `gpuci diff` (not a test): 3 modes x 50,000 tests must take < 5 s, < 1 GB.

    python tests/data/diff/scale_check.py [TESTS_PER_MODE]

Builds a result directory in a temporary folder (500 files; in every mode about 1% of
the tests fail, and in suite mode 10% more fail after other files, so many reproduce
commands carry a long failing order), then diffs it in a fresh interpreter and prints the
wall time and the peak memory of that interpreter.
"""

from __future__ import annotations

import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from gpuci.model import (
    FileRun,
    FileStatus,
    Mode,
    ModeRun,
    Outcome,
    TestResult,
    mode_run_to_json,
    write_json_atomic,
)
from gpuci.verdict.diff import diff_results, format_summary, write_verdict
from gpuci.verdict.policy import Policy

FILES = 500


def build(out: Path, per_mode: int) -> None:
    """Write isolated, parallel and suite run.json files of `per_mode` tests each."""
    per_file = per_mode // FILES
    for mode in Mode:
        tests = []
        for f in range(FILES):
            for t in range(per_file):
                outcome, reruns = Outcome.PASSED, ()
                if t % 100 == 13:
                    outcome, reruns = Outcome.FAILED, (Outcome.FAILED, Outcome.FAILED)
                elif mode is Mode.SUITE and t % 10 == 4:
                    outcome, reruns = Outcome.FAILED, (Outcome.PASSED, Outcome.PASSED)
                tests.append(
                    TestResult(
                        id=f"tests/gpu/test_{f:03d}.py::test_case[{t}-float32]",
                        file=f"tests/gpu/test_{f:03d}.py",
                        outcome=outcome,
                        duration=0.01,
                        message="AssertionError: mismatch\nmore" if reruns else "",
                        reruns=reruns,
                    )
                )
        units = (
            ["(suite)"]
            if mode is Mode.SUITE
            else [f"tests/gpu/test_{f:03d}.py" for f in range(FILES)]
        )
        files = tuple(
            FileRun(file=u, status=FileStatus.FAILED, slot=0, gpu=None, start=i, end=i + 1.0)
            for i, u in enumerate(units)
        )
        run = ModeRun(
            mode=mode,
            command=("gpuci", "run", "tests/gpu", "--mode", mode.value),
            rootdir="/builds/team/project",
            workers=4,
            files=files,
            tests=tuple(tests),
        )
        write_json_atomic(out / mode.value / "run.json", mode_run_to_json(run))


def measure(out: Path) -> None:
    """Diff `out`, write its verdict and summary, and print time and peak memory."""
    start, cpu = time.perf_counter(), time.process_time()
    verdict = diff_results(out, baseline=None, policy=Policy())
    diffed, diffed_cpu = time.perf_counter(), time.process_time()
    write_verdict(verdict, out / "verdict.json")
    summary = format_summary(verdict)
    end, end_cpu = time.perf_counter(), time.process_time()
    peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tests = sum(verdict.summary.values())
    print(summary.splitlines()[0])
    print(
        f"{tests} test ids: diff_results {diffed - start:.2f} s (cpu {diffed_cpu - cpu:.2f}),"
        f" write_verdict + format_summary {end - diffed:.2f} s (cpu {end_cpu - diffed_cpu:.2f}),"
        f" total {end - start:.2f} s; peak memory {peak_mib:.0f} MiB"
    )


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--measure":
        measure(Path(sys.argv[2]))
    else:
        per_mode = int(sys.argv[1]) if len(sys.argv) > 1 else 50_000
        with tempfile.TemporaryDirectory() as tmp:
            build(Path(tmp), per_mode)
            subprocess.run([sys.executable, __file__, "--measure", tmp], check=True)
