"""The state ledger's parts: snapshots compared, changes told in words, failures read against
the ledger, journals read back, and the device probes' guard (no CUDA is touched where no
context exists)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import pytest

from gpuci.run.proc import reaper
from gpuci.state import device
from gpuci.state.changes import LEDGER_VERSION, changes, snapshot
from gpuci.state.device import COOKIE_ENV, device_snapshot, started_here
from gpuci.state.hints import failure_text, hinted_candidates, pointed_keys
from gpuci.state.left import Ledger, describe, read_ledger
from tests.cli_runner import clean_env, write_files

GIB = 1 << 30
ROOT = Path(__file__).resolve().parent.parent  # the gpuci under test, for the child


def test_an_environment_variable_is_named_never_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUCI_TEST_CHANGED", "before-value")
    before = snapshot()
    monkeypatch.setenv("GPUCI_TEST_SECRET", "s3cr3t-value")
    monkeypatch.setenv("GPUCI_TEST_CHANGED", "after-value")
    left = changes(before, snapshot())
    assert left["env"] == {"added": ["GPUCI_TEST_SECRET"], "changed": ["GPUCI_TEST_CHANGED"]}
    assert "value" not in json.dumps(left)


def test_what_ended_or_was_given_back_is_not_left_behind() -> None:
    fds = ((0, "/dev/null"), (3, "/tmp/a.log"), (4, "pipe:[7]"))
    before = {"threads": frozenset({"a", "b"}), "fds": fds, "cupy.pool_used": 4096}
    after = {"threads": frozenset({"a"}), "fds": fds[:2], "cupy.pool_used": 0}
    assert changes(before, after) == {}
    opened = (*fds, (5, "/tmp/b.log"), (6, "socket:[9]"), (7, "socket:[10]"))
    grown = {"threads": frozenset({"a", "b", "c"}), "fds": opened, "cupy.pool_used": 2 * GIB}
    assert changes(before, grown) == {
        "threads": {"added": ["c"]},
        "fds": {"added": ["socket (2)", "/tmp/b.log"]},
        "cupy.pool_used": [4096, 2 * GIB],
    }
    assert describe(changes(before, grown))[1] == (
        "left 3 more descriptor(s) open: socket (2), /tmp/b.log"
    )


def test_descriptors_the_gpu_driver_opened_are_not_left_but_a_tests_are() -> None:
    base = ((0, "/dev/pts/0"), (3, "/tmp/run.log"))
    # CuPy reached the device in this file: the driver's device files, its threads' pipes
    # and event descriptors are its; the file the test opened and kept is the test's
    driver = ((4, "/dev/nvidiactl"), (5, "/dev/nvidia0"), (6, "/dev/nvidia-uvm"))
    beside = ((7, "anon_inode:[eventfd]"), (8, "pipe:[81]"), (9, "pipe:[81]"), (13, "socket:[7]"))
    reached = {"cupy.device": 0, "cupy.pool_limit": 0}
    first = {"fds": (*base, *driver, *beside, (10, "/tmp/leak.txt")), **reached}
    assert changes({"fds": base}, first) == {"fds": {"added": ["/tmp/leak.txt"]}}
    # the device reached before: a pipe and an event descriptor opened now are the test's
    later = {**first, "fds": (*first["fds"], (11, "pipe:[90]"), (12, "anon_inode:[eventfd]"))}
    left = changes(first, later)
    assert left == {"fds": {"added": ["anon_inode:[eventfd]", "pipe"]}}
    assert describe(left) == ["left 2 more descriptor(s) open: anon_inode:[eventfd], pipe"]
    # PyTorch's first CUDA initialization: the same
    torch = {"fds": (*base, *driver, *beside), "torch.device": 0, "torch.allocated": 0}
    assert changes({"fds": base, "torch.default_dtype": "torch.float32"}, torch) == {}
    # a context on a second device: its device file and what opened with it are the driver's
    second = {**first, "fds": (*first["fds"], (11, "/dev/nvidia1"), (12, "anon_inode:[eventfd]"))}
    assert changes(first, second) == {}
    # descriptors of more kinds than are shown: the rest is one entry, the count whole
    many = {"fds": (*base, *((20 + i, f"/tmp/f{i}") for i in range(30)))}
    left = changes({"fds": base}, many)
    assert len(left["fds"]["added"]) == 20 and left["fds"]["added"][-1] == "others (11)"
    assert describe(left)[0].startswith("left 30 more descriptor(s) open: ")


def test_a_library_imported_since_is_not_a_setting_left_but_memory_first_held_is() -> None:
    before: dict[str, Any] = {"cwd": "/a"}
    after = {"cwd": "/a", "numpy.seterr": (("divide", "warn"),), "cupy.pool_used": GIB}
    assert changes(before, after) == {"cupy.pool_used": [0, GIB]}
    # a limit or a stream left by the test that created the context, against a fresh one's
    fresh = {**after, "cupy.pool_limit": GIB, "cupy.stream": "0x5581c0"}
    assert changes(before, fresh) == {
        "cupy.pool_used": [0, GIB],
        "cupy.pool_limit": [0, GIB],
        "cupy.stream": ["default", "0x5581c0"],
    }


def test_a_changed_setting_is_rendered_and_told_by_the_fields_that_differ() -> None:
    before = {"decimal.context": (("prec", 28), ("rounding", "ROUND_HALF_EVEN"))}
    after = {"decimal.context": (("prec", 6), ("rounding", "ROUND_HALF_EVEN"))}
    left = changes(before, after)
    assert left == {
        "decimal.context": ["prec=28,rounding=ROUND_HALF_EVEN", "prec=6,rounding=ROUND_HALF_EVEN"]
    }
    assert describe(left) == ["changed the decimal context to prec=6 (was prec=28)"]


def test_device_state_is_told_as_the_card_says_it() -> None:
    left = {
        "cupy.pool_used": [0, 2 * GIB],
        "cupy.pool_limit": [0, GIB],
        "cupy.stream": ["default", "0x5581c0"],
        "cuda.error": ["", "cudaErrorIllegalAddress: an illegal memory access"],
        "cupy.fft.unreadable": ["x", "y"],  # not a change worth telling
    }
    assert describe(left) == [
        "left 2.0 GiB in use in CuPy's pool",
        "left a CuPy pool limit of 1.0 GiB",
        "left a non-default stream current (0x5581c0)",
        "left a sticky CUDA error: cudaErrorIllegalAddress: an illegal memory access",
    ]


def test_a_pytorch_memory_fraction_left_is_told_and_pointed_at_by_out_of_memory() -> None:
    # the test that created the context and capped it, against a fresh process's cap
    left = changes({"cwd": "/a"}, {"cwd": "/a", "torch.memory_fraction": 0.01})
    assert left == {"torch.memory_fraction": [1.0, 0.01]}
    assert describe(left) == ["left PyTorch's per-process memory fraction at 0.01 (was 1)"]
    # as PyTorch 2.11 reads it back on an H100
    stored = {"torch.memory_fraction": [1.0, 0.009999999999529509]}
    assert describe(stored) == ["left PyTorch's per-process memory fraction at 0.01 (was 1)"]
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert pointed_keys(oom, left) == ["torch.memory_fraction"]
    assert pointed_keys("AssertionError: Tensor-likes are not close!", left) == []


def test_a_failure_points_by_its_words_or_by_naming_what_was_left(tmp_path: Path) -> None:
    source = write_files(tmp_path, {"t.py": "x = 1\nassert os.environ.get('APP_MODE') is None\n"})
    text = failure_text("AssertionError: assert 'debug' is None", "t.py:2", source)
    assert "APP_MODE" in text  # the frame's line names what the message does not
    left = {"env": {"added": ["APP_MODE"]}, "cwd": ["/a", "/b"], "umask": ["0o022", "0o077"]}
    assert pointed_keys(text, left) == ["env"]
    assert pointed_keys("FileNotFoundError: [Errno 2] No such file", left) == ["cwd"]
    assert pointed_keys("AssertionError: assert 3 == 4", left) == []


def test_the_failing_function_is_read_from_its_def_to_the_failing_line(tmp_path: Path) -> None:
    source = write_files(
        tmp_path,
        {
            "t.py": "def test_copy():\n    run_kernel()\n    runtime.deviceSynchronize()\n"
            "    assert_equal(dst, expected)\n    never_reached()\n"
        },
    )
    text = failure_text("AssertionError: Arrays are not equal", "t.py:4", source)
    assert text.splitlines() == [
        "AssertionError: Arrays are not equal",
        "def test_copy():",
        "run_kernel()",
        "runtime.deviceSynchronize()",
        "assert_equal(dst, expected)",
    ]
    # a stream left current: the synchronization points at it; memory: `out of memory`
    left = {"cupy.stream": ["default", "0x55"], "torch.allocated": [0, 1 << 30]}
    assert pointed_keys(text, left) == ["cupy.stream"]
    assert pointed_keys("torch.OutOfMemoryError: CUDA out of memory", left) == ["torch.allocated"]


def test_the_hint_is_the_last_test_that_changed_what_the_failure_points_at() -> None:
    ledger = Ledger(
        tests={
            "a.py::t1": {"cwd": ["/r", "/x"]},
            "a.py::t2": {"env": {"added": ["OTHER"]}},
            "b.py::t3": {"cwd": ["/x", "/y"]},
        }
    )
    candidates = ("a.py::t1", "a.py::t2", "b.py::t3", "b.py::t4")
    assert hinted_candidates(ledger, candidates, "FileNotFoundError: x") == ("b.py::t3",)
    assert hinted_candidates(ledger, candidates, "assert 1 == 2") == ()


def test_a_change_only_its_file_recorded_hints_at_that_files_tests() -> None:
    files = {"a.py": {"umask": ["0o022", "0o077"]}, "b.py": {"fds": {"added": ["pipe (6)"]}}}
    ledger = Ledger(files=files)
    candidates = ("a.py::t1", "a.py::t2", "b.py::t3")
    text = "PermissionError: [Errno 13] Permission denied: 'x'"
    assert hinted_candidates(ledger, candidates, text) == ("a.py::t1", "a.py::t2")


def test_the_ledger_is_read_back_from_the_journals_suite_first(tmp_path: Path) -> None:
    def journal(path: str, *events: dict[str, Any]) -> None:
        lines = [json.dumps(e) for e in events] + ['{"e": "left", "v": 2, "id": "torn']
        write_files(tmp_path, {path: "\n".join(lines) + "\n"})

    journal(
        "suite/journal/suite.jsonl",
        {"e": "left", "v": LEDGER_VERSION, "id": "a.py::t", "left": {"cwd": ["/r", "/suite"]}},
        {"e": "left", "v": LEDGER_VERSION, "file": "a.py", "left": {"umask": ["0o022", "0o077"]}},
        {"e": "left", "v": 99, "id": "a.py::u", "left": {"cwd": ["/r", "/future"]}},
        # version 1's `fds` was a count: misread as what descriptors point at
        {"e": "left", "v": 1, "file": "b.py", "left": {"fds": [3, 36]}},
    )
    journal(
        "evidence/journal/a.py.jsonl",
        {"e": "left", "v": LEDGER_VERSION, "id": "a.py::t", "left": {"cwd": ["/r", "/evidence"]}},
    )
    ledger = read_ledger(tmp_path)
    assert ledger.tests == {"a.py::t": {"cwd": ["/r", "/suite"]}}
    assert ledger.files == {"a.py": {"umask": ["0o022", "0o077"]}}
    assert ledger.entries("a.py::t") == ({"cwd": ["/r", "/suite"]}, {"umask": ["0o022", "0o077"]})


def _fake_cupy(monkeypatch: pytest.MonkeyPatch) -> Any:
    """A fresh `tests/fake_cupy.py` as the imported `cupy` (no PyTorch)."""
    spec = importlib.util.spec_from_file_location("cupy", ROOT / "tests" / "fake_cupy.py")
    assert spec is not None and spec.loader is not None
    cupy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cupy)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    return cupy


def test_the_device_is_read_only_as_far_as_the_suite_took_cuda(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy = _fake_cupy(monkeypatch)
    # imported, nothing called: nothing is asked (a CUDA call would initialize the driver)
    assert device_snapshot(processes=True) == {}
    assert cupy.stage() == {"initialized": False, "context": 0, "device": 0}
    # a pool limit set, nothing allocated: the driver started, no context; the pool's
    # bookkeeping and the device are read, and still no context
    cupy.get_default_memory_pool().set_limit(size=64 << 20)
    assert device_snapshot(processes=False) == {
        "cupy.pool_used": 0,
        "cupy.pool_total": 0,
        "cupy.pool_limit": 64 << 20,
        "cupy.device": 0,
    }
    assert cupy.CONTEXT_MADE_BY == []
    # a limit as a share of the device's memory: a pool made now would ask the device
    monkeypatch.setenv("CUPY_GPU_MEMORY_LIMIT", "50%")
    assert device_snapshot(processes=False) == {}
    monkeypatch.delenv("CUPY_GPU_MEMORY_LIMIT")
    # an allocation made the context: the stream and a sticky error are read too
    cupy.ones(1024)
    assert cupy.CONTEXT_MADE_BY == ["malloc"]
    assert device_snapshot(processes=False)["cupy.stream"] == "default"


class _DeprecatedSettings(types.ModuleType):
    """CuPy 14's `cupy.fft.config`: reading `enable_nd_planning` warns that it is deprecated."""

    def __getattr__(self, name: str) -> object:
        if name == "enable_nd_planning":
            warnings.warn("enable_nd_planning is deprecated", DeprecationWarning, stacklevel=2)
            return True
        raise AttributeError(name)


