"""End-to-end: a claim stands only on runs that show it both ways, each repeated.

Each suite here, built in tmp_path and checked by the real CLI, is one shortcut that once
named a culprit, provider or partner from a run that could not show it
(`gpuci.evidence.claims` says what a claim needs):

- a pool limit's victim beside two memory hogs, whose out-of-memory message reads like
  theirs: a pair run with the hogs fails, but so does its file without them;
- an alternating flaky test among a provider's victims: one group run each way agreed;
- a test that hangs only in threads, after its file's first test: the hang is a note;
- a memory-hog pair in one file's copies (the same hog in the suite interpreter and in its
  parallel file at once): only a strict run that starts the two together asks the
  screen's question, not the hog alone.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci, needs_run_parallel, write_files

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "polluted_suite"


def check(suite: Path, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """`gpuci check` of `suite` into `suite/out`; its verdict's tests by id."""
    proc = gpuci("check", ".", "--out", "out", *args, cwd=suite, env=env)
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    verdict = json.loads((suite / "out" / "verdict.json").read_text())
    return {t["id"]: t for t in verdict["tests"]}


# Two memory hogs that fail, with CuPy's words, exactly where they meet in the parallel
# screen (`hogs.py`: through files, not the clock; as the polluted example's two do), and a
# file whose first test sets a pool limit its second runs out of memory under, in CuPy's
# words too ("limit set to"). Both begin "OutOfMemoryError: out of memory allocating N
# bytes": one failure kind.
HOG = """
import fakegpu
import hogs


@hogs.hog("{name}")
def test_{name}():
    if hogs.contend("{name}", ("{partner}",), expect_modes=("parallel",)):
        raise fakegpu.OutOfMemoryError(
            "out of memory allocating 805306368 bytes (allocated so far: 0 bytes)"
        )
"""
POOL_LIMIT = {
    "conftest.py": """
        import hogs

        def pytest_collection_finish(session):
            hogs.announce(session.items)
    """,
    "hogs.py": (EXAMPLE / "hogs.py").read_text(encoding="utf-8"),
    "fakegpu.py": (EXAMPLE / "fakegpu.py").read_text(encoding="utf-8"),
    # the suite interpreter's first test is no hog: there the hogs run one after another
    "test_0_first.py": "def test_first():\n    pass\n",
    "test_a_train.py": HOG.format(name="train", partner="infer"),
    "test_b_infer.py": HOG.format(name="infer", partner="train"),
    "test_c_limit.py": """
        import fakegpu


        def test_set_limit():
            fakegpu.get_default_memory_pool().set_limit(size=1 << 20)  # never restored


        def test_big_alloc():
            fakegpu.empty(1 << 18)  # 2 MiB, over the limit the test above left
    """,
}


@pytest.mark.slow
def test_a_pool_limit_victim_beside_memory_hogs_is_order_dependent(tmp_path: Path) -> None:
    suite = write_files(tmp_path / "suite", POOL_LIMIT)
    env = dict(
        os.environ,
        HOG_DIR=str(tmp_path / "hogs"),
        HOG_HOLD_S="0.2",
        FAKEGPU_DIR=str(tmp_path / "fake"),
    )
    tests = check(suite, "--modes", "suite,parallel,isolated", "--workers", "3", env=env)
    victim = tests["test_c_limit.py::test_big_alloc"]
    assert "limit set to" in victim["message"]
    # its file fails without the hogs: no pair can show it; its own file does
    assert victim["category"] == "order-dependent", victim
    assert victim["culprits"] == ["test_c_limit.py::test_set_limit"]
    # out of memory under its own process's limit: never paired with another process
    evidence = json.loads((suite / "out" / "evidence" / "evidence.json").read_text())
    searched = {t["id"]: t for t in evidence["tests"]}["test_c_limit.py::test_big_alloc"]
    assert "pair" not in searched["search"], searched
    train, infer = tests["test_a_train.py::test_train"], tests["test_b_infer.py::test_infer"]
    assert train["category"] == infer["category"] == "concurrency", (train, infer)
    # contention is symmetric: each hog names the other's file, never the limit's
    assert [c.partition("::")[0] for c in train["culprits"]] == ["test_b_infer.py"]
    assert [c.partition("::")[0] for c in infer["culprits"]] == ["test_a_train.py"]


