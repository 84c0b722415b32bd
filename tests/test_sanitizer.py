"""compute-sanitizer on roots: memcheck's report parsed, and `gpuci check` running it.

The parser reads outputs shaped like real ones (tests/data/sanitizer/: today's one-line
host frames, older two-line frames, an API error behind a benign one, no error, the
tool's own error). End to end, a fake `compute-sanitizer` on PATH runs the wrapped
interpreter and prints one of them; a fake that hangs shows the timeout.
"""

from __future__ import annotations

import json
import os
import stat
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci

from gpuci.evidence import sanitizer
from gpuci.evidence.classify import Classified
from gpuci.evidence.kinds.engine import gather_evidence
from gpuci.evidence.memcheck import (
    MAX_CHARS,
    MAX_LINES,
    Memcheck,
    cap_lines,
    is_cuda_fault,
    parse_memcheck,
    shorten_signature,
)
from gpuci.evidence.sanitizer import (
    choose_sanitizer,
    describe,
    find_sanitizer,
    sanitizer_roots,
)
from gpuci.model import Category, Mode, Outcome, TestEvidence, TestResult, UsageError
from gpuci.run.proc.endings import EXIT_ID

DATA = Path(__file__).parent / "data" / "sanitizer"
ROOT_ID = "test_cuda.py::test_scatter_rows"
VICTIMS = ("test_cuda.py::test_after_poison_sum", "test_cuda.py::test_after_poison_matmul")
PLAIN = "test_plain.py::test_fails_plainly"

# memcheck on a real H100 (tests/data/sanitizer/README.md): the kernel, the thread, the
# address, CuPy's launch and the test's own frame; no driver, interpreter or pytest frames
H100_SCATTER = """\
Invalid __global__ write of size 4 bytes
at scatter+0x120
by thread (1,0,0) in block (0,0,0)
Access to 0x7fd188800400 is out of bounds
and is 17,007,903,233 bytes after the nearest allocation at 0x7fcd92c00000 of size 512 bytes
Host Frame: __pyx_f_13cupy_backends_4cuda_3api_6driver_launchKernel(…) in driver.cpp:8369 \
[0xda7f] in driver.cpython-312-x86_64-linux-gnu.so
Host Frame: __pyx_f_4cupy_4cuda_8function__launch(…) [clone .constprop.124] in \
function.cpp:10804 [0x16fd4] in function.cpython-312-x86_64-linux-gnu.so
Host Frame: __pyx_pw_4cupy_4cuda_8function_8Function_3__call__(_object*, _object*, _object*) \
in function.cpp:11120 [0x1a148] in function.cpython-312-x86_64-linux-gnu.so
Host Frame: __pyx_pw_4cupy_5_core_3raw_9RawKernel_5__call__(_object*, _object*, _object*) in \
raw.cpp:3945 [0xbdda] in raw.cpython-312-x86_64-linux-gnu.so
Host Frame: test_scatter_rows in test_write_past_end.py:32
ERROR SUMMARY: 260 errors"""