def test_a_deprecated_setting_the_probe_reads_hides_nothing_under_warnings_as_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # CuPy's own suite runs with `error::DeprecationWarning`: the probe's read of a deprecated
    # FFT setting raised, and every CuPy key read `unreadable` (a pool limit was never seen)
    cupy = _fake_cupy(monkeypatch)
    config = _DeprecatedSettings("cupy.fft.config")
    config.use_multi_gpus = False  # type: ignore[attr-defined]
    config.get_plan_cache = lambda: types.SimpleNamespace(get_curr_size=lambda: 0)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy.fft.config", config)
    cupy.ones(16)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("error")
        before = device_snapshot(processes=False)
        cupy.get_default_memory_pool().set_limit(size=4096)
        after = device_snapshot(processes=False)
    assert "cupy.unreadable" not in after and after["cupy.fft"].startswith("nd_planning=True")
    assert changes(before, after) == {"cupy.pool_limit": [0, 4096]}
    assert seen == []  # nor does the probe's warning reach the test's record


def test_a_limit_set_where_cuda_had_not_started_is_left_against_cupys_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # the first test of a file, in a fresh interpreter: before it CUDA had not started
    cupy = _fake_cupy(monkeypatch)
    before = snapshot()
    cupy.get_default_memory_pool().set_limit(size=64 << 20)
    after = snapshot()
    assert changes(before, after) == {"cupy.pool_limit": [0, 64 << 20]}
    assert describe(changes(before, after)) == ["left a CuPy pool limit of 64.0 MiB"]
    # CuPy's default is the environment's limit where one is set: that one is no change
    monkeypatch.setenv("CUPY_GPU_MEMORY_LIMIT", str(64 << 20))
    assert changes(before, after) == {}
    monkeypatch.setenv("CUPY_GPU_MEMORY_LIMIT", "10%")  # unknown here: nothing is claimed
    assert changes(before, after) == {}
    monkeypatch.delenv("CUPY_GPU_MEMORY_LIMIT")
    # another device or a stream left current by the test that made the context
    cupy.cuda.runtime.setDevice(1)
    cupy.cuda.Stream(non_blocking=True).use()
    left = changes(before, snapshot())
    assert left["cupy.device"] == [0, 1]
    assert left["cupy.stream"] == ["default", "0x7f00"]


