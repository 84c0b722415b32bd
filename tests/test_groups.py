"""End-to-end: the victims of one culprit are answered by group runs (`evidence.kinds.groups`).

The suite, built in tmp_path, is pure Python:
- a polluter that sets a module flag and never clears it, with five victims in two later
  files (each asserts the flag is clear: an AssertionError);
- a second polluter whose one victim, in a later file, fails by an AssertionError too: it
  waits with the first polluter's victims, and disagrees in their group run (it passes
  after the first polluter), so it gets alone-runs and a search of its own;
- three parametrized tests that fail the same way everywhere (one fingerprint group).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_runner import clean_env, gpuci, write_files

POLLUTER = "test_a_flag.py::test_a_sets_flag"
FIRST = "test_b_victims.py::test_b_one"
WAITING = (
    "test_b_victims.py::test_b_two",
    "test_b_victims.py::test_b_three",
    "test_c_victims.py::test_c_one",
    "test_c_victims.py::test_c_two",
)
GROUP = (FIRST, *WAITING)
OTHER_POLLUTER = "test_d_word.py::test_d_sets_word"
DISAGREEING = "test_e_word.py::test_e_needs_word"
BROKEN = tuple(f"test_f_broken.py::test_f_needs_backend[{n}]" for n in (1, 2, 3))

VICTIM = """
def test_{name}():
    assert not state.FLAG, "the flag an earlier test set"
"""
FILES = {
    "pytest.ini": "[pytest]\n",
    "state.py": "FLAG = False\nWORD = 'ok'\n",
    "test_a_flag.py": """
        import state


        def test_a_fine():
            pass


        def test_a_sets_flag():
            state.FLAG = True  # never cleared
        """,
    "test_b_victims.py": "import state\n\n"
    + "\n".join(VICTIM.format(name=n) for n in ("b_one", "b_two", "b_three")),
    "test_c_victims.py": "import state\n\n"
    + "\n".join(VICTIM.format(name=n) for n in ("c_one", "c_two")),
    "test_d_word.py": """
        import state


        def test_d_sets_word():
            state.WORD = "changed"  # never restored
        """,
    "test_e_word.py": """
        import state


        def test_e_needs_word():
            assert state.WORD == "ok", "the word an earlier test changed"
        """,
    "test_f_broken.py": """
        import pytest


        @pytest.mark.parametrize("n", [1, 2, 3])
        def test_f_needs_backend(n):
            raise RuntimeError("backend not configured")
        """,
}


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any], Any]:
    """One `gpuci check` of the suite: the suite, its verdict's tests and its evidence."""
    root = tmp_path_factory.mktemp("groups")
    suite = write_files(root / "suite", FILES)
    out = root / "out"
    args = ("check", ".", "--out", str(out), "--workers", "2", "--evidence-budget", "600")
    proc = gpuci(*args, cwd=suite, env=_env())
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    evidence = json.loads((out / "evidence" / "evidence.json").read_text(encoding="utf-8"))
    return suite, {t["id"]: t for t in verdict["tests"]} | {"": verdict}, evidence


def _env() -> dict[str, str]:
    # the printed commands say `python`: this interpreter, with pytest
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    return clean_env() | {"PATH": path}


@pytest.mark.slow
def test_the_victims_of_one_culprit_take_one_group_pair_not_their_alone_runs(
    checked: tuple[Path, dict[str, Any], Any],
) -> None:
    _, tests, evidence = checked
    found = {t["id"]: t for t in evidence["tests"]}
    for victim in GROUP:
        assert tests[victim]["category"] == "order-dependent", tests[victim]
        assert tests[victim]["culprits"] == [POLLUTER], tests[victim]
        assert found[victim]["group"] == list(GROUP), found[victim]
    for victim in WAITING:  # answered by the group: no alone-run, no search of its own
        assert found[victim]["alone"] == [], found[victim]
        kinds = [p.get("kind", "") for p in found[victim]["probes"]]
        assert set(kinds) == {"group after its culprits", "group without its culprits"}
        # the run that shows it failing, twice under one command, before it is blamed
        assert kinds[-3:].count("group after its culprits") == 2, kinds
    # one pair with the disagreeing victim in it, one more with only those that agreed,
    # and the run that shows them failing once more, the same command
    assert evidence["phases"]["groups"]["runs"] == 5, evidence["phases"]
    # alone: the first victim once (it ran first, fresh, in its group's run without the
    # culprit and passed: its second), the disagreeing one twice, the broken group's one
    assert evidence["phases"]["alone"]["runs"] == 1 + 2 + 1, evidence["phases"]
    first = found[GROUP[0]]
    assert first["alone"] == ["passed"], first
    without = [p for p in first["probes"] if p.get("kind") == "group without its culprits"]
    assert without and without[0]["count"] == 0 and without[0]["outcome"] == "passed", first


