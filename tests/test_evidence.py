"""End-to-end: the evidence rules of `gpuci check`, with the real CLI on suites in tmp_path.

One environment per check (every interpreter sees the same GPUs), alone-runs once per
check and counted, the budget's cut shown, a lazy isolated pass, deselected files.
"""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci, python_word

SUITE = {
    "pytest.ini": """
        [pytest]
        markers =
            slow: a slow test
    """,
    # passes only when it sees both GPUs of --gpus 0,1, as CuPy's multi-GPU tests do
    "test_multi.py": """
        import os

        def test_needs_two_gpus():
            assert len(os.environ["CUDA_VISIBLE_DEVICES"].split(",")) == 2

        def test_single():
            pass
    """,
    "test_bad.py": """
        import sys

        def test_first_fails():
            assert False, "broken"

        def test_second_fails():
            # its words name what else the interpreter collected: they differ between the
            # suite and the file's own interpreter, so the lazy isolated pass runs the file
            others = "beside test_clean.py" if "test_clean" in sys.modules else "on its own"
            assert False, f"broken too, {others}"
    """,
    "test_clean.py": """
        def test_ok():
            pass

        def test_ok_too():
            pass
    """,
    # every test deselected by -m "not slow": a note, not an error
    "test_slow.py": """
        import pytest

        @pytest.mark.slow
        def test_slow():
            pass
    """,
}
MULTI = "test_multi.py::test_needs_two_gpus"
FIRST = "test_bad.py::test_first_fails"
SECOND = "test_bad.py::test_second_fails"


