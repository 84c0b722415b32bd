"""End-to-end: contention is symmetric. The polluted example's two memory hogs, in checks of
their own: both are `concurrency`, each naming the other, with the one pair command that
showed it, in three checks in a row. And a pair that fails alike in every screen (the suite
screen too, beside the parallel one), whose files the lazy isolated pass leaves out: still
`concurrency`, never `flaky`.

Which hog fails in a screen, and which fails in a pair run, is down to timing: a search
that counted only the victim's own failure called one hog `flaky` or `passed`, or blamed
every co-running file together, in about one check of three. Each check here is a fresh
OUT (no earlier durations), so each draws its timings anew.
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
FILES = ("fakegpu.py", "conftest.py", "pytest.ini", "test_07_hog_train.py", "test_08_hog_infer.py")
TRAIN = "test_07_hog_train.py::test_train_steps"
INFER = "test_08_hog_infer.py::test_batched_inference"
CHECKS = 3


@pytest.mark.slow
def test_both_hogs_name_each_other_in_three_checks_in_a_row(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    for name in FILES:
        shutil.copy(EXAMPLE / name, suite / name)
    for check in range(CHECKS):
        out = tmp_path / f"out{check}"
        env = dict(os.environ, FAKEGPU_DIR=str(tmp_path / f"state{check}"))
        proc = gpuci("check", ".", "--out", str(out), "--timeout", "3", cwd=suite, env=env)
        assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
        verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
        tests = {t["id"]: t for t in verdict["tests"]}
        train, infer = tests[TRAIN], tests[INFER]
        shown = f"check {check + 1}: {train} {infer}"
        assert train["category"] == infer["category"] == "concurrency", shown
        # each names the other: its file (the victim ran beside it) or its test (the
        # partner failed beside it, in the victim's command)
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
# a step that finds another process holding it is a failure, in both processes.
DEVICE = """
    import fcntl
    import os
    import time
    from pathlib import Path

    STEPS, STEP_S = 10, 0.1
    _held = []  # the lock file, open while the process lives: its POSIX lock with it


    def use():
        if not _held:
            _held.append((Path(os.environ["DEVICE_DIR"]) / "device.lock").open("a+"))
        busy = 0
        for _ in range(STEPS):
            try:  # nobody else holds it where this succeeds
                fcntl.lockf(_held[0], fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                busy += 1
            fcntl.lockf(_held[0], fcntl.LOCK_SH)
            time.sleep(STEP_S)
        assert not busy, f"{busy}/{STEPS} steps: device busy, another process holds it"
"""
PAIR = {
    "device.py": DEVICE,
    "test_a_train.py": """
        import device

        def test_train():
            device.use()

        def test_quick():
            pass
    """,
    # its tail keeps its process (and the device) while the suite interpreter, one file
    # behind the parallel screen, reaches test_infer: it fails there too, alike
    "test_b_infer.py": """
        import time

        import device

        def test_infer():
            device.use()

        def test_tail():
            time.sleep(4)
    """,
}
TRAIN_ALIKE = "test_a_train.py::test_train"
INFER_ALIKE = "test_b_infer.py::test_infer"


@pytest.mark.slow
def test_a_pair_that_fails_alike_in_every_screen_is_concurrency(tmp_path: Path) -> None:
    suite = write_files(tmp_path / "suite", PAIR)
    env = dict(os.environ, DEVICE_DIR=str(tmp_path))
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
