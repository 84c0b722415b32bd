"""The check's suite interpreter starts beside discovery, held after its collection
(`gpuci.run.proc.held`): taken by the suite screen, or killed where the check does not take it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

import pytest
from cli_runner import as_foreground_job, clean_env, gpuci, write_files

from gpuci.evidence.beside import beside_suite_test
from gpuci.evidence.results import ModeResults
from gpuci.model import FileRun, FileStatus, Interpreter, Mode, ModeRun, Outcome, TestResult
from gpuci.run.proc.discover import child_env
from gpuci.run.proc.plugin_env import PLUGIN
from gpuci.run.sched.beside import admit_first

SUITE = {
    "pytest.ini": "[pytest]\n",
    "tests/test_a.py": """
        def test_one():
            assert True

        def test_two():
            assert True
    """,
    "tests/test_b.py": """
        def test_fails():
            assert 1 == 2
    """,
}
MODES = ("--modes", "suite,parallel,isolated", "--evidence-budget", "30")


def events(journal: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in journal.read_text(encoding="utf-8").splitlines()]


def suite_command(out: Path) -> str:
    """The command line the suite interpreter's log says it ran."""
    return (out / "suite" / "logs" / "suite.log").read_text(encoding="utf-8").splitlines()[0]


def ctrl_c_when(
    root: Path,
    out: Path,
    ready: Callable[[], bool],
    *args: str,
    env: Mapping[str, str] | None = None,
) -> None:
    """`gpuci check tests --out OUT ARGS` in `root`, Ctrl-C'd once `ready()`: it ends with
    2, leaving no held suite interpreter running and no folder of it."""
    proc = subprocess.Popen(
        as_foreground_job(
            sys.executable, "-m", "gpuci", "check", "tests", "--out", str(out), *args
        ),
        cwd=root,
        env=clean_env(env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready():
            assert time.monotonic() < deadline and proc.poll() is None, "never got there"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 2, stderr
    assert held_processes(out) == []
    assert not (out / ".gpuci" / "held-suite").exists()


def held_processes(out: Path, folder: str = "held-suite") -> list[int]:
    """Live processes started as this OUT's held suite interpreter (or files': held-files)."""
    mark = f"GPUCI_JOURNAL={out / '.gpuci' / folder}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            environ = (proc / "environ").read_bytes()
            state = (proc / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if mark in environ and state != "Z":
            found.append(int(proc.name))
    return found


@pytest.mark.slow
def test_the_suite_screen_takes_the_interpreter_started_beside_discovery(tmp_path: Path) -> None:
    root = write_files(tmp_path / "suite", SUITE)
    out = tmp_path / "out"
    result = gpuci("check", "tests", "--out", str(out), *MODES, cwd=root)
    assert result.returncode == 1, result.stderr
    # it ran on PATHS, as the user's plain `python -m pytest tests`, nothing added (issue 53)
    assert suite_command(out).endswith(f"{sys.executable} -m pytest tests")
    assert (out / "suite" / "junit" / "suite.xml").exists()  # gpuci's, from GPUCI_JUNIT
    run = json.loads((out / "suite" / "run.json").read_text(encoding="utf-8"))
    [interpreter] = run["files"][0]["interpreters"]
    assert interpreter["start"] < 0  # it started before the mode's clock, and says so
    assert run["wall_s"] >= interpreter["end"] - interpreter["start"] - 0.01
    assert 0 < interpreter["startup_s"] < interpreter["end"] - interpreter["start"]
    # the ledger's events (what importing each file brought) come at collection, before these
    kinds = [e["e"] for e in events(out / "suite" / "journal" / "suite.jsonl")]
    kinds = [k for k in kinds if k != "modules"]
    assert kinds[:2] == ["held", "collected"] and kinds[-1] == "end"
    outcomes = {t["id"]: t["outcome"] for t in run["tests"]}
    assert outcomes == {
        "tests/test_a.py::test_one": "passed",
        "tests/test_a.py::test_two": "passed",
        "tests/test_b.py::test_fails": "failed",
    }
    assert (out / "suite" / "junit.xml").exists()
    assert not (out / ".gpuci" / "held-suite").exists()


def test_a_held_interpreter_runs_only_the_ids_it_is_released_with(tmp_path: Path) -> None:
    root = write_files(
        tmp_path,
        {
            "test_x.py": """
                import os, pathlib

                def test_first():
                    pathlib.Path(os.environ["RAN"], "first").touch()

                def test_second():
                    pathlib.Path(os.environ["RAN"], "second").touch()
            """
        },
    )
    ran = tmp_path / "ran"
    ran.mkdir()
    journal, only = tmp_path / "journal.jsonl", tmp_path / "only.json"
    env = dict(
        child_env(clean_env()),
        GPUCI_HOLD="1",
        GPUCI_JOURNAL=str(journal),
        GPUCI_ONLY=str(only),
        RAN=str(ran),
    )
    command = [sys.executable, "-m", "pytest", "-p", PLUGIN, "-p", "no:cacheprovider", "test_x.py"]
    proc = subprocess.Popen(command, cwd=root, env=env, stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not (journal.exists() and "held" in journal.read_text(encoding="utf-8")):
            assert time.monotonic() < deadline and proc.poll() is None, "never held"
            time.sleep(0.05)
        held = next(e for e in events(journal) if e["e"] == "held")  # the ledger's come first
        assert held["ids"] == [
            "test_x.py::test_first",
            "test_x.py::test_second",
        ]
        time.sleep(0.5)
        assert proc.poll() is None and not list(ran.iterdir())  # held: nothing ran
        only.write_text(json.dumps(["test_x.py::test_second"]), encoding="utf-8")
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.communicate()
    assert sorted(p.name for p in ran.iterdir()) == ["second"]
    assert [e["id"] for e in events(journal) if e["e"] == "finish"] == ["test_x.py::test_second"]


@pytest.mark.slow
def test_a_broken_conftest_folder_stops_the_plain_run_as_pytest(tmp_path: Path) -> None:
    # pytest handed the folder ends there (exit 2): so does the suite interpreter, the
    # one started on PATHS (the user's command), and the check; the other screens run
    # each file; nothing is left running
    files = dict(SUITE)
    files["tests/broken/conftest.py"] = "raise ImportError('broken on purpose')\n"
    files["tests/broken/test_c.py"] = "def test_c():\n    pass\n"
    root = write_files(tmp_path / "suite", files)
    out = tmp_path / "out"
    result = gpuci("check", "tests", "--out", str(out), *MODES, cwd=root)
    assert result.returncode == 2, result.stderr
    assert suite_command(out).endswith(f"{sys.executable} -m pytest tests")
    assert "plain pytest exited 2 (interrupted)" in result.stdout
    assert held_processes(out) == []


@pytest.mark.slow
def test_a_check_that_fails_before_its_screens_leaves_no_held_interpreter(tmp_path: Path) -> None:
    files = dict(SUITE, **{"empty/readme.txt": "no tests here\n"})
    root = write_files(tmp_path / "suite", files)
    out = tmp_path / "out"
    result = gpuci("check", "tests", "empty", "--out", str(out), cwd=root)
    assert result.returncode == 4, result.stderr
    assert "empty: no tests collected" in result.stderr
    assert held_processes(out) == []
    assert not (out / "suite").exists() and not (out / ".gpuci" / "held-suite").exists()


@pytest.mark.slow
def test_ctrl_c_during_collection_ends_the_held_interpreter(tmp_path: Path) -> None:
    files = dict(SUITE)
    files["conftest.py"] = """
        import os, pathlib, time

        def pytest_configure(config):
            # collection takes its time: the check is stopped meanwhile (once this mark is
            # there), and ends this interpreter long before the minute is up
            pathlib.Path(os.environ["COLLECTING"]).touch()
            time.sleep(60)
    """
    root = write_files(tmp_path / "suite", files)
    out = tmp_path / "out"
    collecting = tmp_path / "collecting"
    env = {**os.environ, "COLLECTING": str(collecting)}
    # held, and inside its collection: no clock decides where the Ctrl-C lands
    ctrl_c_when(root, out, lambda: bool(held_processes(out)) and collecting.exists(), env=env)
    assert not (out / "suite").exists()


@pytest.mark.slow
def test_the_check_collects_once_in_the_held_interpreter(tmp_path: Path) -> None:
    # discovery is the held interpreter's collection: no separate --collect-only, and what
    # the user's -k deselects is still said
    files = dict(SUITE)
    files["conftest.py"] = """
        import os, pathlib, sys

        def pytest_configure(config):
            kind = "collect-only" if config.option.collectonly else "run"
            with open(os.environ["STARTS"], "a") as f:
                f.write(kind + "\\n")
    """
    root = write_files(tmp_path / "suite", files)
    out, starts = tmp_path / "out", tmp_path / "starts.txt"
    result = gpuci(
        "check",
        "tests",
        "--out",
        str(out),
        *MODES,
        "--",
        "-k",
        "not fails",
        cwd=root,
        env={**clean_env(), "STARTS": str(starts)},
    )
    assert result.returncode == 0, result.stderr
    assert "collect-only" not in starts.read_text(encoding="utf-8")
    assert "tests/test_b.py: every test deselected by the pytest arguments" in result.stderr
    assert suite_command(out).endswith(" -k 'not fails' tests")


@pytest.mark.slow
def test_gpuci_run_mode_suite_takes_it_too(tmp_path: Path) -> None:
    root = write_files(tmp_path / "suite", SUITE)
    out = tmp_path / "out"
    result = gpuci("run", "tests", "--mode", "suite", "--out", str(out), cwd=root)
    assert result.returncode == 1, result.stderr
    assert suite_command(out).endswith(" tests")
    assert held_processes(out) == []


def test_a_held_suite_interpreters_tests_ran_once_the_screens_started() -> None:
    # held since 5 s before the screens, collected in 3 s: its first test ran at 0, beside
    # the parallel file that ran then, not beside the one that ended before 0.5 s
    held = Interpreter(exit_code=1, start=-5.0, end=4.0, log="l", startup_s=3.0)
    suite_tests = (
        TestResult(id="test_a.py::test_a", file="test_a.py", outcome=Outcome.PASSED, duration=1.0),
        TestResult(id="test_v.py::test_v", file="test_v.py", outcome=Outcome.FAILED, duration=2.0),
    )
    suite = ModeRun(
        mode=Mode.SUITE,
        command=("gpuci",),
        rootdir="/x",
        workers=1,
        tests=suite_tests,
        beside=(Mode.PARALLEL,),
        files=(
            FileRun(
                file="(suite)",
                status=FileStatus.FAILED,
                slot=0,
                gpu=None,
                start=-5.0,
                end=4.0,
                interpreters=(held,),
            ),
        ),
    )
    spans = {"test_early.py": (0.0, 0.5), "test_late.py": (1.2, 3.0)}
    parallel = ModeRun(
        mode=Mode.PARALLEL,
        command=("gpuci",),
        rootdir="/x",
        workers=2,
        beside=(Mode.SUITE,),
        files=tuple(
            FileRun(file=f, status=FileStatus.PASSED, slot=1, gpu=None, start=s, end=e)
            for f, (s, e) in spans.items()
        ),
    )
    results = {
        run.mode: ModeResults(run=run, parts=(run,), part_shards=(1,), total_shards=1)
        for run in (suite, parallel)
    }
    assert beside_suite_test(results, "test_v.py::test_v") == ("test_late.py",)


def parallel_beside_discovery(out: Path) -> list[str]:
    """The parallel files whose interpreters started before the mode's clock."""
    run = json.loads((out / "parallel" / "run.json").read_text(encoding="utf-8"))
    return sorted(f["file"] for f in run["files"] if f["interpreters"][0]["start"] < 0)


FIVE_FILES = {
    "pytest.ini": "[pytest]\n",
    **{f"tests/test_{name}.py": f"def test_{name}():\n    pass\n" for name in "abcde"},
}


@pytest.mark.slow
def test_the_parallel_screens_first_files_start_beside_discovery(tmp_path: Path) -> None:
    root = write_files(tmp_path / "suite", FIVE_FILES)
    out = tmp_path / "out"
    check = ("check", "tests", "--out", str(out), "--workers", "2", "--modes", "suite,parallel")
    first = gpuci(*check, cwd=root)
    assert first.returncode == 0, first.stderr

    # nothing known: the first files in collection order, one per file slot (2)
    assert parallel_beside_discovery(out) == ["tests/test_a.py", "tests/test_b.py"]
    # known: the longest by the durations given; one of them gone: it takes no slot (an
    # interpreter for it would end at once and write its JUnit part into out/parallel
    # before the mode starts), the next longest does
    times = {"c": 9.0, "e": 8.0, "a": 1.0, "b": 1.0, "d": 1.0}
    durations = tmp_path / "durations.json"
    files = {f"tests/test_{name}.py": {"parallel": s} for name, s in times.items()}
    durations.write_text(json.dumps({"schema": "gpuci.durations/1", "files": files}))
    (root / "tests" / "test_c.py").unlink()
    second = gpuci(*check, "--durations", str(durations), cwd=root)
    assert second.returncode == 0, second.stderr
    assert parallel_beside_discovery(out) == ["tests/test_a.py", "tests/test_e.py"]
    assert "test_c" not in second.stderr
    assert held_processes(out, "held-files") == []
    assert not (out / ".gpuci" / "held-files").exists()
    verdict = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["verdict"] == "pass" and verdict["summary"]["passed"] == 4


def test_the_first_files_are_admitted_by_the_memory_their_gpu_has_free() -> None:
    gib = 1024
    peaks = {"a.py": 50 * gib, "b.py": 40 * gib, "d.py": 10 * gib}
    free = {"0": 80 * gib, "1": 40 * gib}
    asked: list[str] = []

    def free_mib(device: str) -> int | None:
        asked.append(device)
        return free[device]

    files = ["a.py", "b.py", "c.py", "d.py", "e.py"]
    # one GPU, 2 file slots: a.py (55.3 GiB with the margin) fits the 80 free; b.py (44.3)
    # then does not fit the 24.7 left, c.py (no peak known) does
    views = (None, "0", "0")
    assert admit_first(files, views, 2, peaks, free_mib) == [(1, "a.py"), (2, "c.py")]
    assert asked == ["0"]  # each GPU asked once
    # two GPUs: slot 2 sees GPU 1 first, where b.py does not fit the 40 free; slot 3 sees
    # GPU 0 again, where d.py (11.3 GiB) fits the 24.7 a.py left
    asked.clear()
    views = (None, "0,1", "1,0", "0,1")
    assert admit_first(files, views, 3, peaks, free_mib) == [(1, "a.py"), (2, "c.py"), (3, "d.py")]
    assert asked == ["0", "1"]
    assert admit_first(files, views, 2, peaks, None) == [(1, "a.py"), (2, "b.py")]  # no GPU


@pytest.mark.slow
def test_ctrl_c_while_the_first_files_start_ends_the_suite_interpreter(tmp_path: Path) -> None:
    # the suite interpreter is started, the first files not yet: gpuci is asking the
    # suite's Python whether pytest-cov loads there (a Python that takes its time to say)
    root = write_files(tmp_path / "suite", SUITE)
    out = tmp_path / "out"
    probing = tmp_path / "probing"
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        f'case "$2" in *pytest11*) touch {probing}; sleep 30;; esac\n'
        f'exec {sys.executable} "$@"\n',
        encoding="utf-8",
    )
    python.chmod(0o755)
    ctrl_c_when(root, out, probing.exists, "--python", str(python))


@pytest.mark.slow
def test_a_collection_the_held_interpreter_finished_before_gpuci_asks_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # on a loaded machine gpuci may reach discovery after the held suite interpreter has
    # written its whole journal: it read from the journal's end then, never saw `held`,
    # and waited out the timeout (10 minutes) before collecting on its own
    from gpuci.run.proc.held import held_collection, hold_suite, let_go
    from gpuci.run.proc.launch import Launch

    root = write_files(tmp_path / "suite", SUITE)
    monkeypatch.chdir(root)
    folder = tmp_path / "held-suite"
    launch = Launch(
        key="(suite)", ids=(), targets=("tests",), slot=0, gpu=None, attempt=1, junit=None, label=""
    )
    hold_suite(sys.executable, (), child_env(clean_env()), launch, folder)
    try:
        journal = folder / "journal.jsonl"
        deadline = time.monotonic() + 60
        while not (journal.exists() and '"e": "held"' in journal.read_text(encoding="utf-8")):
            assert time.monotonic() < deadline, "never held"
            time.sleep(0.05)
        collected = held_collection(timeout=30)
        assert collected is not None, "the held collection was not read"
        (held,) = [e for e in collected if e.get("e") == "held"]
        assert len(held["ids"]) == 3
    finally:
        let_go()


@pytest.mark.slow
def test_each_latent_order_starts_beside_discovery_in_its_order(tmp_path: Path) -> None:
    root = write_files(tmp_path / "suite", FIVE_FILES)
    out = tmp_path / "out"
    # two GPUs named (none used: the tests do not touch one): the slots' views differ, so an
    # interpreter started for another slot than the one that takes it would be killed
    modes = "suite,parallel,reversed,shuffled:7"
    check = ("check", "tests", "--out", str(out), "--workers", "2", "--gpus", "0,1")
    result = gpuci(*check, "--modes", modes, cwd=root)
    assert result.returncode == 0, result.stderr
    files = [f"tests/test_{name}.py" for name in "abcde"]
    for mode, order in (("reversed", files[::-1]), ("shuffled", None)):
        run = json.loads((out / mode / "run.json").read_text(encoding="utf-8"))
        [unit] = run["files"]
        [interpreter] = unit["interpreters"]
        assert interpreter["start"] < 0, mode  # before the mode's clock: beside discovery
        [journal] = (out / mode / "journal").glob("*.jsonl")
        assert [e["e"] for e in events(journal) if e["e"] != "modules"][:2] == [
            "held",
            "collected",
        ]
        ran = [t["id"].split("::")[0] for t in run["tests"]]
        assert sorted(ran) == files and (order is None or ran == order)
    # the parallel screen's first files too, in the slots after the two orders'
    assert parallel_beside_discovery(out) == ["tests/test_a.py", "tests/test_b.py"]
    assert held_processes(out, "held-reversed") == held_processes(out, "held-files") == []


@pytest.mark.slow
def test_a_latent_order_whose_files_were_guessed_wrong_starts_fresh(tmp_path: Path) -> None:
    # a test file with no test in it: the guess hands it over, discovery does not
    files = {**FIVE_FILES, "tests/test_f.py": "HELPER = 1\n"}
    root = write_files(tmp_path / "suite", files)
    out = tmp_path / "out"
    check = ("check", "tests", "--out", str(out), "--modes", "suite,reversed")
    result = gpuci(*check, cwd=root)
    assert result.returncode == 0, result.stderr
    run = json.loads((out / "reversed" / "run.json").read_text(encoding="utf-8"))
    [interpreter] = run["files"][0]["interpreters"]
    assert interpreter["start"] >= 0  # started by its screen, on discovery's files
    ran = [t["id"].split("::")[0] for t in run["tests"]]
    assert ran == [f"tests/test_{name}.py" for name in "edcba"]
    assert held_processes(out, "held-reversed") == []
    assert not (out / ".gpuci" / "held-reversed").exists()
