"""End-to-end: the lazy isolated pass leaves out a file whose failures were alike in every
screen; its tests' alone-runs decide, as if isolated had not been asked for them.

One check (suite, parallel, isolated) of four files: five parametrized tests that raise
one error everywhere (`failed`, one representative alone); an order-dependent pair in
one file, failing alike in every screen but passing alone (`order-dependent`, its culprit
found in its file); a failure whose words differ between the screens (re-run in
isolated); and a clean file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci, write_files

SUITE = {
    "shared.py": "state = {}\n",
    "test_a_broken.py": """
        import pytest

        @pytest.mark.parametrize("case", range(5))
        def test_backend(case):
            raise RuntimeError(f"backend not found (case {case})")
    """,
    "test_b_limit.py": """
        import shared

        def test_sets_limit():
            shared.state["limit"] = 1

        def test_large_batch():
            assert "limit" not in shared.state, "over the leaked limit"
    """,
    # in the suite it sees the name test_b_names.py left; in parallel and alone, nobody
    "test_b_names.py": """
        import shared

        def test_names():
            shared.state["who"] = "alice"
    """,
    "test_c_who.py": """
        import shared

        def test_who():
            assert False, f"saw {shared.state.get('who', 'nobody')}"
    """,
    "test_d_clean.py": "def test_ok():\n    pass\n",
}
BROKEN = [f"test_a_broken.py::test_backend[{case}]" for case in range(5)]
VICTIM = "test_b_limit.py::test_large_batch"


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = write_files(tmp_path_factory.mktemp("alike") / "suite", SUITE)
    modes = ("--modes", "suite,parallel,isolated", "--workers", "2")
    proc = gpuci("check", ".", "--out", "out", *modes, cwd=root)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root / "out", proc.stdout + proc.stderr


@pytest.mark.slow
def test_files_that_failed_alike_everywhere_are_not_rerun_in_isolated(
    checked: tuple[Path, str],
) -> None:
    out, output = checked
    isolated = read(out / "isolated" / "run.json")
    ran = {f["file"] for f in isolated["files"] if not f.get("inferred")}
    assert ran == {"test_c_who.py"}  # its words differ between the screens
    journals = {p.name for p in (out / "isolated" / "journal").iterdir()}
    assert journals == {"test_c_who.py.jsonl"}
    assert "isolated: 2 file(s) failed alike in every screen (suite, parallel)" in output
    said = "isolated: 2 of 5 files not re-run, their failures alike in every screen"
    assert said in (out / "comment.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_their_representatives_decide_a_real_failure(checked: tuple[Path, str]) -> None:
    out, output = checked
    tests = {t["id"]: t for t in read(out / "verdict.json")["tests"]}
    assert {tests[i]["category"] for i in BROKEN} == {"failed"}
    assert all(tests[i]["outcomes"]["isolated"] == "failed" for i in BROKEN)  # inferred
    assert all(tests[i]["inferred"] == ["isolated"] for i in BROKEN)
    alone = {t["id"]: t["alone"] for t in read(out / "evidence" / "evidence.json")["tests"]}
    assert sorted(len(alone.get(i, [])) for i in BROKEN) == [0, 0, 0, 0, 1]
    assert "(isolated not re-run for it: its file failed alike in every screen)" in output


@pytest.mark.slow
def test_one_that_passes_alone_is_order_dependent_with_its_culprit(
    checked: tuple[Path, str],
) -> None:
    out, _ = checked
    tests = {t["id"]: t for t in read(out / "verdict.json")["tests"]}
    victim = tests[VICTIM]
    assert victim["category"] == "order-dependent", victim
    assert victim["outcomes"] == {"isolated": "failed", "parallel": "failed", "suite": "failed"}
    assert victim["culprits"] == ["test_b_limit.py::test_sets_limit"]
    # no "isolated ran the tests before it" note: isolated did not run it
    assert not any("isolated runs a fresh interpreter" in n for n in victim.get("notes", []))


@pytest.mark.slow
def test_a_failure_whose_words_differ_between_screens_is_rerun(
    checked: tuple[Path, str],
) -> None:
    out, _ = checked
    who = {t["id"]: t for t in read(out / "verdict.json")["tests"]}["test_c_who.py::test_who"]
    assert who["category"] == "failed"
    assert "inferred" not in who
    assert who["outcomes"] == {"isolated": "failed", "parallel": "failed", "suite": "failed"}
