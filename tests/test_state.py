"""The state ledger's parts: snapshots compared, changes told in words, failures read against
the ledger, journals read back, and the device probes' guard (no CUDA is touched where no
context exists)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from gpuci.run.proc import reaper
from gpuci.state.changes import changes, snapshot
from gpuci.state.device import COOKIE_ENV, another_interpreter, device_snapshot
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
    before = {"threads": frozenset({"a", "b"}), "fds": 12, "cupy.pool_used": 4096}
    after = {"threads": frozenset({"a"}), "fds": 10, "cupy.pool_used": 0}
    assert changes(before, after) == {}
    grown = {"threads": frozenset({"a", "b", "c"}), "fds": 14, "cupy.pool_used": 2 * GIB}
    assert changes(before, grown) == {
        "threads": {"added": ["c"]},
        "fds": [12, 14],
        "cupy.pool_used": [4096, 2 * GIB],
    }


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
    ledger = Ledger(files={"a.py": {"umask": ["0o022", "0o077"]}, "b.py": {"fds": [3, 9]}})
    candidates = ("a.py::t1", "a.py::t2", "b.py::t3")
    text = "PermissionError: [Errno 13] Permission denied: 'x'"
    assert hinted_candidates(ledger, candidates, text) == ("a.py::t1", "a.py::t2")


def test_the_ledger_is_read_back_from_the_journals_suite_first(tmp_path: Path) -> None:
    def journal(path: str, *events: dict[str, Any]) -> None:
        lines = [json.dumps(e) for e in events] + ['{"e": "left", "v": 1, "id": "torn']
        write_files(tmp_path, {path: "\n".join(lines) + "\n"})

    journal(
        "suite/journal/suite.jsonl",
        {"e": "left", "v": 1, "id": "a.py::t", "left": {"cwd": ["/r", "/suite"]}},
        {"e": "left", "v": 1, "file": "a.py", "left": {"umask": ["0o022", "0o077"]}},
        {"e": "left", "v": 99, "id": "a.py::u", "left": {"cwd": ["/r", "/future"]}},
    )
    journal(
        "evidence/journal/a.py.jsonl",
        {"e": "left", "v": 1, "id": "a.py::t", "left": {"cwd": ["/r", "/evidence"]}},
    )
    ledger = read_ledger(tmp_path)
    assert ledger.tests == {"a.py::t": {"cwd": ["/r", "/suite"]}}
    assert ledger.files == {"a.py": {"umask": ["0o022", "0o077"]}}
    assert ledger.entries("a.py::t") == ({"cwd": ["/r", "/suite"]}, {"umask": ["0o022", "0o077"]})


def test_no_device_is_probed_where_this_process_has_no_cuda_context(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a stand-in for an imported CuPy whose driver says no context is current: its pool,
    # device and streams are not asked (each would create a context)
    def untouchable(*_: object) -> None:
        raise AssertionError("the probe initialized CUDA")

    driver = types.SimpleNamespace(ctxGetCurrent=lambda: 0)
    cuda = types.SimpleNamespace(driver=driver, runtime=untouchable, get_current_stream=untouchable)
    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda  # type: ignore[attr-defined]
    cupy.get_default_memory_pool = untouchable  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert device_snapshot(processes=True) == {}


def test_another_of_the_checks_interpreters_is_nothing_a_test_left() -> None:
    # a PyTorch suite's parallel screen started interpreters that held the GPU while a file
    # of the suite screen ran: the ledger said that file left them
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    started = {}
    for name, cookie in (("other", "theirs"), ("own", "mine"), ("stranger", None)):
        env = clean_env()
        env.pop(COOKIE_ENV, None)
        if cookie is not None:
            env[COOKIE_ENV] = cookie
        started[name] = subprocess.Popen(sleep, env=env)
    try:
        assert another_interpreter(started["other"].pid, "mine")
        assert not another_interpreter(started["own"].pid, "mine")  # what this one started
        assert not another_interpreter(started["stranger"].pid, "mine")
        assert not another_interpreter(started["other"].pid, None)  # not run by gpuci
    finally:
        for proc in started.values():
            proc.kill()
            proc.wait()
    assert COOKIE_ENV == reaper.COOKIE_ENV


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
    assert left == [
        {"e": "left", "v": 1, "import": "test_b.py", "left": {"env": {"added": ["SET_AT_IMPORT"]}}},
        {"e": "left", "v": 1, "id": "test_a.py::test_sets", "left": env},
        {"e": "left", "v": 1, "file": "test_a.py", "left": env},
    ]
    cost = [e for e in events if e["e"] == "ledger-cost"]
    # around each module's import, one before the first test, one after each
    assert cost and cost[0]["snapshots"] == 2 * 2 + 1 + 3
