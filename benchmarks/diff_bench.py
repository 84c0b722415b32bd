"""Diff at scale: a synthetic results directory of 3 modes x N tests, `gpuci diff` and
`gpuci report` timed on it, and the lines that report them."""

from __future__ import annotations

import importlib.util
import json
import platform
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchlib import run_timed, say, shown

from gpuci.formats import mode_run_to_json, write_json_atomic
from gpuci.model import FileRun, FileStatus, Interpreter, Mode, ModeRun, Outcome, TestResult

TARGET_DIFF_S = 5.0  # the issue: 3 modes x 50,000 tests under 5 s...
TARGET_DIFF_MIB = 1024.0  # ...and 1 GB
DIFF_FILE_TESTS = 50  # tests per file in the synthetic diff input
DIFF_WORKERS = 4  # slots of the synthetic parallel mode
LOG_TAIL_CHARS = 3000  # the size of a crash's log excerpt gpuci keeps (run.LOG_EXCERPT_CHARS)


# Planted kinds, with their share of the tests and the category gpuci diff must give them.
PLANTED = (
    ("skipped", 0.03, "skipped"),
    ("failed", 0.005, "failed"),
    ("order-dependent", 0.004, "order-dependent"),
    ("concurrency", 0.003, "concurrency"),
    ("flaky", 0.003, "flaky"),
    ("crashed", 0.0004, "crashed"),
)


@dataclass(frozen=True, slots=True)
class _Planted:
    """One synthetic test: its id, file, kind (a PLANTED name or "passed") and duration."""

    id: str
    file: str
    kind: str
    duration: float


def plant_tests(n: int, rng: random.Random) -> dict[str, list[_Planted]]:
    """N test ids in files of DIFF_FILE_TESTS, each given a kind by PLANTED's shares."""
    by_file: dict[str, list[_Planted]] = {}
    for index in range(n):
        file = f"tests/gpu/test_kernel_{index // DIFF_FILE_TESTS:05d}.py"
        dtype = ("fp16", "fp32", "bf16", "fp64")[index % 4]
        pick, kind = rng.random(), "passed"
        for name, share, _ in PLANTED:
            if pick < share:
                kind = name
                break
            pick -= share
        by_file.setdefault(file, []).append(
            _Planted(f"{file}::test_rows[{dtype}-{index:06d}]", file, kind, rng.expovariate(50.0))
        )
    return by_file


CRASH_LOG = ("CUDA error: an illegal memory access was encountered\n" * 80)[-LOG_TAIL_CHARS:]


def synthetic_result(test: _Planted, mode: Mode, rng: random.Random) -> TestResult:
    """What the runner would have written for a planted test in one mode."""
    if test.kind == "crashed" and mode is Mode.SUITE:
        return TestResult(
            id=test.id,
            file=test.file,
            outcome=Outcome.CRASHED,
            message="interpreter died while this test ran: killed by SIGSEGV (signal 11)",
            reruns=(Outcome.PASSED, Outcome.PASSED),
            log=CRASH_LOG,
        )
    if test.kind == "skipped":
        return TestResult(
            id=test.id, file=test.file, outcome=Outcome.SKIPPED, message="needs a CUDA GPU"
        )
    fails = (
        test.kind == "failed"
        or (test.kind == "order-dependent" and mode is Mode.SUITE)
        or (test.kind == "concurrency" and mode is Mode.PARALLEL)
        or (test.kind == "flaky" and mode is Mode.ISOLATED)
    )
    if not fails:
        return TestResult(
            id=test.id, file=test.file, outcome=Outcome.PASSED, duration=test.duration
        )
    reruns = {
        "failed": (Outcome.FAILED, Outcome.FAILED),
        "flaky": (Outcome.PASSED, Outcome.FAILED),
    }.get(test.kind, (Outcome.PASSED, Outcome.PASSED))
    return TestResult(
        id=test.id,
        file=test.file,
        outcome=Outcome.FAILED,
        duration=test.duration,
        message=f"AssertionError: max abs error {rng.uniform(1e-3, 1):.3g} > 1e-06"
        f" at index {rng.randrange(1 << 20)}",
        reruns=reruns,
    )


