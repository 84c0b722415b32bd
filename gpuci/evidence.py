"""Evidence: what gpuci runs after the main passes to tell a polluted test from a broken one.

Today that is the alone-reruns: every test that did not pass runs by itself in a fresh
interpreter, `reruns` times, one at a time, with the same environment as the mode.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import TextIO

from gpuci.formats import mode_run_to_json, write_json_atomic
from gpuci.interpreter import EXIT_ID, Interpreters, Launch, pytest_target
from gpuci.model import NOT_PASSING, ModeRun, Outcome, TestResult, printable
from gpuci.run import Interrupted, RunOptions, start_interpreters
from gpuci.supervisor import Supervisor


def rerun_alone(
    interpreters: Interpreters, rootdir: Path, test: TestResult, gpu: str | None
) -> Outcome:
    """Run one test by itself in a fresh interpreter."""
    attempt = interpreters.run(
        Launch(
            key=test.file,
            ids=(test.id,),
            targets=(pytest_target(rootdir, test.file),),
            slot=0,
            gpu=gpu,
            attempt=0,
            junit=None,
            label=f"rerun alone: {test.id}",
        )
    )
    for rerun in attempt.results:
        if rerun.id == test.id:
            return rerun.outcome
    return Outcome.NOT_RUN


def is_suspect(test: TestResult) -> bool:
    """A real test (not a pseudo test for an interpreter's death) that did not pass."""
    return test.outcome in NOT_PASSING and not test.id.endswith(EXIT_ID) and "::" in test.id


def rerun_mode_suspects(
    run: ModeRun,
    options: RunOptions,
    *,
    gpu: str | None,
    progress: TextIO = sys.stderr,
) -> ModeRun:
    """Rerun every test of a mode that did not pass alone, and rewrite its `run.json`."""
    suspects = [t for t in run.tests if is_suspect(t)]
    if not suspects or options.reruns == 0:
        return run
    print(
        f"gpuci: {options.mode.value}: rerunning {len(suspects)} test(s) alone,"
        f" {options.reruns}x each",
        file=progress,
        flush=True,
    )
    supervisor = Supervisor()
    interpreters = start_interpreters(options, options.out, time.monotonic(), supervisor)
    rootdir = Path(run.rootdir)
    reruns: dict[str, tuple[Outcome, ...]] = {}
    try:
        with supervisor.handling_signals():
            for suspect in suspects:
                outcomes: list[Outcome] = []
                for _ in range(options.reruns):
                    if supervisor.stopping.is_set():
                        break
                    outcomes.append(rerun_alone(interpreters, rootdir, suspect, gpu))
                reruns[suspect.id] = tuple(outcomes)
                print(
                    f"gpuci:   {printable(suspect.id)}: {suspect.outcome.value},"
                    f" alone: {', '.join(o.value for o in outcomes) or '-'}",
                    file=progress,
                    flush=True,
                )
    finally:
        interpreters.close()
    interrupted = supervisor.stopping.is_set()
    run = dataclasses.replace(
        run,
        interrupted=run.interrupted or interrupted,
        tests=tuple(
            dataclasses.replace(t, reruns=reruns[t.id]) if t.id in reruns else t for t in run.tests
        ),
    )
    write_json_atomic(options.out / "run.json", mode_run_to_json(run))
    if interrupted:
        raise Interrupted(f"interrupted; what finished is in {options.out}")
    return run
