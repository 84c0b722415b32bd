"""gpuci's overhead against bare pytest loops and pytest-xdist, and its diff at scale.

    python benchmarks/bench_runner.py [--files 40] [--tests 20] [--workers 2] [--repeat 1]
                                      [--diff-scale 50000] [--json FILE] [--profile]
                                      [--no-runs] [--no-suite] [--no-check] [--strict]

A benchmark, not a timed test. It generates a suite whose tests sleep a seeded 5-40 ms
(so files differ in length), then times, one after the other on this machine:

(a) a bare loop of `python -m pytest FILE` per file, one at a time;
(b) `gpuci run --mode isolated`: target (b)/(a) <= 1.05;
(c) `gpuci run --mode parallel --workers W`, ordered by (b)'s durations, against the bound
    max(longest file, sum of file durations / W) taken from (a): target <= 1.15;
(d) `pytest -n W --dist loadfile` (pytest-xdist) against the same bound, for comparison;
(e) `gpuci run --mode suite` against a bare `python -m pytest SUITE`;
(f) `gpuci check --workers W` (default modes, evidence, diff, report) against a plain
    `python -m pytest tests`, on the suite as generated (target <= 1.6) and on a copy with
    planted failures (target <= 5): an order-dependent victim of a flag another file leaves
    in a shared module, a real failure, a flaky test (it loses every other run), and a
    concurrency victim of an fcntl lock two files hold; it prints the verdict's summary
    against what was planted.

Then it writes a synthetic results directory of 3 modes x N tests and times `gpuci diff`
(target: under 5 s and 1 GiB) and `gpuci report` on its verdict. Every command is printed
so that it can be pasted; `--strict` makes a missed target exit 1.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import pstats
import random
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuci.formats import mode_run_to_json, read_mode_run, write_json_atomic
from gpuci.model import FileRun, FileStatus, Interpreter, Mode, ModeRun, Outcome, TestResult

TARGET_ISOLATED = 1.05  # gpuci isolated / bare loop
TARGET_PARALLEL = 1.15  # gpuci parallel / max(longest file, sum / W)
TARGET_DIFF_S = 5.0  # the issue: 3 modes x 50,000 tests under 5 s...
TARGET_DIFF_MIB = 1024.0  # ...and 1 GB
TARGET_CHECK_CLEAN = 1.6  # gpuci check / plain pytest, a suite with nothing wrong in it
TARGET_CHECK_POLLUTED = 5.0  # the same with planted failures: their evidence costs more
TESTS_DIR = "tests"  # inside the generated suite; every command runs from the suite root
DIFF_FILE_TESTS = 50  # tests per file in the synthetic diff input
DIFF_WORKERS = 4  # slots of the synthetic parallel mode
LOG_TAIL_CHARS = 3000  # the size of a crash's log excerpt gpuci keeps (run.LOG_EXCERPT_CHARS)
# Variables that would change what the children do: extra pytest options or plugins, and
# GitLab's `parallel:` index, which would make gpuci run one shard only.
COMMAND_TIMEOUT_S = 900.0  # the most one measured command may take before it counts as hung
CHILD_ENV_DROP = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "CI_NODE_INDEX", "CI_NODE_TOTAL")


class BenchError(Exception):
    """A command the benchmark depends on failed; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Measure:
    """One child process: wall time, exit code, and its rusage (with its descendants)."""

    wall_s: float
    exit_code: int
    cpu_s: float  # user + system, the child and every descendant it waited for
    max_rss_mib: float  # the largest single process among them


@dataclass(slots=True)
class Samples:
    """Repeated measurements of one command."""

    command: str
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    def add(self, measure: Measure) -> None:
        """Keep one repetition."""
        self.walls.append(measure.wall_s)
        self.cpus.append(measure.cpu_s)

    @property
    def wall(self) -> float:
        """The median wall time."""
        return statistics.median(self.walls)

    @property
    def cpu(self) -> float:
        """The median CPU time."""
        return statistics.median(self.cpus)


# --- processes -------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    """The environment every measured command gets: ours, less what would skew it."""
    env = {k: v for k, v in os.environ.items() if k not in CHILD_ENV_DROP}
    env["PYTHONUNBUFFERED"] = "1"  # gpuci sets it for its children; the bare runs get it too
    return env


