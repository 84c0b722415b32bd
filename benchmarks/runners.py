"""(a)-(e): gpuci's runners against bare pytest loops and pytest-xdist, measured and reported."""

from __future__ import annotations

import shlex
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib import TESTS_DIR, Measure, Samples, run_timed, say, shown, verdict_word

from gpuci.formats import read_mode_run

TARGET_ISOLATED = 1.05  # gpuci isolated / bare loop
TARGET_PARALLEL = 1.15  # gpuci parallel / max(longest file, sum / W)


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


def startup_per_file(results: RunnerResults, planned: dict[str, float]) -> float:
    """What one bare `python -m pytest FILE` costs besides its tests' sleeps: (a)'s median
    wall less every file's planned sleep, per file (start-up, collection, the arithmetic)."""
    return (results.bare_loop.wall - sum(planned.values())) / len(planned)


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
