"""gpuci's parent under cProfile: its CPU against its children's, and its costliest functions."""

from __future__ import annotations

import json
import pstats
import sys
from pathlib import Path
from typing import Any

from benchlib import TESTS_DIR, run_timed, shown

from gpuci.model import Mode

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