def build(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in SUITE.items():
        (root / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return root


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = build(tmp_path_factory.mktemp("evidence") / "suite")
    proc = gpuci(
        "check", ".", "--out", "out", "--gpus", "0,1", "--workers", "2", "--",
        "-m", "not slow",
        cwd=root,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]  # the planted failures fail it
    return root / "out", proc.stdout + proc.stderr


@pytest.mark.slow
def test_a_test_that_needs_both_gpus_passes_in_every_mode(checked: tuple[Path, str]) -> None:
    out, _ = checked
    tests = {t["id"]: t for t in read(out / "verdict.json")["tests"]}
    assert tests[MULTI]["category"] == "passed"
    assert set(tests[MULTI]["outcomes"].values()) == {"passed"}
    parallel = read(out / "parallel" / "run.json")
    # every slot saw both GPUs, rotated so that slot k starts at GPU k (mod 2); slot 0 is
    # the suite interpreter's in the screens, slot 1 the reversed one's (on by default with
    # two GPUs: first on the GPU the suite's is not), the parallel files share the others
    assert all(f["gpu"] == ("0,1", "1,0")[f["slot"] % 2] for f in parallel["files"])
    assert {f["slot"] for f in parallel["files"]} <= {2, 3}
    assert {f["gpu"] for f in read(out / "suite" / "run.json")["files"]} == {"0,1"}
    assert {f["gpu"] for f in read(out / "reversed" / "run.json")["files"]} == {"1,0"}
    assert read(out / "evidence" / "evidence.json")["gpu"] == "0,1"


@pytest.mark.slow
def test_reproduce_commands_carry_the_gpus(checked: tuple[Path, str]) -> None:
    out, _ = checked
    tests = {t["id"]: t for t in read(out / "verdict.json")["tests"]}
    assert tests[SECOND]["category"] == "failed"
    # the check's interpreter: `python` where PATH has it, else named
    python = python_word()
    seed = read(out / "suite" / "run.json")["environment"]["hash_seed"]  # the check's own
    gpus_and_seed = f"CUDA_VISIBLE_DEVICES=0,1 PYTHONHASHSEED={seed}"
    assert f"{gpus_and_seed} {python} -m pytest" in tests[SECOND]["reproduce"]
    # pasted into a shell where gpuci ran (the suite's root: no `cd`), the command shows
    # the failure (and the multi-GPU test's pass)
    command = tests[SECOND]["reproduce"]
    assert not command.startswith("cd ")
    proc = subprocess.run(
        ["bash", "-c", command], cwd=out.parent, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1 and "1 failed" in proc.stdout


@pytest.mark.slow
def test_each_suspect_is_run_alone_k_times_per_check(checked: tuple[Path, str]) -> None:
    out, _ = checked
    evidence = read(out / "evidence" / "evidence.json")
    alone = {t["id"]: t["alone"] for t in evidence["tests"]}
    # the first test of its file already ran alone in isolated: one more run; the other two
    assert alone == {FIRST: ["failed"], SECOND: ["failed", "failed"]}
    assert evidence["runs"] == 3
    logs = (out / "evidence" / "logs" / "test_bad.py.log").read_text(encoding="utf-8")
    assert logs.count("=== gpuci: alone: ") == 3
    for mode in ("isolated", "parallel", "suite"):  # no mode reran anything of its own
        assert all(t["reruns"] == [] for t in read(out / mode / "run.json")["tests"])


@pytest.mark.slow
def test_isolated_runs_only_files_that_did_not_pass_in_parallel(
    checked: tuple[Path, str],
) -> None:
    out, _ = checked
    isolated = read(out / "isolated" / "run.json")
    ran = {f["file"] for f in isolated["files"] if not f.get("inferred")}
    assert ran == {"test_bad.py"}
    inferred = {t["id"] for t in isolated["tests"] if t.get("inferred")}
    assert inferred == {
        "test_multi.py::test_needs_two_gpus",
        "test_multi.py::test_single",
        "test_clean.py::test_ok",
        "test_clean.py::test_ok_too",
    }
    tests = {t["id"]: t for t in read(out / "verdict.json")["tests"]}
    assert tests["test_clean.py::test_ok"]["inferred"] == ["isolated"]
    assert "inferred" not in tests[FIRST]
    note = "isolated: 2 of 3 files inferred from parallel, where they passed"
    assert note in (out / "report.html").read_text(encoding="utf-8")
    assert note in (out / "comment.md").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_fully_deselected_file_is_a_note(checked: tuple[Path, str]) -> None:
    out, output = checked
    assert "test_slow.py: every test deselected by the pytest arguments" in output
    ids = {t["id"] for t in read(out / "verdict.json")["tests"]}
    assert not any(i.startswith("test_slow.py") for i in ids)


@pytest.mark.slow
def test_the_budget_cut_is_shown_not_hidden(tmp_path: Path) -> None:
    root = build(tmp_path / "suite")
    proc = gpuci(
        "check", ".", "--out", "out", "--gpus", "0,1", "--evidence-budget", "0",
        "--", "-m", "not slow",
        cwd=root,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = root / "out"
    verdict = read(out / "verdict.json")
    tests = {t["id"]: t for t in verdict["tests"]}
    assert tests[SECOND]["cut"] == "not rerun: budget"
    assert tests[SECOND]["reruns"] == []
    assert verdict["evidence"]["runs"] == 0 and verdict["evidence"]["cut"] == 2
    assert "2 tests not rerun: budget" in verdict["reasons"]
    assert "(not rerun: budget)" in proc.stdout
    assert "not rerun: budget" in (out / "report.html").read_text(encoding="utf-8")
    assert "not rerun: budget" in (out / "comment.md").read_text(encoding="utf-8")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--gpus", "0,1", "--gpus-per-slot", "3"], "--gpus-per-slot 3"),
        (["--gpus", "0,1", "--gpus-per-slot", "0"], "--gpus-per-slot 0"),
        (["--gpus", "0,1", "--gpus-per-slot", "-1"], "--gpus-per-slot -1"),
        (["--gpus", "0,1", "--gpus-per-slot", "two"], "--gpus-per-slot"),
        (["--evidence-budget", "soon"], "--evidence-budget"),
        (["--evidence-budget", "-5"], "--evidence-budget"),
        (["--modes", "parallel,parallel"], "--modes"),
    ],
)
def test_bad_evidence_options_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], named: str
) -> None:
    root = build(tmp_path / "suite")
    proc = gpuci("check", ".", "--out", "out", *args, cwd=root)
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuci: error: ")
    assert named in lines[0]
    assert not (root / "out").exists()  # nothing was run, nothing replaced
