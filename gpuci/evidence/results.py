"""Results: a results directory read back, every mode's shards merged into one run.

`load_mode_results(OUT)` finds `OUT/<mode>/run.json` or `OUT/<mode>/shard-I-of-N/run.json`,
checks that each lies where it belongs, and says which shards are missing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from gpuci.formats import read_mode_run
from gpuci.model import InputError, Mode, ModeRun, Outcome, TestResult, UsageError
from gpuci.run.disk.masking import mask_secrets

RUN_NAME = "run.json"
SHARD_DIR = re.compile(r"shard-(\d+)-of-(\d+)")
# When one mode holds one id twice (overlapping shards), the worse outcome is kept.
OUTCOME_RANK = {
    o: i
    for i, o in enumerate(
        (
            Outcome.NOT_RUN,
            Outcome.SKIPPED,
            Outcome.PASSED,
            Outcome.FAILED,
            Outcome.TIMED_OUT,
            Outcome.CRASHED,
        )
    )
}


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeResults:
    """One mode's results: its shards merged, and which shards were found or missing."""

    run: ModeRun  # shards merged; `shard` is None
    parts: tuple[ModeRun, ...]  # the shards as read (one part when not sharded)
    part_shards: tuple[int, ...]  # each part's shard index (1 when not sharded)
    total_shards: int  # N of "shard I of N"; 1 when not sharded
    missing_shards: tuple[int, ...] = ()


def load_results(out: Path) -> dict[Mode, ModeRun]:
    """Every mode under `out` as one ModeRun, its shards merged."""
    return {mode: results.run for mode, results in load_mode_results(out).items()}


def load_mode_results(out: Path) -> dict[Mode, ModeResults]:
    """Every mode under `out`, shards merged, with the shards found and missing."""
    if not out.is_dir():
        raise UsageError(f"{out}: no such directory; give the --out directory of `gpuci run`")
    found = {
        mode: _load_mode(out / mode.value, mode) for mode in Mode if (out / mode.value).is_dir()
    }
    if not found:
        names = ", ".join(f"{m.value}/" for m in Mode)
        raise UsageError(
            f"{out}: holds no mode directory ({names}); run `gpuci run --mode MODE --out {out}`"
        )
    return found


def mask_results(
    results: Mapping[Mode, ModeResults], secrets: Sequence[str]
) -> dict[Mode, ModeResults]:
    """`results` with every secret masked in the tests' messages, frames and log tails, so
    that what is derived from them (fingerprints normalize digits, groups, notes) is derived
    from masked text: a secret normalized first would no longer match its mask."""
    if not secrets:
        return dict(results)

    def masked(run: ModeRun) -> ModeRun:
        tests = tuple(
            replace(
                t,
                message=mask_secrets(t.message, secrets),
                where=mask_secrets(t.where, secrets),
                log=mask_secrets(t.log, secrets),
            )
            for t in run.tests
        )
        return replace(run, tests=tests)

    return {
        mode: replace(r, run=masked(r.run), parts=tuple(masked(p) for p in r.parts))
        for mode, r in results.items()
    }


def _load_mode(directory: Path, mode: Mode) -> ModeResults:
    shard_dirs: dict[int, Path] = {}
    totals: set[int] = set()
    for entry in directory.iterdir():
        match = SHARD_DIR.fullmatch(entry.name)
        if match and entry.is_dir():
            index, total = int(match[1]), int(match[2])
            if not 1 <= index <= total:
                raise InputError(f"{entry}: shard {index} of {total} does not exist")
            shard_dirs[index] = entry
            totals.add(total)
    single = directory / RUN_NAME
    if single.is_file():
        if shard_dirs:
            raise InputError(
                f"{directory}: holds both {RUN_NAME} and shard directories;"
                " results of two different runs are mixed, remove one of them"
            )
        run = _read_run(single, mode)
        return ModeResults(run=_without_shard(run), parts=(run,), part_shards=(1,), total_shards=1)
    if len(totals) > 1:
        raise InputError(
            f"{directory}: mixes shards of {' and '.join(map(str, sorted(totals)))};"
            " results of two different runs are mixed, keep the shards of one"
        )
    parts = [
        (index, _read_run(path / RUN_NAME, mode, shard=index))
        for index, path in sorted(shard_dirs.items())
        # A shard whose job died before it wrote run.json counts as missing.
        if (path / RUN_NAME).is_file()
    ]
    if not parts:
        raise InputError(
            f"{directory / RUN_NAME}: no such file, and no shard-I-of-N/{RUN_NAME} either;"
            f" rerun `gpuci run --mode {mode.value}` or remove {directory}"
        )
    total = totals.pop()
    have = {index for index, _ in parts}
    return ModeResults(
        run=_merge_shards([run for _, run in parts]),
        parts=tuple(run for _, run in parts),
        part_shards=tuple(index for index, _ in parts),
        total_shards=total,
        missing_shards=tuple(i for i in range(1, total + 1) if i not in have),
    )


def _read_run(path: Path, mode: Mode, *, shard: int | None = None) -> ModeRun:
    run = read_mode_run(path)
    if run.mode is not mode:
        raise InputError(
            f"{path}: says mode {run.mode.value!r} but lies in {mode.value}/;"
            " move it where it belongs"
        )
    if shard is not None and run.shard is not None and run.shard[0] != shard:
        raise InputError(
            f"{path}: says shard {run.shard[0]} of {run.shard[1]} but lies in another shard's"
            " directory; move it where it belongs"
        )
    return run


def _without_shard(run: ModeRun) -> ModeRun:
    return replace(run, shard=None) if run.shard is not None else run


def _merge_shards(parts: Sequence[ModeRun]) -> ModeRun:
    """One ModeRun for all shards: files and tests united, wall time the longest shard's."""
    first = parts[0]
    tests: dict[str, TestResult] = {}
    for part in parts:
        for test in part.tests:
            keep_worse(tests, test)
    gpus = dict.fromkeys(g for part in parts for g in part.gpus)
    started = [p.started_at for p in parts if p.started_at]
    return ModeRun(
        mode=first.mode,
        command=first.command,
        pytest_args=first.pytest_args,
        randomly_seed=first.randomly_seed,
        threads=first.threads,
        rootdir=first.rootdir,
        workdir=first.workdir,
        workers=max(p.workers for p in parts),
        gpus=tuple(gpus),
        gpus_per_slot=first.gpus_per_slot,
        shard=None,
        timeout=first.timeout,
        reruns=first.reruns,
        wall_s=max(p.wall_s for p in parts),
        started_at=min(started) if started else "",
        interrupted=any(p.interrupted for p in parts),
        environment=first.environment,
        settings=first.settings,
        files=tuple(f for part in parts for f in part.files),
        tests=tuple(tests.values()),
    )


def keep_worse(tests: dict[str, TestResult], test: TestResult) -> None:
    held = tests.get(test.id)
    if held is None or OUTCOME_RANK[test.outcome] > OUTCOME_RANK[held.outcome]:
        tests[test.id] = test
