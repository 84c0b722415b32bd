"""End-to-end: the threads mode and the thread-unsafe category, with the real CLI.

A pure-Python thread race (a module-level scratch list, a short sleep between write and
read) passes in every mode that runs a test once at a time, and fails only when
pytest-run-parallel runs it in several threads at once: `thread-unsafe`. The same race
marked `thread_unsafe` runs in one thread and passes; nothing else changes category.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci, needs_run_parallel, python_word

SUITE = {
    "pytest.ini": """
        [pytest]
        markers =
            thread_unsafe: pytest-run-parallel runs it in one thread
    """,
    "test_race.py": """
        import threading
        import time

        import pytest

        scratch = []


        def test_race():
            me = threading.get_ident()
            scratch.append(me)
            try:
                time.sleep(0.02)  # every other thread appends meanwhile
                assert scratch == [me]
            finally:
                scratch.remove(me)


        @pytest.mark.thread_unsafe
        def test_race_marked_unsafe():
            me = threading.get_ident()
            scratch.append(me)
            try:
                time.sleep(0.02)
                assert scratch == [me]
            finally:
                scratch.remove(me)


        def test_plain_in_the_same_file():
            assert sorted([3, 1, 2]) == [1, 2, 3]
    """,
    "test_plain.py": """
        def test_add():
            assert 1 + 1 == 2


        def test_upper():
            assert "gpu".upper() == "GPU"
    """,
}
RACE = "test_race.py::test_race"
MARKED = "test_race.py::test_race_marked_unsafe"
PLAIN = (
    "test_race.py::test_plain_in_the_same_file",
    "test_plain.py::test_add",
    "test_plain.py::test_upper",
)
EVERY_MODE = {"suite", "parallel", "threads", "isolated"}


def build(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in SUITE.items():
        (root / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return root


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def categories(out: Path) -> dict[str, str]:
    return {t["id"]: t["category"] for t in read(out / "verdict.json")["tests"]}


def in_a_shell(command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """A reproduce command pasted into a shell in `cwd` (where gpuci ran) where `python` is
    this interpreter."""
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        ["bash", "-c", command], cwd=cwd, capture_output=True, text=True, check=False, env=env
    )


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    root = build(tmp_path_factory.mktemp("threads") / "suite")
    every = "suite,parallel,threads,isolated"
    proc = gpuci("check", ".", "--out", "out", "--gpus", "0,1", "--modes", every, cwd=root)
    assert proc.returncode == 1, proc.stderr[-3000:]  # the race fails the verdict
    return root / "out", proc.stdout + proc.stderr


@pytest.mark.slow
@needs_run_parallel
def test_a_thread_race_is_thread_unsafe_and_nothing_else_changes(
    checked: tuple[Path, str],
) -> None:
    out, output = checked
    verdict = read(out / "verdict.json")
    assert set(verdict["modes"]) == EVERY_MODE  # threads runs where asked for
    assert categories(out) == {
        RACE: "thread-unsafe",
        MARKED: "passed",
        **dict.fromkeys(PLAIN, "passed"),
    }
    race = next(t for t in verdict["tests"] if t["id"] == RACE)
    assert race["outcomes"] == {
        "isolated": "passed",
        "parallel": "passed",
        "suite": "passed",
        "threads": "failed",
    }
    assert race["new"] is None
    assert verdict["reasons"] == ["1 isolation problem"]  # no baseline: nothing regressed
    assert verdict["summary"]["thread-unsafe"] == 1
    # a screen: its files take W slots of the pool beside parallel's W (the suite holds 0)
    assert (
        "threads: 2 files, 5 tests, workers the screens' 5 slots, shared, each test in 4" in output
    )
    # shown with the other isolation problems
    html = (out / "report.html").read_text(encoding="utf-8")
    regressions = html[html.index("Isolation problems") : html.index("Flaky tests")]
    assert '<span class="cat c-thread-unsafe">thread-unsafe</span>' in regressions
    assert "thread-unsafe" in (out / "comment.md").read_text(encoding="utf-8")


@pytest.mark.slow
@needs_run_parallel
def test_threads_mode_runs_each_test_in_threads_and_honours_the_marker(
    checked: tuple[Path, str],
) -> None:
    out, _ = checked
    threads = read(out / "threads" / "run.json")
    assert threads["threads"] == 4
    assert threads["pytest_args"] == []  # kept apart from the user's arguments
    # the screens' pool: the suite interpreter's slot 0, then W = 2 slots for parallel's
    # files and 2 of their own for threads', each seeing both GPUs, rotated by slot
    parallel = read(out / "parallel" / "run.json")
    assert threads["workers"] == parallel["workers"] == 5
    assert {f["slot"] for f in parallel["files"]} <= {1, 2}
    assert {f["slot"] for f in threads["files"]} <= {3, 4}
    assert all(f["gpu"] == ("0,1", "1,0")[f["slot"] % 2] for f in threads["files"])
    for mode in EVERY_MODE - {"threads"}:
        assert "threads" not in read(out / mode / "run.json")
    log = (out / "threads" / "logs" / "test_race.py.log").read_text(encoding="utf-8")
    assert "--parallel-threads 4" in log.splitlines()[0]
    journal = (out / "threads" / "journal" / "test_race.py.jsonl").read_text(encoding="utf-8")
    events = [json.loads(line) for line in journal.splitlines()]
    collected = next(e for e in events if e["e"] == "collected")
    assert (collected["threads"], collected["single_threaded"]) == (4, [MARKED])
    # pytest-run-parallel reports a thread's failure as an error at call; JUnit and gpuci
    # record it as the failure it is
    junit = (out / "threads" / "junit.xml").read_text(encoding="utf-8")
    assert junit.count("<failure") == 1 and "<error" not in junit


@pytest.mark.slow
@needs_run_parallel
def test_evidence_runs_the_race_alone_in_one_thread(checked: tuple[Path, str]) -> None:
    out, _ = checked
    evidence = read(out / "evidence" / "evidence.json")
    assert {t["id"]: t["alone"] for t in evidence["tests"]} == {RACE: ["passed"]}
    log = (out / "evidence" / "logs" / "test_race.py.log").read_text(encoding="utf-8")
    assert "=== gpuci: alone: " in log and "--parallel-threads" not in log


@pytest.mark.slow
@needs_run_parallel
def test_isolated_confirms_only_the_files_that_failed_in_threads(
    checked: tuple[Path, str],
) -> None:
    out, _ = checked
    isolated = read(out / "isolated" / "run.json")
    assert {f["file"] for f in isolated["files"] if not f.get("inferred")} == {"test_race.py"}
    assert {f["file"] for f in isolated["files"] if f.get("inferred")} == {"test_plain.py"}


@pytest.mark.slow
@needs_run_parallel
def test_the_reproduce_command_runs_the_race_in_threads(checked: tuple[Path, str]) -> None:
    out, _ = checked
    race = next(t for t in read(out / "verdict.json")["tests"] if t["id"] == RACE)
    root = out.parent
    # the check's interpreter: `python` where PATH has it, else named
    python = python_word()
    # and the hash seed every interpreter of the check had
    seed = read(out / "threads" / "run.json")["environment"]["hash_seed"]
    assert race["reproduce"] == (
        f"CUDA_VISIBLE_DEVICES=0,1 PYTHONHASHSEED={seed} {python} -m pytest"
        f" --parallel-threads 4 {RACE}"
    )
    shown = in_a_shell(race["reproduce"], root)
    assert shown.returncode == 1, shown.stdout[-2000:]
    assert "PARALLEL FAILED test_race.py::test_race" in shown.stdout
    # the evidence ran that very command once: alone, in the threads mode's 4 threads
    assert race["threaded"] == "failed"
    assert read(out / "evidence" / "evidence.json")["phases"]["threads"]["runs"] == 1


@pytest.mark.slow
@needs_run_parallel
def test_a_race_that_needs_its_file_before_it_reproduces_with_its_file(tmp_path: Path) -> None:
    root = tmp_path / "suite"
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    (root / "test_seen.py").write_text(
        textwrap.dedent(
            """
            SEEN = []


            def test_register():
                SEEN.append(1)  # each of the threads appends its own


            def test_registered_once():
                assert len(SEEN) <= 1, SEEN
            """
        ).lstrip(),
        encoding="utf-8",
    )
    every = "suite,parallel,threads,isolated"
    proc = gpuci("check", ".", "--out", "out", "--gpus", "0", "--modes", every, cwd=root)
    assert proc.returncode == 1, proc.stderr[-3000:]
    victim = next(
        t for t in read(root / "out" / "verdict.json")["tests"] if t["id"].endswith("_once")
    )
    assert victim["category"] == "thread-unsafe"
    # alone in threads it passes (nothing registered before it): the command that shows
    # the finding runs its file's earlier test first, in threads; the two are the whole
    # file, in its order, so the command names the file
    assert victim["threaded"] == "passed"
    assert victim["reproduce"].endswith("--parallel-threads 4 test_seen.py")
    shown = in_a_shell(victim["reproduce"], root)
    assert "FAILED test_seen.py::test_registered_once" in shown.stdout, shown.stdout[-2000:]


@pytest.mark.slow
@needs_run_parallel
def test_threads_mode_alone_in_check_and_in_run(tmp_path: Path) -> None:
    root = build(tmp_path / "suite")
    proc = gpuci("check", ".", "--out", "checked", "--modes", "threads", "--threads", "3", cwd=root)
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert set(read(root / "checked" / "verdict.json")["modes"]) == {"threads"}
    assert categories(root / "checked") == categories_expected()
    # as a CI job runs it: one mode, its own alone-reruns (in one thread), then the diff
    proc = gpuci("run", ".", "--mode", "threads", "--out", "out", "--threads", "2", cwd=root)
    assert proc.returncode == 1, proc.stderr[-3000:]
    run = read(root / "out" / "threads" / "run.json")
    assert run["threads"] == 2
    assert {t["id"]: t["reruns"] for t in run["tests"] if t["reruns"]} == {
        RACE: ["passed", "passed"]
    }
    proc = gpuci("diff", "out", cwd=root)
    assert proc.returncode == 1, proc.stderr
    assert categories(root / "out") == categories_expected()
    race = next(t for t in read(root / "out" / "verdict.json")["tests"] if t["id"] == RACE)
    assert f"--parallel-threads 2 {RACE}" in race["reproduce"]
    # --resume goes on only with as many threads as the run it continues
    resume = ("run", ".", "--mode", "threads", "--out", "out", "--resume")
    proc = gpuci(*resume, "--threads", "3", cwd=root)
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.startswith("gpuci: error: --resume: ") and "--threads" in proc.stderr
    proc = gpuci(*resume, "--threads", "2", cwd=root)
    assert proc.returncode == 1 and "finished earlier, nothing to resume" in proc.stderr


@pytest.mark.slow
@needs_run_parallel
def test_isolated_after_threads_alone_runs_every_file(tmp_path: Path) -> None:
    root = build(tmp_path / "suite")
    proc = gpuci("check", ".", "--out", "out", "--modes", "threads,isolated", cwd=root)
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = root / "out"
    assert categories(out) == categories_expected()
    # a pass in threads stands in for nothing: pytest-run-parallel 0.10 passes a test that
    # fails by a warning, and fresh worker threads see no earlier test's thread state
    isolated = read(out / "isolated" / "run.json")
    assert not [f for f in isolated["files"] if f.get("inferred")]
    assert {f["file"] for f in isolated["files"]} == {"test_race.py", "test_plain.py"}
    assert "inferred from threads" not in (out / "comment.md").read_text(encoding="utf-8")


def categories_expected() -> dict[str, str]:
    return {RACE: "thread-unsafe", MARKED: "passed", **dict.fromkeys(PLAIN, "passed")}


@pytest.mark.parametrize("command", ["check", "run"])
@pytest.mark.parametrize("value", ["1", "0", "-4", "four", "2.5"])
def test_bad_threads_are_one_line_and_exit_2(tmp_path: Path, command: str, value: str) -> None:
    root = build(tmp_path / "suite")
    mode = ["--mode", "threads"] if command == "run" else []
    proc = gpuci(command, ".", "--out", "out", *mode, "--threads", value, cwd=root)
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuci: error: "), lines
    assert "--threads" in lines[0] and value in lines[0]
    assert not (root / "out").exists()


BLOCKER = """
import sys