def _file_status(results: Sequence[TestResult]) -> FileStatus:
    outcomes = {t.outcome for t in results}
    if Outcome.CRASHED in outcomes:
        return FileStatus.CRASHED
    return FileStatus.FAILED if Outcome.FAILED in outcomes else FileStatus.PASSED


def synthetic_mode_run(
    mode: Mode, by_file: dict[str, list[_Planted]], rng: random.Random
) -> ModeRun:
    """One mode's run.json content: files laid out over its slots, tests in run order."""
    workers = DIFF_WORKERS if mode is Mode.PARALLEL else 1
    order = list(by_file)
    if mode is Mode.PARALLEL:
        rng.shuffle(order)  # longest first, as far as the diff can tell
    slots_free = [0.0] * workers
    tests: list[TestResult] = []
    file_runs: list[FileRun] = []
    suite_cuts: list[float] = [0.0]  # suite mode: a fresh interpreter after each crash
    for file in order:
        results = [synthetic_result(t, mode, rng) for t in by_file[file]]
        tests += results
        slot = min(range(workers), key=slots_free.__getitem__)
        start = slots_free[slot]
        end = slots_free[slot] = start + 0.3 + sum(t.duration for t in results)
        status = _file_status(results)
        if mode is Mode.SUITE:
            if status is FileStatus.CRASHED:
                suite_cuts.append(end)
            continue
        code = None if status is FileStatus.CRASHED else int(status is FileStatus.FAILED)
        signum = 11 if code is None else None
        log = f"logs/{file}.log"
        file_runs.append(
            FileRun(
                file=file,
                status=status,
                slot=slot,
                gpu=str(slot % 2) if mode is Mode.PARALLEL else None,
                start=start,
                end=end,
                interpreters=(
                    Interpreter(exit_code=code, signal=signum, start=start, end=end, log=log),
                ),
                tests=len(results),
            )
        )
    wall = max(slots_free)
    if mode is Mode.SUITE:
        cuts = [*suite_cuts, wall]
        interpreters = tuple(
            Interpreter(
                exit_code=1 if i == len(cuts) - 2 else None,
                signal=None if i == len(cuts) - 2 else 11,
                start=cuts[i],
                end=cuts[i + 1],
                log="logs/suite.log",
            )
            for i in range(len(cuts) - 1)
        )
        status = FileStatus.CRASHED if len(interpreters) > 1 else FileStatus.FAILED
        file_runs = [
            FileRun(
                file="(suite)",
                status=status,
                slot=0,
                gpu=None,
                start=0.0,
                end=wall,
                interpreters=interpreters,
                tests=len(tests),
            )
        ]
    return ModeRun(
        mode=mode,
        command=("gpuci", "run", "tests/gpu", "--mode", mode.value, "--out", "out"),
        rootdir="/builds/team/project",
        workers=workers,
        gpus=("0", "1") if mode is Mode.PARALLEL else (),
        timeout=300.0,
        reruns=2,
        wall_s=wall,
        started_at="2026-11-21T14:03:00Z",
        environment={"python": platform.python_version(), "gpu": "synthetic", "commit": "bench"},
        files=tuple(file_runs),
        tests=tuple(tests),
    )


def build_diff_out(out: Path, n: int, seed: int) -> dict[str, int]:
    """Write OUT/{isolated,parallel,suite}/run.json, N tests each; return planted categories."""
    rng = random.Random(seed)  # noqa: S311 -- seeded test data, not secrets
    by_file = plant_tests(n, rng)
    for mode in Mode:
        write_json_atomic(
            out / mode.value / "run.json", mode_run_to_json(synthetic_mode_run(mode, by_file, rng))
        )
    category_of = {kind: category for kind, _, category in PLANTED}
    planted: dict[str, int] = {}
    for tests in by_file.values():
        for test in tests:
            category = category_of.get(test.kind, "passed")
            planted[category] = planted.get(category, 0) + 1
    return planted


