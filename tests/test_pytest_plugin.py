"""The child-side journal plugin, in real pytest subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cli_runner import needs_run_parallel

from gpuci.run.proc.discover import child_env

SOURCE = """
import pytest

def test_pass():
    pass

def test_fail():
    assert 1 == 2, "one is not two"

@pytest.mark.skip(reason="not today")
def test_skip():
    pass

@pytest.mark.xfail(reason="known")
def test_xfail():
    assert False

@pytest.fixture
def broken():
    raise RuntimeError("fixture broke")

def test_setup_error(broken):
    pass

@pytest.mark.gpu_serial
def test_serial():
    pass
"""


def run_child(
    tmp_path: Path,
    files: dict[str, str],
    *args: str,
    env: dict[str, str] | None = None,
    ini: str = "[pytest]\n",
) -> list[dict[str, Any]]:
    """Write FILES under tmp_path, run pytest there with the plugin; return the journal."""
    (tmp_path / "pytest.ini").write_text(ini, encoding="utf-8")
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    journal = tmp_path / "journal.jsonl"
    child = child_env({**os.environ, **(env or {})})
    child["GPUCI_JOURNAL"] = str(journal)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "gpuci.pytest_plugin",
            "-p",
            "no:cacheprovider",
            "--continue-on-collection-errors",
            "--strict-markers",
            *args,
        ],
        cwd=tmp_path,
        env=child,
        capture_output=True,
        check=False,
        timeout=120,
        text=True,
    )
    assert journal.exists(), f"no journal; the child said:\n{proc.stdout}\n{proc.stderr}"
    return [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]


def run_pytest(tmp_path: Path, only: list[str] | None = None) -> list[dict[str, Any]]:
    """Run pytest with the plugin on SOURCE; return the journal's events."""
    env = {}
    if only is not None:
        (tmp_path / "only.json").write_text(json.dumps(only), encoding="utf-8")
        env["GPUCI_ONLY"] = str(tmp_path / "only.json")
    files = {"test_x.py": SOURCE, "test_broken.py": "import nope_nope\n"}
    return run_child(tmp_path, files, ".", env=env)


def test_every_event_is_journaled(tmp_path: Path) -> None:
    journaled = run_pytest(tmp_path)
    # the ledger's: what importing the file brought to sys.modules (itself, at least)
    assert any(e["e"] == "modules" and e.get("import") == "test_x.py" for e in journaled)
    events = [e for e in journaled if e["e"] != "modules"]
    kinds = [e["e"] for e in events]
    assert kinds[0] == "collect-error"
    assert kinds[1] == "collected"
    assert kinds[-1] == "end"
    assert events[-1]["exitstatus"] == 1
    collected = events[1]
    assert collected["rootdir"] == str(tmp_path)
    assert collected["serial"] == ["test_x.py::test_serial"]
    assert len(collected["ids"]) == 6
    finished = {e["id"]: e for e in events if e["e"] == "finish"}
    starts = [e["id"] for e in events if e["e"] == "start"]
    assert starts == collected["ids"]
    assert finished["test_x.py::test_pass"]["outcome"] == "passed"
    assert finished["test_x.py::test_fail"]["outcome"] == "failed"
    assert "one is not two" in finished["test_x.py::test_fail"]["message"]
    assert finished["test_x.py::test_skip"] == {
        "e": "finish",
        "id": "test_x.py::test_skip",
        "outcome": "skipped",
        "duration": finished["test_x.py::test_skip"]["duration"],
        "message": "not today",
    }
    assert finished["test_x.py::test_xfail"]["outcome"] == "skipped"
    error = finished["test_x.py::test_setup_error"]
    assert error["outcome"] == "failed"
    assert error["message"].startswith("error in setup: RuntimeError: fixture broke")
    assert "nope_nope" in events[0]["message"]


@pytest.mark.slow
def test_only_runs_the_named_tests(tmp_path: Path) -> None:
    events = run_pytest(tmp_path, only=["test_x.py::test_serial", "test_x.py::test_pass"])
    collected = next(e for e in events if e["e"] == "collected")
    # collection order is kept, whatever the order of the list
    assert collected["ids"] == ["test_x.py::test_pass", "test_x.py::test_serial"]
    assert [e["id"] for e in events if e["e"] == "finish"] == collected["ids"]


# Just the CuPy API the poisoning touches; every call is logged to $CUPY_STUB_LOG.
CUPY_STUB = """
import json
import os
from types import SimpleNamespace


def _log(*call):
    with open(os.environ["CUPY_STUB_LOG"], "a") as f:
        f.write(json.dumps(call) + "\\n")


class MemoryPointer:
    def __init__(self, ptr):
        self.ptr = ptr


class MemoryPool:
    def __init__(self):
        self._next = 0

    def malloc(self, size):
        self._next += 0x1000
        _log("malloc", self._next, size)
        return MemoryPointer(self._next)


_pool = MemoryPool()
_allocator = _pool.malloc


def get_default_memory_pool():
    return _pool


def _set_allocator(allocator=None):
    global _allocator
    _allocator = allocator if allocator is not None else _pool.malloc
    _log("set_allocator", type(_allocator).__name__)


def _memset_async(ptr, value, size, stream):
    _log("memsetAsync", ptr, value, size, stream)


cuda = SimpleNamespace(
    set_allocator=_set_allocator,
    get_allocator=lambda: _allocator,
    alloc=lambda size: _allocator(size),  # what cupy.empty and friends call
    get_current_stream=lambda: SimpleNamespace(ptr=0x5EED),
    runtime=SimpleNamespace(memsetAsync=_memset_async),
)
"""