class _NoRunParallel:
    # as if pytest-run-parallel were not installed in this interpreter
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "pytest_run_parallel":
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


sys.meta_path.insert(0, _NoRunParallel())
"""


@pytest.fixture
def python_without_run_parallel(tmp_path: Path) -> str:
    """An interpreter that cannot import pytest-run-parallel (and pytest loads no plugins)."""
    site = tmp_path / "blocker"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCKER, encoding="utf-8")
    wrapper = tmp_path / "python-without-run-parallel"
    wrapper.write_text(
        "#!/bin/sh\n"
        f'PYTHONPATH="{site}${{PYTHONPATH:+:$PYTHONPATH}}" PYTEST_DISABLE_PLUGIN_AUTOLOAD=1'
        f' exec "{sys.executable}" "$@"\n',
        encoding="utf-8",
    )
    wrapper.chmod(0o755)
    return str(wrapper)


@pytest.mark.parametrize(
    ("args", "asked"),
    [
        (["check", "--modes", "suite,threads"], "--modes suite,threads"),
        (["run", "--mode", "threads"], "--mode threads"),
    ],
)
def test_threads_without_pytest_run_parallel_is_one_line_and_exit_2(
    tmp_path: Path, python_without_run_parallel: str, args: list[str], asked: str
) -> None:
    root = build(tmp_path / "suite")
    command, *rest = args
    proc = gpuci(
        command, ".", "--out", "out", *rest, "--python", python_without_run_parallel, cwd=root
    )
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"gpuci: error: {asked}: "), lines
    assert "pytest-run-parallel" in lines[0] and python_without_run_parallel in lines[0]
    assert not (root / "out").exists()


@pytest.mark.slow
def test_check_leaves_threads_out_where_pytest_run_parallel_is_missing(
    tmp_path: Path, python_without_run_parallel: str
) -> None:
    root = build(tmp_path / "suite")
    proc = gpuci("check", ".", "--out", "out", "--python", python_without_run_parallel, cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]  # one thread at a time, nothing races
    out = root / "out"
    assert set(read(out / "verdict.json")["modes"]) == EVERY_MODE - {"threads"}
    assert not (out / "threads").exists()
    assert set(categories(out).values()) == {"passed"}


@pytest.mark.slow
@needs_run_parallel
def test_the_threads_screen_orders_its_files_by_its_own_earlier_times(tmp_path: Path) -> None:
    # the lazy isolated pass of the check before ran no file (each inferred, timed 0 s):
    # its times put the threads files in path order, CuPy's 12 s compile-heavy file last
    # long in threads only, and by more than any interpreter's start-up on a loaded machine
    # (1.5 s once lost to a start-up of test_many.py on 2 busy cores)
    (tmp_path / "test_slow.py").write_text(
        "import os, time\n\n\ndef test_slow():\n"
        "    time.sleep(4.0 if os.environ.get('GPUCI_MODE') == 'threads' else 0.1)\n",
        encoding="utf-8",
    )
    (tmp_path / "test_many.py").write_text(
        "".join(f"def test_{n}():\n    pass\n\n\n" for n in range(6)), encoding="utf-8"
    )
    check = ("check", ".", "--out", "out", "--modes", "suite,parallel,threads,isolated")

    def first_in_threads() -> str:
        run = read(tmp_path / "out" / "threads" / "run.json")
        return str(min(run["files"], key=lambda f: f["start"])["file"])

    for _ in range(2):
        proc = gpuci(*check, "--workers", "1", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    assert first_in_threads() == "test_slow.py"
