"""End-to-end: the check's lazy isolated pass runs its files side by side; a file that did
not pass there runs again alone, and that strict run is the file's isolated result.

One check (suite, parallel, threads, isolated; 2 slots; its screens at once, or one mode
after another with --serial-modes; no evidence: the isolated pass is what it shows) of
eight files. Isolated runs the files that did not pass in parallel or threads, but a file
that failed fresh in parallel runs alone from the start (it would fail again), so the files
that isolated runs side by side pass in the suite and in parallel and fail in threads (a
fake OutOfMemoryError; an evidence alone-run, GPUCI_MODE=evidence, would pass):
- test_a_lock_1.py and test_a_lock_2.py fail only at the same time as each other: the
  first time isolated runs them, each writes its marker and waits for the other's, and
  fails where it came (gpuci runs them in its two slots, in collection order, so they
  meet; they would fail too if the other never came, after the wait); the second time
  (alone) nothing waits, and they pass where no other isolated test runs meanwhile;
- test_b_meet_1.py and test_b_meet_2.py pass only side by side: each waits for the
  other's marker (120 s at most) and passes once it came. Run one at a time they fail,
  not pass slowly, and their second isolated start fails at once: no wait hangs;
- test_c_broken.py fails in every interpreter (an AssertionError): isolated runs it alone
  at once, once (a failure fresh in its own order in parallel will likely come again);
- test_c_short.py fails in threads and in isolated by running the device out of memory:
  side by side, then again alone;
- test_c_serial.py (gpu_serial) fails in every interpreter: isolated runs it alone, after
  the others, once;
- test_d_clean.py passes everywhere: isolated infers it from parallel.
Each file counts its isolated starts in a file of its own.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci, needs_run_parallel, write_files

HELPER = """
    import os, time
    from pathlib import Path

    STATE = Path(__file__).parent / "state"
    MODE = os.environ.get("GPUCI_MODE", "")
    WAIT_S = 120  # a bound, never the expected case: the partner comes at once


    def start(name):
        # this file's isolated starts so far, this one included
        STATE.mkdir(exist_ok=True)
        with (STATE / f"{name}.starts").open("a") as counter:
            counter.write("start\\n")
        return len((STATE / f"{name}.starts").read_text().splitlines())


    def others_running():
        # the isolated tests running now in other interpreters (conftest.py marks them)
        mine = f".{os.getpid()}"
        return sorted(p.name for p in (STATE / "running").iterdir() if not p.name.endswith(mine))


    class OutOfMemoryError(Exception):  # CuPy's name for a device that ran out of memory
        pass


    def contended():
        # in the screens: failed as a test that ran the device out of memory beside others
        raise OutOfMemoryError(f"out of device memory in {MODE}")


    def meet(name, partner):
        # write my marker, wait for the partner's: whether it came
        (STATE / f"{name}.here").touch()
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if (STATE / f"{partner}.here").exists():
                return True
            time.sleep(0.05)
        return False
"""


CONFTEST = """
    import os

    import pytest
    from helper import MODE, STATE


    @pytest.fixture(autouse=True)
    def running(request):
        # each isolated test marks itself running while it runs
        mine = STATE / "running" / f"{request.node.name}.{os.getpid()}"
        if MODE == "isolated":
            mine.parent.mkdir(parents=True, exist_ok=True)
            mine.touch()
        yield
        mine.unlink(missing_ok=True)