# Just torch's deterministic switches, and an op that warns in warn_only mode.
TORCH_STUB = """
import warnings

from torch.utils import deterministic

_mode = {"on": False, "warn_only": False}


def are_deterministic_algorithms_enabled():
    return _mode["on"]


def use_deterministic_algorithms(mode, *, warn_only=False):
    _mode.update(on=mode, warn_only=warn_only)


def empty(n):
    if _mode["on"] and _mode["warn_only"]:
        warnings.warn("empty does not have a deterministic implementation, but you set "
                      "'torch.use_deterministic_algorithms(True, warn_only=True)'.")
        warnings.warn("Deterministic behavior was enabled with either ... but this operation "
                      "is not deterministic because it uses CuBLAS")
    filled = _mode["on"] and deterministic.fill_uninitialized_memory
    return [float("nan") if filled else 0.0] * n
"""


def run_poisoned(
    tmp_path: Path, tests: dict[str, str], *, poison: bool = True, cupy: str = CUPY_STUB
) -> tuple[list[dict[str, Any]], list[list[Any]]]:
    """Run TESTS against the stub libraries; return the journal and the stub CuPy's calls."""
    stubs = {
        "stubs/cupy/__init__.py": cupy,
        "stubs/torch/__init__.py": TORCH_STUB,
        "stubs/torch/utils/__init__.py": "",
        # False where real torch says True, so that the plugin must be seen to set it
        "stubs/torch/utils/deterministic.py": "fill_uninitialized_memory = False\n",
    }
    log = tmp_path / "cupy_calls.jsonl"
    path = [str(tmp_path / "stubs"), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = {"PYTHONPATH": os.pathsep.join(p for p in path if p), "CUPY_STUB_LOG": str(log)}
    env["GPUCI_STATE"] = "off"  # the poisoning's events alone (the ledger's are test_state's)
    if poison:
        env["GPUCI_POISON"] = "1"
    ini = "[pytest]\nfilterwarnings = error\n"
    events = run_child(tmp_path, {**stubs, **tests}, *tests, env=env, ini=ini)
    lines = log.read_text(encoding="utf-8").splitlines() if log.exists() else []
    calls = [json.loads(line) for line in lines]
    return events, calls


def outcomes(events: list[dict[str, Any]]) -> dict[str, str]:
    """Each finished test's outcome, by id."""
    return {e["id"]: e["outcome"] for e in events if e["e"] == "finish"}


CUPY_TESTS = """
import cupy


def test_allocates():
    cupy.cuda.alloc(100)
    cupy.cuda.alloc(0)


def test_restores_the_pool():
    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)


def test_allocates_again():
    cupy.cuda.alloc(7)
"""


def test_poison_fills_every_cupy_allocation(tmp_path: Path) -> None:
    events, calls = run_poisoned(tmp_path, {"test_cupy.py": CUPY_TESTS})
    assert calls == [
        ["set_allocator", "PoisonedAllocator"],  # once the test modules are imported
        ["malloc", 0x1000, 100],
        ["memsetAsync", 0x1000, 0xFF, 100, 0x5EED],
        ["malloc", 0x2000, 0],  # nothing to fill
        ["set_allocator", "method"],  # the test put the bare pool back ...
        ["set_allocator", "PoisonedAllocator"],  # ... and the next test's setup wraps it again
        ["malloc", 0x3000, 7],
        ["memsetAsync", 0x3000, 0xFF, 7, 0x5EED],
    ]
    # poisoned once after collection, once more when a test undid it; no event otherwise
    assert [(e["e"], e.get("libs")) for e in events if e["e"] in ("collected", "poison")] == [
        ("collected", None),
        ("poison", ["cupy"]),
        ("poison", ["cupy"]),
    ]
    assert [e["e"] for e in events] == [
        "collected",
        "poison",
        *["start", "finish"] * 2,
        *["start", "poison", "finish"],  # at the third test's setup
        "end",
    ]
    assert set(outcomes(events).values()) == {"passed"}


@pytest.mark.slow
def test_without_poison_nothing_is_touched(tmp_path: Path) -> None:
    events, calls = run_poisoned(tmp_path, {"test_cupy.py": CUPY_TESTS}, poison=False)
    assert [c[0] for c in calls] == ["malloc", "malloc", "set_allocator", "malloc"]
    assert "poison" not in [e["e"] for e in events]


def test_poison_reaches_cupy_imported_lazily(tmp_path: Path) -> None:
    tests = {
        "test_lazy.py": """
            import pytest


            def test_imports_in_its_body():
                import cupy

                cupy.cuda.alloc(16)  # cupy was not loaded when this test started: not filled


            @pytest.fixture
            def cupy():
                import cupy

                return cupy


            def test_imports_in_a_fixture(cupy):
                cupy.cuda.alloc(32)
            """
    }
    events, calls = run_poisoned(tmp_path, tests)
    assert calls == [
        ["malloc", 0x1000, 16],
        ["set_allocator", "PoisonedAllocator"],
        ["malloc", 0x2000, 32],
        ["memsetAsync", 0x2000, 0xFF, 32, 0x5EED],
    ]
    kinds = [e["e"] for e in events]
    assert kinds == ["collected", "start", "finish", "start", "poison", "finish", "end"]


@pytest.mark.slow
def test_poison_reaches_a_fixture_that_imports_cupy(tmp_path: Path) -> None:
    tests = {
        "test_fixture.py": """
            import pytest


            @pytest.fixture
            def cupy():
                import cupy

                return cupy


            def test_allocates(cupy):
                cupy.cuda.alloc(32)
            """
    }
    events, calls = run_poisoned(tmp_path, tests)
    # the fixture ran after setup's poisoning: the call's poisoning catches it
    assert calls[-2:] == [["malloc", 0x1000, 32], ["memsetAsync", 0x1000, 0xFF, 32, 0x5EED]]
    assert [e["e"] for e in events] == ["collected", "start", "poison", "finish", "end"]


@pytest.mark.slow
def test_poison_fills_torch_memory_without_failing_on_its_warnings(tmp_path: Path) -> None:
    tests = {
        "test_torch.py": """
            import math

            import cupy
            import torch


            def test_empty_is_nan():
                assert all(math.isnan(x) for x in torch.empty(3))
            """
    }
    events, _ = run_poisoned(tmp_path, tests)
    assert [e["libs"] for e in events if e["e"] == "poison"] == [["cupy", "torch"]]
    # filterwarnings = error, yet the warnings deterministic mode brings are not failures
    assert outcomes(events) == {"test_torch.py::test_empty_is_nan": "passed"}


@pytest.mark.slow
def test_a_library_that_cannot_be_poisoned_is_journaled_not_failed(tmp_path: Path) -> None:
    tests = {
        "test_odd.py": """
            import cupy


            def test_one():
                pass


            def test_two():
                pass
            """
    }
    events, _ = run_poisoned(tmp_path, tests, cupy="_log = print\n")
    poisons = [e for e in events if e["e"] == "poison"]
    # reported once, not before every test
    assert poisons == [
        {"e": "poison", "libs": [], "errors": {"cupy": poisons[0]["errors"]["cupy"]}}
    ]
    assert poisons[0]["errors"]["cupy"].startswith("AttributeError:")
    assert set(outcomes(events).values()) == {"passed"}


# Each test passes alone; the first fails when several threads share `scratch`.
RACE = """
import threading
import time

import pytest

scratch = []


def test_race():
    scratch.clear()
    scratch.append(threading.get_ident())
    time.sleep(0.01)
    assert scratch == [threading.get_ident()]


@pytest.mark.thread_unsafe
def test_race_marked_unsafe():
    scratch.clear()
    scratch.append(threading.get_ident())
    time.sleep(0.01)
    assert scratch == [threading.get_ident()]


def test_fails_in_one_thread(thread_index):
    if thread_index == 2:
        raise ValueError(f"thread {thread_index} broke")
"""


@pytest.mark.slow
@needs_run_parallel
def test_a_failure_in_one_thread_is_the_tests_failure(tmp_path: Path) -> None:
    events = run_child(tmp_path, {"test_race.py": RACE}, "--parallel-threads=4", ".")
    collected = next(e for e in events if e["e"] == "collected")
    assert collected["threads"] == 4
    assert collected["single_threaded"] == ["test_race.py::test_race_marked_unsafe"]
    # pytest-run-parallel reports these as errors at call ("PARALLEL FAILED")
    finished = {e["id"]: e for e in events if e["e"] == "finish"}
    race = finished["test_race.py::test_race"]
    assert race["outcome"] == "failed"
    assert race["message"].startswith("assert [")
    assert finished["test_race.py::test_race_marked_unsafe"]["outcome"] == "passed"
    one = finished["test_race.py::test_fails_in_one_thread"]
    assert (one["outcome"], one["message"]) == ("failed", "ValueError: thread 2 broke")
    assert [e["id"] for e in events if e["e"] == "start"] == collected["ids"]
    assert events[-1] == {"e": "end", "exitstatus": 1}


@pytest.mark.slow
@needs_run_parallel
@pytest.mark.parametrize("threads", [[], ["--parallel-threads=1"]])
def test_one_thread_journals_as_before(tmp_path: Path, threads: list[str]) -> None:
    events = run_child(tmp_path, {"test_race.py": RACE}, *threads, ".")
    collected = next(e for e in events if e["e"] == "collected")
    assert "threads" not in collected
    assert "single_threaded" not in collected
    assert set(outcomes(events).values()) == {"passed"}