def run_timed(cmd: Sequence[str], *, cwd: Path, log: Path, allow: Sequence[int] = (0,)) -> Measure:
    """Run `cmd` to its end; wait4 gives this child's own rusage, not every child's so far."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(  # reaped by wait4 below, so no context manager
            list(cmd),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=child_env(),
            start_new_session=True,
        )
        # A hung command must not hang the benchmark: a timer ends its process group,
        # and the blocking wait4 (no polling, so no added latency) returns.
        expired = threading.Event()
        timer = threading.Timer(COMMAND_TIMEOUT_S, _kill_group, (proc.pid, expired))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - start
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    if expired.is_set():
        raise BenchError(f"{COMMAND_TIMEOUT_S:g}s passed, killed: {shlex.join(cmd)} (see {log})")
    if code not in allow:
        tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise BenchError(f"exit code {code} from: {shlex.join(cmd)}\n--- {log} (tail):\n{tail}")
    # ru_maxrss is in KiB on Linux (bytes on macOS)
    rss_kib = usage.ru_maxrss / (1024 if sys.platform == "darwin" else 1)
    return Measure(wall, code, usage.ru_utime + usage.ru_stime, rss_kib / 1024)


def _kill_group(pid: int, expired: threading.Event) -> None:
    expired.set()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def shown(cmd: Sequence[str], cwd: Path) -> str:
    """A command as one pastes it: `cd DIR && ...`, with `python` for our interpreter."""
    words = ["python" if w == sys.executable else w for w in cmd]
    return f"cd {shlex.quote(str(cwd))} && {shlex.join(words)}"


# --- the generated suite ---------------------------------------------------------------


def generate_suite(
    root: Path, *, files: int, tests: int, seed: int, min_ms: float, max_ms: float
) -> dict[str, float]:
    """Write `files` test files of `tests` tests each; return each file's planned sleep (s).

    Each file draws a weight, so files differ in length (what duration ordering is for);
    each test sleeps a seeded time in [min_ms, max_ms] scaled by it and does a little
    arithmetic, so there is real interpreter work besides the sleeping.
    """
    rng = random.Random(seed)  # noqa: S311 -- seeded test data, not secrets
    (root / TESTS_DIR).mkdir(parents=True)
    # Our own rootdir: no pytest.ini or conftest.py above the temporary directory applies.
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    planned: dict[str, float] = {}
    width = len(str(files - 1))
    for index in range(files):
        weight = rng.uniform(0.1, 1.0)
        sleeps = [
            round(min_ms + (max_ms - min_ms) * weight * rng.random(), 2) for _ in range(tests)
        ]
        name = f"{TESTS_DIR}/test_bench_{index:0{width}d}.py"
        planned[name] = sum(sleeps) / 1000
        body = [
            f'"""Generated by benchmarks/bench_runner.py (seed {seed}): {tests} tests."""',
            "",
            "import time",
            "",
            "",
            "def work(ms: float) -> int:",
            "    time.sleep(ms / 1000)",
            "    return sum(i * i for i in range(2000))",
            "",
        ]
        for number, ms in enumerate(sleeps):
            body += ["", f"def test_{number:03d}():", f"    assert work({ms}) > 0", ""]
        (root / name).write_text("\n".join(body), encoding="utf-8")
    return planned


# --- the runner measurements -----------------------------------------------------------


@dataclass(slots=True)
class RunnerResults:
    """Everything (a) to (e) measured, every repetition kept."""

    bare_loop: Samples
    bare_files: dict[str, list[float]]  # per file, the bare loop's wall times
    isolated: Samples
    parallel: Samples
    xdist: Samples | None
    suite: Samples | None
    bare_suite: Samples | None
    bare_parallel: Samples  # W bare interpreters at a time: what the machine itself allows
    collect: Samples  # pytest --collect-only of the whole suite: what discovery costs
    cli_start: Samples  # `python -m gpuci --version`: the CLI's own start-up
    gpuci_files: dict[str, list[float]] = field(default_factory=dict)  # isolated run.json
    gpuci_run_walls: list[float] = field(default_factory=list)  # isolated run.json wall_s
    parallel_run_walls: list[float] = field(default_factory=list)


def measure_runners(
    suite: Path,
    files: Sequence[str],
    work: Path,
    *,
    workers: int,
    repeat: int,
    with_suite: bool,
    with_xdist: bool,
) -> RunnerResults:
    """Measure (a) to (e) `repeat` times, interleaved, so drift hits every one alike."""
    py = sys.executable
    pytest_file = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    out_of = [work / f"out-{r + 1}" for r in range(repeat)]
    gpuci = [py, "-m", "gpuci", "run", TESTS_DIR]
    iso_cmd = [*gpuci, "--mode", "isolated", "--out", str(out_of[0])]
    par_cmd = [*gpuci, "--mode", "parallel", "--workers", str(workers), "--out", str(out_of[0])]
    suite_cmd = [*gpuci, "--mode", "suite", "--out", str(out_of[0])]
    xdist_cmd = [*pytest_file, "-n", str(workers), "--dist", "loadfile", TESTS_DIR]
    bare_suite_cmd = [*pytest_file, TESTS_DIR]
    collect_cmd = [*pytest_file, "--collect-only", TESTS_DIR]
    start_cmd = [py, "-m", "gpuci", "--version"]
    results = RunnerResults(
        bare_loop=Samples(
            f"for f in {TESTS_DIR}/test_*.py; do {shlex.join(['python', *pytest_file[1:]])}"
            ' "$f"; done'
        ),
        bare_files={f: [] for f in files},
        isolated=Samples(shown(iso_cmd, suite)),
        parallel=Samples(shown(par_cmd, suite)),
        xdist=Samples(shown(xdist_cmd, suite)) if with_xdist else None,
        suite=Samples(shown(suite_cmd, suite)) if with_suite else None,
        bare_suite=Samples(shown(bare_suite_cmd, suite)) if with_suite else None,
        bare_parallel=Samples(""),  # its order is known after the first (a)
        collect=Samples(shown(collect_cmd, suite)),
        cli_start=Samples(shown(start_cmd, suite)),
    )
    results.bare_loop.command = f"cd {shlex.quote(str(suite))} && {results.bare_loop.command}"
    logs = work / "logs"
    # Warm-up: pytest's assertion rewriting caches each module's bytecode on first import.
    run_timed(collect_cmd, cwd=suite, log=logs / "warmup.log")
    for r in range(repeat):
        out = out_of[r]
        tag = f"[{r + 1}/{repeat}]"
        results.cli_start.add(run_timed(start_cmd, cwd=suite, log=logs / "start.log"))
        results.collect.add(run_timed(collect_cmd, cwd=suite, log=logs / "collect.log"))

        say(f"{tag} (a) bare pytest loop over {len(files)} files")
        loop, per_file = run_bare_loop(pytest_file, files, suite, logs / "bare")
        results.bare_loop.add(loop)
        for name, wall in per_file.items():
            results.bare_files[name].append(wall)

        say(f"{tag} (b) gpuci isolated")
        cmd = [*iso_cmd[:-1], str(out)]
        results.isolated.add(run_timed(cmd, cwd=suite, log=logs / f"isolated-{r}.log"))
        run = read_mode_run(out / "isolated" / "run.json")
        results.gpuci_run_walls.append(run.wall_s)
        for file_run in run.files:
            results.gpuci_files.setdefault(file_run.file, []).append(file_run.duration)

        say(f"{tag} (c0) bare pytest, {workers} files at a time, longest first")
        longest_first = sorted(files, key=lambda f: -results.bare_files[f][-1])
        if r == 0:
            results.bare_parallel.command = (
                f"cd {shlex.quote(str(suite))} && printf '%s\\n' {shlex.join(longest_first)}"
                f" | xargs -P {workers} -n 1 {shlex.join(['python', *pytest_file[1:]])}"
            )
        results.bare_parallel.add(
            run_bare_parallel(pytest_file, longest_first, suite, logs / "bare-par", workers)
        )

        say(f"{tag} (c) gpuci parallel --workers {workers}")
        cmd = [*par_cmd[:-1], str(out)]
        results.parallel.add(run_timed(cmd, cwd=suite, log=logs / f"parallel-{r}.log"))
        results.parallel_run_walls.append(read_mode_run(out / "parallel" / "run.json").wall_s)

        if results.xdist is not None:
            say(f"{tag} (d) pytest-xdist -n {workers} --dist loadfile")
            results.xdist.add(run_timed(xdist_cmd, cwd=suite, log=logs / f"xdist-{r}.log"))
        if results.suite is not None and results.bare_suite is not None:
            say(f"{tag} (e) gpuci suite, and a bare pytest of the whole suite")
            cmd = [*suite_cmd[:-1], str(out)]
            results.suite.add(run_timed(cmd, cwd=suite, log=logs / f"suite-{r}.log"))
            results.bare_suite.add(
                run_timed(bare_suite_cmd, cwd=suite, log=logs / f"bare-suite-{r}.log")
            )
    return results


def run_bare_loop(
    pytest_file: Sequence[str], files: Sequence[str], suite: Path, logs: Path
) -> tuple[Measure, dict[str, float]]:
    """`python -m pytest FILE` for every file, one at a time: the loop, and each file's wall."""
    start = time.perf_counter()
    measures = {
        name: run_timed([*pytest_file, name], cwd=suite, log=logs / f"{Path(name).name}.log")
        for name in files
    }
    wall = time.perf_counter() - start
    cpu = sum(m.cpu_s for m in measures.values())
    rss = max(m.max_rss_mib for m in measures.values())
    return Measure(wall, 0, cpu, rss), {name: m.wall_s for name, m in measures.items()}


