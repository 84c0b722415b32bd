"""Write the results fixture that tests/test_gitlab_ci.py hands to the verdict job.

    python tests/data/ci/make_results.py      # rewrites tests/data/ci/out/gpu/

The GPU jobs' artifacts as they unpack in the verdict job: `isolated` sharded in two
(as `parallel: 2` runs it), `parallel`, `suite` and `threads` whole, each with run.json
and a pytest-style junit.xml. The suite holds one test of each kind the verdict must
tell apart: passing, skipped, a real failure, order-dependent (fails in `suite` only),
concurrency (fails in `parallel` only) and thread-unsafe (fails in `threads` only); the
last three pass their alone-reruns.
The gpu:explain job's `evidence/evidence.json` names the culprits of the first two.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

from gpuci.evidence_file import evidence_to_json
from gpuci.formats import mode_run_to_json, write_json_atomic
from gpuci.model import (
    Evidence,
    FileRun,
    FileStatus,
    Interpreter,
    Mode,
    ModeRun,
    Outcome,
    Probe,
    TestEvidence,
    TestResult,
)

HERE = Path(__file__).parent
OUT = HERE / "out" / "gpu"
ROOTDIR = "/builds/team/gpuci"
ENVIRONMENT = {
    "python": "3.11.7",
    "pytest": "8.3.2",
    "gpu": "NVIDIA H100 80GB HBM3",
    "driver": "580.159.04",
    "cuda": "12.6",
    "cupy": "13.3.0",
    "commit": "0123456789abcdef0123456789abcdef01234567",
    "pipeline_url": "https://gitlab.example.com/team/gpuci/-/pipelines/900",
    "job_url": "https://gitlab.example.com/team/gpuci/-/jobs/9001",
}
SOFTMAX = "tests/gpu/test_softmax.py"
POOL = "tests/gpu/test_pool.py"
SCAN = "tests/gpu/test_scan.py"
FILES = (SOFTMAX, POOL, SCAN)
ISOLATED_SHARDS = ((SOFTMAX, POOL), (SCAN,))  # what `parallel: 2` gives each shard

P, F, S = Outcome.PASSED, Outcome.FAILED, Outcome.SKIPPED
ISO, PAR, SUI, THR = Mode.ISOLATED, Mode.PARALLEL, Mode.SUITE, Mode.THREADS
THREADS = 4  # what the threads job runs each test in
# test id -> outcome per mode; the alone-reruns of those that did not pass
OUTCOMES: dict[str, dict[Mode, Outcome]] = {
    f"{SOFTMAX}::test_rows[fp32]": {ISO: P, PAR: P, SUI: P, THR: P},
    f"{SOFTMAX}::test_rows[fp16]": {ISO: P, PAR: P, SUI: F, THR: P},
    f"{POOL}::test_reuse": {ISO: P, PAR: F, SUI: P, THR: P},
    f"{POOL}::test_limit": {ISO: S, PAR: S, SUI: S, THR: S},
    f"{SCAN}::test_scan": {ISO: P, PAR: P, SUI: P, THR: P},
    f"{SCAN}::test_cached_plan": {ISO: P, PAR: P, SUI: P, THR: F},
    f"{SCAN}::test_empty": {ISO: F, PAR: F, SUI: F, THR: F},
}
MESSAGES = {
    f"{SOFTMAX}::test_rows[fp16]": "AssertionError: rows do not sum to 1 (max error 0.37)",
    f"{POOL}::test_reuse": "OutOfMemoryError: out of memory allocating 2,147,483,648 bytes",
    f"{SCAN}::test_cached_plan": "KeyError: 'scan_f32' (filled by another thread)",
    f"{SCAN}::test_empty": "IndexError: index 0 is out of bounds for axis 0 with size 0",
}
RERUNS = {
    f"{SOFTMAX}::test_rows[fp16]": (P, P),
    f"{POOL}::test_reuse": (P, P),
    f"{SCAN}::test_cached_plan": (P, P),
    f"{SCAN}::test_empty": (F, F),
}
DURATION = 0.25  # of every test, in seconds


def tests_of(files: tuple[str, ...], mode: Mode) -> list[TestResult]:
    """The results of `files`' tests in `mode`, in file order."""
    results = []
    for test_id, outcomes in OUTCOMES.items():
        file = test_id.split("::")[0]
        if file not in files:
            continue
        outcome = outcomes[mode]
        results.append(
            TestResult(
                id=test_id,
                file=file,
                outcome=outcome,
                duration=DURATION,
                message=MESSAGES.get(test_id, "") if outcome is F else "",
                reruns=RERUNS.get(test_id, ()) if outcome is F else (),
            )
        )
    return results