EXPECTED = {
    "h100_scatter_rows.txt": (Outcome.FAILED, H100_SCATTER),
    "h100_passed.txt": (
        Outcome.PASSED,
        "no memcheck error (ERROR SUMMARY: 0 errors); the test passed under compute-sanitizer",
    ),
    "h100_host_segfault.txt": (
        Outcome.CRASHED,
        "Error: process didn't terminate successfully\n"
        "The application may have hit an error when dereferencing Unified Memory from the host."
        " Please rerun the application under cuda-gdb or a host debugger to catch host side"
        " errors.\n"
        "ERROR SUMMARY: 0 errors",
    ),
    "global_write_cupy.txt": (
        Outcome.FAILED,
        """\
Invalid __global__ write of size 4 bytes
at scatter+0xd0
by thread (1,0,0) in block (0,0,0)
Address 0x7f1c02000100 is out of bounds
and is 4,294,901,504 bytes after the nearest allocation at 0x7f1b02000000 of size 65,536 bytes
Host Frame: __pyx_f_13cupy_backends_4cuda_3api_6driver_launchKernel(…) in driver.cpp:7245 \
[0x1c3a2] in driver.cpython-312-x86_64-linux-gnu.so
Host Frame: __pyx_f_4cupy_4cuda_8function__launch(…) in function.cpp:6113 [0x13e88] \
in function.cpython-312-x86_64-linux-gnu.so
Host Frame: __pyx_pw_4cupy_4cuda_8function_8Function_3__call__(…) in function.cpp:7380 \
[0x15a41] in function.cpython-312-x86_64-linux-gnu.so
Host Frame: __pyx_pw_4cupy_5_core_3raw_9RawKernel_3__call__(…) in raw.cpp:4420 [0x2a7c1] \
in raw.cpython-312-x86_64-linux-gnu.so
ERROR SUMMARY: 257 errors""",
    ),
    "api_error_700.txt": (
        Outcome.FAILED,
        """\
Program hit cudaErrorIllegalAddress (error 700) due to "an illegal memory access was \
encountered" on CUDA API call to cudaMemcpy.
Host Frame: cudaMemcpy [0x8a1f2] in runtime.cpython-311-x86_64-linux-gnu.so
Host Frame: __pyx_f_13cupy_backends_4cuda_3api_7runtime_memcpy(…) in runtime.cpp:16231 \
[0x3f0a1] in runtime.cpython-311-x86_64-linux-gnu.so
ERROR SUMMARY: 2 errors""",
    ),
    "legacy_two_line_frames.txt": (
        Outcome.FAILED,
        """\
Invalid __global__ read of size 8 bytes
at 0x1b0 in /builds/team/project/kernels/softmax.cu:41:softmax_rows(const double *, double *, \
int, int)
by thread (31,0,0) in block (7,0,0)
Address 0x7f3a4e2003f8 is misaligned
Host Frame: cupy_backends/cuda/api/driver.cpp:7245:\
__pyx_f_13cupy_backends_4cuda_3api_6driver_launchKernel(…) [0x1c3a2] in \
/opt/conda/lib/python3.10/site-packages/cupy_backends/cuda/api/\
driver.cpython-310-x86_64-linux-gnu.so
ERROR SUMMARY: 1 error""",
    ),
}


def _describe(output: str, outcome: Outcome = Outcome.FAILED) -> str:
    report = parse_memcheck(output)
    return describe(report, outcome, timed_out=False, limit="300s", where="evidence/logs/x.log")


# -- the parser ------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_recorded_or_composed_report_gives_its_first_error(name: str) -> None:
    outcome, expected = EXPECTED[name]
    text = _describe((DATA / name).read_text(encoding="utf-8"), outcome)
    assert text == expected
    assert "=========" not in text
    assert len(text) <= MAX_CHARS and len(text.splitlines()) <= MAX_LINES


def test_driver_runtime_python_and_pytest_frames_are_left_out() -> None:
    for name in ("h100_scatter_rows.txt", "global_write_cupy.txt"):
        text = _describe((DATA / name).read_text(encoding="utf-8"))
        for noise in ("libcuda", "libpython", "_PyEval", "Py_RunMain", "libc.so", "_start",
                      "pytest_pyfunc_call", "_multicall", "runpy", "__main__"):  # fmt: skip
            assert noise not in text, name
        # the first error, not the second (thread 2) nor the API error after them
        assert "thread (1,0,0)" in text and "thread (2,0,0)" not in text
        assert "cudaErrorLaunchFailure" not in text