def run_bare_parallel(
    pytest_file: Sequence[str], files: Sequence[str], suite: Path, logs: Path, workers: int
) -> Measure:
    """`python -m pytest FILE` for every file, `workers` at a time, in the given order."""
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        measures = list(
            pool.map(
                lambda name: run_timed(
                    [*pytest_file, name], cwd=suite, log=logs / f"{Path(name).name}.log"
                ),
                files,
            )
        )
    wall = time.perf_counter() - start
    return Measure(wall, 0, sum(m.cpu_s for m in measures), max(m.max_rss_mib for m in measures))


def parallel_bound(bare_files: dict[str, list[float]], workers: int) -> tuple[float, float, float]:
    """max(longest file, sum / W) from the bare loop's median per-file walls, and both parts."""
    per_file = [statistics.median(v) for v in bare_files.values()]
    longest, total = max(per_file), sum(per_file)
    return max(longest, total / workers), longest, total


# --- (f) gpuci check against plain pytest, clean and polluted --------------------------

CHECK_MIN_FILES = 5  # the planted tests go to 5 distinct files
STATE_MODULE = "_state"  # tests/_state.py: process-wide state (think: a memory-pool limit)
DEVICE_LOCK = "_device.lock"  # tests/_device.lock: the "GPU" two files each want alone
FLAKY_COUNT = "_flaky.count"  # tests/_flaky.count: how often the flaky test ran
LOCK_HOLD_S = 0.2  # the lock test holds the device this long, so both holders overlap

# Appended to the generated files (which define `work(ms)` and import `time`); each
# planted test's name starts with test_plant_. The lock holders keep the lock for their
# whole file; the first check (no earlier durations) orders parallel files by tests per
# file, then path, so giving them the most tests starts both together on the two slots.
PLANT_LOCK = f'''
import fcntl
import pathlib

import pytest

DEVICE_LOCK = pathlib.Path(__file__).with_name("{DEVICE_LOCK}")


@pytest.fixture(scope="module", autouse=True)
def exclusive_device():
    """The whole file holds the device; another interpreter holding it is an error."""
    with DEVICE_LOCK.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
        else:
            yield True


def test_plant_exclusive_device(exclusive_device):
    time.sleep({LOCK_HOLD_S})
    assert exclusive_device, "another interpreter holds the device ({DEVICE_LOCK})"
'''
PLANT_POLLUTER = f"""
import {STATE_MODULE}


def test_plant_leaves_pool_limit():
    {STATE_MODULE}.POOL_LIMIT = 1024  # never restored
    assert work(5) > 0
"""
PLANT_VICTIM = f"""
import {STATE_MODULE}


def test_plant_needs_default_pool():
    limit = {STATE_MODULE}.POOL_LIMIT
    assert limit is None, f"pool limit {{limit}} left behind by an earlier test"
"""
PLANT_FAILURE = """

def test_plant_real_failure():
    assert work(5) < 0, "a real bug: fails everywhere, alone too"
"""
PLANT_FLAKY = f'''
import pathlib

FLAKY_COUNT = pathlib.Path(__file__).with_name("{FLAKY_COUNT}")


def test_plant_flaky():
    try:
        runs = int(FLAKY_COUNT.read_text())
    except (FileNotFoundError, ValueError):
        runs = 0
    FLAKY_COUNT.write_text(str(runs + 1))
    assert runs % 2 == 1, f"lost a race (run {{runs + 1}}; every other run loses)"
'''


@dataclass(frozen=True, slots=True)
class Plant:
    """One planted test: its id and the category `gpuci check` should give it."""

    id: str
    expect: str  # a category, or "passed"; "concurrency?" for either holder of the lock


