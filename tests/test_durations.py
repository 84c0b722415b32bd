"""The durations file (`gpuci/run/disk/durations.py`): written at the end of every check, taken
by a later check into another OUT with --durations, through the real CLI."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpuci.model import InputError, Mode
from gpuci.run.disk.durations import SCHEMA, read_durations_file
from gpuci.run.sched.plan import read_durations
from tests.cli_runner import gpuci

# no evidence: the durations a check writes are what these show, its planted failure too
CHECK = ("--modes", "suite,parallel,isolated", "--workers", "1", "--evidence-budget", "0")
SUITE = {
    # the longest file has the fewest tests and comes last in path order: without times,
    # a check starts the file with the most tests first
    "test_many.py": "".join(f"def test_{n}():\n    pass\n\n\n" for n in range(6)),
    "test_some.py": "".join(f"def test_{n}():\n    pass\n\n\n" for n in range(4)),
    "test_slow.py": """
        import sys
        import time


        def test_slow():
            time.sleep(1.5)


        def test_broken():
            # its words differ between the suite and the file's own interpreter (what else
            # was collected), so the lazy isolated pass runs the file: isolated times it
            where = "in the suite" if "test_many" in sys.modules else "on its own"
            assert False, f"a real failure {where}: the check fails, and writes its durations"
    """,
}


def write_suite(root: Path) -> Path:
    root.mkdir(parents=True)
    for name, text in SUITE.items():
        (root / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return root


def parallel_order(out: Path) -> list[str]:
    run = json.loads((out / "parallel" / "run.json").read_text(encoding="utf-8"))
    return [f["file"] for f in sorted(run["files"], key=lambda f: f["start"])]


def unmistakable(data: dict[str, Any]) -> dict[str, Any]:
    """A durations file as written, its parallel times set to say test_slow.py is longest by
    far: measured, each file's time is mostly its interpreter's start-up, which a busy
    machine varies by more than test_slow.py's 1.5 s."""
    files = {name: {**times, "parallel": 0.5} for name, times in data["files"].items()}
    files["test_slow.py"]["parallel"] = 30.0
    return {**data, "files": files}