def test_the_tests_own_python_frames_are_kept_up_to_the_test_function() -> None:
    frames = [
        "_PyEval_EvalFrameDefault [0x1d710e] in python",
        "__pyx_f_4cupy_4cuda_8function__launch(long) in function.cpp:10804 [0x16fd4] in f.so",
        "_stage in helpers.py:12",
        "squared_norms in test_workspace_race.py:44",
        "test_squared_norms_shared_workspace in test_workspace_race.py:55",
        "pytest_pyfunc_call in python.py:167",
        "_multicall in _callers.py:121",
    ]
    output = "========= Invalid __global__ read of size 4 bytes\n" + "".join(
        f"=========         Host Frame: {f}\n" for f in frames
    )
    assert _describe(output).splitlines()[1:] == [f"Host Frame: {f}" for f in frames[1:5]]
    # no test function among them (a fixture faulted): the innermost Python frames only
    no_test = output.replace("test_squared_norms_shared_workspace in test_workspace_race", "x in y")
    no_test = no_test.replace("squared_norms in test_workspace_race", "z in y")
    assert [line for line in _describe(no_test).splitlines() if ".py:" in line] == [
        "Host Frame: _stage in helpers.py:12",
        "Host Frame: z in y.py:44",
    ]


def test_pytest_banners_with_nine_equals_are_not_memcheck_lines() -> None:
    output = textwrap.dedent("""\
        ========= 1 failed in 5.21s =========
        ==================== 3 passed ====================
        ========= ERROR SUMMARY: 0 errors
    """)
    assert parse_memcheck(output) == Memcheck(block=(), errors=0)


def test_errors_of_several_processes_add_up_and_unprinted_ones_do_not_count() -> None:
    output = textwrap.dedent("""\
        ========= ERROR SUMMARY: 1 error
        ========= ERROR SUMMARY: 3 errors
        ========= ERROR SUMMARY: 2 errors were not printed. Use --print-limit option
    """)
    assert parse_memcheck(output).errors == 4


def test_output_without_a_report_or_with_a_timeout_says_so() -> None:
    assert _describe("Traceback ...\nModuleNotFoundError: x\n", Outcome.NOT_RUN) == (
        "no report from compute-sanitizer (the test not-run); its output is in evidence/logs/x.log"
    )
    nothing, limit = Memcheck(block=(), errors=None), "12s (the evidence budget left)"
    assert describe(nothing, Outcome.NOT_RUN, timed_out=True, limit=limit, where="x") == (
        "compute-sanitizer did not finish within 12s (the evidence budget left) (no progress);"
        " gpuci killed it"
    )
    counted = describe(Memcheck(block=(), errors=3), Outcome.FAILED, timed_out=False, limit="9s",
                       where="evidence/logs/t.py.log")  # fmt: skip
    assert counted == "memcheck counted 3 error(s) but printed none; see evidence/logs/t.py.log"


def test_a_timeout_after_the_error_keeps_the_error_and_says_so() -> None:
    block = tuple(f"Host Frame: f{i}() " + "x" * 200 for i in range(30))
    text = describe(Memcheck(block=block, errors=1), Outcome.TIMED_OUT, timed_out=True,
                    limit="300s", where="x")  # fmt: skip
    lines = text.splitlines()
    assert lines[0].startswith("Host Frame: f0()")
    assert lines[-2:] == ["ERROR SUMMARY: 1 error", "(then no progress for 300s: gpuci killed it)"]
    assert len(text) <= MAX_CHARS and len(lines) <= MAX_LINES


def test_a_flood_of_huge_frames_stays_bounded() -> None:
    error = "========= Invalid __global__ write of size 4 bytes\n"
    frame = "=========         Host Frame: kernel<" + "int, " * 200 + "float>(x) in a.so\n"
    assert _describe(error + frame).splitlines()[1] == "Host Frame: kernel<…>(x) in a.so"
    huge = frame.replace("int, " * 200, "int, " * 20000)
    # this process's CPU time, not the wall: a loaded machine does not fail it, and a
    # regular expression that backtracks over the huge frames still does
    started = time.process_time()
    text = _describe(error + huge * 200)
    assert time.process_time() - started < 5
    assert len(text) <= MAX_CHARS and len(text.splitlines()) <= MAX_LINES