def plant_failures(root: Path, files: Sequence[str], *, seed: int, workers: int) -> list[Plant]:
    """Append the planted tests to five of the generated files (seeded); return them."""
    rng = random.Random(seed)  # noqa: S311 -- seeded test data, not secrets
    first, second, third, fourth, last = (
        files[i] for i in sorted(rng.sample(range(len(files)), 5))
    )
    failure, flaky = rng.sample([third, fourth], 2)
    (root / TESTS_DIR / f"{STATE_MODULE}.py").write_text(
        '"""State one test leaves behind for another (generated by bench_runner.py)."""\n\n'
        "POOL_LIMIT = None\n",
        encoding="utf-8",
    )
    # With one worker nothing runs beside anything: the lock holders both pass.
    holder = "concurrency?" if workers > 1 else "passed"
    plants = {
        # first gets two extra tests, the rest one each: first and second (ties go by
        # path) are the two longest files of a first check, so they start together
        first: [(PLANT_LOCK, "test_plant_exclusive_device", holder)],
        second: [(PLANT_LOCK, "test_plant_exclusive_device", holder)],
        failure: [(PLANT_FAILURE, "test_plant_real_failure", "failed")],
        flaky: [(PLANT_FLAKY, "test_plant_flaky", "flaky")],
        last: [(PLANT_VICTIM, "test_plant_needs_default_pool", "order-dependent")],
    }
    plants[first].append((PLANT_POLLUTER, "test_plant_leaves_pool_limit", "passed"))
    planted: list[Plant] = []
    for name, chunks in plants.items():
        with (root / name).open("a", encoding="utf-8") as handle:
            for code, test, expect in chunks:
                handle.write(code)
                planted.append(Plant(id=f"{name}::{test}", expect=expect))
    return planted


def expected_summary(plants: Sequence[Plant], tests: int) -> dict[str, int]:
    """The verdict summary the planted suite should get (`tests` counts every test)."""
    summary: dict[str, int] = {"passed": tests - len(plants)}
    holders = [p for p in plants if p.expect == "concurrency?"]
    for plant in plants:
        if plant.expect != "concurrency?":
            summary[plant.expect] = summary.get(plant.expect, 0) + 1
    if holders:  # whichever of the two started second loses the lock
        summary["concurrency"] = 1
        summary["passed"] += len(holders) - 1
    return summary


def reset_plants(root: Path) -> None:
    """Start the flaky test's count afresh, so every run of it fails, passes, fails, ..."""
    (root / TESTS_DIR / FLAKY_COUNT).unlink(missing_ok=True)


@dataclass(slots=True)
class CheckResults:
    """(f): plain pytest and gpuci check on the clean and the polluted suite, every repetition."""

    clean_pytest: Samples
    clean_check: Samples
    polluted_pytest: Samples
    polluted_check: Samples
    plants: list[Plant]
    expected: dict[str, int]
    clean_outs: list[dict[str, Any]] = field(default_factory=list)
    polluted_outs: list[dict[str, Any]] = field(default_factory=list)


def read_check_out(out: Path, exit_code: int) -> dict[str, Any]:
    """What one `gpuci check` wrote: its verdict, summary, where its time went, planted ids."""
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    evidence = verdict.get("evidence") or {}
    return {
        "exit_code": exit_code,
        "verdict": verdict.get("verdict"),
        "summary": {k: v for k, v in verdict.get("summary", {}).items() if v},
        "modes_s": {m: d.get("wall_s", 0.0) for m, d in verdict.get("modes", {}).items()},
        "evidence_s": evidence.get("spent_s"),
        "evidence_runs": evidence.get("runs"),
        "categories": {
            t["id"]: t.get("category")
            for t in verdict.get("tests", [])
            if "::test_plant_" in t["id"]
        },
    }


def measure_check(
    work: Path,
    *,
    files: int,
    tests: int,
    seed: int,
    min_ms: float,
    max_ms: float,
    workers: int,
    repeat: int,
) -> CheckResults:
    """Measure (f) `repeat` times, interleaved: plain pytest and gpuci check, clean and polluted."""
    py = sys.executable
    clean, polluted = work / "check-clean", work / "check-polluted"
    # The same seeded suite twice; the planted tests go into the second copy only.
    for root in (clean, polluted):
        planned = generate_suite(
            root, files=files, tests=tests, seed=seed, min_ms=min_ms, max_ms=max_ms
        )
    plants = plant_failures(polluted, list(planned), seed=seed, workers=workers)
    say(f"(f) suites: {clean} and {polluted} ({len(plants)} planted tests)")
    pytest_cmd = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", TESTS_DIR]
    collect_cmd = [*pytest_cmd[:-1], "--collect-only", TESTS_DIR]

    def check_cmd(out: Path) -> list[str]:
        return [py, "-m", "gpuci", "check", TESTS_DIR, "--out", str(out), "--workers", str(workers)]

    def out_of(r: int, kind: str) -> Path:
        return work / f"check-out-{r + 1}" / kind

    results = CheckResults(
        clean_pytest=Samples(shown(pytest_cmd, clean)),
        clean_check=Samples(shown(check_cmd(out_of(0, "clean")), clean)),
        polluted_pytest=Samples(shown(pytest_cmd, polluted)),
        polluted_check=Samples(shown(check_cmd(out_of(0, "polluted")), polluted)),
        plants=plants,
        expected=expected_summary(plants, files * tests + len(plants)),
    )
    logs = work / "logs"
    # Warm-up, as for (a)-(e): assertion rewriting caches each module's bytecode once.
    for root in (clean, polluted):
        run_timed(collect_cmd, cwd=root, log=logs / f"check-warmup-{root.name}.log")
    for r in range(repeat):
        tag = f"[{r + 1}/{repeat}]"
        say(f"{tag} (f) plain pytest, clean suite")
        results.clean_pytest.add(
            run_timed(pytest_cmd, cwd=clean, log=logs / f"check-pytest-clean-{r}.log")
        )
        say(f"{tag} (f) gpuci check --workers {workers}, clean suite")
        out = out_of(r, "clean")
        # 1 is a failed verdict, a finding in a clean suite; anything else is a broken check
        measure = run_timed(
            check_cmd(out), cwd=clean, log=logs / f"check-clean-{r}.log", allow=(0, 1)
        )
        results.clean_check.add(measure)
        results.clean_outs.append(read_check_out(out, measure.exit_code))

        say(f"{tag} (f) plain pytest, polluted suite")
        reset_plants(polluted)
        results.polluted_pytest.add(
            run_timed(
                pytest_cmd, cwd=polluted, log=logs / f"check-pytest-polluted-{r}.log", allow=(0, 1)
            )
        )
        say(f"{tag} (f) gpuci check --workers {workers}, polluted suite")
        reset_plants(polluted)
        out = out_of(r, "polluted")
        measure = run_timed(
            check_cmd(out), cwd=polluted, log=logs / f"check-polluted-{r}.log", allow=(0, 1)
        )
        results.polluted_check.add(measure)
        results.polluted_outs.append(read_check_out(out, measure.exit_code))
    return results


