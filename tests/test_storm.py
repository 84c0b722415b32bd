"""End-to-end: a failure storm does not hide the findings that matter.

300 parametrized tests over two files fail identically in every mode (as when a library
turns a warning into an error); beside them, a test that depends on another file and an
order-dependent pair. The check spends one alone-run on the 300 (their group's
representative), names both culprits at the default budget, shows the 300 as one group,
and its evidence takes at most twice its main passes.
"""

from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci

STORM = """
    import pytest
    from helpers import call_deprecated

    @pytest.mark.parametrize("case", range(150))
    def test_deprecated_api(case, tmp_path):
        call_deprecated(case, tmp_path)
"""
SUITE = {
    "pytest.ini": "[pytest]\n",
    "shared.py": "state = {}\n",
    # the storm's innermost frame in the suite's own code: one helper for both files
    "helpers.py": """
        def call_deprecated(case, where):
            raise RuntimeError(f"deprecated call at 0x{id(where):x} in {where} (case {case})")
    """,
    "test_storm_a.py": STORM,
    "test_storm_b.py": STORM,
    # depends-on-others: passes only after test_a_warm.py warmed the shared state
    "test_a_warm.py": """
        import shared

        def test_warm_cache():
            shared.state["warm"] = True
    """,
    "test_b_cold.py": """
        import shared

        def test_needs_warm_cache():
            assert shared.state.get("warm"), "cache not warmed"
    """,
    # order-dependent in its own file: fails in every mode, passes alone
    "test_c_limit.py": """
        import shared

        def test_sets_limit():
            shared.state["limit"] = 1

        def test_large_batch():
            assert "limit" not in shared.state, "over the leaked limit"
    """,
}
NEEDS = "test_b_cold.py::test_needs_warm_cache"
VICTIM = "test_c_limit.py::test_large_batch"


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def stormed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, float]:
    root = tmp_path_factory.mktemp("storm") / "suite"
    root.mkdir()
    for name, text in SUITE.items():
        (root / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    started = time.monotonic()
    proc = gpuci(
        "check", ".", "--out", "out", "--modes", "suite,parallel,isolated", "--workers", "2",
        cwd=root,
    )  # fmt: skip
    wall = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    return root / "out", proc.stdout + proc.stderr, wall


@pytest.mark.slow
def test_both_culprits_are_named(stormed: tuple[Path, str, float]) -> None:
    out, _, _ = stormed
    tests = {t["id"]: t for t in read(out / "verdict.json")["tests"]}
    assert tests[NEEDS]["category"] == "depends-on-others"
    assert tests[NEEDS]["providers"] == ["test_a_warm.py::test_warm_cache"]
    assert tests[VICTIM]["category"] == "order-dependent"
    assert tests[VICTIM]["culprits"] == ["test_c_limit.py::test_sets_limit"]


@pytest.mark.slow
def test_the_storm_costs_a_few_alone_runs_and_is_failed_inferred(
    stormed: tuple[Path, str, float],
) -> None:
    out, _, _ = stormed
    evidence = read(out / "evidence" / "evidence.json")
    storm = [t for t in evidence["tests"] if t["id"].startswith("test_storm_")]
    representatives = [t["id"] for t in storm if t["alone"]]
    assert len(representatives) == 1  # it failed alone the same way: no second
    assert sum(len(t["alone"]) for t in storm) == 1
    tests = [t for t in read(out / "verdict.json")["tests"] if t["id"].startswith("test_storm_")]
    assert len(tests) == 300
    assert {t["category"] for t in tests} == {"failed"}
    inferred = [t for t in tests if t.get("inferred_from")]
    assert len(inferred) == 299
    assert all(sorted(t["inferred_from"]) == sorted(representatives) for t in inferred)
    assert len({t["fingerprint"] for t in tests}) == 1
    fingerprint = tests[0]["fingerprint"]
    assert "<hex>" in fingerprint and "<tmp>" in fingerprint and "case N" in fingerprint


@pytest.mark.slow
def test_the_storm_is_one_group_everywhere(stormed: tuple[Path, str, float]) -> None:
    out, output, _ = stormed
    lines = [line for line in output.splitlines() if "test_storm_" in line]
    summary = [line for line in lines if line.startswith("failed")]
    assert summary == [summary[0]] and "300 tests in test_storm_a.py, test_storm_b.py" in summary[0]
    assert "alone: 1 ran alone (failed); 299 inferred from it" in output
    comment = (out / "comment.md").read_text(encoding="utf-8")
    assert "300 tests in test\\_storm\\_a.py" in comment or "300 tests in test_storm" in comment
    assert comment.count("test_storm_a.py::test_deprecated_api[") <= 2  # one command
    html = (out / "report.html").read_text(encoding="utf-8")
    assert '<details class="members"><summary>300 tests</summary>' in html


@pytest.mark.slow
def test_the_evidence_costs_the_storm_one_run(stormed: tuple[Path, str, float]) -> None:
    # counted in runs, not seconds (timings go in benchmarks): the storm's 300 failures cost
    # one alone-run; the rest is the two victims' own (alone-runs and a search each, 9 here);
    # the lazy isolated pass does not re-run the storm's files (alike in every screen)
    out, _, _ = stormed
    evidence = read(out / "evidence" / "evidence.json")
    assert evidence["runs"] <= 12, evidence["phases"]
    isolated = read(out / "isolated" / "run.json")["files"]
    assert {f["file"] for f in isolated if not f.get("inferred")} == {"test_b_cold.py"}


@pytest.mark.slow
def test_gpuci_run_spends_one_alone_run_on_a_storm(tmp_path: Path) -> None:
    # `gpuci run` (a CI job per mode) reruns its failures alone with the check's rule: a
    # group that failed alike runs one representative; the rest are inferred from it and
    # say so in run.json, and `gpuci diff` shows them failed, inferred. (Before: two
    # alone-runs for each of the 20.) The order-dependent victim still runs alone twice.
    suite = {**SUITE, "test_storm_a.py": STORM.replace("150", "10")}
    suite["test_storm_b.py"] = suite["test_storm_a.py"]
    for name, text in suite.items():
        (tmp_path / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    proc = gpuci("run", ".", "--mode", "suite", "--out", "out", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "20 tests failed the same way in suite; running one of them alone" in proc.stderr
    tests = {t["id"]: t for t in read(tmp_path / "out" / "suite" / "run.json")["tests"]}
    storm = [t for i, t in tests.items() if i.startswith("test_storm_")]
    assert len(storm) == 20
    ran = [t for t in storm if t["reruns"]]
    assert [t["reruns"] for t in ran] == [["failed"]]
    inferred = [t for t in storm if t.get("inferred_from")]
    assert len(inferred) == 19
    assert all(t["inferred_from"] == [ran[0]["id"]] for t in inferred)
    assert tests[VICTIM]["reruns"] == ["passed", "passed"]
    assert gpuci("diff", "out", cwd=tmp_path).returncode == 1
    verdict = {t["id"]: t for t in read(tmp_path / "out" / "verdict.json")["tests"]}
    assert {verdict[t["id"]]["category"] for t in storm} == {"failed"}
    assert sum(1 for t in storm if verdict[t["id"]].get("inferred_from")) == 19
    assert verdict[VICTIM]["category"] == "order-dependent"