def test_signatures_are_shortened_not_mangled() -> None:
    assert shorten_signature("f(int, int) in a.cu:3") == "f(int, int) in a.cu:3"
    long = "void cub::Kernel<cub::Policy<short, unsigned int, thrust::minimum<void>>>(T2, T3)"
    assert shorten_signature(long) == "void cub::Kernel<…>(T2, T3)"
    assert shorten_signature("a < b (" + "x" * 50) == "a < b (" + "x" * 50  # unclosed: kept


def test_cap_lines_counts_lines_and_characters() -> None:
    assert cap_lines(["a"] * 40) == "\n".join(["a"] * MAX_LINES)
    capped = cap_lines(["x" * 1000] * 10)
    assert len(capped) <= MAX_CHARS and capped.endswith("…")


@pytest.mark.parametrize(
    ("message", "fault"),
    [
        ("CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access was encountered", 1),
        ("CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access", 1),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", 1),
        ("CUDARuntimeError: cudaErrorLaunchFailure: unspecified launch failure", 1),
        ("RuntimeError: CUDA error: misaligned address", 1),
        ("CUDA_ERROR_LAUNCH_FAILED", 1),
        ("cudaerrorillegaladdress", 1),
        ("OutOfMemoryError: Out of memory allocating 1,024 bytes", 0),
        ("AssertionError: assert 1 == 2", 0),
        ("KeyError: 'scale'", 0),
    ],
)
def test_cuda_faults_are_recognised_in_failure_messages(message: str, fault: int) -> None:
    assert is_cuda_fault(message) is bool(fault)


# -- finding the tool and choosing the roots -------------------------------------------


def _executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_the_tool_is_found_on_path_then_under_cuda_home(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sanitizer, "CUDA_DEFAULT", tmp_path / "none" / "compute-sanitizer")
    on_path = _executable(tmp_path / "bin" / "compute-sanitizer")
    home = _executable(tmp_path / "cuda" / "bin" / "compute-sanitizer")
    empty = str(tmp_path / "empty")
    assert find_sanitizer({"PATH": f"{empty}:{on_path.parent}"}) == str(on_path)
    assert find_sanitizer({"PATH": empty, "CUDA_HOME": str(tmp_path / "cuda")}) == str(home)
    assert find_sanitizer({"PATH": empty}) is None
    default = _executable(tmp_path / "usr-local-cuda" / "compute-sanitizer")
    monkeypatch.setattr(sanitizer, "CUDA_DEFAULT", default)
    assert find_sanitizer({"PATH": empty}) == str(default)


def test_sanitize_on_without_the_tool_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sanitizer, "CUDA_DEFAULT", tmp_path / "none")
    nothing = {"PATH": str(tmp_path)}
    with pytest.raises(UsageError, match="--sanitize: compute-sanitizer is not on PATH"):
        choose_sanitizer(True, nothing)
    assert choose_sanitizer(None, nothing) is None  # auto: off, no error
    tool = _executable(tmp_path / "compute-sanitizer")
    assert choose_sanitizer(False, nothing) is None
    assert choose_sanitizer(None, nothing) == str(tool)


def _classified(
    test_id: str, category: Category, *outcomes: tuple[Outcome, str] | tuple[Outcome, str, str]
) -> Classified:
    """A classified test; each outcome is (outcome, message) or (outcome, message, log)."""
    file = test_id.partition("::")[0]
    results = {
        mode: TestResult(id=test_id, file=file, outcome=outcome, message=message, log="".join(log))
        for mode, (outcome, message, *log) in zip(Mode, outcomes, strict=False)
    }
    return Classified(
        id=test_id,
        category=category,
        outcomes={m: r.outcome for m, r in results.items()},
        reruns=(),
        results=results,
    )


