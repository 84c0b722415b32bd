"""Plan: which files run, in which order, in how many slots, on which GPUs.

Pure functions of the discovered files and the durations of an earlier run: the same
inputs give every CI shard the same plan, so shards never overlap or miss a file.
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuci.formats import read_mode_run
from gpuci.model import InputError, Mode, ModeRun, Outcome, UsageError
from gpuci.run.disk.durations import is_durations_file, read_durations_file
from gpuci.run.sched.views import plain_gpus, visible_gpus

# A GPU kernel suite is rarely CPU-bound: a few interpreters per GPU keep it busy
# without every process fighting for the same memory.
WORKERS_PER_GPU = 4
THREADS_OPTION = "--parallel-threads"  # pytest-run-parallel's: each test in N threads at once


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """The ordered work of one mode: a pool of files, then the files that run alone."""

    pool: tuple[str, ...]  # run up to `workers` at once, longest first
    serial: tuple[str, ...]  # gpu_serial files: one at a time, after the pool
    workers: int
    slot_gpus: tuple[str | None, ...]  # CUDA_VISIBLE_DEVICES per slot, None: leave it alone

    @property
    def files(self) -> tuple[str, ...]:
        """Every file of the schedule, in the order they start."""
        return self.pool + self.serial


def parse_shard(text: str) -> tuple[int, int]:
    """`I/N` with 1 <= I <= N, as GitLab's CI_NODE_INDEX / CI_NODE_TOTAL count."""
    try:
        index_text, total_text = text.split("/")
        index, total = int(index_text), int(total_text)
    except ValueError:
        raise UsageError(f"--shard {text!r}: expected I/N, e.g. 2/4") from None
    if not 1 <= index <= total:
        raise UsageError(f"--shard {text!r}: I must be between 1 and N (got {index} of {total})")
    return index, total


def shard_from_env(environ: Mapping[str, str]) -> tuple[int, int] | None:
    """The shard of a GitLab `parallel:` job, or None outside one."""
    index, total = environ.get("CI_NODE_INDEX"), environ.get("CI_NODE_TOTAL")
    if not index or not total or total == "1":
        return None
    return parse_shard(f"{index}/{total}")


def parse_workers(text: str) -> int | None:
    """`auto` (None) or a positive number of parallel interpreters."""
    if text == "auto":
        return None
    try:
        workers = int(text)
    except ValueError:
        raise UsageError(f"--workers {text!r}: expected a positive number or 'auto'") from None
    if workers < 1:
        raise UsageError(f"--workers {workers}: at least one interpreter must run")
    return workers


def choose_workers(requested: int | None, *, cpus: int, gpus: int, files: int) -> tuple[int, str]:
    """The number of slots, and why (for `--workers auto`)."""
    if requested is not None:
        return max(1, min(requested, max(files, 1))), f"{requested} requested"
    limit = WORKERS_PER_GPU * gpus if gpus else cpus
    workers = max(1, min(cpus, limit, max(files, 1)))
    why = f"{cpus} CPUs, {gpus} GPU{'s' if gpus != 1 else ''}, {files} files"
    return workers, f"auto: {workers} ({why})"


def read_durations(path: Path, mode: Mode = Mode.PARALLEL) -> dict[str, float]:
    """Per-file wall times from an earlier run: a check's durations.json (for `mode`), a
    run.json or a results directory."""
    if is_durations_file(path):
        return read_durations_file(path).of(mode)
    if not path.exists():
        raise UsageError(
            f"--durations {path}: no such file or directory; give an earlier check's"
            " durations.json, a run.json or a results directory"
        )
    candidates = (
        [path]
        if path.is_file()
        else sorted(path.glob("run.json")) + sorted(path.glob("shard-*/run.json"))
    )
    durations: dict[str, float] = {}
    for candidate in candidates:
        run = read_mode_run(candidate)
        if run.mode is Mode.SUITE:
            raise InputError(f"{candidate}: a suite-mode run has no per-file durations")
        for file_run in run.files:
            durations[file_run.file] = file_run.duration
    return durations


def estimate_durations(
    files: Sequence[str], durations: Mapping[str, float], weights: Mapping[str, int]
) -> dict[str, float]:
    """Each file's seconds: its earlier duration, else a start-up plus a per-test rate fitted
    on the files whose durations are known, times its weight (`weights`: its number of
    tests, where the plan reads them a kernel compile counted as many,
    `gpuci.run.sched.compiles`); with no duration known, its weight, which orders but is
    not seconds."""
    known = {f: durations[f] for f in files if f in durations}
    if not known:
        return {f: float(weights[f]) for f in files if f in weights}
    startup, rate = fit_startup_and_rate(
        [(weights[f], d) for f, d in known.items() if f in weights]
    )
    # a file whose tests nobody counted (a caller without weights): the known files' mean
    mean = sum(known.values()) / len(known)
    estimates = dict(known)
    for f in files:
        if f not in known:
            estimates[f] = startup + rate * weights[f] if f in weights else mean
    return estimates


