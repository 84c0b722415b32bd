"""What a root's card says its culprits left: only what its victims' failure can touch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuci.evidence.results import ModeResults
from gpuci.model import Category, Mode, ModeRun, Outcome, Root, TestResult
from gpuci.state.hints import hinted_candidates, touched_keys
from gpuci.state.left import Ledger
from gpuci.verdict.left_behind import explain_roots
from tests.cli_runner import write_files

CULPRIT = "test_a.py::test_culprit"
# what a CuPy culprit's file left in a fresh interpreter (the descriptors of its context
# creation no longer among them: `tests/test_state.py`), and what the culprit left itself
LEFT_BY_FILE = {
    "fds": {"added": ["/tmp/app.log"]},
    "gpu.processes": {"added": ["pid 4242"]},
    "umask": ["0o022", "0o077"],
}
LEFT = {
    "cupy.pool_limit": [0, 64 << 20],
    "cupy.pool_total": [0, 1 << 20],
    "logging": {"added": ["app: NullHandler"]},
    "env": {"added": ["APP_MODE"]},
}


def _card(tmp_path: Path, message: str, source: str) -> tuple[str, ...]:
    """The lines on the root of CULPRIT and its victim, which failed with `message` at the
    last line of `source`."""
    # a folder per source: the failing line is read through linecache, which keeps a path's
    root_dir = write_files(tmp_path / str(abs(hash(source))), {"test_v.py": source})
    where = f"test_v.py:{len(source.splitlines())}"
    victim = TestResult(
        id="test_v.py::test_victim", file="test_v.py", outcome=Outcome.FAILED,
        message=message, where=where,
    )  # fmt: skip
    run = ModeRun(mode=Mode.SUITE, command=(), rootdir=str(root_dir), workers=1, tests=(victim,))
    results = {Mode.SUITE: ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)}
    root = Root(
        culprits=(CULPRIT,), category=Category.ORDER_DEPENDENT,
        victims=("test_v.py::test_victim",), reproduce="",
    )  # fmt: skip
    ledger = Ledger(tests={CULPRIT: dict(LEFT)}, files={"test_a.py": dict(LEFT_BY_FILE)})
    (explained,) = explain_roots((root,), results, ledger)
    return explained.left


def test_a_missing_module_is_not_explained_by_a_logging_handler(tmp_path: Path) -> None:
    # it points at sys.path, which the culprit did not touch: none of what it left is said
    source = "def test_victim():\n    import app_cli\n"
    assert _card(tmp_path, "ModuleNotFoundError: No module named 'app_cli'", source) == ()
    # nor the device state CuPy left, where the module is missing in CuPy code
    source = "import cupy as cp\ndef test_victim():\n    x = cp.ones(3)\n    import app_cli\n"
    assert _card(tmp_path, "ModuleNotFoundError: No module named 'app_cli'", source) == ()


def test_a_pool_limits_out_of_memory_is_told_the_limit_not_processes_or_descriptors(
    tmp_path: Path,
) -> None:
    source = "import cupy as cp\ndef test_victim():\n    x = cp.zeros(1 << 27)\n"
    message = (
        "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 536,870,912 bytes"
        " (allocated so far: 0 bytes, limit set to: 67,108,864 bytes)."
    )
    assert _card(tmp_path, message, source) == (
        "left a CuPy pool limit of 64.0 MiB",
        "left 1.0 MiB held by CuPy's pool",
    )


def test_a_device_failure_is_told_the_device_state_its_words_do_not_name(
    tmp_path: Path,
) -> None:
    # a stale buffer fails an array comparison: what CuPy left on the device can touch it
    source = "import cupy as cp\ndef test_victim():\n    assert (cp.empty(4) == 0).all()\n"
    assert _card(tmp_path, "AssertionError: assert False", source) == (
        "left a CuPy pool limit of 64.0 MiB",
        "left 1.0 MiB held by CuPy's pool",
    )
    # contention: memory another process of this interpreter's holds can touch it
    message = "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 1,024 bytes"
    assert "its file left other processes on the GPU pid 4242" in _card(
        tmp_path, message, "def test_victim():\n    hold()\n"
    )


def test_a_failure_that_names_what_was_left_is_told_that(tmp_path: Path) -> None:
    source = "import os\ndef test_victim():\n    assert os.environ.get('APP_MODE') is None\n"
    assert _card(tmp_path, "AssertionError: assert 'debug' is None", source) == (
        "left environment variables set APP_MODE",
    )
    source = "import os\ndef test_victim():\n    assert len(os.listdir('/proc/self/fd')) < 9\n"
    assert _card(tmp_path, "AssertionError: assert 300 < 9", source) == (
        "its file left 1 more descriptor(s) open: /tmp/app.log",
    )


def test_the_hint_points_only_where_the_card_would_tell() -> None:
    # a pool limit's out-of-memory error: the test that set it, not the one whose file had
    # a process of its own on the GPU
    left: dict[str, dict[str, Any]] = {
        "a.py::limit": {"cupy.pool_limit": [0, 64 << 20]},
        "b.py::worker": {"gpu.processes": {"added": ["pid 4242"]}},
    }
    text = "OutOfMemoryError: Out of memory allocating 1,024 bytes (limit set to: 67,108,864 bytes)"
    ledger = Ledger(tests=left)
    assert hinted_candidates(ledger, ("a.py::limit", "b.py::worker"), text) == ("a.py::limit",)
    assert touched_keys(text, left["b.py::worker"]) == []
    # without a limit in its words, both can touch it
    contention = "OutOfMemoryError: Out of memory allocating 1,024 bytes"
    assert hinted_candidates(ledger, ("a.py::limit", "b.py::worker"), contention) == (
        "a.py::limit",
        "b.py::worker",
    )


def test_a_pool_limit_named_by_its_failure_hints_only_at_the_test_that_set_it() -> None:
    # CuPy's subset on an H200 with a planted 4 KiB limit: the ledger also pointed at two
    # tests that left memory in the pool or a CuPy stream, and a 3-test hint cost a wave of
    # four runs where the limit's setter alone is two (its run and the confirmation)
    left: dict[str, dict[str, Any]] = {
        "g.py::curand": {"cupy.pool_total": [0, 2 << 20]},
        "i.py::planted": {"cupy.pool_limit": [0, 4096]},
        "n.py::item": {"cupy.pool_used": [0, 512]},
    }
    text = (
        "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 80,384 bytes "
        "(allocated so far: 59,904 bytes, limit set to: 4,096 bytes)."
    )
    order = ("g.py::curand", "i.py::planted", "n.py::item")
    assert hinted_candidates(Ledger(tests=left), order, text) == ("i.py::planted",)
    # without a limit in its words, the pool's memory may be what it lacked: all three
    plain = "cupy.cuda.memory.OutOfMemoryError: Out of memory allocating 80,384 bytes"
    assert hinted_candidates(Ledger(tests=left), order, plain) == order