def test_roots_are_failing_or_culprit_tests_with_a_cuda_fault_not_victims() -> None:
    fault = "CUDARuntimeError: cudaErrorIllegalAddress: an illegal memory access was encountered"
    sticky = "CUDADriverError: CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access"
    tests = [
        _classified("a.py::test_root", Category.FAILED, (Outcome.FAILED, fault)),
        _classified("a.py::test_victim", Category.ORDER_DEPENDENT, (Outcome.FAILED, sticky)),
        _classified("a.py::test_plain", Category.FAILED, (Outcome.FAILED, "assert 1 == 2")),
        _classified("b.py::test_segv", Category.CRASHED, (Outcome.CRASHED, "killed by SIGSEGV")),
        _classified(f"b.py::{EXIT_ID}", Category.CRASHED, (Outcome.CRASHED, "died at exit")),
        # flaky itself, but the search named it: a root; its CUDA fault was in suite
        _classified(
            "c.py::test_culprit", Category.FLAKY, (Outcome.PASSED, ""), (Outcome.FAILED, fault)
        ),
        _classified("c.py::test_named_clean", Category.PASSED, (Outcome.PASSED, "")),
        _classified("d.py::test_victim_of_file", Category.CONCURRENCY, (Outcome.FAILED, fault)),
    ]
    named = {
        "a.py::test_victim": ("c.py::test_culprit",),
        "x.py::test_other": ("c.py::test_named_clean",),
        "d.py::test_victim_of_file": ("d.py",),  # a concurrency culprit is a file
    }
    found = {i: TestEvidence(id=i, culprits=c) for i, c in named.items()}
    roots = sanitizer_roots({t.id: t for t in tests}, found)
    assert roots == ["a.py::test_root", "b.py::test_segv", "c.py::test_culprit"]


def test_a_plain_sigkill_is_no_cuda_fault_unless_its_log_says_so() -> None:
    killed = "interpreter died while this test ran: killed by SIGKILL (signal 9)"
    tests = [
        _classified("a.py::test_oom_killed", Category.CRASHED, (Outcome.CRASHED, killed)),
        _classified("a.py::test_exit", Category.CRASHED, (Outcome.CRASHED, "exit code 3")),
        _classified(
            "b.py::test_sticky",
            Category.CRASHED,
            (Outcome.CRASHED, killed, "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access"),
        ),
    ]
    assert sanitizer_roots({t.id: t for t in tests}, {}) == ["b.py::test_sticky"]


# -- end to end: gpuci check with a fake compute-sanitizer on PATH ---------------------

SUITE = {
    "pytest.ini": "[pytest]\n",
    # the root poisons "the context": every later test of its interpreter fails
    "test_cuda.py": """
        STATE = {"poisoned": False}
        STICKY = "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered"

        def test_scatter_rows():
            STATE["poisoned"] = True
            raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")

        def test_after_poison_sum():
            if STATE["poisoned"]:
                raise RuntimeError(STICKY)

        def test_after_poison_matmul():
            if STATE["poisoned"]:
                raise RuntimeError(STICKY)
    """,
    "test_plain.py": """
        def test_fails_plainly():
            assert 1 == 2, "not a CUDA fault"

        def test_ok():
            pass
    """,
}

FAKE = '''#!{python}
"""A stand-in for compute-sanitizer: runs the wrapped command, then prints a report."""
import json, os, subprocess, sys, time

args = sys.argv[1:]
options = []
while args and args[0].startswith("--"):
    options.append(args.pop(0))
with open(os.environ["FAKE_SANITIZER_CALLS"], "a", encoding="utf-8") as calls:
    calls.write(json.dumps({{"options": options, "command": args}}) + "\\n")
print("========= COMPUTE-SANITIZER", flush=True)
if os.environ.get("FAKE_SANITIZER_HANG"):
    time.sleep(600)
code = subprocess.call(args)
with open(os.environ["FAKE_SANITIZER_REPORT"], encoding="utf-8") as report:
    sys.stdout.write(report.read())
sys.exit(code)
'''


# The root alone: enough where a test asks only whether, and how, the sanitizer runs (the
# victims' culprit searches and the plain failure's alone-runs would show nothing more)
ROOT_ONLY = {
    "pytest.ini": "[pytest]\n",
    "test_cuda.py": """
        def test_scatter_rows():
            raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")
    """,
}