# --- profile: where the parent's time goes --------------------------------------------

PROFILE_WRAPPER = '''\
"""Run gpuci's CLI under cProfile, every thread, on CPU time; print the CPU split."""
import cProfile, json, pstats, resource, sys, threading, time

from gpuci.cli import main

profiles = []
if sys.version_info < (3, 12):
    # cProfile follows one thread only: give each slot thread its own profile.
    thread_run = threading.Thread.run

    def run_profiled(self):
        profile = cProfile.Profile(time.thread_time)
        profiles.append(profile)
        profile.enable()
        try:
            thread_run(self)
        finally:
            profile.disable()

    threading.Thread.run = run_profiled
    main_profile = cProfile.Profile(time.thread_time)
else:
    # 3.12's cProfile sees every thread (sys.monitoring), and only one may be active.
    main_profile = cProfile.Profile(time.process_time)
start = time.perf_counter()
main_profile.enable()
code = main(sys.argv[2:])
main_profile.disable()
wall = time.perf_counter() - start
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
pstats.Stats(main_profile, *profiles).dump_stats(sys.argv[1])
with open(sys.argv[1] + ".json", "w") as f:
    json.dump({"wall_s": wall, "exit_code": code,
               "parent_cpu_s": me.ru_utime + me.ru_stime,
               "children_cpu_s": kids.ru_utime + kids.ru_stime}, f)
'''


def profile_gpuci(suite: Path, work: Path, mode: str, workers: int, top: int) -> dict[str, Any]:
    """Run one mode under the profiling wrapper; return the CPU split and the top functions."""
    wrapper = work / "profile_gpuci.py"
    wrapper.write_text(PROFILE_WRAPPER, encoding="utf-8")
    prof = work / f"profile-{mode}.prof"
    cmd = [sys.executable, str(wrapper), str(prof), "run", TESTS_DIR, "--mode", mode]
    cmd += ["--out", str(work / "out-profile")]
    if mode == Mode.PARALLEL.value:
        cmd += ["--workers", str(workers)]
    run_timed(cmd, cwd=suite, log=work / "logs" / f"profile-{mode}.log")
    split = json.loads(Path(f"{prof}.json").read_text(encoding="utf-8"))
    stats = pstats.Stats(str(prof))
    rows = []
    # tottime: CPU spent in the function itself, what a fix would save
    for func, (_cc, ncalls, tottime, cumtime, _callers) in sorted(
        stats.stats.items(),  # type: ignore[attr-defined]
        key=lambda item: item[1][2],
        reverse=True,
    )[:top]:
        path, line, name = func
        where = f"{Path(path).name}:{line}({name})" if line else name
        rows.append({"function": where, "calls": ncalls, "self_s": tottime, "cum_s": cumtime})
    return {**split, "command": shown(cmd, suite), "prof": str(prof), "top": rows}


# --- diff at scale ---------------------------------------------------------------------

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
    if importlib.util.find_spec("gpuci.report") is None:
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


# --- output ----------------------------------------------------------------------------


def say(text: str) -> None:
    """Progress, on stderr so the table on stdout stays clean."""
    print(f"bench: {text}", file=sys.stderr, flush=True)


def verdict_word(ratio: float, target: float) -> str:
    return "ok" if ratio <= target else "MISSED"