def file_run(file: str, tests: list[TestResult], *, slot: int, start: float) -> FileRun:
    """One file's run: one interpreter that ran all its tests and exited normally."""
    end = start + DURATION * len(tests) + 1.0
    failed = any(t.outcome is F for t in tests)
    return FileRun(
        file=file,
        status=FileStatus.FAILED if failed else FileStatus.PASSED,
        slot=slot,
        gpu=None,
        start=start,
        end=end,
        tests=len(tests),
        interpreters=(
            Interpreter(exit_code=1 if failed else 0, start=start, end=end, log=f"logs/{file}.log"),
        ),
    )


def mode_run(mode: Mode, files: tuple[str, ...], shard: tuple[int, int] | None) -> ModeRun:
    """The run.json of one mode, or one shard of it."""
    tests = tests_of(files, mode)
    if mode is Mode.SUITE:
        runs = [file_run("(suite)", tests, slot=0, start=0.0)]
    else:
        runs, start = [], 0.0
        for slot, file in enumerate(files):
            mine = [t for t in tests if t.file == file]
            run = file_run(file, mine, slot=slot if mode is Mode.PARALLEL else 0, start=start)
            runs.append(run)
            start = 0.0 if mode is Mode.PARALLEL else run.end
    command = ["gpuci", "run", "tests/gpu", "--mode", mode.value, "--out", "out/gpu"]
    return ModeRun(
        mode=mode,
        command=tuple(command),
        rootdir=ROOTDIR,
        threads=THREADS if mode is Mode.THREADS else None,
        workers=len(files) if mode is Mode.PARALLEL else 1,
        shard=shard,
        timeout=300.0,
        reruns=2,
        wall_s=max(r.end for r in runs),
        started_at="2026-11-21T14:03:00Z",
        environment=ENVIRONMENT,
        files=tuple(runs),
        tests=tuple(tests),
    )


def junit_xml(tests: list[TestResult]) -> bytes:
    """The JUnit XML pytest would have written for `tests`."""
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="pytest",
        errors="0",
        failures=str(sum(t.outcome is F for t in tests)),
        skipped=str(sum(t.outcome is S for t in tests)),
        tests=str(len(tests)),
        time=f"{DURATION * len(tests):.3f}",
        timestamp="2026-11-21T14:03:00",
        hostname="gpu-runner-1",
    )
    for t in tests:
        path, name = t.id.split("::", 1)
        classname = path.removesuffix(".py").replace("/", ".")
        case = ET.SubElement(suite, "testcase", classname=classname, name=name)
        case.set("time", f"{t.duration:.3f}")
        if t.outcome is F:
            failure = ET.SubElement(case, "failure", message=t.message)
            failure.text = t.message
        elif t.outcome is S:
            ET.SubElement(case, "skipped", type="pytest.skip", message="needs two GPUs")
    ET.indent(suites)
    return ET.tostring(suites, encoding="utf-8", xml_declaration=True) + b"\n"


def write_mode(where: Path, run: ModeRun) -> None:
    """One result directory: run.json and junit.xml."""
    write_json_atomic(where / "run.json", mode_run_to_json(run))
    (where / "junit.xml").write_bytes(junit_xml(list(run.tests)))


def evidence() -> Evidence:
    """What gpu:explain adds: the culprit of each isolation finding, with its runs."""
    victim, culprit = f"{SOFTMAX}::test_rows[fp16]", f"{SOFTMAX}::test_rows[fp32]"
    return Evidence(
        gpu=None,
        budget_s=5.0,
        spent_s=2.5,
        runs=2,
        phases={"culprits": {"runs": 2, "seconds": 2.5}},
        tests=(
            TestEvidence(
                id=victim,
                culprits=(culprit,),
                search="bisection: 1 run(s)",
                probes=(Probe(count=1, shown=(culprit,), outcome=F),),
            ),
            TestEvidence(
                id=f"{POOL}::test_reuse",
                culprits=(SCAN,),
                search="pair: 1 run(s)",
                probes=(Probe(count=1, shown=(SCAN,), outcome=F),),
            ),
        ),
    )


def main() -> None:
    """Rewrite the fixture from scratch."""
    shutil.rmtree(OUT, ignore_errors=True)
    total = len(ISOLATED_SHARDS)
    for index, files in enumerate(ISOLATED_SHARDS, start=1):
        where = OUT / Mode.ISOLATED.value / f"shard-{index}-of-{total}"
        write_mode(where, mode_run(Mode.ISOLATED, files, (index, total)))
    write_mode(OUT / Mode.PARALLEL.value, mode_run(Mode.PARALLEL, FILES, None))
    write_mode(OUT / Mode.SUITE.value, mode_run(Mode.SUITE, FILES, None))
    write_mode(OUT / Mode.THREADS.value, mode_run(Mode.THREADS, FILES, None))
    write_json_atomic(OUT / "evidence" / "evidence.json", evidence_to_json(evidence()))


if __name__ == "__main__":
    main()