def test_pytorchs_first_device_state_is_left_against_its_defaults() -> None:
    # PyTorch's state is read once it initialized CUDA (its initialization makes the context)
    env = ((b"HOME", b"/root"),)
    before: dict[str, Any] = {"torch.default_dtype": "torch.float32", "env": env}
    after = {
        **before,
        "torch.allocated": 0,
        "torch.memory_fraction": 0.25,
        "torch.device": 1,
        "torch.stream": "default",
        # what its CUDA initialization sets where unset: not the test's doing
        "env": (*env, (b"CUDA_MODULE_LOADING", b"LAZY")),
    }
    assert changes(before, after) == {
        "torch.device": [0, 1],
        "torch.memory_fraction": [1.0, 0.25],
    }
    # a test that sets it where PyTorch had reached the device already set it itself
    later = {**after, "env": (*env, (b"CUDA_MODULE_LOADING", b"EAGER"), (b"APP", b"1"))}
    assert changes({**after, "env": env}, later) == {
        "env": {"added": ["APP", "CUDA_MODULE_LOADING"]}
    }


def _sleepers(cookies: dict[str, str | None]) -> dict[str, subprocess.Popen[bytes]]:
    started = {}
    for name, cookie in cookies.items():
        env = clean_env()
        env.pop(COOKIE_ENV, None)
        if cookie is not None:
            env[COOKIE_ENV] = cookie
        started[name] = subprocess.Popen([sys.executable, "-c", SLEEP], env=env)
    return started