def measure_diff(work: Path, n: int, seed: int) -> dict[str, Any]:
    """Build the synthetic OUT, then time `gpuci diff` and `gpuci report` on it."""
    out = work / "diff-out"
    say(f"diff: writing 3 modes x {n} tests to {out}")
    start = time.perf_counter()
    planted = build_diff_out(out, n, seed)
    built_s = time.perf_counter() - start
    logs = work / "logs"
    diff_cmd = [sys.executable, "-m", "gpuci", "diff", str(out)]
    say("diff: gpuci diff")
    diff = run_timed(diff_cmd, cwd=work, log=logs / "diff.log", allow=(0, 1))
    verdict_path = out / "verdict.json"
    verdict = json.loads(verdict_path.read_text(encoding="utf-8"))
    summary = {k: v for k, v in verdict["summary"].items() if v}
    result: dict[str, Any] = {
        "tests_per_mode": n,
        "build_s": built_s,
        "run_json_mib": sum((out / m.value / "run.json").stat().st_size for m in Mode) / 2**20,
        "diff": {
            "command": shown(diff_cmd, work),
            **asdict(diff),
            "verdict_mib": verdict_path.stat().st_size / 2**20,
        },
        "planted": planted,
        "summary": summary,
        "summary_matches": summary == planted,
    }
    if importlib.util.find_spec("gpuci.report.render") is None:
        result["report"] = None
        return result
    report_cmd = [sys.executable, "-m", "gpuci", "report", str(verdict_path)]
    say("diff: gpuci report")
    report = run_timed(report_cmd, cwd=work, log=logs / "report.log")
    result["report"] = {
        "command": shown(report_cmd, work),
        **asdict(report),
        "html_mib": (out / "report.html").stat().st_size / 2**20,
        "markdown_kib": (out / "comment.md").stat().st_size / 1024,
    }
    return result


def diff_report(result: dict[str, Any]) -> tuple[list[str], bool]:
    """The diff-at-scale lines, and whether its target held."""
    diff = result["diff"]
    ok = diff["wall_s"] < TARGET_DIFF_S and diff["max_rss_mib"] < TARGET_DIFF_MIB
    n = result["tests_per_mode"]
    lines = [
        f"diff at scale: 3 modes x {n} tests ({result['run_json_mib']:.1f} MiB of run.json,"
        f" built in {result['build_s']:.1f} s)",
        f"  gpuci diff     {diff['wall_s']:>7.2f} s  {diff['max_rss_mib']:>7.0f} MiB peak RSS"
        f"  {diff['cpu_s']:>6.2f} s CPU   target < {TARGET_DIFF_S:g} s and"
        f" < {TARGET_DIFF_MIB:.0f} MiB: {'ok' if ok else 'MISSED'}"
        f"  (verdict.json {diff['verdict_mib']:.1f} MiB)",
    ]
    report = result.get("report")
    if report:
        lines.append(
            f"  gpuci report   {report['wall_s']:>7.2f} s  {report['max_rss_mib']:>7.0f} MiB"
            f" peak RSS  {report['cpu_s']:>6.2f} s CPU   (report.html {report['html_mib']:.1f} MiB,"
            f" comment.md {report['markdown_kib']:.0f} KiB)"
        )
    else:
        lines.append("  gpuci report   not measured: gpuci/report/render.py is not there yet")
    match = "yes" if result["summary_matches"] else f"NO: got {result['summary']}"
    lines += [
        f"  planted {result['planted']}",
        f"  categories as planted: {match}",
        f"  {diff['command']}",
    ]
    if report:
        lines.append(f"  {report['command']}")
    return lines, ok
