"""End-to-end: contention is symmetric. The polluted example's two memory hogs, in a check of
their own: both are `concurrency`, each naming the other, with the one pair command that
showed it. And a pair that fails alike in every screen (the suite screen too, beside the
parallel one), whose files the lazy isolated pass leaves out: still `concurrency`, never
`flaky`.

The hogs meet through files (the example's `hogs.py`), not by the clock: in the parallel
screen and in every pair run both fail, on a loaded machine too; alone, and in the suite
interpreter, they pass. So one check decides it (when the hogs met by the clock, three
checks in a row were the guard against a lucky one). Each check here is a fresh OUT (no
earlier durations) and a fresh scratch folder.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from cli_runner import gpuci, write_files

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "polluted_suite"
FILES = (
    "fakegpu.py",
    "hogs.py",
    "conftest.py",
    "pytest.ini",
    "test_07_hog_train.py",
    "test_08_hog_infer.py",
)
# first in the suite interpreter, as in the whole example: there the hogs come after other
# tests, and do not contend (`hogs.py`)
FIRST = "def test_first():\n    pass\n"
TRAIN = "test_07_hog_train.py::test_train_steps"
INFER = "test_08_hog_infer.py::test_batched_inference"


@pytest.mark.slow
def test_both_hogs_name_each_other(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in FILES:
        shutil.copy(EXAMPLE / name, suite / name)
    (suite / "test_00_first.py").write_text(FIRST, encoding="utf-8")
    out = tmp_path / "out"
    env = dict(os.environ, FAKEGPU_DIR=str(tmp_path / "state"))
    proc = gpuci("check", ".", "--out", str(out), "--timeout", "3", cwd=suite, env=env)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    tests = {t["id"]: t for t in verdict["tests"]}
    train, infer = tests[TRAIN], tests[INFER]
    shown = f"{train} {infer}"
    assert train["category"] == infer["category"] == "concurrency", shown
    # each names the other: its file (the victim ran beside it) or its test (the partner
    # failed beside it, in the victim's command)
    assert [c.partition("::")[0] for c in train["culprits"]] == [INFER.partition("::")[0]]
    assert [c.partition("::")[0] for c in infer["culprits"]] == [TRAIN.partition("::")[0]]
    # one pair command shows it for both: the one the evidence ran
    assert train["reproduce"] == infer["reproduce"], shown
    assert " & " in train["reproduce"], shown
    # the stuck kernel is the only other finding: no hog is flaky, none blames all
    others = {i: t["category"] for i, t in tests.items() if i not in (TRAIN, INFER)}
    assert sorted(c for c in others.values() if c != "passed") == ["timed-out"], others


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
    env = dict(os.environ, HOG_DIR=str(tmp_path / "hogs"))
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
