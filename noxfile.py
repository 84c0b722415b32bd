"""Sessions: gpuci's own checks, the GPU suite in each mode, the verdict, demos, benchmarks."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_venv = "yes"
# uv creates the sessions' environments and installs into them where it is installed (CI
# installs it beside nox: .ci/run), several times quicker than pip on a cold cache; pip and
# virtualenv where it is not, so `nox` alone still works
nox.options.default_venv_backend = "uv|virtualenv"
# and compiles what it installs, as pip does: the tests' interpreters may write no bytecode
# (PYTHONDONTWRITEBYTECODE), and every one of their thousands would compile pytest again
os.environ.setdefault("UV_COMPILE_BYTECODE", "1")

ROOT = Path(__file__).parent
GPU_OUT = "out/gpu"
# CuPy's wheel is per CUDA major version; a GPU runner picks its own.
CUPY = os.environ.get("GPUCI_CUPY_PACKAGE", "cupy-cuda12x")
# playwright drives Debian's Chromium (never its own download); comrak is GitLab's own
# Markdown engine, to check the MR comment renders with no links, images or mentions.
# NumPy: the GPU suite's references (collected, and skipped, even where no GPU is).
RUN_PARALLEL = "pytest-run-parallel>=0.10"  # runs each test in threads: the threads mode
# tests/test_plain_run.py: the plain run's seed is every interpreter's (apart, as above:
# loaded by every pytest that sees it, it would shuffle every suite of gpuci's tests)
RANDOMLY = "pytest-randomly==3.16.0"
TEST_DEPS = [
    "pytest>=7.4",
    "check-jsonschema>=0.29",
    "playwright>=1.45",
    "comrak==0.0.16",
    "numpy",
    "pytest-cov",  # tests/test_side_outputs.py: --cov is the plain run's
    "pytest-xdist>=3.6",  # the tests spread over the cores (--dist loadgroup)
    # the release's build, as the tag pipeline's release:build runs it in the tests
    "hatchling>=1.27",
    "build>=1.2",
    # tests/release_wheel.py builds the release with pip and gives a job's Python this pip:
    # a uv-made environment has none of its own
    "pip",
]


def has_gpu() -> bool:
    """Whether nvidia-smi sees a GPU here (decides what the GPU sessions install)."""
    if shutil.which("nvidia-smi") is None:
        return False
    probe = subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False)
    return probe.returncode == 0 and b"GPU" in probe.stdout


def install_gpuci(session: nox.Session, *extra: str, gpu: bool = False) -> None:
    """gpuci itself (and `extra`), and CuPy where there is a GPU to use it (a --no-venv run
    keeps its own)."""
    if isinstance(session.virtualenv, nox.virtualenv.PassthroughEnv):
        return
    session.install("-e", ".", *extra)
    if gpu:  # the GPU suite's references need NumPy; CuPy only where it can run
        session.install("numpy", *([CUPY] if has_gpu() else []))


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and format) and mypy --strict."""
    session.install("ruff>=0.6", "mypy>=1.10", "-e", ".", "types-requests")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


@nox.session
def tests(session: nox.Session) -> None:
    """gpuci's own tests: unit, end-to-end, publisher, browser, pipeline (no GPU needed)."""
    # gpuci's own build backend is among the tests' dependencies: installed first (with
    # `editables`, which its editable builds import), it builds the editable install in
    # place, where pip's build isolation would fetch and install another copy in a
    # throwaway environment first, at every install
    session.install(*TEST_DEPS, "editables")
    session.install("--no-build-isolation", "-e", ".")
    # pytest-run-parallel goes into a folder of its own, on the PYTHONPATH of the children of
    # the tests marked `threads_plugin` only (tests/conftest.py): loaded by every pytest that
    # sees it (NumPy with it), it would cost each of the suites' thousands of interpreters
    # 0.15 s (a quarter of test_culprits' time); gpuci's own run is not threaded
    # (absolute: the children run elsewhere; not create_tmp(), whose TMPDIR would put the
    # tests' suites under this repository, inside its pytest configuration)
    site = Path(session.virtualenv.location).absolute() / "run-parallel"
    session.install("--no-deps", "--upgrade", "--target", str(site), RUN_PARALLEL)
    randomly = Path(session.virtualenv.location).absolute() / "randomly"
    session.install("--no-deps", "--upgrade", "--target", str(randomly), RANDOMLY)
    env = {
        "GPUCI_FILE_TIMES": "1",
        "GPUCI_RUN_PARALLEL_SITE": str(site),
        "GPUCI_RANDOMLY_SITE": str(randomly),
    }
    # A line per test file with its time and CPU seconds: the whole run takes a while
    # (README says how long). One worker per core, each taking the next test as it frees,
    # the slow ones first, so that neither waits long for the other's last (each test builds
    # its suites in its own tmp_path); the tests that share a fixture of their file's (a
    # check run once for several tests) go to one worker together (tests/conftest.py), so no
    # long file holds up the end. `-- -n 0` runs them in this one process. The slowest ten
    # are listed at the end, the quick lane's too.
    spread = ["-n", "auto", "--dist", "loadgroup", "--durations", "10"]
    session.run("pytest", "-p", "no:run-parallel", *spread, *session.posargs, env=env)


