"""GPUs: which ones a check uses, and the facts about them (and the rest) for the report.

`detect_gpus` answers once per check; every interpreter of that check then sees the same
set, so that what differs between modes is only what the mode is about.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
import threading
from collections.abc import Mapping
from pathlib import Path

from gpuci.model import UsageError
from gpuci.run.proc.seed import hash_seed


def detect_gpus(requested: str | None, environ: Mapping[str, str]) -> tuple[str, ...]:
    """GPUs to spread slots over: --gpus, else CUDA_VISIBLE_DEVICES, else NVML or nvidia-smi."""
    if requested is not None:
        gpus = tuple(g.strip() for g in requested.split(","))
        if not all(re.fullmatch(r"\d+|(GPU|MIG)-[\w-]+", g) for g in gpus):
            raise UsageError(f"--gpus {requested!r}: expected GPU indices or UUIDs, e.g. 0,1")
        return gpus
    visible = environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return tuple(g.strip() for g in visible.split(",") if g.strip())
    with _ASKING:
        return _present_gpus()


# nvidia-smi takes tenths of a second on a GPU host, and a check asks for the same facts
# many times (each mode, each slot's view): each is asked once per process
_ASKING = threading.Lock()


@functools.cache
def _present_gpus() -> tuple[str, ...]:
    """The GPUs this host has: NVML's count, or nvidia-smi's indices."""
    with contextlib.suppress(Exception):  # no NVML library or no driver: ask nvidia-smi
        import pynvml  # type: ignore[import-not-found,unused-ignore]

        pynvml.nvmlInit()
        try:
            return tuple(str(i) for i in range(pynvml.nvmlDeviceGetCount()))
        finally:
            pynvml.nvmlShutdown()
    lines = _nvidia_smi(["--query-gpu=index", "--format=csv,noheader"])
    return tuple(line.strip() for line in lines if line.strip().isdigit())


def _nvidia_smi(args: list[str]) -> list[str]:
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        proc = subprocess.run(
            ["nvidia-smi", *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return proc.stdout.splitlines() if proc.returncode == 0 else []


def describe_environment(environ: Mapping[str, str], python: str) -> dict[str, str]:
    """GPU, driver, CUDA, CuPy, Python and CI facts for the report, and the hash seed
    every interpreter had (reproduce commands carry it: `gpuci.run.proc.seed`)."""
    env: dict[str, str] = {
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "host": platform.node(),
        "hash_seed": hash_seed(),
    }
    # pytest-randomly and pytest-random-order: a file's tests may have run in another order
    # than the file's, which only their ids then name (`gpuci.evidence.reproduce`)
    names = ("pytest", "pytest-randomly", "pytest-random-order")
    for name in (*names, "cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            env["cupy" if name.startswith("cupy") else name] = importlib.metadata.version(name)
    env.update(machine_facts())
    for key, var in (
        ("commit", "CI_COMMIT_SHA"),
        ("branch", "CI_COMMIT_REF_NAME"),
        ("pipeline_url", "CI_PIPELINE_URL"),
        ("job_url", "CI_JOB_URL"),
        ("merge_request", "CI_MERGE_REQUEST_IID"),
    ):
        if environ.get(var):
            env[key] = environ[var]
    if not _python_on_path(python, environ):
        # reproduce commands name it: a bare `python` would run another interpreter
        env["interpreter"] = python
    if "commit" not in env:
        with _ASKING:
            sha = _git_commit()
        if sha:
            env["commit"] = sha
    return env


def machine_facts() -> dict[str, str]:
    """The GPUs' names, driver, memory and CUDA version (nvidia-smi's), asked once."""
    with _ASKING:
        return dict(_machine_facts())


def ask_machine_ahead() -> None:
    """Ask the GPUs and the commit now, in a thread of their own, so that each run written
    later finds them asked (a check starts this beside discovery)."""

    def ask() -> None:
        machine_facts()
        with _ASKING:
            _git_commit()

    threading.Thread(target=ask, name="gpuci-facts", daemon=True).start()


@functools.cache
def _machine_facts() -> tuple[tuple[str, str], ...]:
    env: dict[str, str] = {}
    gpu = _nvidia_smi(["--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"])
    if gpu:
        names = [line.split(",")[0].strip() for line in gpu]
        env["gpu"] = (
            f"{len(names)} x {names[0]}"
            if len(set(names)) == 1 and len(names) > 1
            else ", ".join(names)
        )
        first = [part.strip() for part in gpu[0].split(",")]
        env["driver"] = first[1] if len(first) > 1 else ""
        total = first[2].split()[0] if len(first) > 2 and first[2] else ""
        if total.isdigit():  # "81559 MiB": what a contention's peaks are measured against
            env["gpu_memory_mib"] = total
        header = "\n".join(_nvidia_smi([]))
        match = re.search(r"CUDA Version:\s*([\d.]+)", header)
        if match:
            env["cuda"] = match.group(1)
    return tuple(env.items())


@functools.cache
def _git_commit() -> str:
    """The commit checked out where gpuci runs ('' outside git)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        return subprocess.run(
            ["git", "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
            stdin=subprocess.DEVNULL,
        ).stdout.strip()
    return ""


def _python_on_path(python: str, environ: Mapping[str, str]) -> bool:
    """Whether `python` on the PATH is the interpreter the check runs: the same file in the
    same folder (a venv's python links to its base interpreter, which is another one)."""
    found = shutil.which("python", path=environ.get("PATH", os.defpath))
    ours = shutil.which(python) or python
    if found is None:
        return False
    mine, theirs = Path(ours).absolute(), Path(found).absolute()
    try:
        return mine.parent == theirs.parent and mine.samefile(theirs)
    except OSError:  # gone, or unreadable: name it
        return False
