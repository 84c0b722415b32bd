"""Culprit searches against their bound: per search, its runs against ceil(log2 n), its
waves, the runs it started ahead and the losers it killed, read from evidence.json.

    python benchmarks/bench_searches.py OUT [OUT...]        checks that ran already
    python benchmarks/bench_searches.py --plant 16,128,1024  planted suites, checked here

`--plant` builds, for each size n, a suite of n tests in files of 16 with one polluter at
a seeded random place and a victim in a last file, and runs `gpuci check` on it (with this
Python, --workers as given). It exits 1 where a search took more runs than the bound its
evidence.json states (`steps.bound`: ceil(log2 n) + 3, or searched by files first,
ceil(log2 files) + ceil(log2 tests in the file) + 3, plus a checked stage's where one ran),
and says why where the note does (a refuted inference falls back to the checked halving).
Runs are counts, not timings; the wall of each check is printed beside them for reading,
never compared.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

PER_FILE = 16  # tests per generated file
SEED = 38  # issue 38: the polluter's place in each planted suite


def plant_suite(root: Path, n: int, rng: random.Random) -> tuple[str, str]:
    """n tests in files of PER_FILE, one of them a polluter; a victim after them all. The
    polluter's id and the victim's."""
    root.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (root / "state.py").write_text("POLLUTED = False\n", encoding="utf-8")
    place = rng.randrange(n)
    polluter = ""
    for start in range(0, n, PER_FILE):
        name = f"test_{start // PER_FILE:04d}.py"
        body = ["import state\n"]
        for i in range(start, min(n, start + PER_FILE)):
            if i == place:
                polluter = f"{name}::test_{i}"
                body.append(f"\ndef test_{i}():\n    state.POLLUTED = True  # never restored\n")
            else:
                body.append(f"\ndef test_{i}():\n    pass\n")
        (root / name).write_text("\n".join(body), encoding="utf-8")
    victim = "test_zz_victim.py::test_reads_fresh_state"
    (root / "test_zz_victim.py").write_text(
        "import state\n\n\ndef test_reads_fresh_state():\n    assert not state.POLLUTED\n",
        encoding="utf-8",
    )
    return polluter, victim


def check(suite: Path, out: Path, workers: str) -> float:
    """`gpuci check` of `suite` into `out`; its wall (seconds, for reading only). A check
    that wrote no evidence ends the benchmark with its output's tail."""
    started = time.monotonic()
    args = [sys.executable, "-m", "gpuci", "check", ".", "--out", str(out)]
    proc = subprocess.run(
        [*args, "--workers", workers],
        cwd=suite,
        capture_output=True,
        text=True,
        check=False,
    )
    if not (out / "evidence" / "evidence.json").is_file():
        sys.exit(f"gpuci check wrote no evidence (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.monotonic() - started


def searches(out: Path) -> list[dict[str, Any]]:
    """The searches of one check's evidence.json: each test's evidence with its steps."""
    evidence = json.loads((out / "evidence" / "evidence.json").read_text(encoding="utf-8"))
    return [t for t in evidence["tests"] if t.get("steps")]


def report(name: str, found: list[dict[str, Any]]) -> bool:
    """Print one line per search; whether each kept within its bound."""
    within = True
    for test in found:
        s = test["steps"]
        log2 = math.ceil(math.log2(max(1, s["n"])))
        ok = s["runs"] <= s["bound"]
        within &= ok
        print(
            f"{name:>12}  {test['id'][-48:]:48}  n={s['n']:<5} ceil(log2 n)={log2:<3}"
            f" runs={s['runs']:<3} bound={s['bound']:<3} waves={s['waves']:<3}"
            f" ahead={s.get('ahead', 0):<3} losers={s['losers']:<3} killed={s['killed']:<3}"
            f" tries={s['tries']:<2}"
            + (f" files={s['files']} in_file={s['in_file']}" if s.get("files") else "")
            + (f" checked={s['checked']}" if s.get("checked") else "")
            + f" {'ok' if ok else 'OVER: ' + test.get('search', '')}"
        )
    return within


def main(argv: list[str] | None = None) -> int:
    """Print the searches of the checks named or planted; 1 where one exceeded its bound."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outs", nargs="*", type=Path, help="OUT directories of checks")
    parser.add_argument("--plant", default="", help="sizes of planted suites, e.g. 16,128")
    parser.add_argument("--workers", default="3", help="the planted checks' --workers")
    args = parser.parse_args(argv)
    within = True
    for out in args.outs:
        within &= report(out.name, searches(out))
    rng = random.Random(SEED)  # noqa: S311 -- seeded places to plant, not secrets
    with tempfile.TemporaryDirectory(prefix="gpuci-bench-searches-") as scratch:
        for n in [int(x) for x in args.plant.split(",") if x]:
            root = Path(scratch) / f"n{n}"
            polluter, _ = plant_suite(root / "suite", n, rng)
            wall = check(root / "suite", root / "out", args.workers)
            found = searches(root / "out")
            named = all(t.get("culprits") == [polluter] for t in found) and bool(found)
            within &= report(f"planted {n}", found) and named
            print(
                f"{'':>12}  polluter {polluter}: {'named' if named else 'NOT named'};"
                f" check {wall:.1f}s"
            )
    return 0 if within else 1


if __name__ == "__main__":
    sys.exit(main())
