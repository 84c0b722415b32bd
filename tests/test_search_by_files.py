"""End-to-end: `gpuci check` searches a culprit among many files by files, then tests, within
ceil(log2 files) + ceil(log2 tests in the file) + its confirmations, and a provider a
module hint points at first.

The first suite, built in tmp_path: 12 files of 5 tests, the 7th file's third test leaves a
flag behind, and a last file's test fails after it. The second: a file imports a module of
the suite's own that two tests of an earlier file need (one's failure names it, the
other's does not: it reads it through the suite's code, which looks it up in `sys.modules`
without importing it): both
pass in plain pytest, which imports every file before the first test, and fail alone.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from cli_runner import clean_env, gpuci, write_files

FILES, PER_FILE = 12, 5
POLLUTER = "test_06.py::test_2"
VICTIM = "test_zz.py::test_reads_fresh_state"


def _many_files() -> dict[str, str]:
    files = {"pytest.ini": "[pytest]\n", "state.py": "POLLUTED = False\n"}
    for f in range(FILES):
        tests = [
            f"def test_{t}():\n    state.POLLUTED = True  # never restored\n"
            if f"test_{f:02d}.py::test_{t}" == POLLUTER
            else f"def test_{t}():\n    pass\n"
            for t in range(PER_FILE)
        ]
        files[f"test_{f:02d}.py"] = "import state\n\n\n" + "\n\n".join(tests)
    files["test_zz.py"] = (
        "import state\n\n\ndef test_reads_fresh_state():\n    assert not state.POLLUTED\n"
    )
    return files


PROVIDED = {
    "pytest.ini": "[pytest]\n",
    "lib.py": """
        import sys


        def mode():
            # an extension another module may have loaded; never imported here
            return "extended" if sys.modules.get("registry_ext") is not None else "plain"
    """,
    "registry_ext.py": "READY = True\n",
    "test_a.py": """
        import sys

        import lib


        def test_reads_the_extension():
            assert sys.modules.get("registry_ext") is not None, "registry_ext is not loaded"


        def test_runs_extended():
            assert lib.mode() == "extended"


        def test_plain():
            pass
    """,
    **{f"test_{c}.py": "def test_one():\n    pass\n\n\ndef test_two():\n    pass\n" for c in "bcd"},
    "test_e.py": "import registry_ext\n\n\ndef test_ready():\n    assert registry_ext.READY\n",
    "test_f.py": "def test_last():\n    pass\n",
}


def _check(root: Path, files: dict[str, str], *modes: str) -> tuple[dict[str, Any], dict[str, Any]]:
    suite = write_files(root / "suite", files)
    out = root / "out"
    args = ("check", ".", "--out", str(out), "--workers", "2", "--evidence-budget", "600")
    args += ("--modes", ",".join(modes)) if modes else ()
    proc = gpuci(*args, cwd=suite, env=clean_env())
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    evidence = json.loads((out / "evidence" / "evidence.json").read_text(encoding="utf-8"))
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    return evidence, verdict


def _test(document: dict[str, Any], test_id: str) -> dict[str, Any]:
    return next(t for t in document["tests"] if t["id"] == test_id)


@pytest.mark.slow
def test_a_culprit_among_twelve_files_is_found_by_files_then_tests(tmp_path: Path) -> None:
    # the suite screen alone: the victim fails there, after the polluter, and passes in its
    # isolated run; the parallel screen's 13 interpreters would pass every test
    evidence, verdict = _check(tmp_path, _many_files(), "suite")
    found = _test(evidence, VICTIM)
    steps = found["steps"]
    assert (steps["files"], steps["in_file"]) == (FILES, PER_FILE), found["search"]
    levels = math.ceil(math.log2(FILES)) + math.ceil(math.log2(PER_FILE))
    # the whole replay may run beside the first wave (a screen's failure): one more
    assert levels + 3 <= steps["bound"] <= levels + 4
    assert steps["runs"] <= steps["bound"], found["search"]
    assert found["culprits"] == [POLLUTER]
    # named both ways: it fails after the polluter, passes without it
    test = _test(verdict, VICTIM)
    assert test["category"] == "order-dependent" and test["culprits"] == [POLLUTER]


@pytest.mark.slow
def test_a_provider_is_found_by_the_module_it_brought_first(tmp_path: Path) -> None:
    evidence, verdict = _check(tmp_path, PROVIDED)
    for victim in ("test_a.py::test_reads_the_extension", "test_a.py::test_runs_extended"):
        found = _test(evidence, victim)
        assert found["culprits"] == ["test_e.py"], found["search"]
        # the first run is the hint's, test_e.py collected; then its confirmation; then, where
        # it had failed one alone-run, that run once more: its claim stands on it twice
        assert found["probes"][0]["kind"] == "modules", found["probes"]
        assert found["search"].startswith("modules:")
        again = found["probes"][2:]
        assert all(p == {"count": 0, "shown": [], "outcome": "failed"} for p in again), again
        assert len(found["alone"]) + len(again) == 2, found
        assert _test(verdict, victim)["category"] == "depends-on-others"
