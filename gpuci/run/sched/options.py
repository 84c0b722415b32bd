"""Options: what a command asks of the modes it runs, as one frozen value.

The command line (merged with `[tool.gpuci]`) builds it once (`gpuci.options`); the run
stage reads only this, never argparse's `Namespace`. Text the user gave (`--workers`,
`--shard`, `--gpus`) stays text here and is parsed where a mode is planned, as before; what
the check decides as it goes (its run id, the earlier check it replaced, the modes it runs
and why, the suite's own thread count) is set with `dataclasses.replace`, never in place.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpuci.model import Mode
from gpuci.run.sched.modes import Setting


@dataclass(frozen=True, slots=True, kw_only=True)
class ModeOptions:
    """The modes' options: the suite, OUT, and how each mode's interpreters run."""

    paths: tuple[str, ...]
    out: Path
    pytest_args: tuple[str, ...] = ()
    python: str = sys.executable
    workers: str = "auto"  # N or auto, as given
    timeout: float | None = None
    threads: int = 4
    reruns: int = 2
    shard: str | None = None  # I/N, as given (else CI's variables)
    gpus: str | None = None  # 0,1, as given (else every GPU)
    gpus_per_slot: int | None = None
    durations: Path | None = None
    poison: bool = False
    # each effective value and where it came from (run.json's `settings`)
    settings: Mapping[str, Setting] = field(default_factory=dict)
    # the check's own, set as it goes: its run id, the earlier check's results it moved
    # aside (their times order the files), the modes it runs and why
    run_id: str = ""
    history: Path | None = None
    mode_plan: tuple[tuple[Mode, ...], Mapping[Mode, str]] | None = None
    randomly_seed: int | None = None  # the plain run's pytest-randomly seed, once collected
    shuffle_seed: int | None = None  # the shuffled mode's: asked (shuffled:SEED) or drawn
