"""Tests of gpuci.verdict.diff: classifying tests across modes and alone-reruns, and the verdict.

Result directories are built from the model's own types (`ModeRun`, `TestResult`) and
written with `mode_run_to_json` + `write_json_atomic`, so they follow the model. The
scenario below is also committed as tests/data/diff/out/ (for `gpuci diff` by hand and for
the report's tests); `python tests/test_diff.py` rewrites it and its golden verdict.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

import pytest

from gpuci.evidence.classify import classify_test
from gpuci.evidence.orders import MAX_PRECEDING
from gpuci.evidence.results import load_mode_results, load_results
from gpuci.formats import mode_run_to_json, read_json, verdict_to_json, write_json_atomic
from gpuci.model import (
    Category,
    FileRun,
    FileStatus,
    InputError,
    Interpreter,
    Mode,
    ModeRun,
    Outcome,
    TestResult,
    TestVerdict,
    UsageError,
    Verdict,
    printable,
)
from gpuci.report.summary import MAX_LISTED, format_summary
from gpuci.verdict.diff import diff_results, read_baseline, write_verdict
from gpuci.verdict.policy import DEFAULT_FAIL_ON, Policy, parse_policy

DATA = Path(__file__).parent / "data" / "diff"
REPO = Path(__file__).parent.parent
ROOT = "/builds/team/project"
ISO, PAR, SUI, THR = Mode.ISOLATED, Mode.PARALLEL, Mode.SUITE, Mode.THREADS
P, F, SK = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED
C, T, N = Outcome.CRASHED, Outcome.TIMED_OUT, Outcome.NOT_RUN
A = "tests/gpu/test_a.py"
B = "tests/gpu/test_b.py"
CF = "tests/gpu/test_c.py"
D = "tests/gpu/test_d.py"
E = "tests/gpu/test_e.py"
PYTEST = f"cd {ROOT} && python -m pytest -m 'not slow'"


# --- building result directories --------------------------------------------------------


def result(
    test_id: str,
    outcome: Outcome,
    *reruns: Outcome,
    message: str = "",
    log: str = "",
) -> TestResult:
    return TestResult(
        id=test_id,
        file=test_id.split("::", maxsplit=1)[0],
        outcome=outcome,
        duration=0.25,
        message=message,
        reruns=reruns,
        log=log,
    )


def mode_run(
    mode: Mode,
    tests: Sequence[TestResult],
    *,
    shard: tuple[int, int] | None = None,
    wall_s: float = 10.0,
    interrupted: bool = False,
    environment: Mapping[str, str] | None = None,
) -> ModeRun:
    """A ModeRun with one FileRun per file (one `(suite)` unit in suite mode)."""
    units = ["(suite)"] if mode is SUI else list(dict.fromkeys(t.file for t in tests))
    files = []
    for slot, unit in enumerate(units):
        mine = [t for t in tests if unit in ("(suite)", t.file)]
        crashed = any(t.outcome is C for t in mine)
        files.append(
            FileRun(
                file=unit,
                status=FileStatus.CRASHED if crashed else FileStatus.PASSED,
                slot=slot % 2 if mode is PAR else 0,
                gpu="0" if mode is PAR else None,
                start=float(slot),
                end=slot + 1.5,
                tests=len(mine),
                interpreters=(
                    Interpreter(
                        exit_code=None if crashed else 0,
                        signal=11 if crashed else None,
                        start=float(slot),
                        end=slot + 1.5,
                        log=f"logs/{unit}.log",
                    ),
                ),
            )
        )
    return ModeRun(
        mode=mode,
        command=("gpuci", "run", "tests/gpu", "--mode", mode.value),
        pytest_args=("-m", "not slow"),
        rootdir=ROOT,
        workers=4 if mode is PAR else 1,
        gpus=("0",) if mode is PAR else (),
        shard=shard,
        timeout=300.0,
        reruns=2,
        wall_s=wall_s,
        started_at="2026-11-21T14:03:00Z",
        interrupted=interrupted,
        environment=dict(environment or {"python": "3.12.3", "gpu": "NVIDIA H100 80GB HBM3"}),
        files=tuple(files),
        tests=tuple(tests),
    )


def write_run(out: Path, run: ModeRun) -> Path:
    folder = out / run.mode.value
    if run.shard is not None:
        folder = folder / f"shard-{run.shard[0]}-of-{run.shard[1]}"
    path = folder / "run.json"
    write_json_atomic(path, mode_run_to_json(run))
    return path


def build_scenario(out: Path) -> None:
    """Three modes over five files; parallel ran as 3 shards, of which shard 2 is missing.

    a: test_reads_pool fails after test_leaks_pool in every mode, passes alone.
    b: test_softmax[fp16] fails only in suite (after a); test_needs_warmup fails alone.
    c: a concurrency failure, a real bug, a flaky test, a timeout and a crash in suite.
    d: never ran (suite was interrupted); e: a collection error.
    """
    hang_log = "tests/gpu/test_c.py::test_hangs\ngpuci: killed after 300 s"
    crash_log = "CUDA error: an illegal memory access was encountered\nFatal Python error"
    a = [
        result(f"{A}::test_ok", P),
        result(f"{A}::test_leaks_pool", P),
        result(f"{A}::test_reads_pool", F, P, P, message="AssertionError: buffer not zeroed"),
        result(f"{A}::test_skip", SK),
    ]
    c_isolated = [
        result(f"{CF}::test_kernel_cache", P),
        result(f"{CF}::test_real_bug", F, F, F, message="AssertionError: max abs diff 0.5\n+x"),
        result(f"{CF}::test_flaky", P),
        result(f"{CF}::test_hangs", T, log=hang_log),
        result(f"{CF}::test_after_hang", P),
        result(f"{CF}::test_illegal_address", P),
    ]
    e = [result(E, F, message="collection error: ImportError: No module named 'cupy'")]
    isolated = [
        *a,
        result(f"{B}::test_softmax[fp16]", P),
        result(f"{B}::test_needs_warmup", P),
        *c_isolated,
        *e,
    ]
    write_run(out, mode_run(ISO, isolated, wall_s=93.1))
    c_parallel = [
        result(f"{CF}::test_kernel_cache", F, P, P, message="RuntimeError: cache file truncated"),
        c_isolated[1],
        result(f"{CF}::test_flaky", F, P, F, message="AssertionError: timing"),
        *c_isolated[3:],
    ]
    write_run(out, mode_run(PAR, [*a, *c_parallel], shard=(1, 3), wall_s=40.0))
    write_run(out, mode_run(PAR, e, shard=(3, 3), wall_s=5.0))
    suite = [
        *a,
        result(f"{B}::test_softmax[fp16]", F, P, P, message="AssertionError: nan in output"),
        result(f"{B}::test_needs_warmup", F, F, F, message="RuntimeError: not warmed up"),
        *c_isolated[:5],
        result(f"{CF}::test_illegal_address", C, log=crash_log),
        *e,
        result(f"{D}::test_never", N, message="gpuci was interrupted before this test ran"),
    ]
    environment = {"python": "3.12.3", "gpu": "suite's GPU: not the one reported"}
    write_run(out, mode_run(SUI, suite, wall_s=120.0, interrupted=True, environment=environment))


def finding(test_id: str, category: Category, *, new: bool | None) -> TestVerdict:
    return TestVerdict(
        id=test_id, file=test_id.split("::", maxsplit=1)[0], category=category, outcomes={}, new=new
    )


def write_baseline(path: Path, tests: Sequence[TestVerdict]) -> Path:
    write_verdict(Verdict(verdict="fail", tests=tuple(tests)), path)
    return path


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    out = tmp_path / "out"
    build_scenario(out)
    return out


# --- classify_test --------------------------------------------------------------------

CASES = [
    # (name, outcomes, reruns, first_in_file, category)
    ("all passed", {ISO: P, PAR: P, SUI: P}, (), False, Category.PASSED),
    ("all skipped", {ISO: SK, PAR: SK, SUI: SK}, (), False, Category.SKIPPED),
    ("skipped is neutral beside passed", {ISO: SK, PAR: P, SUI: P}, (), False, Category.PASSED),
    ("skipped is neutral beside failed", {ISO: SK, PAR: F, SUI: F}, (F, F), False, Category.FAILED),
    ("not run anywhere", {ISO: N, PAR: N, SUI: N}, (), False, Category.NOT_RUN),
    ("no mode at all", {}, (), False, Category.NOT_RUN),
    ("missing from one mode", {ISO: P, PAR: N, SUI: F}, (P, P), False, Category.ORDER_DEPENDENT),
    ("a shard missing, rest passed", {ISO: P, PAR: N, SUI: P}, (), False, Category.PASSED),
    ("a shard missing, skipped elsewhere", {ISO: N, PAR: SK, SUI: SK}, (), False, Category.SKIPPED),
    ("crash only in suite", {ISO: P, PAR: P, SUI: C}, (P, P), False, Category.CRASHED),
    ("crash outranks timeout", {ISO: T, PAR: P, SUI: C}, (), False, Category.CRASHED),
    ("timeout outranks failure", {ISO: F, PAR: T, SUI: F}, (F, F), False, Category.TIMED_OUT),
    ("fails everywhere, alone too", {ISO: F, PAR: F, SUI: F}, (F, F), False, Category.FAILED),
    ("fails only in suite", {ISO: P, PAR: P, SUI: F}, (P, P), False, Category.ORDER_DEPENDENT),
    (
        "fails after earlier tests",
        {ISO: F, PAR: F, SUI: F},
        (P, P),
        False,
        Category.ORDER_DEPENDENT,
    ),
    ("fails in isolated as first test", {ISO: F, PAR: F, SUI: F}, (P, P), True, Category.FLAKY),
    ("fails only in parallel", {ISO: P, PAR: F, SUI: P}, (P, P), False, Category.CONCURRENCY),
    ("first test, fails in parallel", {ISO: P, PAR: F, SUI: P}, (P, P), True, Category.CONCURRENCY),
    ("parallel only, no isolated", {PAR: F, SUI: P}, (P, P), False, Category.CONCURRENCY),
    (
        "fails alone, passes after others",
        {ISO: P, PAR: P, SUI: F},
        (F, F),
        False,
        Category.DEPENDS_ON_OTHERS,
    ),
    (
        "first test, passes only in suite",
        {ISO: F, PAR: F, SUI: P},
        (F, F),
        True,
        Category.DEPENDS_ON_OTHERS,
    ),
    ("first test, passes only in isolated", {ISO: P, SUI: F}, (F, F), True, Category.FLAKY),
    ("reruns disagree", {ISO: P, PAR: P, SUI: F}, (P, F), False, Category.FLAKY),
    ("flaky that also fails in parallel", {ISO: P, PAR: F, SUI: P}, (F, P), False, Category.FLAKY),
    ("isolated failed, parallel passed", {ISO: F, PAR: P, SUI: F}, (P, P), False, Category.FLAKY),
    ("same, even when reruns fail", {ISO: F, PAR: P, SUI: F}, (F, F), False, Category.FLAKY),
    ("rerun crash counts as not passing", {ISO: F, PAR: F, SUI: F}, (C, P), False, Category.FLAKY),
    ("reruns crash every time", {ISO: F, PAR: F, SUI: F}, (C, T), False, Category.FAILED),
    ("skipped reruns say nothing", {ISO: P, SUI: F}, (SK, N), False, Category.ORDER_DEPENDENT),
    ("reruns=0: suite only", {ISO: P, PAR: P, SUI: F}, (), False, Category.ORDER_DEPENDENT),
    ("reruns=0: parallel only", {ISO: P, PAR: F, SUI: P}, (), False, Category.CONCURRENCY),
    ("reruns=0: fails everywhere", {ISO: F, PAR: F, SUI: F}, (), False, Category.FAILED),
    (
        "reruns=0: isolated fails, suite passes",
        {ISO: F, SUI: P},
        (),
        False,
        Category.DEPENDS_ON_OTHERS,
    ),
    ("reruns=0, no isolated: fails", {SUI: F}, (), False, Category.FAILED),
    ("reruns=0, no isolated: suite only", {PAR: P, SUI: F}, (), False, Category.ORDER_DEPENDENT),
    # threads: each test of a file in N threads at once, in a fresh interpreter per file
    (
        "fails only in threads",
        {ISO: P, PAR: P, SUI: P, THR: F},
        (P, P),
        False,
        Category.THREAD_UNSAFE,
    ),
    ("first test, fails in threads", {ISO: P, SUI: P, THR: F}, (P,), True, Category.THREAD_UNSAFE),
    ("threads only, passes alone", {THR: F}, (P, P), False, Category.THREAD_UNSAFE),
    ("reruns=0: threads only", {ISO: P, PAR: P, THR: F}, (), False, Category.THREAD_UNSAFE),
    ("reruns=0, threads alone: fails", {THR: F}, (), False, Category.FAILED),
    # a failure with no threads needs none to explain it
    (
        "fails in parallel and threads",
        {ISO: P, PAR: F, THR: F},
        (P, P),
        False,
        Category.CONCURRENCY,
    ),
    (
        "fails in suite and threads",
        {ISO: P, SUI: F, THR: F},
        (P, P),
        False,
        Category.ORDER_DEPENDENT,
    ),
    ("fails in isolated and threads", {ISO: F, THR: F}, (P, P), False, Category.ORDER_DEPENDENT),
    ("fails in threads, alone too", {ISO: F, PAR: F, THR: F}, (F, F), False, Category.FAILED),
    ("fails in threads, reruns disagree", {ISO: P, THR: F}, (P, F), False, Category.FLAKY),
    # threads runs each test in fresh worker threads: thread-local pollution (a leaked
    # current stream) does not reach it there, so passing in threads is not chance
    (
        "isolated failed, threads passed",
        {ISO: F, SUI: F, THR: P},
        (P, P),
        False,
        Category.ORDER_DEPENDENT,
    ),
    ("isolated failed, parallel passed", {ISO: F, PAR: P, THR: P}, (P, P), False, Category.FLAKY),
    # a pass in threads decides nothing but thread-unsafety (pytest-run-parallel 0.10 reports
    # a test failing by a warning as passed in threads): these fail alone and everywhere else
    ("fails alone, passes in threads", {SUI: F, THR: P}, (F, F), False, Category.FAILED),
    ("first test, passes only in threads", {SUI: F, THR: P}, (F, F), True, Category.FAILED),
    (
        "fails alone and isolated, passes in threads",
        {ISO: F, THR: P},
        (F, F),
        False,
        Category.FAILED,
    ),
]


@pytest.mark.parametrize(
    ("outcomes", "reruns", "first", "expected"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_classify_test(
    outcomes: dict[Mode, Outcome],
    reruns: tuple[Outcome, ...],
    first: bool,
    expected: Category,
) -> None:
    assert classify_test(outcomes, reruns, first_in_file=first) is expected


def test_every_category_is_reachable() -> None:
    assert {case[-1] for case in CASES} == set(Category)


# --- load_results ---------------------------------------------------------------------


def test_shards_are_merged(scenario: Path) -> None:
    loaded = load_mode_results(scenario)
    parallel = loaded[PAR]
    assert parallel.part_shards == (1, 3)
    assert parallel.total_shards == 3
    assert parallel.missing_shards == (2,)
    assert parallel.run.wall_s == 40.0
    assert parallel.run.shard is None
    assert [f.file for f in parallel.run.files] == [A, CF, E]
    assert len(parallel.run.tests) == 11
    assert loaded[ISO].missing_shards == ()
    assert loaded[ISO].total_shards == 1
    runs = load_results(scenario)
    assert list(runs) == [ISO, PAR, SUI]
    assert runs[PAR] == parallel.run


def test_shard_directory_without_run_json_counts_as_missing(tmp_path: Path) -> None:
    write_run(tmp_path, mode_run(SUI, [result(f"{A}::test_ok", P)], shard=(2, 2)))
    (tmp_path / "suite" / "shard-1-of-2" / "logs").mkdir(parents=True)
    loaded = load_mode_results(tmp_path)[SUI]
    assert (loaded.part_shards, loaded.missing_shards) == ((2,), (1,))


def test_a_test_in_two_shards_keeps_its_worse_outcome(tmp_path: Path) -> None:
    write_run(tmp_path, mode_run(ISO, [result(f"{A}::test_ok", P)], shard=(1, 2)))
    write_run(tmp_path, mode_run(ISO, [result(f"{A}::test_ok", F, F)], shard=(2, 2)))
    (test,) = load_results(tmp_path)[ISO].tests
    assert test.outcome is F


@pytest.mark.parametrize(
    ("layout", "error", "says"),
    [
        ("nothing", UsageError, "holds no mode directory"),
        ("empty mode", InputError, "no such file"),
        ("both", InputError, "both run.json and shard directories"),
        ("mixed totals", InputError, "mixes shards of 2 and 3"),
        ("wrong mode", InputError, "says mode 'suite' but lies in isolated/"),
        ("wrong shard", InputError, "says shard 1 of 2"),
    ],
)
def test_inconsistent_directories_are_refused(
    tmp_path: Path, layout: str, error: type[Exception], says: str
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "report").mkdir()  # not a mode: ignored
    one = [result(f"{A}::test_ok", P)]
    if layout == "empty mode":
        (out / "isolated").mkdir()
    elif layout == "both":
        write_run(out, mode_run(ISO, one))
        write_run(out, mode_run(ISO, one, shard=(1, 2)))
    elif layout == "mixed totals":
        write_run(out, mode_run(ISO, one, shard=(1, 2)))
        write_run(out, mode_run(ISO, one, shard=(2, 3)))
    elif layout == "wrong mode":
        path = write_run(out, mode_run(SUI, one))
        path.parent.rename(out / "isolated")
    elif layout == "wrong shard":
        path = write_run(out, mode_run(ISO, one, shard=(1, 2)))
        path.parent.rename(path.parent.with_name("shard-2-of-2"))
    with pytest.raises(error, match=says):
        load_results(out)


def test_run_json_of_another_schema_names_the_file() -> None:
    bad = DATA / "other-schema" / "isolated" / "run.json"
    with pytest.raises(InputError, match=r"schema is 'gpuci\.run/2'") as caught:
        load_results(DATA / "other-schema")
    assert str(bad) in str(caught.value)


def test_truncated_run_json_names_the_file(scenario: Path) -> None:
    path = scenario / "suite" / "run.json"
    path.write_text(path.read_text()[:200])
    with pytest.raises(InputError, match="not readable as JSON") as caught:
        load_results(scenario)
    assert str(path) in str(caught.value)


# --- diff_results ---------------------------------------------------------------------


def test_scenario_matches_golden_verdict(tmp_path: Path) -> None:
    baseline = read_baseline(DATA / "baseline-verdict.json")
    verdict = diff_results(DATA / "out", baseline=baseline, policy=parse_policy(None, None))
    expected = json.loads((DATA / "expected-verdict.json").read_text())
    assert verdict_to_json(verdict) == expected


def test_committed_scenario_is_what_the_model_writes(tmp_path: Path) -> None:
    build_scenario(tmp_path / "out")
    written = sorted(p.relative_to(tmp_path / "out") for p in (tmp_path / "out").rglob("*.json"))
    committed = sorted(p.relative_to(DATA / "out") for p in (DATA / "out").rglob("*.json"))
    assert written == committed
    for rel in written:
        assert (tmp_path / "out" / rel).read_text() == (DATA / "out" / rel).read_text(), rel


def test_categories_and_evidence(scenario: Path) -> None:
    baseline = read_baseline(DATA / "baseline-verdict.json")
    verdict = diff_results(scenario, baseline=baseline, policy=Policy())
    tests = {t.id: t for t in verdict.tests}
    categories = {i: t.category.value for i, t in tests.items()}
    assert categories == {
        f"{A}::test_ok": "passed",
        f"{A}::test_leaks_pool": "passed",
        f"{A}::test_reads_pool": "order-dependent",
        f"{A}::test_skip": "skipped",
        f"{B}::test_softmax[fp16]": "order-dependent",
        f"{B}::test_needs_warmup": "depends-on-others",
        f"{CF}::test_kernel_cache": "concurrency",
        f"{CF}::test_real_bug": "failed",
        f"{CF}::test_flaky": "flaky",
        f"{CF}::test_hangs": "timed-out",
        f"{CF}::test_after_hang": "passed",
        f"{CF}::test_illegal_address": "crashed",
        f"{D}::test_never": "not-run",
        E: "failed",
    }
    assert [t.id for t in verdict.tests] == [
        f"{A}::test_reads_pool",  # new isolation regressions
        f"{B}::test_needs_warmup",
        f"{CF}::test_kernel_cache",
        f"{B}::test_softmax[fp16]",  # known
        f"{CF}::test_real_bug",  # failed
        E,
        f"{CF}::test_illegal_address",  # crashed
        f"{CF}::test_hangs",  # timed-out
        f"{CF}::test_flaky",  # flaky
        f"{D}::test_never",  # not-run
        f"{A}::test_skip",  # skipped
        f"{A}::test_leaks_pool",  # passed
        f"{A}::test_ok",
        f"{CF}::test_after_hang",
    ]
    assert verdict.summary["passed"] == 3
    assert verdict.summary["failed"] == 2
    assert sum(verdict.summary.values()) == len(verdict.tests)

    softmax = tests[f"{B}::test_softmax[fp16]"]
    assert softmax.new is False
    assert softmax.outcomes == {"isolated": "passed", "parallel": "not-run", "suite": "failed"}
    assert softmax.reruns == ("passed", "passed")
    assert softmax.message == "AssertionError: nan in output"
    assert tests[f"{A}::test_reads_pool"].new is True
    assert tests[f"{A}::test_reads_pool"].reruns == ("passed",) * 6
    assert tests[f"{CF}::test_real_bug"].new is None
    assert tests[f"{CF}::test_real_bug"].message == "AssertionError: max abs diff 0.5"
    assert tests[f"{CF}::test_flaky"].message == "AssertionError: timing"
    assert tests[E].message.startswith("collection error: ImportError")
    assert tests[f"{CF}::test_illegal_address"].log.startswith("CUDA error: an illegal memory")
    assert tests[f"{CF}::test_hangs"].log.endswith("killed after 300 s")
    assert tests[f"{CF}::test_real_bug"].log == ""
    assert verdict.environment == {"python": "3.12.3", "gpu": "NVIDIA H100 80GB HBM3"}


def test_reproduce_commands(scenario: Path) -> None:
    verdict = diff_results(scenario, baseline=None, policy=Policy())
    reproduce = {t.id: t.reproduce for t in verdict.tests}
    # Failed after earlier tests of its file: those tests, in order, then it.
    assert reproduce[f"{A}::test_reads_pool"] == (
        f"{PYTEST} {A}::test_ok {A}::test_leaks_pool {A}::test_reads_pool"
    )
    # Failed only in suite: the files that ran before its own, then it.
    assert reproduce[f"{B}::test_softmax[fp16]"] == f"{PYTEST} {A} '{B}::test_softmax[fp16]'"
    # Everything else: the test alone.
    assert reproduce[f"{B}::test_needs_warmup"] == f"{PYTEST} {B}::test_needs_warmup"
    # Concurrency: the test and the files whose interpreters overlapped it, all at once,
    # each with the GPUs its interpreter had.
    each = "CUDA_VISIBLE_DEVICES=0 python -m pytest -m 'not slow'"
    assert reproduce[f"{CF}::test_kernel_cache"] == (
        f"cd {ROOT} && ({each} {CF}::test_kernel_cache & {each} {A} & wait)"
    )
    assert reproduce[E] == f"{PYTEST} {E}"
    # Crashed only in suite, in the interpreter that took over after test_hangs timed out.
    assert reproduce[f"{CF}::test_illegal_address"] == (
        f"{PYTEST} {CF}::test_after_hang {CF}::test_illegal_address"
    )
    # Timed out in isolated too: alone is enough.
    assert reproduce[f"{CF}::test_hangs"] == f"{PYTEST} {CF}::test_hangs"
    assert reproduce[f"{A}::test_ok"] == ""
    assert reproduce[f"{A}::test_skip"] == ""


def test_suite_order_after_a_crash_starts_in_the_fresh_interpreter(tmp_path: Path) -> None:
    x, y = "tests/test_x.py", "tests/test_y.py"
    write_run(
        tmp_path,
        mode_run(
            ISO,
            [
                result(f"{x}::t1", P),
                result(f"{x}::t2", P),
                result(f"{x}::t3", P),
                result(f"{y}::t1", P),
            ],
        ),
    )
    suite = [
        result("tests/test_w.py::t0", P),
        result(f"{x}::t1", P),
        result(f"{x}::t2", C),  # the next interpreter starts at t3, in the middle of x
        result(f"{x}::t3", P),
        result(f"{y}::t1", F, P, P),
    ]
    write_run(tmp_path, mode_run(SUI, suite))
    verdict = diff_results(tmp_path, baseline=None, policy=Policy())
    (victim,) = [t for t in verdict.tests if t.id == f"{y}::t1"]
    assert victim.category is Category.ORDER_DEPENDENT
    assert victim.reproduce.endswith(f"pytest -m 'not slow' {x}::t3 {y}::t1")


def test_pseudo_test_of_a_dead_interpreter_reproduces_with_its_file(tmp_path: Path) -> None:
    x = "tests/test_x.py"
    tests = [result(f"{x}::t1", P), result(f"{x}::[interpreter exit]", C)]
    write_run(tmp_path, mode_run(ISO, tests))
    (dead,) = diff_results(tmp_path, baseline=None, policy=Policy()).tests[:1]
    assert dead.category is Category.CRASHED
    assert dead.reproduce == f"{PYTEST} {x}"


def threads_scenario(out: Path, *, shards: int = 1) -> None:
    """isolated and threads (4 threads, GPUs 0,1 split in pairs) over one file: a race,
    a test after a polluter, a real failure."""
    x = "tests/test_x.py"
    isolated = [
        result(f"{x}::test_race", P),
        result(f"{x}::test_leaks", P),
        result(f"{x}::test_victim", F, P, P),
        result(f"{x}::test_bug", F, F, F),
    ]
    threads = [
        result(f"{x}::test_race", F, P, P, message="AssertionError: [2, 1] == [1]"),
        *(replace(t, reruns=()) for t in isolated[1:]),
    ]
    gpus = {"gpus": ("0", "1", "2", "3"), "gpus_per_slot": 2}
    write_run(out, replace(mode_run(ISO, isolated), **gpus))
    for index in range(1, shards + 1):  # every shard ran the whole file: the worse outcome wins
        run = replace(mode_run(THR, threads), threads=4, **gpus)
        write_run(out, replace(run, shard=(index, shards)) if shards > 1 else run)


@pytest.mark.parametrize("shards", [1, 2])
def test_thread_unsafe_reproduces_in_threads_and_nothing_else_does(
    tmp_path: Path, shards: int
) -> None:
    threads_scenario(tmp_path, shards=shards)
    verdict = diff_results(tmp_path, baseline=None, policy=Policy())
    tests = {t.id.split("::")[1]: t for t in verdict.tests}
    assert {i: t.category for i, t in tests.items()} == {
        "test_race": Category.THREAD_UNSAFE,
        "test_leaks": Category.PASSED,
        "test_victim": Category.ORDER_DEPENDENT,
        "test_bug": Category.FAILED,
    }
    assert verdict.reasons == ("2 isolation problems", "1 failed test")
    assert tests["test_race"].outcomes == {"isolated": "passed", "threads": "failed"}
    # alone in 4 threads, on every GPU, as every serial interpreter sees them (not a window)
    serial = f"cd {ROOT} && CUDA_VISIBLE_DEVICES=0,1,2,3 python -m pytest -m 'not slow'"
    assert tests["test_race"].reproduce == (
        f"{serial} --parallel-threads 4 tests/test_x.py::test_race"
    )
    # the other findings reproduce as they would without a threads mode: in one thread
    assert tests["test_victim"].reproduce == (
        f"{serial} tests/test_x.py::test_race tests/test_x.py::test_leaks"
        " tests/test_x.py::test_victim"
    )
    assert tests["test_bug"].reproduce == f"{serial} tests/test_x.py::test_bug"
    assert verdict.modes["threads"]["threads"] == 4
    assert "threads" not in verdict.modes["isolated"]
    summary = format_summary(verdict)
    assert f"thread-unsafe     {'':<5} tests/test_x.py::test_race" in summary


def test_long_failing_orders_keep_the_nearest(tmp_path: Path) -> None:
    big = "tests/test_big.py"
    tests = [result(f"{big}::t{i}", P) for i in range(MAX_PRECEDING + 7)]
    tests.append(result(f"{big}::victim", F, P, P))
    write_run(tmp_path, mode_run(ISO, tests))
    (victim,) = diff_results(tmp_path, baseline=None, policy=Policy()).tests[:1]
    assert victim.category is Category.ORDER_DEPENDENT
    args = victim.reproduce.split("  #")[0].split()
    assert args[-MAX_PRECEDING - 1 :] == [
        *(f"{big}::t{i}" for i in range(7, MAX_PRECEDING + 7)),
        f"{big}::victim",
    ]
    assert victim.reproduce.endswith("# 7 earlier in the isolated order left out, see its run.json")


def test_modes_describe_each_run(scenario: Path) -> None:
    modes = diff_results(scenario, baseline=None, policy=Policy()).modes
    assert list(modes) == ["isolated", "parallel", "suite"]
    parallel = modes["parallel"]
    assert {k: v for k, v in parallel.items() if k != "file_runs"} == {
        "wall_s": 40.0,
        "files": 3,
        "tests": 11,
        "counts": "5 failed, 4 passed, 1 skipped, 1 timed-out",
        "workers": 4,
        "gpus": ["0"],
        "shards": 3,
        "missing_shards": [2],
        "interrupted": False,
        "inferred_files": 0,
    }
    assert [(r["file"], r["shard"]) for r in parallel["file_runs"]] == [(A, 1), (CF, 1), (E, 3)]
    assert parallel["file_runs"][1] == {
        "file": CF,
        "status": "passed",
        "slot": 1,
        "gpu": "0",
        "start": 1.0,
        "end": 2.5,
        "duration": 1.5,
        "shard": 1,
        "exit_codes": [0],
        "signals": [],
    }
    suite = modes["suite"]
    assert suite["files"] == 5
    assert suite["interrupted"] is True
    assert suite["file_runs"][0]["status"] == "crashed"
    assert suite["file_runs"][0]["signals"] == [11]
    assert suite["file_runs"][0]["exit_codes"] == []


# --- policy and verdict -----------------------------------------------------------------


def test_default_verdict_and_reasons(scenario: Path) -> None:
    baseline = read_baseline(DATA / "baseline-verdict.json")
    verdict = diff_results(scenario, baseline=baseline, policy=parse_policy(None, None))
    assert verdict.verdict == "fail"
    assert verdict.reasons == (
        "3 new isolation regressions",
        "1 known isolation problem",
        "2 failed tests",
        "1 crashed test",
        "1 timed-out test",
        "1 flaky test",
        "1 test not run",
        "parallel: shard 2 of 3 missing",
        "suite: interrupted before every test ran",
    )


def only_known_regression(out: Path) -> Path:
    """One known order-dependent test, everything else passing, every shard present."""
    write_run(out, mode_run(ISO, [result(f"{A}::test_ok", P), result(f"{B}::test_softmax", P)]))
    suite = [result(f"{A}::test_ok", P), result(f"{B}::test_softmax", F, P, P)]
    write_run(out, mode_run(SUI, suite))
    return out


def test_allow_known_turns_fail_into_pass(tmp_path: Path) -> None:
    out = only_known_regression(tmp_path / "out")
    baseline = write_baseline(
        tmp_path / "baseline.json",
        [finding(f"{B}::test_softmax", Category.CONCURRENCY, new=None)],
    )
    known = read_baseline(baseline)
    strict = diff_results(out, baseline=known, policy=parse_policy(None, None))
    assert strict.verdict == "fail"
    assert strict.reasons == ("1 known isolation problem",)
    allowed = diff_results(out, baseline=known, policy=parse_policy(None, "known"))
    assert allowed.verdict == "pass"
    # the pass says what it let through, never reads as if there were nothing
    assert allowed.reasons == ("1 known isolation problem allowed",)
    assert allowed.summary["order-dependent"] == 1
    # The same test without a baseline is a regression like any other.
    unknown = diff_results(out, baseline=None, policy=parse_policy(None, "known"))
    assert (unknown.verdict, unknown.reasons) == ("fail", ("1 isolation problem",))
    # A baseline where it passed makes it new.
    passed = write_baseline(
        tmp_path / "passed.json", [finding(f"{B}::test_softmax", Category.PASSED, new=None)]
    )
    fresh = diff_results(out, baseline=read_baseline(passed), policy=parse_policy(None, "known"))
    assert (fresh.verdict, fresh.reasons) == ("fail", ("1 new isolation regression",))
    assert fresh.tests[0].new is True


def test_warn_without_failures(tmp_path: Path) -> None:
    write_run(tmp_path, mode_run(ISO, [result(f"{A}::test_ok", P), result(f"{A}::t2", F, P, F)]))
    write_run(tmp_path, mode_run(SUI, [result(f"{A}::test_ok", P)], shard=(1, 2)))
    verdict = diff_results(tmp_path, baseline=None, policy=Policy())
    assert verdict.verdict == "warn"
    assert verdict.reasons == ("1 flaky test", "suite: shard 2 of 2 missing")
    fail_on_flaky = parse_policy("flaky", None)
    assert diff_results(tmp_path, baseline=None, policy=fail_on_flaky).verdict == "fail"
    allow_flaky = parse_policy(None, "flaky")
    assert diff_results(tmp_path, baseline=None, policy=allow_flaky).reasons == (
        "suite: shard 2 of 2 missing",
        "1 flaky test allowed",
    )


def test_a_pass_names_what_the_policy_allowed(tmp_path: Path) -> None:
    write_run(
        tmp_path,
        mode_run(
            ISO,
            [result(f"{A}::test_ok", P), result(f"{A}::t2", F, F, F), result(f"{A}::t3", F, F, F)],
        ),
    )
    strict = diff_results(tmp_path, baseline=None, policy=Policy())
    assert (strict.verdict, strict.reasons) == ("fail", ("2 failed tests",))
    allowed = diff_results(tmp_path, baseline=None, policy=parse_policy(None, "failed"))
    assert (allowed.verdict, allowed.reasons) == ("pass", ("2 failed tests allowed",))
    # what --fail-on adds is no allowance: the default policy would not have counted it
    assert diff_results(tmp_path, baseline=None, policy=parse_policy("failed", None)).reasons == (
        "2 failed tests",
    )


def test_clean_run_passes(tmp_path: Path) -> None:
    write_run(tmp_path, mode_run(ISO, [result(f"{A}::test_ok", P), result(f"{A}::t2", SK)]))
    verdict = diff_results(tmp_path, baseline=None, policy=Policy())
    assert (verdict.verdict, verdict.reasons) == ("pass", ())


def test_parse_policy() -> None:
    default = parse_policy(None, None)
    assert default == Policy()
    assert default.fail_on == DEFAULT_FAIL_ON
    assert default.fail_on == {
        Category.ORDER_DEPENDENT,
        Category.DEPENDS_ON_OTHERS,
        Category.CONCURRENCY,
        Category.THREAD_UNSAFE,
        Category.FAILED,
        Category.CRASHED,
        Category.TIMED_OUT,
    }
    assert not default.allow_known
    only = parse_policy(" crashed, flaky ", None)
    assert only.fail_on == {Category.CRASHED, Category.FLAKY}
    assert only.warn_on == {Category.NOT_RUN}
    allowed = parse_policy(None, "known,concurrency,not-run")
    assert allowed.allow_known
    assert Category.CONCURRENCY not in allowed.fail_on
    assert Category.ORDER_DEPENDENT in allowed.fail_on
    assert allowed.warn_on == {Category.FLAKY}
    assert parse_policy("", None).fail_on == frozenset()


@pytest.mark.parametrize(
    ("fail_on", "allow", "says"),
    [
        ("failed,borked", None, "--fail-on 'failed,borked': unknown 'borked'; choose from passed"),
        ("known", None, "unknown 'known'"),
        (None, "flakey", "--allow 'flakey': unknown 'flakey'; choose from .*, not-run, known"),
    ],
)
def test_unknown_policy_names_are_usage_errors(
    fail_on: str | None, allow: str | None, says: str
) -> None:
    with pytest.raises(UsageError, match=says):
        parse_policy(fail_on, allow)


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("not-a-verdict.json", "schema is 'gpuci.run/1', expected 'gpuci.verdict/1'"),
        ("malformed-verdict.json", "malformed verdict.json"),
        ("absent.json", "no such file"),
    ],
)
def test_baseline_that_is_not_a_verdict_names_the_file(name: str, says: str) -> None:
    with pytest.raises(InputError, match=says) as caught:
        read_baseline(DATA / name)
    assert str(DATA / name) in str(caught.value)


@pytest.mark.slow
def test_bad_inputs_through_the_command_line_leave_the_verdict_alone(
    scenario: Path, tmp_path: Path
) -> None:
    existing = tmp_path / "verdict.json"
    existing.write_text("earlier verdict\n")
    for args, names in [
        ([str(DATA / "other-schema")], DATA / "other-schema" / "isolated" / "run.json"),
        (
            [str(scenario), "--baseline", str(DATA / "not-a-verdict.json")],
            DATA / "not-a-verdict.json",
        ),
    ]:
        proc = subprocess.run(
            [sys.executable, "-m", "gpuci", "diff", *args, "-o", str(existing)],
            capture_output=True,
            text=True,
            cwd=REPO,
            check=False,
        )
        assert proc.returncode == 3, proc.stderr
        assert "gpuci: error: " in proc.stderr
        assert str(names) in proc.stderr
        assert "Traceback" not in proc.stderr
        assert existing.read_text() == "earlier verdict\n"


def test_write_verdict_round_trips(scenario: Path, tmp_path: Path) -> None:
    verdict = diff_results(scenario, baseline=None, policy=Policy())
    path = tmp_path / "deep" / "verdict.json"
    write_verdict(verdict, path)
    assert read_baseline(path) == verdict
    assert read_json(path, "gpuci.verdict/1")["summary"]["flaky"] == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["verdict.json"]


# --- the terminal summary ---------------------------------------------------------------


def test_format_summary(scenario: Path) -> None:
    baseline = read_baseline(DATA / "baseline-verdict.json")
    text = format_summary(diff_results(scenario, baseline=baseline, policy=Policy()))
    # the plain run's count in pytest's words first, then the categories'
    assert text.splitlines()[0].startswith("pytest (suite): "), text
    lines = text.splitlines()[1:]
    assert lines[0] == (
        "categories: 3 passed, 1 skipped, 2 failed, 1 flaky, 2 order-dependent,"
        " 1 depends-on-others, 1 concurrency, 1 crashed, 1 timed-out, 1 not-run"
    )
    assert lines[1] == (
        f"order-dependent   new   {A}::test_reads_pool  isolated=failed parallel=failed"
        " suite=failed reruns=passed,passed,passed,passed,passed,passed"
    )
    # it failed in isolated, which sounds like alone: the summary says what isolated is
    assert lines[2] == (
        "    isolated runs a fresh interpreter per file: the tests before it in its file ran first"
    )
    assert lines[3] == "    failure: AssertionError: buffer not zeroed"  # each finding's
    assert lines[4] == (
        f"    reproduce: {PYTEST} {A}::test_ok {A}::test_leaks_pool {A}::test_reads_pool"
    )
    assert lines[11] == (
        f"order-dependent   known {B}::test_softmax[fp16]  isolated=passed parallel=not-run"
        " suite=failed reruns=passed,passed"
    )
    # which modes ran, and which did not (no check recorded why: only OUT tells)
    assert lines[-3:-1] == [
        "modes: isolated, parallel, suite ran: results in OUT",
        "modes: threads, reversed, shuffled not run: no results in OUT",
    ]
    listed = [line.split()[0] for line in lines[1:-3] if not line.startswith("    ")]
    assert listed == [
        "order-dependent",
        "depends-on-others",
        "concurrency",
        "order-dependent",
        "failed",
        "failed",
        "crashed",
        "timed-out",
        "flaky",
    ]
    assert lines[-1].startswith("verdict: fail (3 new isolation regressions; 1 known")
    assert "test_skip" not in text
    assert "test_never" not in text


def test_format_summary_caps_the_listing() -> None:
    tests = tuple(
        replace(finding(f"tests/test_{i:03d}.py::t", Category.FAILED, new=None), reproduce="x")
        for i in range(MAX_LISTED + 3)
    )
    text = format_summary(Verdict(verdict="fail", summary={"failed": len(tests)}, tests=tests))
    lines = text.splitlines()
    assert len(lines) == 1 + 2 * MAX_LISTED + 2
    assert lines[-2] == "... and 3 more (see verdict.json; -v lists all)"
    assert format_summary(Verdict(verdict="pass")).splitlines() == [
        "categories: no tests",
        "verdict: pass",
    ]


def test_untrusted_ids_cannot_rewrite_the_terminal() -> None:
    evil = "tests/test_x.py::test_a[\x1b[2J\x1b[1;31mred\x1b]0;title\x07\r\nfake\u202e\x9b]"
    verdict = Verdict(
        verdict="fail",
        summary={"failed": 1},
        tests=(replace(finding(evil, Category.FAILED, new=None), reproduce=f"pytest {evil}"),),
    )
    text = format_summary(verdict)
    assert "\x1b" not in text
    assert "\r" not in text
    assert "\u202e" not in text
    assert "\x9b" not in text
    assert len(text.splitlines()) == 4  # the id's newline did not add a line
    assert "test_a[red??fake??]" in text
    assert printable("plain text [ok]") == "plain text [ok]"


# --- the committed fixtures ---------------------------------------------------------------


def regenerate() -> None:
    """Rewrite tests/data/diff/out and expected-verdict.json (then review the diff!)."""
    shutil.rmtree(DATA / "out", ignore_errors=True)
    build_scenario(DATA / "out")
    baseline = read_baseline(DATA / "baseline-verdict.json")
    verdict = diff_results(DATA / "out", baseline=baseline, policy=parse_policy(None, None))
    write_verdict(verdict, DATA / "expected-verdict.json")


if __name__ == "__main__":
    regenerate()


def test_first_in_its_isolated_file_counts_as_seen_alone(tmp_path: Path) -> None:
    # the only test of its file: isolated ran it alone in all but name. It passed there and
    # failed its one alone-run (the evidence counts isolated as the other): flaky, not a
    # test that needs others because it also passed in suite
    test_id = f"{A}::test_counter"
    for mode, outcome in ((ISO, P), (PAR, F), (SUI, P)):
        reruns = (F,) if mode is PAR else ()
        write_run(tmp_path, mode_run(mode, [result(test_id, outcome, *reruns)]))
    verdict = diff_results(tmp_path, baseline=None, policy=Policy())
    assert {t.id: t.category for t in verdict.tests} == {test_id: Category.FLAKY}
