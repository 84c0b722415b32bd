"""What the state ledger costs the suite screen: `gpuci run PATHS --mode suite` with the
ledger off, per file and per test (GPUCI_STATE), interleaved, in one command.

    python benchmarks/ledger_overhead.py --reps 5 --out /tmp/ledger-bench -- tests [PYTEST_ARGS...]

Run it from the suite's root with the suite's Python (and PYTHONPATH naming the gpuci to
measure). Each repetition runs the three levels one after another in a rotated order, so
that a drift of the machine's load spreads over all three; it prints each run's wall (the
suite's run.json `wall_s`), the CPU seconds of the whole `gpuci run` and its children, and
the ledger's own cost as the suite interpreter journaled it (`ledger-cost`: its CPU seconds
in snapshots and diffs, which a loaded machine does not inflate); per level, the medians and
their overhead against `off`, written to OUT/ledger_overhead.json too. Timings: not for
tests (they depend on the load).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

LEVELS = ("off", "file", "test")


def run_once(level: str, paths: list[str], out: Path) -> tuple[float, float, float]:
    """One suite screen at `level`: its wall (run.json), the CPU seconds of gpuci and its
    interpreters, and the ledger's own cost (its journal's `ledger-cost`), in seconds."""
    target = out / f"run-{level}"
    env = {**os.environ, "GPUCI_STATE": level}
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    # PATHS, then the pytest arguments (from the first option on), after gpuci's `--`
    cut = next((i for i, arg in enumerate(paths) if arg.startswith("-")), len(paths))
    command = [sys.executable, "-m", "gpuci", "run", *paths[:cut], "--mode", "suite"]
    done = subprocess.run(
        [*command, "--out", str(target), "--", *paths[cut:]],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    now = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (now.ru_utime + now.ru_stime) - (used.ru_utime + used.ru_stime)
    run_json = target / "suite" / "run.json"
    if not run_json.exists():
        sys.exit(f"gpuci run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    cost = sum(
        float(event.get("s", 0.0))
        for journal in (target / "suite" / "journal").glob("*.jsonl")
        for line in journal.read_text().splitlines()
        if '"ledger-cost"' in line and (event := json.loads(line))
    )
    return float(json.loads(run_json.read_text())["wall_s"]), cpu, cost


def main() -> int:
    """Measure and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("paths", nargs="+", help="PATHS and pytest arguments, after --")
    args = parser.parse_args()
    runs: dict[str, list[tuple[float, float, float]]] = {level: [] for level in LEVELS}
    run_once("off", args.paths, args.out)  # warm the file cache and .pyc files first
    for rep in range(args.reps):
        order = LEVELS[rep % 3 :] + LEVELS[: rep % 3]
        for level in order:
            wall, cpu, cost = run_once(level, args.paths, args.out)
            runs[level].append((wall, cpu, cost))
            print(f"rep {rep + 1} {level}: wall {wall:.2f}s cpu {cpu:.2f}s ledger {cost:.3f}s")
    wall_off = statistics.median(w for w, _, _ in runs["off"])
    cpu_off = statistics.median(c for _, c, _ in runs["off"])
    summary = {}
    for level, values in runs.items():
        wall = statistics.median(w for w, _, _ in values)
        cpu = statistics.median(c for _, c, _ in values)
        cost = statistics.median(x for _, _, x in values)
        summary[level] = {
            "runs": values,
            "wall_s": wall,
            "wall_pct": round(100 * (wall - wall_off) / wall_off, 2),
            "cpu_s": cpu,
            "cpu_pct": round(100 * (cpu - cpu_off) / cpu_off, 2),
            "ledger_s": cost,
            "ledger_pct_of_wall": round(100 * cost / wall_off, 2),
        }
        print(
            f"{level}: wall {wall:.2f}s ({summary[level]['wall_pct']:+.2f}%), cpu {cpu:.2f}s"
            f" ({summary[level]['cpu_pct']:+.2f}%), the ledger's own {cost:.3f}s ="
            f" {summary[level]['ledger_pct_of_wall']:.2f}% of the suite screen's wall (off)"
        )
    (args.out / "ledger_overhead.json").write_text(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