SLEEP = "import time; time.sleep(60)"


def test_only_what_this_interpreter_started_is_left_by_it() -> None:
    # a PyTorch suite's parallel screen started interpreters that held the GPU while a file
    # of the suite screen ran; a pair's partner runs beside its victim; a stranger's job
    # came: the ledger said the file left each of them
    started = _sleepers({"other": "theirs", "own": "mine", "stranger": None, "sibling": None})
    try:
        sibling = started["sibling"].pid  # an interpreter none of the others descends from
        assert started_here(started["own"].pid, sibling, "mine")  # its cookie: started there
        assert not started_here(started["other"].pid, sibling, "mine")  # the check's other
        assert not started_here(started["stranger"].pid, sibling, "mine")
        assert not started_here(started["other"].pid, sibling, None)  # not run by gpuci
        # a test's process with its environment cleared: it descends from the interpreter
        assert started_here(started["stranger"].pid, os.getpid(), "mine")
    finally:
        for proc in started.values():
            proc.kill()
            proc.wait()
    assert COOKIE_ENV == reaper.COOKIE_ENV


class _FakeNvml:
    """NVML listing `pids` on every device."""

    def __init__(self, pids: list[int]) -> None:
        self.pids = pids

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[Any]:
        return [types.SimpleNamespace(pid=p, usedGpuMemory=1 << 20) for p in self.pids]


