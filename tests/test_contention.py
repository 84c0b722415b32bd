"""End-to-end: contention is symmetric. The polluted example's two memory hogs, in checks of
their own: both are `concurrency`, each naming the other, with the one pair command that
showed it, in three checks in a row.

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
from cli_runner import gpuci

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