@pytest.mark.slow
def test_the_printed_commands_are_the_group_runs_and_show_it(
    checked: tuple[Path, dict[str, Any], Any],
) -> None:
    suite, tests, _ = checked
    # the group is every test of its two files, in their order: the commands name the files
    files = ["test_b_victims.py", "test_c_victims.py"]
    assert sorted({v.partition("::")[0] for v in GROUP}) == files
    after = f"-m pytest {shlex.join([POLLUTER, *files])}"
    without = f"-m pytest {shlex.join(files)}"
    for victim in GROUP:
        assert tests[victim]["reproduce"].endswith(after), tests[victim]["reproduce"]
        assert tests[victim]["passes_alone"].endswith(without), tests[victim]["passes_alone"]
    root = tests[""]["roots"][0]
    assert root["culprits"] == [POLLUTER]
    assert root["victims"] == sorted(GROUP)
    assert root["reproduce"] == tests[FIRST]["reproduce"]  # the card's: the group run
    failing = _run(tests[FIRST]["reproduce"], suite)
    assert all(f"FAILED {v}" in failing for v in GROUP), failing[-2000:]
    assert "5 failed, 1 passed" in failing, failing[-2000:]
    assert "5 passed in" in _run(tests[FIRST]["passes_alone"], suite)


def _run(command: str, cwd: Path) -> str:
    shown = subprocess.run(
        ["bash", "-c", command],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return shown.stdout


@pytest.mark.slow
def test_a_victim_its_group_run_disagrees_on_gets_its_own_runs(
    checked: tuple[Path, dict[str, Any], Any],
) -> None:
    _, tests, evidence = checked
    found = {t["id"]: t for t in evidence["tests"]}
    other = found[DISAGREEING]
    assert tests[DISAGREEING]["category"] == "order-dependent"
    assert tests[DISAGREEING]["culprits"] == [OTHER_POLLUTER]
    assert "group" not in other, other
    assert other["alone"] == ["passed", "passed"]
    assert other["search"].startswith("bisection"), other["search"]
    assert tests[DISAGREEING]["reproduce"].endswith(f"-m pytest {OTHER_POLLUTER} {DISAGREEING}")


@pytest.mark.slow
def test_a_group_of_identical_failures_runs_one_representative(
    checked: tuple[Path, dict[str, Any], Any],
) -> None:
    _, tests, evidence = checked
    found = {t["id"]: t for t in evidence["tests"]}
    ran = [i for i in BROKEN if found[i]["alone"]]
    assert len(ran) == 1, [found[i] for i in BROKEN]
    assert found[ran[0]]["alone"] == ["failed"]
    for test_id in BROKEN:
        assert tests[test_id]["category"] == "failed"
        if test_id not in ran:
            assert found[test_id]["inferred_from"] == ran


STICKY = {
    "pytest.ini": "[pytest]\n",
    # a context-poisoning error as CUDA gives it: once raised, every later launch fails alike
    "device.py": """
        POISONED = []


        def launch(bad=False):
            if bad:
                POISONED.append(True)
            if POISONED:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
        """,
    "test_g_sticky.py": """
        import device


        def test_g_scatter():
            device.launch(bad=True)  # its own bug


        def test_g_sum():
            device.launch()  # fails only after the scatter, by its sticky error
        """,
}


@pytest.mark.slow
def test_a_sticky_errors_later_victim_is_not_inferred_from_its_culprit(tmp_path: Path) -> None:
    # both fail the same way everywhere (one fingerprint group), and the group's
    # representative is the culprit itself: its failing alone must not decide the victim
    suite = write_files(tmp_path / "suite", STICKY)
    out = tmp_path / "out"
    proc = gpuci("check", ".", "--out", str(out), "--workers", "2", cwd=suite, env=_env())
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    tests = {t["id"]: t for t in json.loads((out / "verdict.json").read_text())["tests"]}
    assert tests["test_g_sticky.py::test_g_scatter"]["category"] == "failed"
    victim = tests["test_g_sticky.py::test_g_sum"]
    assert victim["category"] == "order-dependent", victim
    assert victim["culprits"] == ["test_g_sticky.py::test_g_scatter"], victim
