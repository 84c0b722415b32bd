"""pytest's own failures are failures (issue 27, items 1 and 7), through the real CLI.

An INTERNALERROR, a usage error (a file that deleted itself), tests an interpreter never
collected, and ids only a JSON route keeps intact: none of them may end in a green verdict.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuci.run.sched.unit import UNCOLLECTED
from tests.cli_runner import gpuci, write_files

MODES = ("--modes", "suite,parallel,isolated")
# raises in pytest's own hook for one test: plain pytest prints INTERNALERROR, exit 3
RAISING_CONFTEST = """
    def pytest_itemcollected(item):
        if item.name == "test_b":
            raise RuntimeError("hook refuses test_b")
"""
THREE_TESTS = """
    def test_a():
        pass

    def test_b():
        pass

    def test_c():
        pass
"""


def verdict_of(root: Path) -> dict[str, Any]:
    return dict(json.loads((root / "out" / "verdict.json").read_text(encoding="utf-8")))


@pytest.mark.slow
def test_internal_error_fails_the_check_with_its_cause(tmp_path: Path) -> None:
    root = write_files(tmp_path, {"conftest.py": RAISING_CONFTEST, "test_x.py": THREE_TESTS})
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=root)
    # pytest's collection ended: plain pytest runs no test (exit 3), the check none either,
    # its verdict fails with pytest's cause (issue 37: never green where pytest is red),
    # and it exits as plain pytest does (issue 53)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    cause = "RuntimeError: hook refuses test_b (at conftest.py:4 in pytest_itemcollected)"
    ended = "pytest's collection ended with INTERNALERROR (plain pytest: exit 3, no test run)"
    assert f"gpuci: {ended}: {cause}" in proc.stderr
    assert f"verdict: fail ({ended}: {cause})" in proc.stdout
    verdict = verdict_of(root)
    assert verdict["verdict"] == "fail"
    (failure,) = verdict["tests"]
    assert failure["id"] == "[pytest collection]"
    assert failure["category"] == "failed"
    assert cause in failure["message"]
    for name in ("report.html", "comment.md"):
        assert "hook refuses test_b" in (root / "out" / name).read_text(encoding="utf-8"), name


@pytest.mark.slow
def test_a_file_that_deletes_itself_is_not_a_pass(tmp_path: Path) -> None:
    root = write_files(
        tmp_path,
        {
            "test_gone.py": """
                from pathlib import Path

                def test_gone():
                    Path(__file__).unlink()
            """,
            "test_stays.py": "def test_stays():\n    pass\n",
        },
    )
    proc = gpuci("check", ".", "--out", "out", *MODES, "--serial-modes", cwd=root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "pytest usage error: file or directory not found: test_gone.py" in proc.stdout
    verdict = verdict_of(root)
    assert verdict["verdict"] == "fail"
    tests = {t["id"]: t for t in verdict["tests"]}
    assert tests["test_gone.py::[interpreter exit]"]["category"] == "failed"
    assert tests["test_stays.py::test_stays"]["category"] == "passed"


@pytest.mark.slow
def test_a_test_a_screens_interpreter_never_collected_is_not_run_there(tmp_path: Path) -> None:
    # the suite's own hook drops a test in parallel only: pytest ends 0, one test short. The
    # screens run files, as plain pytest would: the test did not run there, and says so;
    # the plain run (the suite interpreter) passed it
    conftest = """
        import os

        def pytest_collection_modifyitems(items):
            if os.environ.get("GPUCI_MODE") == "parallel":
                items[:] = [i for i in items if i.name != "test_b"]
    """
    root = write_files(tmp_path, {"conftest.py": conftest, "test_x.py": THREE_TESTS})
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tests = {t["id"]: t for t in verdict_of(root)["tests"]}
    assert "test_x.py::[interpreter exit]" not in tests
    dropped = tests["test_x.py::test_b"]
    assert dropped["outcomes"]["suite"] == "passed"
    assert dropped["outcomes"]["parallel"] == "not-run"
    parallel = json.loads((root / "out" / "parallel" / "run.json").read_text(encoding="utf-8"))
    seen = {t["id"]: t for t in parallel["tests"]}["test_x.py::test_b"]
    assert seen["message"] == UNCOLLECTED


@pytest.mark.slow
def test_an_id_with_a_newline_runs_in_every_mode(tmp_path: Path) -> None:
    root = write_files(
        tmp_path,
        {
            "pytest.ini": """
                [pytest]
                disable_test_id_escaping_and_forfeit_all_rights_to_community_support = true
            """,
            "test_ids.py": """
                import pytest

                @pytest.mark.parametrize("text", ["plain", "two\\nlines", "tab\\tand é"], ids=str)
                def test_text(text):
                    assert "\\n" not in text
            """,
        },
    )
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=root)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    tests = {t["id"]: t for t in verdict_of(root)["tests"]}
    assert set(tests) == {
        "test_ids.py::test_text[plain]",
        "test_ids.py::test_text[two\nlines]",
        "test_ids.py::test_text[tab\tand é]",
    }
    newline = tests["test_ids.py::test_text[two\nlines]"]
    assert newline["category"] == "failed"
    assert set(newline["outcomes"].values()) == {"failed"}
    assert newline["reruns"] == ["failed", "failed"]  # the alone-runs got it exactly too
    assert tests["test_ids.py::test_text[tab\tand é]"]["category"] == "passed"