def _gpu_mode(session: nox.Session, mode: str, *extra: str) -> None:
    install_gpuci(session, *extra, gpu=True)
    session.run("gpuci", "run", "tests/gpu", "--mode", mode, "--out", GPU_OUT, *session.posargs)


@nox.session
def gpu_isolated(session: nox.Session) -> None:
    """The GPU suite, one fresh interpreter per file, one at a time."""
    _gpu_mode(session, "isolated")


@nox.session
def gpu_parallel(session: nox.Session) -> None:
    """The GPU suite, one fresh interpreter per file, several at once on the GPU(s)."""
    _gpu_mode(session, "parallel")


@nox.session
def gpu_suite(session: nox.Session) -> None:
    """The GPU suite in one interpreter, as a plain pytest run would."""
    _gpu_mode(session, "suite")


@nox.session
def gpu_threads(session: nox.Session) -> None:
    """The GPU suite, one fresh interpreter per file, each test in several threads at once."""
    _gpu_mode(session, "threads", RUN_PARALLEL)


@nox.session
def gpu_explain(session: nox.Session) -> None:
    """The evidence of the GPU modes' results: alone-runs, culprits, diagnoses (needs a GPU)."""
    install_gpuci(session, gpu=True)
    # a failing verdict is the verdict job's to report: evidence gathered is success here
    session.run("gpuci", "explain", GPU_OUT, *session.posargs, success_codes=[0, 1])


@nox.session
def gpu_verdict(session: nox.Session) -> None:
    """Merge, diff and report the GPU modes' results; publish inside an MR pipeline."""
    install_gpuci(session)
    session.run("gpuci", "merge", GPU_OUT, "-o", f"{GPU_OUT}/junit.xml")
    diff = ["gpuci", "diff", GPU_OUT, *session.posargs]
    session.run(*diff, success_codes=[0, 1])
    session.run("gpuci", "report", f"{GPU_OUT}/verdict.json")
    if os.environ.get("CI_MERGE_REQUEST_IID"):
        session.run("gpuci", "publish", f"{GPU_OUT}/comment.md")
    session.run(*diff, "-o", f"{GPU_OUT}/verdict.json", silent=True)  # the verdict's exit code


@nox.session
def demo(session: nox.Session) -> None:
    """`gpuci check` on the bundled polluted suite (its CuPy twin where a GPU is present)."""
    gpu = has_gpu()
    install_gpuci(session, gpu=gpu)
    suite = "examples/gpu_polluted" if gpu else "examples/polluted_suite"
    out = ROOT / "out" / "demo"
    state = out / "state"
    shutil.rmtree(out, ignore_errors=True)
    state.mkdir(parents=True)
    env = {"FAKEGPU_DIR": str(state), "GPU_POLLUTED_STATE": str(state)}
    # The planted bugs fail the verdict on purpose: exit code 1 is the expected answer.
    # The default evidence budget follows the suspects, so every culprit is named.
    session.run(
        "gpuci",
        "check",
        suite,
        "--out",
        str(out),
        "--timeout",
        "5",
        *session.posargs,
        env=env,
        success_codes=[0, 1],
    )
    session.log(
        f"the failing verdict above is planted: every bug in {suite} is there on purpose,"
        f" and {suite}/expected.json lists the category each test should get"
    )
    session.log(f"report: {out / 'report.html'}")
    session.log(f"MR comment: {out / 'comment.md'}")


@nox.session
def bench(session: nox.Session) -> None:
    """gpuci's overhead against bare pytest loops and pytest-xdist, on a generated suite."""
    session.install("-e", ".", "pytest-xdist")
    session.run("python", "benchmarks/bench_runner.py", *session.posargs)


@nox.session
def bench_kernels(session: nox.Session) -> None:
    """The CuPy kernels against the obvious CuPy compositions (needs a GPU)."""
    install_gpuci(session, gpu=True)
    session.run("python", "benchmarks/bench_kernels.py", *session.posargs)