def runner_report(results: RunnerResults, workers: int) -> tuple[list[str], dict[str, Any], bool]:
    """The table of (a)-(e), the same numbers for JSON, and whether every target held."""
    bound, longest, total = parallel_bound(results.bare_files, workers)
    a, b, c = results.bare_loop.wall, results.isolated.wall, results.parallel.wall
    ratio_b, ratio_c = b / a, c / bound
    ok = ratio_b <= TARGET_ISOLATED and ratio_c <= TARGET_PARALLEL
    n = len(results.bare_loop.walls)
    lines = [
        f"{'measurement':<44} {'median s':>9} {'CPU s':>7}  {'ratio':<22} {'target':<8}",
        f"{'(a) bare pytest loop, one file at a time':<44} {a:>9.2f} {results.bare_loop.cpu:>7.2f}",
        f"{'(b) gpuci run --mode isolated':<44} {b:>9.2f} {results.isolated.cpu:>7.2f}"
        f"  {ratio_b:>6.3f} (b)/(a)         <= {TARGET_ISOLATED:<5} "
        f"{verdict_word(ratio_b, TARGET_ISOLATED)}",
        f"{'    bound: max(longest file, sum / W)':<44} {bound:>9.2f}"
        f"          longest {longest:.2f}, sum {total:.2f}, W {workers}",
        f"{f'(c0) bare pytest per file, {workers} at a time':<44}"
        f" {results.bare_parallel.wall:>9.2f} {results.bare_parallel.cpu:>7.2f}"
        f"  {results.bare_parallel.wall / bound:>6.3f} (c0)/bound",
        f"{f'(c) gpuci run --mode parallel --workers {workers}':<44} {c:>9.2f}"
        f" {results.parallel.cpu:>7.2f}  {ratio_c:>6.3f} (c)/bound       <= {TARGET_PARALLEL:<5} "
        f"{verdict_word(ratio_c, TARGET_PARALLEL)}",
        f"{'':<62}{c / results.bare_parallel.wall:>6.3f} (c)/(c0)",
    ]
    data: dict[str, Any] = {
        "repeat": n,
        "workers": workers,
        "bare_loop_s": a,
        "isolated_s": b,
        "isolated_ratio": ratio_b,
        "parallel_s": c,
        "parallel_bound_s": bound,
        "longest_file_s": longest,
        "sum_files_s": total,
        "parallel_ratio": ratio_c,
        "bare_parallel_s": results.bare_parallel.wall,
        "parallel_over_bare_parallel": c / results.bare_parallel.wall,
        "samples": {
            "bare_loop": results.bare_loop.walls,
            "isolated": results.isolated.walls,
            "parallel": results.parallel.walls,
            "bare_parallel": results.bare_parallel.walls,
        },
        "cpu_s": {
            "bare_loop": results.bare_loop.cpu,
            "isolated": results.isolated.cpu,
            "parallel": results.parallel.cpu,
        },
    }
    if results.xdist is not None:
        d = results.xdist.wall
        lines.append(
            f"{f'(d) pytest -n {workers} --dist loadfile (xdist)':<44} {d:>9.2f}"
            f" {results.xdist.cpu:>7.2f}  {d / bound:>6.3f} (d)/bound"
        )
        data |= {"xdist_s": d, "xdist_ratio": d / bound}
        data["samples"]["xdist"] = results.xdist.walls
        data["cpu_s"]["xdist"] = results.xdist.cpu
    else:
        lines.append(
            f"{'(d) pytest-xdist':<44} {'-':>9}          not installed: pip install pytest-xdist"
        )
    if results.suite is not None and results.bare_suite is not None:
        e, bare = results.suite.wall, results.bare_suite.wall
        lines += [
            f"{'(e) gpuci run --mode suite':<44} {e:>9.2f} {results.suite.cpu:>7.2f}"
            f"  {e / bare:>6.3f} (e)/bare suite",
            f"{'    bare python -m pytest SUITE':<44} {bare:>9.2f} {results.bare_suite.cpu:>7.2f}",
        ]
        data |= {"suite_s": e, "bare_suite_s": bare, "suite_ratio": e / bare}
        data["samples"] |= {"suite": results.suite.walls, "bare_suite": results.bare_suite.walls}
    # Where (b)'s extra time goes: per interpreter, and once per run.
    deltas = [
        statistics.median(results.gpuci_files[f]) - statistics.median(results.bare_files[f])
        for f in results.bare_files
        if f in results.gpuci_files
    ]
    per_file = statistics.median(deltas)
    run_wall = statistics.median(results.gpuci_run_walls)
    gpuci_sum = sum(statistics.median(v) for v in results.gpuci_files.values())
    lines += [
        "",
        "where (b) - (a) goes:",
        f"  per interpreter: gpuci's file wall - bare file wall, median {per_file * 1000:+.0f} ms"
        f" (x {len(deltas)} files = {per_file * len(deltas):+.2f} s)",
        f"  inside run_mode, between and after files: run.json wall_s {run_wall:.2f}"
        f" - sum of its file durations {gpuci_sum:.2f} = {run_wall - gpuci_sum:+.2f} s",
        f"  outside run_mode (start-up, discovery, exit): CLI wall {b:.2f} - wall_s {run_wall:.2f}"
        f" = {b - run_wall:+.2f} s; for scale: `gpuci --version` {results.cli_start.wall:.2f} s,"
        f" `pytest --collect-only` {results.collect.wall:.2f} s",
    ]
    data["breakdown"] = {
        "per_file_overhead_s": per_file,
        "run_json_wall_s": run_wall,
        "gpuci_sum_files_s": gpuci_sum,
        "between_files_s": run_wall - gpuci_sum,
        "outside_run_mode_s": b - run_wall,
        "cli_start_s": results.cli_start.wall,
        "collect_only_s": results.collect.wall,
        "parallel_run_json_wall_s": statistics.median(results.parallel_run_walls),
    }
    commands = {
        "(a)": results.bare_loop.command,
        "(b)": results.isolated.command,
        "(c0)": results.bare_parallel.command,
        "(c)": results.parallel.command,
    }
    if results.xdist is not None:
        commands["(d)"] = results.xdist.command
    if results.suite is not None and results.bare_suite is not None:
        commands["(e)"] = results.suite.command
        commands["(e) bare"] = results.bare_suite.command
    commands["discovery-scale"] = results.collect.command
    lines += ["", "commands (each repetition uses its own --out):"]
    lines += [f"  {k:<16}{v}" for k, v in commands.items()]
    data["commands"] = commands
    return lines, data, ok