@pytest.mark.slow
def test_a_check_with_another_outs_durations_runs_its_longest_file_first(tmp_path: Path) -> None:
    first = write_suite(tmp_path / "first")
    proc = gpuci("check", ".", "--out", "out", *CHECK, cwd=first)
    assert proc.returncode == 1, proc.stderr  # the planted failure
    # (which file the parallel screen starts first here is the suite interpreter's race: it
    # runs beside it, and a file it finds long starts next; test_faults.py has the order
    # of a check that knows nothing)
    durations = first / "out" / "durations.json"
    assert "durations: out/durations.json" in proc.stderr
    data = json.loads(durations.read_text(encoding="utf-8"))
    assert data["schema"] == SCHEMA
    assert (
        data["run_id"]
        == json.loads((first / "out" / ".gpuci" / "check.json").read_text())["run_id"]
    )
    assert sorted(data["files"]) == sorted(SUITE)
    assert data["files"]["test_slow.py"]["parallel"] > 1.5
    assert data["files"]["test_slow.py"]["isolated"] > 1.5  # it failed: isolated ran it

    # another machine, another checkout, another OUT: only the file travels
    second = write_suite(tmp_path / "second")
    carried = tmp_path / "cache" / "durations.json"
    carried.parent.mkdir()
    carried.write_text(json.dumps(unmistakable(data)), encoding="utf-8")
    # the parallel screen alone: the carried times order its files (the suite interpreter
    # runs them in path order, and the lazy isolated pass would only time test_slow.py again)
    proc = gpuci(
        "check", ".", "--out", "elsewhere", "--modes", "parallel", "--workers", "1",
        "--durations", str(carried), cwd=second,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert parallel_order(second / "elsewhere")[0] == "test_slow.py"
    assert (second / "elsewhere" / "durations.json").is_file()  # and it writes its own


@pytest.mark.slow
def test_new_files_among_carried_durations_are_estimated_from_their_tests(tmp_path: Path) -> None:
    # the carried times fit 0.8 s of start-up and 0.1 s per test: new_big.py, with 40
    # tests, is estimated 4.8 s and starts first, new_one.py 0.9 s and starts last (the
    # known files' mean would have put both second); the progress counts both
    tests = {"a": 2, "b": 4, "c": 12, "new_big": 40, "new_one": 1}
    root = tmp_path / "suite"
    root.mkdir()
    for name, n in tests.items():
        text = f"@pytest.mark.parametrize('i', range({n}))\ndef test_x(i):\n    pass\n"
        (root / f"test_{name}.py").write_text(f"import pytest\n\n\n{text}", encoding="utf-8")
    times = {"test_a.py": 1.0, "test_b.py": 1.2, "test_c.py": 2.0}
    files = {name: {"parallel": seconds} for name, seconds in times.items()}
    carried = tmp_path / "durations.json"
    carried.write_text(json.dumps({"schema": SCHEMA, "run_id": "", "files": files}), "utf-8")
    args = ("--modes", "parallel", "--workers", "1", "--durations", str(carried))
    proc = gpuci("check", ".", "--out", "out", *args, cwd=root)
    assert proc.returncode == 0, proc.stderr
    order = ["test_new_big.py", "test_c.py", "test_b.py", "test_a.py", "test_new_one.py"]
    assert parallel_order(root / "out") == order
    # what is left after new_big.py: 2.0 + 1.2 + 1.0 + 0.9 s, one at a time
    assert "parallel test_new_big.py: 40 passed" in proc.stderr
    assert "~5s left" in proc.stderr.split("parallel test_new_big.py", 1)[1].splitlines()[0]


@pytest.mark.slow
def test_explain_writes_the_mode_jobs_durations_for_the_next_pipelines_jobs(
    tmp_path: Path,
) -> None:
    # CI with one job per mode: the mode jobs' results meet in gpuci explain's OUT, which
    # writes the durations; the next pipeline's mode jobs take them with --durations
    root = write_suite(tmp_path / "suite")
    # no alone-reruns of the planted failure: the files' times are what these show
    once = ("--workers", "1", "--reruns", "0")
    for mode in ("parallel", "suite"):
        proc = gpuci("run", ".", "--mode", mode, "--out", "out", *once, cwd=root)
        assert proc.returncode == 1, proc.stderr
    assert parallel_order(root / "out") == ["test_many.py", "test_some.py", "test_slow.py"]
    # the durations are written whatever evidence is gathered: none here
    proc = gpuci("explain", "out", "--evidence-budget", "0", cwd=root)
    assert proc.returncode == 1, proc.stderr
    written = root / "out" / "durations.json"
    data = json.loads(written.read_text(encoding="utf-8"))
    assert sorted(data["files"]) == sorted(SUITE)
    # the parallel files' times, and the suite interpreter's in each file's tests
    assert all(set(times) == {"parallel", "suite"} for times in data["files"].values())
    written.write_text(json.dumps(unmistakable(data)), encoding="utf-8")
    args = ("--mode", "parallel", "--out", "next", *once)
    proc = gpuci("run", ".", *args, "--durations", "out/durations.json", cwd=root)
    assert proc.returncode == 1, proc.stderr
    assert parallel_order(root / "next")[0] == "test_slow.py"


def test_a_missing_durations_file_is_refused_before_out_is_touched(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite")
    proc = gpuci("check", ".", "--out", "out", "--durations", "nowhere.json", cwd=root)
    assert proc.returncode == 4
    assert proc.stderr.startswith("gpuci: error: --durations nowhere.json: no such file")
    assert not (root / "out").exists()


def test_each_mode_is_ordered_by_its_own_times_first(tmp_path: Path) -> None:
    path = tmp_path / "durations.json"
    files = {
        "a.py": {"parallel": 1.0, "isolated": 9.0, "threads": 5.0, "gpu_peak_mib": 300},
        "b.py": {"isolated": 2.0},
        "c.py": {"threads": 4.0},
    }
    path.write_text(json.dumps({"schema": SCHEMA, "run_id": "", "files": files}), "utf-8")
    assert read_durations(path, Mode.PARALLEL) == {"a.py": 1.0, "b.py": 2.0, "c.py": 4.0}
    assert read_durations(path, Mode.THREADS) == {"a.py": 5.0, "b.py": 2.0, "c.py": 4.0}
    assert read_durations(path, Mode.ISOLATED) == {"a.py": 9.0, "b.py": 2.0, "c.py": 4.0}
    assert read_durations_file(path).peaks == {"a.py": 300}


@pytest.mark.parametrize(
    ("files", "says"),
    [
        ({"a.py": 3}, "'a.py' is not an object of times per mode"),
        ({"a.py": {"parallel": "slow"}}, "'a.py' parallel: 'slow' is not a number of seconds"),
        ({"a.py": {"parallel": -1}}, "'a.py' parallel: -1 is not a number of seconds"),
    ],
)
def test_a_malformed_durations_file_names_the_entry(
    tmp_path: Path, files: dict[str, object], says: str
) -> None:
    path = tmp_path / "durations.json"
    path.write_text(json.dumps({"schema": SCHEMA, "run_id": "", "files": files}), "utf-8")
    with pytest.raises(InputError, match=f"^{path}: {says}$".replace("(", r"\(")):
        read_durations(path)