def fit_startup_and_rate(points: Sequence[tuple[int, float]]) -> tuple[float, float]:
    """Seconds = start-up + rate x tests, least squares over (tests, seconds), neither
    negative; one number of tests alone gives a rate through zero (a new file with 10x the
    tests of the known ones is longer, if not quite 10x)."""
    if not points:
        return 0.0, 0.0
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    squares = sum(x * x for x, _ in points)
    if spread == 0:
        return (0.0, mean_y / mean_x) if mean_x else (mean_y, 0.0)
    rate = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    if rate < 0:  # noise: more tests never make a file shorter
        return mean_y, 0.0
    startup = mean_y - rate * mean_x
    if startup < 0:
        return 0.0, sum(x * y for x, y in points) / squares
    return startup, rate


def order_files(
    files: Sequence[str], durations: Mapping[str, float], counts: Mapping[str, int] | None = None
) -> list[str]:
    """Longest first (LPT) by earlier durations, a file without one by its estimate from its
    number of tests; by number of tests where no duration is known; else path order."""
    estimates = estimate_durations(files, durations, counts or {})
    position = {f: i for i, f in enumerate(files)}
    return sorted(files, key=lambda f: (-estimates.get(f, 0.0), position[f]))


def shard_files(
    files: Sequence[str],
    durations: Mapping[str, float],
    index: int,
    total: int,
    counts: Mapping[str, int] | None = None,
) -> list[str]:
    """The files of shard `index` of `total`, balanced by their estimates (greedy LPT)."""
    estimates = estimate_durations(files, durations, counts or {})
    bins: list[tuple[float, int]] = [(0.0, i) for i in range(total)]
    owner: dict[str, int] = {}
    for f in order_files(files, estimates):
        load, which = heapq.heappop(bins)
        owner[f] = which
        # a file with nothing to go by still counts, so that the shards share them out
        heapq.heappush(bins, (load + estimates.get(f, 1.0), which))
    return [f for f in files if owner[f] == index - 1]


def plan_schedule(
    files: Sequence[str],
    *,
    mode: Mode,
    durations: Mapping[str, float],
    serial: frozenset[str],
    workers: int,
    gpus: Sequence[str],
    gpus_per_slot: int | None = None,
) -> Schedule:
    """Order the files of one mode and give each slot its GPUs."""
    # threads' files are each an interpreter of their own too: beside parallel's in the
    # screens, the longest starts first as well
    if mode in (Mode.PARALLEL, Mode.THREADS):
        ordered = order_files(files, durations)
        pool = tuple(f for f in ordered if f not in serial)
        late = tuple(f for f in ordered if f in serial)
        return Schedule(
            pool=pool,
            serial=late,
            workers=workers,
            slot_gpus=visible_gpus(gpus, workers, gpus_per_slot),
        )
    # isolated and suite keep collection order and see every GPU: a plain pytest run's
    return Schedule(pool=tuple(files), serial=(), workers=1, slot_gpus=(plain_gpus(gpus),))


def parse_gpus_per_slot(value: int | None, gpus: Sequence[str]) -> int | None:
    """`--gpus-per-slot N`: between 1 and the number of GPUs gpuci uses."""
    if value is None:
        return None
    if value < 1:
        raise UsageError(f"--gpus-per-slot {value}: a slot needs at least one GPU")
    if value > len(gpus):
        have = f"only {len(gpus)} ({','.join(gpus)})" if gpus else "none (give --gpus 0,1)"
        raise UsageError(f"--gpus-per-slot {value}: more GPUs than gpuci uses: {have}")
    return value


def cpu_count() -> int:
    """CPUs this process may use (respects affinity and cgroup pinning where visible)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def files_to_confirm(*runs: ModeRun) -> set[str]:
    """Files a lazy isolated pass must run: some test did not pass in one of `runs`
    (`parallel`, `threads`).

    A file that passed entirely there ran in a fresh interpreter in its own order, with
    others beside it or in several threads: isolated would only take those away.
    """
    ok = (Outcome.PASSED, Outcome.SKIPPED)
    return {t.file for run in runs for t in run.tests if t.outcome not in ok}


def thread_args(threads: int | None) -> tuple[str, ...]:
    """The pytest arguments that run each test in `threads` threads; () for one thread.

    Kept apart from the user's pytest arguments (run.json's `threads`), so that every other
    interpreter of a check, alone-runs included, runs each test once, in one thread.
    """
    return (THREADS_OPTION, str(threads)) if threads else ()