def check_report(results: CheckResults, workers: int) -> tuple[list[str], dict[str, Any], bool]:
    """The lines of (f), the same numbers for JSON, and whether both targets held."""
    clean_ratio = results.clean_check.wall / results.clean_pytest.wall
    polluted_ratio = results.polluted_check.wall / results.polluted_pytest.wall
    ok = clean_ratio <= TARGET_CHECK_CLEAN and polluted_ratio <= TARGET_CHECK_POLLUTED
    check = f"(f) gpuci check --workers {workers}"
    planted = len(results.plants)
    lines = [
        f"{'measurement':<44} {'median s':>9} {'CPU s':>7}  {'ratio':<22} {'target':<8}",
        f"{'(f) plain pytest, clean suite':<44} {results.clean_pytest.wall:>9.2f}"
        f" {results.clean_pytest.cpu:>7.2f}",
        f"{check + ', clean':<44} {results.clean_check.wall:>9.2f}"
        f" {results.clean_check.cpu:>7.2f}  {clean_ratio:>6.3f} check/pytest    "
        f"<= {TARGET_CHECK_CLEAN:<5} {verdict_word(clean_ratio, TARGET_CHECK_CLEAN)}",
        f"{f'(f) plain pytest, polluted ({planted} planted)':<44}"
        f" {results.polluted_pytest.wall:>9.2f} {results.polluted_pytest.cpu:>7.2f}",
        f"{check + ', polluted':<44} {results.polluted_check.wall:>9.2f}"
        f" {results.polluted_check.cpu:>7.2f}  {polluted_ratio:>6.3f} check/pytest    "
        f"<= {TARGET_CHECK_POLLUTED:<5} {verdict_word(polluted_ratio, TARGET_CHECK_POLLUTED)}",
        "",
    ]
    for kind, samples, outs in (
        ("clean", results.clean_check, results.clean_outs),
        ("polluted", results.polluted_check, results.polluted_outs),
    ):
        lines.append(f"where the {kind} check goes: {time_split(samples.wall, outs)}")
    found = [out["summary"] for out in results.polluted_outs]
    matches = [summary == results.expected for summary in found]
    lines += [
        f"planted:       {format_counts(results.expected)}",
        f"found:         {format_counts(found[0])}  (verdict {results.polluted_outs[0]['verdict']},"
        f" exit {results.polluted_outs[0]['exit_code']})",
    ]
    lines += [
        f"  repetition {r + 1}: {format_counts(summary)}"
        for r, summary in enumerate(found)
        if r and summary != found[0]
    ]
    lines.append(
        f"categories as planted: {sum(matches)} of {len(matches)} repetition(s)"
        + ("" if all(matches) else " (see the tests below)")
    )
    # Every planted test, and what each repetition made of it.
    for plant in sorted(results.plants, key=lambda p: p.id):
        got = [out["categories"].get(plant.id, "missing") for out in results.polluted_outs]
        expect = plant.expect.replace("concurrency?", "concurrency or passed")
        lines.append(f"  {plant.id:<58} planted {expect:<22} found {', '.join(got)}")
    clean_found = [out["summary"] for out in results.clean_outs]
    clean_exits = [out["exit_code"] for out in results.clean_outs]
    lines.append(
        f"clean suite:   {format_counts(clean_found[0])}  (exit {', '.join(map(str, clean_exits))};"
        " expected 0)"
    )
    commands = {
        "(f) pytest": results.clean_pytest.command,
        "(f) check": results.clean_check.command,
        "(f) pytest pol": results.polluted_pytest.command,
        "(f) check pol": results.polluted_check.command,
    }
    lines += ["", "commands (each repetition uses its own --out):"]
    lines += [f"  {k:<16}{v}" for k, v in commands.items()]
    data: dict[str, Any] = {
        "repeat": len(results.clean_check.walls),
        "workers": workers,
        "clean_pytest_s": results.clean_pytest.wall,
        "clean_check_s": results.clean_check.wall,
        "clean_ratio": clean_ratio,
        "clean_target": TARGET_CHECK_CLEAN,
        "polluted_pytest_s": results.polluted_pytest.wall,
        "polluted_check_s": results.polluted_check.wall,
        "polluted_ratio": polluted_ratio,
        "polluted_target": TARGET_CHECK_POLLUTED,
        "samples": {
            "clean_pytest": results.clean_pytest.walls,
            "clean_check": results.clean_check.walls,
            "polluted_pytest": results.polluted_pytest.walls,
            "polluted_check": results.polluted_check.walls,
        },
        "cpu_s": {
            "clean_pytest": results.clean_pytest.cpu,
            "clean_check": results.clean_check.cpu,
            "polluted_pytest": results.polluted_pytest.cpu,
            "polluted_check": results.polluted_check.cpu,
        },
        "planted": [asdict(p) for p in results.plants],
        "expected_summary": results.expected,
        "summary_matches": matches,
        "clean_runs": results.clean_outs,
        "polluted_runs": results.polluted_outs,
        "commands": commands,
    }
    return lines, data, ok


def time_split(wall: float, outs: Sequence[dict[str, Any]]) -> str:
    """The check's median wall, split into its modes, its evidence and the rest."""
    modes: dict[str, list[float]] = {}
    for out in outs:
        for mode, seconds in out["modes_s"].items():
            modes.setdefault(mode, []).append(seconds)
    parts = {mode: statistics.median(v) for mode, v in modes.items()}
    evidence = [out["evidence_s"] for out in outs if out["evidence_s"] is not None]
    if evidence:
        runs = statistics.median(out["evidence_runs"] or 0 for out in outs)
        parts[f"evidence ({runs:g} runs)"] = statistics.median(evidence)
    rest = wall - sum(parts.values())
    text = ", ".join(f"{name} {seconds:.2f} s" for name, seconds in parts.items())
    return f"{text}; the rest (start-up, discovery, diff, report) {rest:.2f} s"


def format_counts(summary: dict[str, int]) -> str:
    """A verdict summary as `passed 120, failed 1, ...`, passed first."""
    keys = sorted(summary, key=lambda k: (k != "passed", k))
    return ", ".join(f"{k} {summary[k]}" for k in keys) or "(nothing)"


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
        lines.append("  gpuci report   not measured: gpuci/report.py is not there yet")
    match = "yes" if result["summary_matches"] else f"NO: got {result['summary']}"
    lines += [
        f"  planted {result['planted']}",
        f"  categories as planted: {match}",
        f"  {diff['command']}",
    ]
    if report:
        lines.append(f"  {report['command']}")
    return lines, ok


