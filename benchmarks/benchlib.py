"""What every benchmark section shares: timed child processes, their samples, printed commands.

The sections (runners.py, check_bench.py, diff_bench.py, profile_bench.py) import this
module; it imports none of them.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

TESTS_DIR = "tests"  # inside the generated suite; every command runs from the suite root
COMMAND_TIMEOUT_S = 900.0  # the most one measured command may take before it counts as hung
# Variables that would change what the children do: extra pytest options or plugins, and
# GitLab's `parallel:` index, which would make gpuci run one shard only.
CHILD_ENV_DROP = ("PYTEST_ADDOPTS", "PYTEST_PLUGINS", "CI_NODE_INDEX", "CI_NODE_TOTAL")


class BenchError(Exception):
    """A command the benchmark depends on failed; the message says which and why."""


@dataclass(frozen=True, slots=True)
class Measure:
    """One child process: wall time, exit code, and its rusage (with its descendants)."""

    wall_s: float
    exit_code: int
    cpu_s: float  # user + system, the child and every descendant it waited for
    max_rss_mib: float  # the largest single process among them


@dataclass(slots=True)
class Samples:
    """Repeated measurements of one command."""

    command: str
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)

    def add(self, measure: Measure) -> None:
        """Keep one repetition."""
        self.walls.append(measure.wall_s)
        self.cpus.append(measure.cpu_s)

    @property
    def wall(self) -> float:
        """The median wall time."""
        return statistics.median(self.walls)

    @property
    def cpu(self) -> float:
        """The median CPU time."""
        return statistics.median(self.cpus)


# --- processes -------------------------------------------------------------------------


def child_env() -> dict[str, str]:
    """The environment every measured command gets: ours, less what would skew it."""
    env = {k: v for k, v in os.environ.items() if k not in CHILD_ENV_DROP}
    env["PYTHONUNBUFFERED"] = "1"  # gpuci sets it for its children; the bare runs get it too
    return env


def run_timed(cmd: Sequence[str], *, cwd: Path, log: Path, allow: Sequence[int] = (0,)) -> Measure:
    """Run `cmd` to its end; wait4 gives this child's own rusage, not every child's so far."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("wb") as sink:
        start = time.perf_counter()
        proc = subprocess.Popen(  # reaped by wait4 below, so no context manager
            list(cmd),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=child_env(),
            start_new_session=True,
        )
        # A hung command must not hang the benchmark: a timer ends its process group,
        # and the blocking wait4 (no polling, so no added latency) returns.
        expired = threading.Event()
        timer = threading.Timer(COMMAND_TIMEOUT_S, _kill_group, (proc.pid, expired))
        timer.start()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - start
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    if expired.is_set():
        raise BenchError(f"{COMMAND_TIMEOUT_S:g}s passed, killed: {shlex.join(cmd)} (see {log})")
    if code not in allow:
        tail = log.read_text(encoding="utf-8", errors="replace")[-2000:]
        raise BenchError(f"exit code {code} from: {shlex.join(cmd)}\n--- {log} (tail):\n{tail}")
    # ru_maxrss is in KiB on Linux (bytes on macOS)
    rss_kib = usage.ru_maxrss / (1024 if sys.platform == "darwin" else 1)
    return Measure(wall, code, usage.ru_utime + usage.ru_stime, rss_kib / 1024)


def _kill_group(pid: int, expired: threading.Event) -> None:
    expired.set()
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def shown(cmd: Sequence[str], cwd: Path) -> str:
    """A command as one pastes it: `cd DIR && ...`, with `python` for our interpreter."""
    words = ["python" if w == sys.executable else w for w in cmd]
    return f"cd {shlex.quote(str(cwd))} && {shlex.join(words)}"


# --- output ----------------------------------------------------------------------------


def say(text: str) -> None:
    """Progress, on stderr so the table on stdout stays clean."""
    print(f"bench: {text}", file=sys.stderr, flush=True)


def verdict_word(ratio: float, target: float) -> str:
    """`ok` when a ratio is within its target, else `MISSED`."""
    return "ok" if ratio <= target else "MISSED"


def append_plants(tests: Path, plants: Mapping[str, str]) -> list[str]:
    """Append each planted text to its file under `tests`, unless a plant is there already
    (a `test_plant_` test); the files changed."""
    changed = []
    for name, text in sorted(plants.items()):
        path = tests / name
        if "test_plant_" in path.read_text(encoding="utf-8"):
            continue  # planted already
        with path.open("a", encoding="utf-8") as f:
            f.write(text)
        changed.append(name)
    return changed
