"""End-to-end: `gpuci check` on the bundled polluted suite, every category as written down."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest
from cli_runner import gpuci

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "examples" / "polluted_suite"
TRAIN = "test_07_hog_train.py::test_train_steps"
INFER = "test_08_hog_infer.py::test_batched_inference"


@pytest.fixture(scope="module")
def checked(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess[str], dict[str, str]]:
    """One `gpuci check` of the polluted suite, shared by the assertions below."""
    tmp = tmp_path_factory.mktemp("check")
    # the hogs' least hold decides nothing here (they meet through files, and no durations
    # order the files): short, so each of their many runs does not sleep 1.5 s
    env = dict(os.environ, FAKEGPU_DIR=str(tmp / "state"), HOG_HOLD_S="0.2")
    env.pop("CI_JOB_URL", None)
    out = tmp / "out"
    # no --evidence-budget: the default follows the suspects, and must be enough for this
    # suite, where most tests are planted findings, to name every culprit
    args = ("--timeout", "3")
    proc = gpuci("check", str(SUITE), "--out", str(out), *args, cwd=ROOT, env=env)
    return out, proc, env


@pytest.mark.slow
def test_every_test_gets_its_expected_category(
    checked: tuple[Path, subprocess.CompletedProcess[str], dict[str, str]],
) -> None:
    out, proc, _ = checked
    assert proc.returncode == 1, proc.stderr[-3000:]  # planted failures fail the verdict
    expected = json.loads((SUITE / "expected.json").read_text(encoding="utf-8"))
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    got = {t["id"]: t["category"] for t in verdict["tests"]}
    assert got == {i: e if isinstance(e, str) else e["category"] for i, e in expected.items()}
    # a concurrency finding names its partner's file, or its test (a pair's partner)
    named = {
        t["id"]: [c.partition("::")[0] if t["category"] == "concurrency" else c for c in found]
        for t in verdict["tests"]
        if (found := t.get("culprits") or t.get("providers"))
    }
    assert named == {i: e["culprits"] for i, e in expected.items() if "culprits" in e}
    # contention is symmetric: one pair command shows it for both hogs, the one the
    # evidence ran
    tests = {t["id"]: t for t in verdict["tests"]}
    train, infer = tests[TRAIN], tests[INFER]
    assert train["reproduce"] == infer["reproduce"], (train, infer)
    assert " & " in train["reproduce"], train
    assert verdict["verdict"] == "fail"
    every = {
        "passed",
        "skipped",
        "failed",
        "flaky",
        "order-dependent",
        "depends-on-others",
        "concurrency",
        "crashed",
        "timed-out",
        "not-run",
    }
    assert {c for c, n in verdict["summary"].items() if n} == every
    # threads runs only where asked for (the CPU example does not ask), installed or not
    assert set(verdict["modes"]) == {"isolated", "parallel", "suite"}
    assert verdict["checked"]["threads"]["ran"] is False


@pytest.mark.slow
def test_check_writes_every_artifact_and_a_summary(
    checked: tuple[Path, subprocess.CompletedProcess[str], dict[str, str]],
) -> None:
    out, proc, _ = checked
    for name in ("verdict.json", "report.html", "comment.md"):
        assert (out / name).stat().st_size > 0
    for mode in ("isolated", "parallel", "suite"):
        assert (out / mode / "run.json").exists()
        assert (out / mode / "junit.xml").exists()
    lines = proc.stdout.splitlines()
    assert any(line.startswith("order-dependent") for line in lines)
    # gpuci ran in the project's root; the suite's rootdir (its pytest.ini) lies below it
    assert any(
        line.strip().startswith("reproduce: cd examples/polluted_suite && ") for line in lines
    )
    assert any(line.startswith("verdict: fail") for line in lines)


@pytest.mark.slow
def test_a_baseline_makes_regressions_known_and_allow_known_passes(
    checked: tuple[Path, subprocess.CompletedProcess[str], dict[str, str]], tmp_path: Path
) -> None:
    out, _, env = checked
    baseline = tmp_path / "baseline.json"
    baseline.write_text((out / "verdict.json").read_text(encoding="utf-8"), encoding="utf-8")
    again = tmp_path / "again.json"
    proc = gpuci("diff", str(out), "--baseline", str(baseline), "-o", str(again), cwd=ROOT, env=env)
    assert proc.returncode == 1
    verdict = json.loads(again.read_text(encoding="utf-8"))
    isolation = [
        t
        for t in verdict["tests"]
        if t["category"] in ("order-dependent", "depends-on-others", "concurrency")
    ]
    assert isolation and all(t["new"] is False for t in isolation)
    # only known regressions and the planted real failures remain: allowed, it passes
    allowed = "known,failed,crashed,timed-out"
    proc = gpuci(
        "diff",
        str(out),
        "--baseline",
        str(baseline),
        "-o",
        str(again),
        "--allow",
        allowed,
        cwd=ROOT,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    # without the baseline the same regressions are not known, and the verdict fails
    proc = gpuci("diff", str(out), "-o", str(again), "--allow", allowed, cwd=ROOT, env=env)
    assert proc.returncode == 1


@pytest.mark.slow
def test_the_report_tells_time_and_inference_as_they_were(
    checked: tuple[Path, subprocess.CompletedProcess[str], dict[str, str]],
) -> None:
    out, _, _ = checked
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    html = (out / "report.html").read_text(encoding="utf-8")
    note = (out / "comment.md").read_text(encoding="utf-8")
    # the timeline draws every worker: the suite interpreter's slot is one of them
    workers = verdict["modes"]["parallel"]["workers"]
    lanes = re.findall(r'text-anchor="end">slot (\d+)', html)
    assert sorted(map(int, lanes)) == list(range(workers)), lanes
    assert "slot 0 (suite)" in html
    # a file isolated concluded from parallel has no isolated time of its own
    modes = re.search(r"<tr><th>file</th>(.*?)</tr>", html, re.DOTALL)
    assert modes is not None
    column = re.findall(r"<th>([^<]+)</th>", modes[1]).index("isolated")
    inferred = [r["file"] for r in verdict["modes"]["isolated"]["file_runs"] if r.get("inferred")]
    assert inferred, "the example has files that passed in parallel"
    for file in inferred:
        row = re.search(rf"<tr><td><code>{re.escape(file)}</code></td>(.*?)</tr>", html)
        assert row is not None, file
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row[1])
        assert cells[column] == "—", (file, cells)
    # inferring a passing file is a fact, not a warning; so is leaving out one whose
    # failures were alike in every screen (the example's test_02_pool.py and others)
    runs = verdict["modes"]["isolated"]["file_runs"]
    alike = sum(1 for r in runs if r.get("inferred") and r["status"] != "passed")
    fact = f"isolated: {len(inferred) - alike} of {len(runs)} files inferred from parallel,"
    assert fact in note and f"⚠️ {fact}" not in note
    assert f'<ul class="facts">\n<li>{fact}' in html
    left_out = f"isolated: {alike} of {len(runs)} files not re-run, their failures alike"
    assert alike and left_out in note and left_out in html
