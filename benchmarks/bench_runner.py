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
(f) `gpuci check --workers W` (default: the screens at once; and `--serial-modes` beside it,
    the same run's ratio) against a plain
    `python -m pytest tests`, on the suite as generated (target <= 1.5) and on a copy with
    planted failures (target <= 3): an order-dependent victim of a flag another file leaves
    in a shared module, a real failure, a flaky test (it loses every other run), and a
    concurrency victim of an fcntl lock two files hold; it prints the verdict's summary
    against what was planted, and the floor under check/pytest: the check's own passes
    (suite, parallel, ...) over plain pytest, and the per-file start-up that (a) measured.

Then it writes a synthetic results directory of 3 modes x N tests and times `gpuci diff`
(target: under 5 s and 1 GiB) and `gpuci report` on its verdict. Every command is printed
so that it can be pasted; `--strict` makes a missed target exit 1.

The sections live beside this file (runners.py, check_bench.py with check_plants.py,
diff_bench.py, profile_bench.py, on benchlib.py and gensuite.py); run as a script, this
file's folder is on sys.path, so they import as plain modules.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import platform
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from benchlib import BenchError, say
from check_bench import check_section
from diff_bench import diff_report, measure_diff
from gensuite import generate_suite
from profile_bench import profile_gpuci, profile_report
from runners import measure_runners, runner_report, startup_per_file

from gpuci.model import Mode

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


def runners_section(
    work: Path, args: argparse.Namespace, data: dict[str, Any]
) -> tuple[list[str], bool, float]:
    """(a)-(e), and the profile if asked, on a generated suite: their lines, whether the
    targets held, and a bare pytest's per-file start-up; the numbers go into `data`."""
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
    lines = [
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
    return lines, ok, startup_per_file(results, planned)


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
    startup_s = None  # per file, from (a); (f) prints it beside its floor
    try:
        if not args.no_runs:
            run_lines, ok, startup_s = runners_section(work, args, data)
            lines, all_ok = [*lines, *run_lines], all_ok and ok
        if not args.no_check:
            check_lines, data["check"], ok = check_section(work, args, startup_s)
            lines, all_ok = [*lines, "", *check_lines], all_ok and ok
        if args.diff_scale > 0:
            if importlib.util.find_spec("gpuci.verdict.diff") is None:
                lines += ["", "diff at scale: not measured: gpuci/verdict/diff.py is not there yet"]
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