"""


def lock_file(name: str, partner: str) -> str:
    return f"""
        import time

        from helper import MODE, contended, meet, others_running, start

        def test_exclusive():
            if MODE == "threads":
                contended()
            if MODE == "isolated" and start("{name}") == 1:
                met = meet("{name}", "{partner}")
                assert not met, "{partner} held the device at the same time"
                assert False, "{partner} never came"
            if MODE == "isolated":  # again, alone: nothing else may run meanwhile
                time.sleep(0.5)  # long enough for another test to show, were one started
                assert not others_running(), "ran beside others, not alone"
    """


def meet_file(name: str, partner: str) -> str:
    return f"""
        from helper import MODE, contended, meet, start

        def test_together():
            if MODE == "threads":
                contended()
            if MODE == "isolated":
                assert start("{name}") == 1, "run again: alone, {partner} cannot come"
                assert meet("{name}", "{partner}"), "{partner} never ran beside it"
    """


SUITE = {
    "pytest.ini": "[pytest]\n",
    "helper.py": HELPER,
    "conftest.py": CONFTEST,
    "test_a_lock_1.py": lock_file("lock1", "lock2"),
    "test_a_lock_2.py": lock_file("lock2", "lock1"),
    "test_b_meet_1.py": meet_file("meet1", "meet2"),
    "test_b_meet_2.py": meet_file("meet2", "meet1"),
    "test_c_broken.py": """
        import time

        from helper import MODE, others_running, start

        def test_broken():
            if MODE == "isolated":
                start("broken")
                time.sleep(0.5)  # long enough for another test to show, were one started
                assert not others_running(), "ran beside others"
            assert False, f"broken in {MODE}"
    """,
    "test_c_short.py": """
        from helper import MODE, OutOfMemoryError, start

        def test_short_of_memory():
            if MODE == "isolated":
                start("short")
            if MODE in ("threads", "isolated"):
                raise OutOfMemoryError(f"out of device memory in {MODE}, even alone")
    """,
    "test_c_serial.py": """
        import time

        import pytest
        from helper import MODE, others_running, start

        @pytest.mark.gpu_serial
        def test_serial():
            if MODE == "isolated":
                start("serial")
                time.sleep(0.5)  # long enough for another test to show, were one started
                assert not others_running(), "ran beside others"
            assert False, f"serial, broken in {MODE}"
    """,
    "test_d_clean.py": """
        from helper import MODE, start

        def test_clean():
            if MODE == "isolated":
                start("clean")
    """,
}
LOCKS = ("test_a_lock_1.py::test_exclusive", "test_a_lock_2.py::test_exclusive")
MEETS = ("test_b_meet_1.py::test_together", "test_b_meet_2.py::test_together")
BROKEN = "test_c_broken.py::test_broken"
SHORT = "test_c_short.py::test_short_of_memory"
SERIAL = "test_c_serial.py::test_serial"


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def starts(root: Path, name: str) -> int:
    counter = root / "state" / f"{name}.starts"
    return len(counter.read_text().splitlines()) if counter.exists() else 0


@pytest.fixture(scope="module", params=[(), ("--serial-modes",)], ids=["screens", "serial"])
def checked(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> tuple[Path, str]:
    root = write_files(tmp_path_factory.mktemp("beside") / "suite", SUITE)
    modes = ("--modes", "suite,parallel,threads,isolated", "--workers", "2", *request.param)
    modes += ("--evidence-budget", "0")
    proc = gpuci("check", ".", "--out", "out", *modes, cwd=root)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    return root, proc.stdout + proc.stderr


@pytest.mark.slow
@needs_run_parallel
def test_isolated_files_run_side_by_side(checked: tuple[Path, str]) -> None:
    root, output = checked
    tests = {t["id"]: t for t in read(root / "out" / "verdict.json")["tests"]}
    # each passed only because the other ran beside it, and ran once: not again alone
    assert [tests[i]["outcomes"]["isolated"] for i in MEETS] == ["passed", "passed"]
    assert (starts(root, "meet1"), starts(root, "meet2")) == (1, 1)
    assert "isolated: 7 files (the rest inferred from parallel)" in output
    assert "workers 2 side by side (2 requested), admitted by device memory" in output


@pytest.mark.slow
@needs_run_parallel
def test_a_failure_beside_others_is_replaced_by_its_run_alone(
    checked: tuple[Path, str],
) -> None:
    root, output = checked
    out = root / "out"
    assert (starts(root, "lock1"), starts(root, "lock2")) == (2, 2)  # beside, then alone
    said = "isolated: 3 file(s) did not pass beside others: again alone, one at a time"
    assert said in output
    tests = {t["id"]: t for t in read(out / "verdict.json")["tests"]}
    for test_id in LOCKS:
        assert tests[test_id]["outcomes"] == {
            "isolated": "passed",
            "parallel": "passed",
            "suite": "passed",
            "threads": "failed",
        }
        assert tests[test_id]["category"] not in ("failed", "flaky"), tests[test_id]
    # run.json, the JUnit and the journal hold the strict run only, each test once
    isolated = read(out / "isolated" / "run.json")
    files = {f["file"]: f for f in isolated["files"]}
    ids = [t["id"] for t in isolated["tests"]]
    clean = "test_d_clean.py::test_clean"
    assert sorted(ids) == sorted([*LOCKS, *MEETS, BROKEN, SHORT, SERIAL, clean])
    for file in ("test_a_lock_1.py", "test_a_lock_2.py"):
        assert files[file]["status"] == "passed"
        assert len(files[file]["interpreters"]) == 1
        journal = (out / "isolated" / "journal" / f"{file}.jsonl").read_text()
        events = [json.loads(line) for line in journal.splitlines()]
        assert [e.get("outcome") for e in events if e.get("outcome")] == ["passed"]
        beside = (out / "isolated" / "logs" / f"{file}.beside.log").read_text()
        assert "at the same time" in beside  # the side-by-side run's log, kept aside
    junit = (out / "isolated" / "junit.xml").read_text(encoding="utf-8")
    assert junit.count('name="test_exclusive"') == 2
    assert 'tests="7"' in junit and 'failures="3"' in junit  # the clean file: inferred


@pytest.mark.slow
@needs_run_parallel
def test_a_real_failure_is_confirmed_alone(checked: tuple[Path, str]) -> None:
    root, _ = checked
    tests = {t["id"]: t for t in read(root / "out" / "verdict.json")["tests"]}
    assert tests[SHORT]["outcomes"]["isolated"] == "failed"
    assert starts(root, "short") == 2  # side by side, then alone
    assert starts(root, "clean") == 0  # passed in parallel: inferred, never run


@pytest.mark.slow
@needs_run_parallel
def test_a_file_that_failed_fresh_in_parallel_runs_alone_at_once(
    checked: tuple[Path, str],
) -> None:
    root, _ = checked
    tests = {t["id"]: t for t in read(root / "out" / "verdict.json")["tests"]}
    assert tests[BROKEN]["outcomes"]["isolated"] == "failed"
    assert tests[BROKEN]["category"] == "failed"
    # not by running the device short: it fails alone too, so it runs alone, once
    assert starts(root, "broken") == 1


@pytest.mark.slow
@needs_run_parallel
def test_a_gpu_serial_file_runs_alone_once(checked: tuple[Path, str]) -> None:
    root, _ = checked
    test = {t["id"]: t for t in read(root / "out" / "verdict.json")["tests"]}[SERIAL]
    assert test["outcomes"]["isolated"] == "failed"
    assert test["category"] == "failed"
    assert starts(root, "serial") == 1  # alone, after the others: not again
    isolated = read(root / "out" / "isolated" / "run.json")
    message = next(t["message"] for t in isolated["tests"] if t["id"] == SERIAL)
    assert "serial, broken in isolated" in message