# A provider's two victims, and a test that fails as they do in every screen but, in the
# evidence's runs, every other time it runs (its count in a file): the first of them
# passes. One group run each way agreed with "depends-on-others" for it.
NEEDS = """
def test_{name}():
    assert registry.READY, "the backend was never registered"
"""
PROVIDER = {
    "pytest.ini": "[pytest]\n",
    "registry.py": "READY = False\n",
    "test_a_provider.py": """
        import registry


        def test_a_registers():
            registry.READY = True
    """,
    "test_b_needs.py": "import os\nfrom pathlib import Path\n\nimport registry\n\n"
    + "\n".join(NEEDS.format(name=n) for n in ("b_one", "b_two"))
    + '''

def test_b_flip():
    """Fails as a victim of the provider in the screens; in the evidence, every other run."""
    if os.environ.get("GPUCI_MODE") in ("isolated", "parallel", "suite"):
        assert registry.READY, "the backend was never registered"
        return
    counter = Path(os.environ["FLIP_FILE"])
    runs = int(counter.read_text()) + 1 if counter.exists() else 1
    counter.write_text(str(runs))
    assert runs % 2, "the backend was never registered"
''',
}


@pytest.mark.slow
def test_an_alternating_test_among_a_providers_victims_is_flaky(tmp_path: Path) -> None:
    suite = write_files(tmp_path / "suite", PROVIDER)
    env = dict(os.environ, FLIP_FILE=str(tmp_path / "flips"))
    tests = check(suite, "--modes", "suite,parallel,isolated", "--workers", "2", env=env)
    flip = tests["test_b_needs.py::test_b_flip"]
    assert flip["category"] == "flaky", flip
    assert not flip.get("providers") and not flip.get("culprits")
    # its outcomes went both ways under one command: the evidence ran it at least 3 times
    assert int((tmp_path / "flips").read_text()) >= 3
    for victim in ("test_b_needs.py::test_b_one", "test_b_needs.py::test_b_two"):
        test = tests[victim]
        assert test["category"] == "depends-on-others", test
        assert test["providers"] == ["test_a_provider.py::test_a_registers"]


# An order-dependent victim (a cache its file's first test fills) that fails in isolated,
# parallel and suite, passes alone, and in threads waits forever for what never comes.
THREADS_HANG = {
    "pytest.ini": "[pytest]\n",
    "test_cache.py": """
        import os
        import time

        CACHE = {}


        def test_fill_cache():
            CACHE["rows"] = 3  # never cleared


        def test_empty_cache():
            if CACHE and os.environ.get("GPUCI_MODE") == "threads":
                time.sleep(600)  # in threads it waits for a worker that never comes
            assert not CACHE, "a cache an earlier test filled"
    """,
    "test_plain.py": """
        def test_add():
            assert 1 + 1 == 2
    """,
}


@pytest.mark.slow
@needs_run_parallel
def test_a_hang_in_threads_only_is_a_note_on_the_category(tmp_path: Path) -> None:
    suite = write_files(tmp_path / "suite", THREADS_HANG)
    modes = ("--modes", "suite,parallel,isolated,threads")
    # the hang is cut after --timeout without progress; every other test takes moments (a
    # start-up on busy cores is no hang: before the first test the floor of 30 s holds)
    tests = check(suite, *modes, "--timeout", "5")
    victim = tests["test_cache.py::test_empty_cache"]
    assert victim["outcomes"]["threads"] == "timed-out"
    assert victim["category"] == "order-dependent", victim
    assert victim["culprits"] == ["test_cache.py::test_fill_cache"]
    assert any("timed out in threads" in n for n in victim["notes"]), victim["notes"]
    assert tests["test_plain.py::test_add"]["category"] == "passed"
