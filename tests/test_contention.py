"""End-to-end: contention is symmetric. A pair of memory hogs that fails alike in every
screen (the suite screen too, beside the parallel one), whose files the lazy isolated pass
leaves out: still `concurrency`, never `flaky`, each naming the other.

The hogs meet through files (the polluted example's `hogs.py`), not by the clock. The
example's own two hogs, each naming the other with the one pair command that showed it,
are in tests/test_check.py's check of the whole example.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from cli_runner import gpuci, write_files

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "polluted_suite"


# A device one process at a time may use, as two memory hogs share one GPU: a process takes
# it at its first use and keeps it until it exits (a memory pool keeps what it allocated);
# a hog that finds another process holding it fails, in both processes. In the screens
# (suite and parallel) each hog waits for another holder, certain to come: the suite
# interpreter and the two parallel files all start at once (`hogs.py`).
HOG = """
import os

import hogs

MODES = ("suite", "parallel")


@hogs.hog("device")
def test_{name}():
    try:
        held = hogs.contend("device", ("device",), expect_modes=MODES, keep=True)
        assert not held, hogs.MESSAGE
    finally:
        if os.environ.get("GPUCI_MODE") == "suite":
            hogs.mark_done("suite-{name}")
"""
PAIR = {
    "conftest.py": """
        import hogs

        def pytest_collection_finish(session):
            hogs.announce(session.items)
    """,
    "hogs.py": (EXAMPLE / "hogs.py").read_text(encoding="utf-8"),
    "test_a_train.py": HOG.format(name="train")
    + """
def test_quick():
    pass
""",
    # its tail keeps its process (and the device) in the parallel screen until the suite
    # interpreter, which runs it after test_a_train.py's, has met it there: it fails too
    "test_b_infer.py": HOG.format(name="infer")
    + """
def test_tail():
    if os.environ.get("GPUCI_MODE") == "parallel":
        assert hogs.wait_done("suite-infer"), "the suite interpreter never reached test_infer"
""",
}
TRAIN_ALIKE = "test_a_train.py::test_train"
INFER_ALIKE = "test_b_infer.py::test_infer"


@pytest.mark.slow
def test_a_pair_that_fails_alike_in_every_screen_is_concurrency(tmp_path: Path) -> None:
    suite = write_files(tmp_path / "suite", PAIR)
    # the hogs' least hold decides nothing here (no durations order the files): short
    env = dict(os.environ, HOG_DIR=str(tmp_path / "hogs"), HOG_HOLD_S="0.2")
    args = ("--modes", "suite,parallel,isolated", "--workers", "2")
    proc = gpuci("check", ".", "--out", "out", *args, cwd=suite, env=env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = suite / "out"
    tests = {t["id"]: t for t in json.loads((out / "verdict.json").read_text())["tests"]}
    train, infer = tests[TRAIN_ALIKE], tests[INFER_ALIKE]
    for test in (train, infer):  # failed alike in both screens: isolated left them out
        assert test["outcomes"] == {"isolated": "failed", "parallel": "failed", "suite": "failed"}
        assert test["inferred"] == ["isolated"]
    isolated = json.loads((out / "isolated" / "run.json").read_text())
    assert not [f for f in isolated["files"] if not f.get("inferred")]
    # the inferred isolated failure is not read as a fresh one: not flaky, but the pair
    assert train["category"] == infer["category"] == "concurrency", (train, infer)
    assert [c.partition("::")[0] for c in train["culprits"]] == ["test_b_infer.py"]
    assert [c.partition("::")[0] for c in infer["culprits"]] == ["test_a_train.py"]
    assert train["reruns"] and set(train["reruns"]) == {"passed"}
    # one contention, told once with both sides named (each names the other)
    verdict = json.loads((out / "verdict.json").read_text())
    pairs = [r for r in verdict["roots"] if r["category"] == "concurrency"]
    assert [sorted(r["victims"]) for r in pairs] == [[TRAIN_ALIKE, INFER_ALIKE]]
    told = f"{TRAIN_ALIKE} and {INFER_ALIKE} fail beside each other"
    comment = (out / "comment.md").read_text(encoding="utf-8")
    assert comment.count("fail beside each other") == 1, comment
    assert told in proc.stdout or f"{INFER_ALIKE} and {TRAIN_ALIKE} fail beside" in proc.stdout
