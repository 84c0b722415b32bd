"""End-to-end: `gpuci check` runs its screens at once, and only strict runs make findings."""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci

# test_count fails when two interpreters hold the shared resource at once: in the screens
# the suite interpreter and the parallel file both hold it while the parallel test_count
# looks; no strict run (alone, isolated, the pair with test_a_hold.py) ever has two holders.
# No clock decides it: where the screens start together (HOLD_TOGETHER=1) each hold in them
# lasts until the parallel screen's first test_count has seen two holders (a minute at most:
# then the screens did not overlap, and the test says so); elsewhere nothing waits. Each
# hold and look is logged with its mode and its monotonic times, to tell what ran when.
LOAD_SUITE = {
    "pytest.ini": "[pytest]\n",
    "hold.py": """
        import os, pathlib, time

        DIR = pathlib.Path(os.environ["HOLD_DIR"])
        MODE = os.environ.get("GPUCI_MODE")
        SCREENS = os.environ.get("HOLD_TOGETHER") == "1" and MODE in ("suite", "parallel")


        def holders():
            DIR.mkdir(exist_ok=True)
            return {p.name.split("-")[1] for p in DIR.glob("holder-*")}


        def wait_for(ready):
            deadline = time.monotonic() + 60
            while not ready() and time.monotonic() < deadline:
                time.sleep(0.02)


        def first_look():
            # the folder first: test_count may start before any holder made it (it then
            # failed at once, for the wrong reason, and the holders waited their minute)
            DIR.mkdir(exist_ok=True)
            try:  # one claim: a rerun of test_count does not wait again
                os.close(os.open(DIR / "claimed", os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return False
            return True


        def log(what, start):
            with (DIR / "log").open("a") as f:
                f.write(f"{MODE} {what} {start} {time.monotonic()}\\n")
    """,
    "test_a_hold.py": """
        import os, threading, time

        import hold


        def test_hold():
            start = time.monotonic()
            hold.holders()  # the folder
            me = hold.DIR / f"holder-{os.getpid()}-{threading.get_ident()}"
            me.write_text("")
            if hold.SCREENS:  # until the parallel screen's test_count has seen it
                hold.wait_for((hold.DIR / "counted").exists)
            me.unlink()
            hold.log("hold", start)
    """,
    "test_b_count.py": """
        import time

        import hold


        def test_count():
            start = time.monotonic()
            first = hold.SCREENS and hold.MODE == "parallel" and hold.first_look()
            if first:  # the screens' two holders: the suite interpreter's and the file's
                hold.wait_for(lambda: len(hold.holders()) >= 2)
            most = len(hold.holders())
            if first:
                (hold.DIR / "counted").touch()
            hold.log("count", start)
            assert most < 2, f"{most} interpreters held the shared resource at once"
    """,
}
COUNT = "test_b_count.py::test_count"
MODES = ("--modes", "suite,parallel,isolated", "--workers", "2", "--evidence-budget", "60")