def profile_report(profiles: dict[str, dict[str, Any]]) -> list[str]:
    """The parent's CPU against its children's, and the parent's costliest functions."""
    lines = ["", "profile of the gpuci parent (cProfile, every thread, CPU time):"]
    for mode, p in profiles.items():
        share = p["parent_cpu_s"] / p["wall_s"] * 100 if p["wall_s"] else 0.0
        lines += [
            f"  {mode}: wall {p['wall_s']:.2f} s, parent CPU {p['parent_cpu_s']:.2f} s"
            f" ({share:.1f}% of one core), children CPU {p['children_cpu_s']:.2f} s",
            f"    {'self s':>7} {'cum s':>7} {'calls':>7}  function",
        ]
        lines += [
            f"    {row['self_s']:>7.3f} {row['cum_s']:>7.3f} {row['calls']:>7}  {row['function']}"
            for row in p["top"]
        ]
        lines.append(f"    {p['command']}")
    return lines


# --- main ------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The benchmark's options; small defaults that finish in a few minutes on 2 cores."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=40, help="test files (default 40)")
    parser.add_argument("--tests", type=int, default=20, help="tests per file (default 20)")
    parser.add_argument("--workers", type=int, default=2, help="W for parallel and xdist (2)")
    parser.add_argument("--repeat", type=int, default=1, help="repetitions; the median counts")
    parser.add_argument("--min-ms", type=float, default=5.0, help="shortest sleep of a test")
    parser.add_argument("--max-ms", type=float, default=40.0, help="longest sleep of a test")
    parser.add_argument("--seed", type=int, default=0, help="seed of the suite and diff input")
    parser.add_argument(
        "--diff-scale", type=int, default=50_000, help="tests per mode for the diff (0: skip)"
    )
    parser.add_argument("--no-runs", action="store_true", help="skip (a) to (e)")
    parser.add_argument("--no-suite", action="store_true", help="skip (e)")
    parser.add_argument(
        "--no-check", action="store_true", help="skip (f), gpuci check against plain pytest"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also profile the gpuci parent (isolated, parallel)"
    )
    parser.add_argument("--json", type=Path, help="write every number to this file")
    parser.add_argument("--keep", type=Path, help="work here and keep it (default: a temp dir)")
    parser.add_argument("--strict", action="store_true", help="exit 1 when a target is missed")
    return parser


def check_section(work: Path, args: argparse.Namespace) -> tuple[list[str], Any, bool]:
    """(f) measured and reported: its lines, its JSON (None when skipped), its targets held."""
    if args.files < CHECK_MIN_FILES:
        return [f"(f) not measured: it needs --files {CHECK_MIN_FILES} or more"], None, True
    check = measure_check(
        work,
        files=args.files,
        tests=args.tests,
        seed=args.seed,
        min_ms=args.min_ms,
        max_ms=args.max_ms,
        workers=args.workers,
        repeat=args.repeat,
    )
    lines, data, ok = check_report(check, args.workers)
    header = (
        f"gpuci check against plain pytest: {args.files} files x {args.tests} tests,"
        f" W={args.workers}, {args.repeat} repetition(s)"
    )
    return [header, "", *lines], data, ok


def main(argv: Sequence[str] | None = None) -> int:
    """Generate, measure, print; 0 unless a command failed (or, with --strict, a target)."""
    args = build_parser().parse_args(argv)
    if min(args.files, args.tests, args.workers, args.repeat) < 1:
        print("bench: --files, --tests, --workers and --repeat must be 1 or more", file=sys.stderr)
        return 2
    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="gpuci-bench-"))
    if args.keep:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    data: dict[str, Any] = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(terse=True),
            "cpus": len(os.sched_getaffinity(0))
            if hasattr(os, "sched_getaffinity")
            else os.cpu_count(),
        },
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
    }
    lines: list[str] = []
    all_ok = True
    try:
        if not args.no_runs:
            suite = work / "suite"
            planned = generate_suite(
                suite,
                files=args.files,
                tests=args.tests,
                seed=args.seed,
                min_ms=args.min_ms,
                max_ms=args.max_ms,
            )
            say(
                f"suite: {args.files} files x {args.tests} tests in {suite},"
                f" {sum(planned.values()):.1f} s of sleep"
            )
            with_xdist = importlib.util.find_spec("xdist") is not None
            results = measure_runners(
                suite,
                list(planned),
                work,
                workers=args.workers,
                repeat=args.repeat,
                with_suite=not args.no_suite,
                with_xdist=with_xdist,
            )
            table, data["runners"], ok = runner_report(results, args.workers)
            all_ok &= ok
            lines += [
                f"gpuci runner: {args.files} files x {args.tests} tests, sleeps"
                f" {args.min_ms:g}-{args.max_ms:g} ms, W={args.workers},"
                f" {args.repeat} repetition(s), {data['machine']['cpus']} CPUs",
                "",
                *table,
            ]
            if args.profile:
                say("profile: isolated and parallel under cProfile")
                profiles = {
                    mode: profile_gpuci(suite, work, mode, args.workers, top=12)
                    for mode in (Mode.ISOLATED.value, Mode.PARALLEL.value)
                }
                data["profile"] = profiles
                lines += profile_report(profiles)
        if not args.no_check:
            check_lines, data["check"], ok = check_section(work, args)
            lines, all_ok = [*lines, "", *check_lines], all_ok and ok
        if args.diff_scale > 0:
            if importlib.util.find_spec("gpuci.diff") is None:
                lines += ["", "diff at scale: not measured: gpuci/diff.py is not there yet"]
                data["diff"] = None
            else:
                data["diff"] = measure_diff(work, args.diff_scale, args.seed)
                diff_lines, ok = diff_report(data["diff"])
                all_ok &= ok
                lines += ["", *diff_lines]
    except BenchError as exc:
        print(f"bench: error: {exc}", file=sys.stderr)
        return 3
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print("\n".join(lines))
    if args.json:
        data["all_targets_met"] = all_ok
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        say(f"wrote {args.json}")
    return 1 if args.strict and not all_ok else 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
    sys.exit(130)
