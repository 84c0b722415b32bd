"""Start-up per file: a fresh `python -m pytest` against one forked from the fork server.

    python benchmarks/bench_startup.py [--files 12] [--imports numpy] [--repeat 3]

A benchmark, not a timed test. It generates FILES test files that import IMPORTS at top
level and hold one trivial test, then runs `gpuci run --mode isolated` on them with the
fork server (default) and with `--no-preload`, REPEAT times each, alternating, and prints
the median interpreter wall time per file (run.json: end - start, start-up included) and
the mode's wall time. Run it from a checkout: gpuci is imported from there.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def write_suite(root: Path, files: int, imports: list[str]) -> None:
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    header = "".join(f"import {name}\n" for name in imports)
    for n in range(files):
        body = f"{header}\n\ndef test_{n}():\n    assert True\n"
        (root / f"test_{n:03}.py").write_text(body, encoding="utf-8")


def run_once(root: Path, forked: bool) -> tuple[float, list[float]]:
    """The mode's wall time and each interpreter's, in seconds."""
    out = root / "out"
    extra = [] if forked else ["--no-preload"]
    # gpuci from this checkout first; whatever the caller's path holds (its packages) after
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    command = [sys.executable, "-m", "gpuci", "run", ".", "--mode", "isolated", "--out", "out"]
    started = time.monotonic()
    subprocess.run([*command, *extra], cwd=root, env=env, check=True, capture_output=True)
    wall = time.monotonic() - started
    run = json.loads((out / "isolated" / "run.json").read_text(encoding="utf-8"))
    interpreters = [i for f in run["files"] for i in f["interpreters"]]
    assert all(i.get("forked", False) is forked for i in interpreters), "not the way asked"
    return wall, [i["end"] - i["start"] for i in interpreters]


def main() -> int:
    """Print fresh against forked start-up for one generated suite."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=12)
    parser.add_argument("--imports", default="numpy", help="comma list (default numpy)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    imports = [name for name in args.imports.split(",") if name]
    with tempfile.TemporaryDirectory(prefix="gpuci-startup-") as tmp:
        root = Path(tmp)
        write_suite(root, args.files, imports)
        walls: dict[bool, list[float]] = {True: [], False: []}
        each: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(args.repeat):
            for forked in (False, True):
                wall, times = run_once(root, forked)
                walls[forked].append(wall)
                each[forked] += times
    print(
        f"{args.files} files importing {', '.join(imports) or 'nothing'}, {args.repeat} runs each"
    )
    for forked, name in ((False, "fresh  "), (True, "forked ")):
        per_file, wall = statistics.median(each[forked]), statistics.median(walls[forked])
        print(f"{name} per file {per_file:.3f}s (median)   isolated mode {wall:.2f}s")
    ratio = statistics.median(each[True]) / statistics.median(each[False])
    print(f"forked / fresh per file: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
