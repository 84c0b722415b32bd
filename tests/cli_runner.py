"""The real gpuci CLI in a real subprocess, as the end-to-end tests run it."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TypeVar

import pytest

from gpuci.run.proc.discover import child_env
from gpuci.run.proc.interpreter import Interpreters
from gpuci.run.proc.supervisor import Supervisor

Test = TypeVar("Test", bound=Callable[..., object])
# where `nox -s tests` installed pytest-run-parallel apart (tests/conftest.py)
RUN_PARALLEL_SITE = os.environ.get("GPUCI_RUN_PARALLEL_SITE", "")
AUTOLOAD_OFF = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"
PLUGIN_CHOICE = (AUTOLOAD_OFF, "PYTEST_PLUGINS")  # tests/conftest.py's, per test


def needs_run_parallel(test: Test) -> Test:
    """A test whose suites run the threads mode: its interpreters find pytest-run-parallel
    (marked `threads_plugin`); skipped where it is nowhere, but not under CI=true, where CI
    installs it and a missing one is a failure."""
    missing = importlib.util.find_spec("pytest_run_parallel") is None and not RUN_PARALLEL_SITE
    skip = pytest.mark.skipif(
        missing and os.environ.get("CI") != "true",
        reason="pytest-run-parallel is not installed (pip install pytest-run-parallel)",
    )
    return pytest.mark.threads_plugin(skip(test))  # type: ignore[no-any-return]


def clean_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """`base` (default: this process's environment) without what would change gpuci's run:
    a CI job's shard (CI_NODE_*), pytest's own settings, and the GPUs the caller sees. Kept:
    which plugins load (AUTOLOAD_OFF, PYTEST_PLUGINS), which tests/conftest.py sets for each
    test as its marks say."""
    env = {
        k: v
        for k, v in (os.environ if base is None else base).items()
        if k in PLUGIN_CHOICE or not k.startswith(("CI_NODE", "PYTEST_"))
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def as_foreground_job(*command: str) -> list[str]:
    """`command` (a Python's argv) started as a terminal's foreground job has it, SIGINT at
    its default: the tests that Ctrl-C gpuci also run under `nohup` or as a shell's
    background job, where SIGINT is inherited ignored and a Python started so never raises
    KeyboardInterrupt. (No preexec_fn: pytest may run tests in threads.)"""
    reset = (
        "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
        "os.execv(sys.argv[1], sys.argv[1:])"
    )
    return [sys.executable, "-c", reset, *command]


# a sitecustomize.py: each subprocess a Python that loads it starts, one JSON line of its argv
SPY = """
import json, os, sys

def _spy(event, args):
    if event == "subprocess.Popen":
        with open(os.environ["GPUCI_TEST_SPY"], "a", encoding="utf-8") as log:
            log.write(json.dumps([str(arg) for arg in args[1]]) + "\\n")

sys.addaudithook(_spy)
"""


def spied_env(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """This environment, with every Python in it logging the subprocesses it starts (an
    audit hook), and that log (`started_commands`)."""
    spy = write_files(tmp_path / "spy", {"sitecustomize.py": SPY})
    log = tmp_path / "started.jsonl"
    path = os.pathsep.join(p for p in (str(spy), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "GPUCI_TEST_SPY": str(log)}, log


def started_commands(log: Path) -> list[list[str]]:
    """The argv of every subprocess started under `spied_env`, in order."""
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def write_files(root: Path, files: Mapping[str, str]) -> Path:
    """Each of `files` (a path under `root`: its dedented text) written, folders made."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def gpuci(
    *args: str, cwd: Path, env: Mapping[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`python -m gpuci ARGS` in `cwd`, output captured, no standard input."""
    return subprocess.run(
        [sys.executable, "-m", "gpuci", *args],
        cwd=cwd,
        env=clean_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def python_word() -> str:
    """How gpuci's printed commands name this interpreter: `python` where the PATH's
    `python` is this very file in this folder (a venv's `python` beside its `python3`), else
    its quoted path; the rule of gpuci.run.proc.gpus, so a venv that runs `python3` is no
    different from one that runs `python`."""
    found = shutil.which("python")
    mine = Path(sys.executable).absolute()
    if found is not None:
        theirs = Path(found).absolute()
        with contextlib.suppress(OSError):
            if mine.parent == theirs.parent and mine.samefile(theirs):
                return "python"
    return shlex.quote(sys.executable)


def fresh_interpreters(out: Path) -> Interpreters:
    """gpuci's interpreter launcher as a mode builds it: this Python, no pytest arguments,
    a 60 s timeout, writing under `out` (for tests that start interpreters themselves)."""
    return Interpreters(
        out=out,
        python=sys.executable,
        pytest_args=(),
        timeout=60,
        environ=child_env(os.environ),
        clock_zero=time.monotonic(),
        supervisor=Supervisor(),
    )