def test_a_pair_partner_or_a_stranger_on_the_gpu_is_not_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cupy = _fake_cupy(monkeypatch)
    cupy.ones(16)  # the device reached: its processes are read
    monkeypatch.setenv(COOKIE_ENV, "mine")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    started = _sleepers({"partner": "theirs", "worker": "mine", "stranger": None})
    pids = [os.getpid(), *(proc.pid for proc in started.values())]
    try:
        monkeypatch.setattr(device, "_NVML", [_FakeNvml(pids)])
        # the stranger (no cookie) is this test's child here: its ancestry is what counts
        monkeypatch.setattr(device, "_ancestors", lambda pid: [])
        processes = device_snapshot(processes=True)["gpu.processes"]
        assert processes == frozenset({f"pid {started['worker'].pid}"})
        # NVML's ids from another PID namespace (this process not among them): none is told
        monkeypatch.setattr(device, "_NVML", [_FakeNvml(pids[1:])])
        monkeypatch.setattr(device, "_in_root_pid_namespace", lambda: False)
        assert device_snapshot(processes=True)["gpu.processes"] == frozenset()
    finally:
        for proc in started.values():
            proc.kill()
            proc.wait()


def test_the_plugin_journals_what_each_test_and_file_left(tmp_path: Path) -> None:
    suite = write_files(
        tmp_path / "s",
        {
            "test_a.py": "import os\ndef test_sets():\n    os.environ['LEFT_BY_A'] = '1'\n"
            "def test_clean():\n    pass\n",
            "test_b.py": "import os, sys\nos.environ['SET_AT_IMPORT'] = '1'\n"
            "def test_other():\n    pass\n",
        },
    )
    journal = tmp_path / "j.jsonl"
    env = {**clean_env(), "GPUCI_JOURNAL": str(journal), "PYTHONPATH": str(ROOT)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "gpuci.pytest_plugin",
            "-p",
            "no:cacheprovider",
        ],
        cwd=suite,
        env=env,
        check=True,
        capture_output=True,
    )
    events = [json.loads(line) for line in journal.read_text().splitlines()]
    left = [e for e in events if e["e"] == "left"]
    # importing test_b.py (pytest collects every file first) set a variable; pytest's own
    # sys.path entry for it is not the module's doing
    env = {"env": {"added": ["LEFT_BY_A"]}}
    imported = {"env": {"added": ["SET_AT_IMPORT"]}}
    assert left == [
        {"e": "left", "v": LEDGER_VERSION, "import": "test_b.py", "left": imported},
        {"e": "left", "v": LEDGER_VERSION, "id": "test_a.py::test_sets", "left": env},
        {"e": "left", "v": LEDGER_VERSION, "file": "test_a.py", "left": env},
    ]
    cost = [e for e in events if e["e"] == "ledger-cost"]
    # around each module's import, one before the first test, one after each
    assert cost and cost[0]["snapshots"] == 2 * 2 + 1 + 3
