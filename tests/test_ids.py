"""Ids computed at import: the screens run files, so such a test runs and is matched by its
stable part (`gpuci.run.proc.ids`); never a failure of its file (marshmallow's `datetime.now()`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from cli_runner import gpuci, write_files

from gpuci.run.proc.ids import match_ids, select_ids, stem_of

NOW = """
    import datetime as dt
    import pytest

    @pytest.mark.parametrize("value", ["x", dt.datetime.now().strftime("%H:%M:%S.%f")])
    def test_value(value):
        assert value

    def test_plain():
        pass
"""


def test_a_parameter_made_at_import_is_matched_by_its_place_among_its_stems_ids() -> None:
    known = ["f.py::test_v[x]", "f.py::test_v[10:00:01.5]", "f.py::test_p"]
    reported = ["f.py::test_v[x]", "f.py::test_v[10:00:02.7]", "f.py::test_p"]
    assert match_ids(reported, known) == {"f.py::test_v[10:00:02.7]": "f.py::test_v[10:00:01.5]"}
    assert stem_of("f.py::C::test_v[a[b]]") == "f.py::C::test_v"
    # a stem with as many ids on both sides only: otherwise nothing is guessed
    assert match_ids(["f.py::test_v[1]"], ["f.py::test_v[2]", "f.py::test_v[3]"]) == {}
    # a run by ids keeps the test whose id it computed differently
    assert select_ids(known[:2], reported) == reported[:2]
    assert select_ids(["f.py::test_v[10:00:01.5]"], reported) == []  # one of two: unknown


@pytest.mark.slow
def test_a_check_runs_files_so_an_id_made_at_import_is_no_failure(tmp_path: Path) -> None:
    root = write_files(
        tmp_path,
        {
            "test_now.py": NOW,
            "test_other.py": "def test_other():\n    pass\n",
            "test_broken.py": "def test_broken():\n    assert False, 'a real failure'\n",
        },
    )
    proc = gpuci("check", ".", "--out", "out", cwd=root)
    assert proc.returncode == 1, proc.stderr
    verdict = json.loads((root / "out" / "verdict.json").read_text())
    found = {t["id"]: t["category"] for t in verdict["tests"]}
    # one test per collected id, the interpreters' own ids matched to discovery's
    assert sorted(found.values()).count("passed") == 4, found
    assert found["test_broken.py::test_broken"] == "failed", found
    assert not any("interpreter exit" in i for i in found), found
    assert len(found) == 5, found


# structlog 26.1.0: parameters from a set of strings, in hash order, which each fresh
# interpreter draws at random: one id, another parameter in each interpreter
SET_ORDER = """
    import pytest

    NAMES = {"alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta"}

    @pytest.mark.parametrize("name", [n for n in NAMES])
    def test_name(name):
        assert name != "gamma", "a real failure, whatever its id"
"""


@pytest.mark.slow
def test_one_hash_seed_per_check_keeps_a_set_ordered_id_the_same_test(tmp_path: Path) -> None:
    root = write_files(tmp_path, {"test_set.py": SET_ORDER, "test_other.py": NOW})
    proc = gpuci("check", ".", "--out", "out", cwd=root)
    assert proc.returncode == 1, proc.stderr
    verdict = json.loads((root / "out" / "verdict.json").read_text())
    found = {t["id"]: t for t in verdict["tests"] if t["file"] == "test_set.py"}
    assert sorted(t["category"] for t in found.values()).count("failed") == 1, found
    assert not [i for i, t in found.items() if t["category"] not in ("passed", "failed")]
    failing = next(t for t in found.values() if t["category"] == "failed")
    # the command printed carries the seed, and shows the failure as printed
    suite = json.loads((root / "out" / "suite" / "run.json").read_text())
    seed = suite["environment"]["hash_seed"]
    assert f"PYTHONHASHSEED={seed} " in failing["reproduce"], failing["reproduce"]
    shown = subprocess.run(
        ["bash", "-c", failing["reproduce"]], cwd=root, capture_output=True, text=True, check=False
    )
    assert shown.returncode == 1 and "a real failure" in shown.stdout, shown.stdout


STAMPED_VICTIM = {
    "pytest.ini": "[pytest]\n",
    "state.py": "FLAG = []\n",
    "test_a_sets.py": "import state\n\ndef test_a_sets():\n    state.FLAG.append(1)\n",
    # a victim of test_a_sets (it fails only after it, in the suite interpreter) whose id is
    # made at import: no evidence run can name it
    "test_b_stamped.py": """
        import time

        import pytest

        import state

        @pytest.mark.parametrize("stamp", [time.time_ns()])
        def test_b_flag_is_clear(stamp):
            assert not state.FLAG
        """,
}


@pytest.mark.slow
def test_a_suspect_whose_id_no_run_can_name_is_said_once(tmp_path: Path) -> None:
    suite = write_files(tmp_path / "suite", STAMPED_VICTIM)
    out = tmp_path / "out"
    proc = gpuci("check", ".", "--out", str(out), "--workers", "2", cwd=suite)
    assert proc.returncode in (0, 1), proc.stdout[-2000:] + proc.stderr[-2000:]
    verdict = json.loads((out / "verdict.json").read_text())
    notes = verdict["evidence"].get("notes", [])
    said = [n for n in notes if "could not run alone: their id differs in every interpreter" in n]
    assert len(said) == 1, notes
    assert "test_b_stamped.py::test_b_flag_is_clear[" in said[0]
    # never a failure of its file
    assert not any(t["id"].endswith("[interpreter exit]") for t in verdict["tests"])
    assert "could not run alone" in (out / "comment.md").read_text()
