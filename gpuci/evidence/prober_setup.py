"""Prober setup: the one evidence `Prober` of a check (or of a mode's own reruns), from its
results: the environment of its serial interpreters, slots and device memory admitted by
the screens' peaks, and interpreters started ahead where a start-up is worth hiding.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from gpuci.evidence.admission import EXPENSIVE_START_S, Admission, evidence_slots
from gpuci.evidence.ahead import AHEAD_START_S, Ahead, ahead_limit
from gpuci.evidence.probe import Prober
from gpuci.evidence.reproduce import serial_gpu
from gpuci.model import ModeRun
from gpuci.run.disk.side_outputs import seed_args
from gpuci.run.proc.discover import POISON_ENV, child_env
from gpuci.run.proc.gpumem import narrow_files, screen_peaks
from gpuci.run.proc.interpreter import Interpreters
from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.views import visible_gpus


def start_prober(
    out: Path,
    run: ModeRun,
    *,
    python: str,
    timeout: float | None,
    budget_s: float | None,
    supervisor: Supervisor,
    mode_name: str,
    slots: int = 1,
    start_s: float = 0.0,
) -> Prober:
    """A prober writing journals and logs under `out`, with `run`'s pytest arguments,
    running up to `slots` interpreters at once (each once its GPU has room for its
    file's peak in the check's screens, `out`'s sibling mode directories); where one
    interpreter's start-up takes `start_s` >= EXPENSIVE_START_S, up to the cores."""
    environ = child_env(os.environ)
    environ["GPUCI_MODE"] = mode_name
    if run.poison:  # one environment: the evidence of a poisoned check is poisoned too
        environ[POISON_ENV] = "1"
    interpreters = Interpreters(
        out=out,
        python=python,
        # the plain run's pytest-randomly seed too, as every screen's interpreter had it
        pytest_args=(*run.pytest_args, *seed_args(run.randomly_seed)),
        timeout=timeout,
        environ=environ,
        clock_zero=time.monotonic(),
        supervisor=supervisor,
    )
    total = str(run.environment.get("gpu_memory_mib", ""))
    admission = Admission(
        slots=evidence_slots(slots, start_s, os.cpu_count()),
        capacity_mib=int(total) if total.isdigit() else None,
        devices=max(1, len(run.gpus)),
        peaks=screen_peaks(out.parent),
        # held interpreters (an expensive start-up) see the serial GPUs: no lanes
        narrow=narrow_files(out.parent) if start_s < EXPENSIVE_START_S else set(),
    )
    views = visible_gpus(run.gpus, max(1, len(run.gpus)))
    rootdir = Path(run.rootdir)
    return Prober(
        interpreters,
        rootdir,
        serial_gpu(run),
        budget_s,
        run.poison,
        views=views,
        admission=admission,
        expensive=start_s >= EXPENSIVE_START_S,
        ahead=Ahead(
            interpreters,
            admission,
            views,
            rootdir,
            limit=ahead_limit(admission.slots, os.cpu_count()),
            on=start_s >= AHEAD_START_S,
        ),
    )