def build(root: Path, files: dict[str, str] = SUITE) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return root


def fake_env(tmp: Path, *, fake: bool = True) -> dict[str, str]:
    """The environment of a gpuci run: the fake first on PATH (or no tool at all)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CI_NODE", "PYTEST_"))}
    for name in ("CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "FAKE_SANITIZER_HANG"):
        env.pop(name, None)
    path = [str(Path(sys.executable).parent), "/usr/bin", "/bin"]
    if fake:
        bin_dir = tmp / "fakebin"
        _executable(bin_dir / "compute-sanitizer", FAKE.format(python=sys.executable))
        path.insert(0, str(bin_dir))
    env["PATH"] = os.pathsep.join(path)
    env["FAKE_SANITIZER_CALLS"] = str(tmp / "calls.jsonl")
    env["FAKE_SANITIZER_REPORT"] = str(DATA / "h100_scatter_rows.txt")
    return env


def calls(env: dict[str, str]) -> list[dict[str, Any]]:
    path = Path(env["FAKE_SANITIZER_CALLS"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def verdict_tests(out: Path) -> dict[str, Any]:
    return {t["id"]: t for t in read(out / "verdict.json")["tests"]}


CHECK = ("check", ".", "--out", "out", "--modes", "isolated", "--evidence-budget", "120")


@pytest.fixture(scope="module")
def sanitized(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, dict[str, str]]:
    """One check of the suite with the fake compute-sanitizer on PATH (auto: on)."""
    tmp = tmp_path_factory.mktemp("sanitized")
    root = build(tmp / "suite")
    env = fake_env(tmp)
    proc = gpuci(*CHECK, cwd=root, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]  # the planted failures fail it
    return root / "out", proc.stdout + proc.stderr, env


@pytest.mark.slow
def test_the_root_gets_memchecks_first_error_in_the_verdict(
    sanitized: tuple[Path, str, dict[str, str]],
) -> None:
    out, output, _ = sanitized
    tests = verdict_tests(out)
    assert tests[ROOT_ID]["category"] == "failed"
    assert tests[ROOT_ID]["sanitizer"] == H100_SCATTER
    evidence = {t["id"]: t for t in read(out / "evidence" / "evidence.json")["tests"]}
    assert evidence[ROOT_ID]["sanitizer"] == H100_SCATTER
    # it failed alone: a root known before the searches, memchecked beside them
    assert (
        "gpuci: compute-sanitizer: running 1 root(s) under memcheck (1 of them beside the"
        " searches)" in output
    )
    assert f"{ROOT_ID}: sanitizer: Invalid __global__ write of size 4 bytes" in output


@pytest.mark.slow
def test_victims_and_plain_failures_are_not_sanitized(
    sanitized: tuple[Path, str, dict[str, str]],
) -> None:
    out, _, env = sanitized
    tests = verdict_tests(out)
    for victim in VICTIMS:  # the same CUDA error, but the poison came from the root
        assert tests[victim]["category"] == "order-dependent"
        assert tests[victim]["culprits"] == [ROOT_ID]
        assert "sanitizer" not in tests[victim]
    assert tests[PLAIN]["category"] == "failed" and "sanitizer" not in tests[PLAIN]
    assert len(calls(env)) == 1


@pytest.mark.slow
def test_the_sanitizer_run_is_evidence_alone_in_the_checks_environment(
    sanitized: tuple[Path, str, dict[str, str]],
) -> None:
    out, _, env = sanitized
    (call,) = calls(env)
    assert call["options"] == list(sanitizer.OPTIONS)
    assert call["options"][0] == "--tool=memcheck"
    command = call["command"]
    assert command[:3] == [sys.executable, "-m", "pytest"] and command[-1] == "test_cuda.py"
    evidence = read(out / "evidence" / "evidence.json")
    assert evidence["phases"]["sanitizer"]["runs"] == 1
    log = (out / "evidence" / "logs" / "test_cuda.py.log").read_text(encoding="utf-8")
    assert log.count(f"=== gpuci: sanitizer: {ROOT_ID}: ") == 1
    sanitized_part = log[log.index("=== gpuci: sanitizer: ") :]
    assert "1 failed" in sanitized_part  # the root alone (GPUCI_ONLY), failing again


@pytest.mark.slow
def test_no_sanitize_skips_it(tmp_path: Path) -> None:
    root = build(tmp_path / "suite", ROOT_ONLY)
    env = fake_env(tmp_path)
    proc = gpuci(*CHECK, "--no-sanitize", cwd=root, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert calls(env) == []
    assert not any("sanitizer" in t for t in verdict_tests(root / "out").values())
    assert "sanitizer" not in read(root / "out" / "evidence" / "evidence.json")["phases"]
    assert "compute-sanitizer" not in proc.stderr


@pytest.mark.slow
def test_without_the_tool_auto_is_off_with_a_note(tmp_path: Path) -> None:
    env = fake_env(tmp_path, fake=False)
    if find_sanitizer(env) is not None:
        pytest.skip(f"a real compute-sanitizer is installed here: {find_sanitizer(env)}")
    root = build(tmp_path / "suite", ROOT_ONLY)
    proc = gpuci(*CHECK, cwd=root, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "gpuci: error" not in proc.stderr
    assert "compute-sanitizer: not found; 1 root(s) with a CUDA fault not sanitized" in proc.stderr
    assert not any("sanitizer" in t for t in verdict_tests(root / "out").values())


@pytest.mark.slow
def test_sanitize_without_the_tool_is_refused_before_anything_runs(tmp_path: Path) -> None:
    env = fake_env(tmp_path, fake=False)
    if find_sanitizer(env) is not None:
        pytest.skip(f"a real compute-sanitizer is installed here: {find_sanitizer(env)}")
    root = build(tmp_path / "suite")
    proc = gpuci(*CHECK, "--sanitize", cwd=root, env=env)
    assert proc.returncode == 4
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuci: error: --sanitize: compute-sanitizer")
    assert not (root / "out").exists()


@pytest.mark.slow
def test_the_budget_cut_is_recorded(tmp_path: Path) -> None:
    root = build(tmp_path / "suite")
    env = fake_env(tmp_path)
    proc = gpuci(*CHECK, "--evidence-budget", "0", cwd=root, env=env)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert calls(env) == []
    assert verdict_tests(root / "out")[ROOT_ID]["sanitizer"] == "not run (budget)"
    assert f"{ROOT_ID}: sanitizer: not run (budget)" in proc.stderr


@pytest.mark.slow
def test_a_hanging_sanitizer_is_killed_at_its_timeout_and_recorded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = build(tmp_path / "suite", ROOT_ONLY)
    env = fake_env(tmp_path)
    proc = gpuci(
        "run", ".", "--mode", "isolated", "--out", "out", "--reruns", "0", cwd=root, env=env
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    for name in ("CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)
    for name in ("PATH", "FAKE_SANITIZER_CALLS", "FAKE_SANITIZER_REPORT"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("FAKE_SANITIZER_HANG", "1")
    monkeypatch.setattr(sanitizer, "TIMEOUT_S", 2.0)
    monkeypatch.chdir(root)
    # a hanging tool is ended by its time-out (the result says so), not waited for
    evidence = gather_evidence(
        root / "out", runs=1, budget_s=None, timeout=None, progress=sys.stderr, sanitize=True
    )
    found = {t.id: t for t in evidence.tests}
    assert found[ROOT_ID].sanitizer == (
        "compute-sanitizer did not finish within 2s (no progress); gpuci killed it"
    )
    assert len(calls(env)) == 1
    assert evidence.phases["sanitizer"]["runs"] == 1
    assert 2.0 <= evidence.phases["sanitizer"]["seconds"] < 30
    assert not evidence.leftovers  # the fake and what it started died with its group