def write_suite(root: Path, files: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        (root / name).write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return root


def verdict_of(out: Path) -> dict[str, dict[str, Any]]:
    data = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    return {t["id"]: t for t in data["tests"]}


@pytest.mark.slow
def test_a_failure_only_under_combined_load_is_passed_with_a_note(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite", LOAD_SUITE)
    env = dict(os.environ, HOLD_DIR=str(tmp_path / "held"), HOLD_TOGETHER="1")
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parallel = json.loads((root / "out" / "parallel" / "run.json").read_text(encoding="utf-8"))
    count = next(t for t in parallel["tests"] if t["id"] == COUNT)
    assert count["outcome"] == "failed", "the screens did not overlap: the suite proves nothing"
    assert "2 interpreters held the shared resource at once" in count["message"], count
    assert parallel["beside"] == ["suite"]
    test = verdict_of(root / "out")[COUNT]
    assert test["category"] == "passed"
    assert test["notes"][-1].startswith("failed once under the check's combined load (parallel);")
    assert "passed in" in test["notes"][-1]
    assert "pair" in test["strict"]
    assert test["reruns"] and set(test["reruns"]) == {"passed"}
    # one pool: the suite interpreter and both parallel files started together
    suite = json.loads((root / "out" / "suite" / "run.json").read_text(encoding="utf-8"))
    starts = [f["start"] for f in parallel["files"]] + [suite["files"][0]["start"]]
    assert max(starts) - min(starts) < 1.5, starts


@pytest.mark.slow
def test_serial_modes_run_one_mode_after_another(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite", LOAD_SUITE)
    env = dict(os.environ, HOLD_DIR=str(tmp_path / "held"))
    proc = gpuci("check", ".", "--out", "out", *MODES, "--serial-modes", cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = root / "out"
    suite = json.loads((out / "suite" / "run.json").read_text(encoding="utf-8"))
    parallel = json.loads((out / "parallel" / "run.json").read_text(encoding="utf-8"))
    assert "beside" not in suite and "beside" not in parallel
    # parallel began after the suite interpreter had ended (each mode's clock starts at 0:
    # the tests' own log, on one monotonic clock, tells)
    assert all(t["outcome"] == "passed" for t in parallel["tests"])
    logged = [line.split() for line in (tmp_path / "held" / "log").read_text().splitlines()]
    suite_end = max(float(end) for mode, _, _, end in logged if mode == "suite")
    parallel_start = min(float(start) for mode, _, start, _ in logged if mode == "parallel")
    assert suite_end < parallel_start, logged
    assert verdict_of(out)[COUNT]["category"] == "passed"
    assert "note" not in verdict_of(out)[COUNT]


def test_serial_modes_is_refused_by_gpuci_run(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite", LOAD_SUITE)
    proc = gpuci("run", ".", "--mode", "suite", "--out", "out", "--serial-modes", cwd=root)
    assert proc.returncode == 4
    assert proc.stderr.startswith("gpuci: error: --serial-modes: only for gpuci check")
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (root / "out").exists()


# Where nothing is known, the parallel files start with those started beside discovery (the
# first in collection order, one per file slot), then by their number of tests:
# test_c_slow.py (3 tests of 1 s) would start last. The suite interpreter reaches it early,
# and the parallel screen learns from it that the file is long. No clock decides whether it
# learns in time: the quick tests wait, in the parallel screen, until the suite interpreter
# has been in test_c_slow.py for a whole test (its first test leaves a mark).
SLOW_FEW = {
    "pytest.ini": "[pytest]\n",
    "test_c_slow.py": """
        import os, pathlib, time
        import pytest

        @pytest.mark.parametrize("n", range(3))
        def test_slow(n):
            time.sleep(1.0)
            if n == 0 and os.environ.get("GPUCI_MODE") == "suite":
                pathlib.Path(os.environ["SLOW_MARK"]).touch()
    """,
    **{
        f"test_{name}_quick.py": """
        import os, pathlib, time
        import pytest

        @pytest.mark.parametrize("n", range(12))
        def test_quick(n):
            mark = pathlib.Path(os.environ["SLOW_MARK"])
            deadline = time.monotonic() + 60
            while os.environ.get("GPUCI_MODE") == "parallel" and not mark.exists():
                assert time.monotonic() < deadline, "the suite interpreter never ran test_slow"
                time.sleep(0.02)
        """
        for name in "abdefghijk"
    },
}


@pytest.mark.slow
def test_a_file_the_suite_found_long_starts_early_in_parallel(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite", SLOW_FEW)
    modes = ("--modes", "suite,parallel", "--workers", "2")
    env = dict(os.environ, SLOW_MARK=str(tmp_path / "suite-in-slow"))
    proc = gpuci("check", ".", "--out", "out", *modes, cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parallel = json.loads((root / "out" / "parallel" / "run.json").read_text(encoding="utf-8"))
    files = sorted(parallel["files"], key=lambda f: f["start"])
    started = [f["file"] for f in files]
    # nothing known yet: the 2 file slots' first files started beside discovery, and ran first
    assert started[:2] == ["test_a_quick.py", "test_b_quick.py"], started
    assert [f["start"] < 0 for f in files[:3]] == [True, True, False]
    # by number of tests it would start last; the quick files started first wait until the
    # suite interpreter is a test into it, so it starts once that is learned, not last
    assert started.index("test_c_slow.py") < len(started) - 1, started
