"""End-to-end: Ctrl-C, then `--resume`, gives what an uninterrupted run gives, rerunning only
what had not finished; without `--resume` an earlier OUT is replaced, and said so.

Every test appends `start MODE ID` and `finish MODE ID` to a counter file, so what ran how
often is counted, not guessed. One test blocks while a `block` file names its mode: the
interruption comes while it runs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cli_runner import as_foreground_job
from cli_runner import gpuci as run_cli

ROOT = Path(__file__).resolve().parent.parent

COUNTING = """
    import os, time
    from pathlib import Path

    MODE = os.environ.get("GPUCI_MODE", "?")
    BLOCK = Path(os.environ["GPUCI_TEST_BLOCK"])

    def count(what, test_id):
        with open(os.environ["GPUCI_TEST_COUNTER"], "a") as f:
            f.write(f"{what} {MODE} {test_id}\\n")
"""
BODY = """
    def test_{name}(request):
        count("start", request.node.nodeid)
        {extra}
        count("finish", request.node.nodeid)
"""
BLOCK = "while BLOCK.exists() and BLOCK.read_text() == MODE: time.sleep(0.05)"
FILES = {
    "test_a.py": ("one", "two"),
    "test_b.py": ("three", "four"),
    "test_c.py": ("five", "blocks", "six"),
    "test_d.py": ("seven", "eight"),
}


def write_suite(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    for file, names in FILES.items():
        source = textwrap.dedent(COUNTING)
        for name in names:
            extra = BLOCK if name == "blocks" else "pass"
            source += textwrap.dedent(BODY).format(name=name, extra=extra)
        (root / file).write_text(source, encoding="utf-8")
    return root


def _env(root: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "GPUCI_TEST_COUNTER": str(root / "counter.txt"),
        "GPUCI_TEST_BLOCK": str(root / "block"),
    }
    env.pop("CI_JOB_URL", None)
    return env


def gpuci(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=cwd, env=_env(cwd))


def interrupt_while_blocked(root: Path, mode: str, *args: str) -> None:
    """Start gpuci; once test_c.py::test_blocks runs in `mode`, Ctrl-C (SIGINT) it."""
    (root / "block").write_text(mode, encoding="utf-8")
    proc = subprocess.Popen(
        as_foreground_job(sys.executable, "-m", "gpuci", *args),
        cwd=root,
        env=_env(root),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    counter = root / "counter.txt"
    deadline = time.monotonic() + 120
    while f"start {mode} test_c.py::test_blocks" not in (
        counter.read_text(encoding="utf-8") if counter.exists() else ""
    ):
        assert time.monotonic() < deadline, "test_blocks never started"
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    (root / "block").unlink()
    assert proc.returncode == 2, stderr


def counts(root: Path, mode: str) -> tuple[Counter[str], Counter[str]]:
    """How often each test started and finished in `mode`."""
    lines = (root / "counter.txt").read_text(encoding="utf-8").splitlines()
    found: dict[str, Counter[str]] = {"start": Counter(), "finish": Counter()}
    for line in lines:
        what, in_mode, test_id = line.split(" ", 2)
        if in_mode == mode:
            found[what][test_id] += 1
    return found["start"], found["finish"]


def outcomes(run_json: Path) -> dict[str, str]:
    run = json.loads(run_json.read_text(encoding="utf-8"))
    return {t["id"]: t["outcome"] for t in run["tests"]}


def _read(run_json: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(run_json.read_text(encoding="utf-8"))
    return data


ALL_IDS = {f"{file}::test_{name}" for file, names in FILES.items() for name in names}


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["isolated", "parallel", "suite"])
def test_ctrl_c_then_resume_reruns_only_what_had_not_finished(tmp_path: Path, mode: str) -> None:
    args = ("run", ".", "--mode", mode, "--out", "out", "--workers", "2")
    # what a run that nothing interrupts gives, in every mode (test_a_finished_check_is_kept_
    # by_resume and test_without_resume_an_earlier_out_is_replaced_and_said_so run them)
    expected = dict.fromkeys(ALL_IDS, "passed")
    root = write_suite(tmp_path / "suite")
    interrupt_while_blocked(root, mode, *args)
    run_json = root / "out" / mode / "run.json"
    first = _read(run_json)
    assert first["interrupted"] is True
    assert "resumed" not in first
    finished_before = {t["id"] for t in first["tests"] if t["outcome"] == "passed"}
    assert "test_c.py::test_five" in finished_before
    assert "test_c.py::test_blocks" not in finished_before
    # what ran when Ctrl-C came (test_blocks; in parallel perhaps one in the other slot)
    running = {t["id"] for t in first["tests"] if "interrupted while this test ran" in t["message"]}
    assert "test_c.py::test_blocks" in running
    started_before, _ = counts(root, mode)

    resumed = gpuci(*args, "--resume", cwd=root)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming: {len(finished_before)} finished earlier" in resumed.stderr
    assert outcomes(run_json) == expected
    run = _read(run_json)
    assert run["resumed"] is True
    assert run["interrupted"] is False

    started, finished = counts(root, mode)
    # those running when Ctrl-C came ran again: test_blocks started twice; another one (in
    # parallel, the other slot's) twice, or once where pytest had begun it (journaled) but
    # the Ctrl-C came before its body counted its start; no finished test ran again
    assert started["test_c.py::test_blocks"] == 2
    assert {i: n for i, n in started.items() if i not in running} == dict.fromkeys(
        ALL_IDS - running, 1
    )
    assert all(started[i] in (1, 2) for i in running)
    assert {i: n for i, n in finished.items() if i not in running} == dict.fromkeys(
        ALL_IDS - running, 1
    )
    assert all(finished[i] in (1, 2) for i in running)
    rerun = sum(started.values()) - sum(started_before.values())
    assert rerun == len(ALL_IDS) - len(finished_before)
    # test_c.py (suite: the suite): its interrupted interpreter, then one for the rest
    interpreters = {f["file"]: len(f["interpreters"]) for f in run["files"]}
    assert interpreters["(suite)" if mode == "suite" else "test_c.py"] == 2
    junit = (root / "out" / mode / "junit.xml").read_text(encoding="utf-8")
    assert junit.count("<testcase") == len(ALL_IDS)
    assert "<skipped" not in junit


@pytest.mark.slow
def test_check_resume_keeps_finished_modes_and_resumes_the_interrupted_one(
    tmp_path: Path,
) -> None:
    root = write_suite(tmp_path / "suite")
    modes = ("--modes", "parallel,suite,isolated")  # the interrupted mode is not the first
    # one mode after another: parallel has finished when suite is interrupted (in the
    # screens the two run at once, and an interrupt stops both)
    args = ("check", ".", "--out", "out", "--workers", "2", "--serial-modes", *modes)
    interrupt_while_blocked(root, "suite", *args)
    assert not (root / "out" / "verdict.json").exists()
    parallel_before = (root / "out" / "parallel" / "run.json").read_bytes()
    suite_started_before, _ = counts(root, "suite")

    resumed = gpuci(*args, "--resume", cwd=root)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    assert "parallel: finished earlier, kept" in resumed.stderr
    assert (root / "out" / "parallel" / "run.json").read_bytes() == parallel_before
    started, finished = counts(root, "parallel")
    assert started == finished == Counter(dict.fromkeys(ALL_IDS, 1))  # not run again
    started, finished = counts(root, "suite")
    assert finished == Counter(dict.fromkeys(ALL_IDS, 1))
    assert started == Counter({**dict.fromkeys(ALL_IDS, 1), "test_c.py::test_blocks": 2})
    assert sum(started.values()) - sum(suite_started_before.values()) == 4  # blocks, six, d
    suite = _read(root / "out" / "suite" / "run.json")
    assert suite["resumed"] is True
    assert outcomes(root / "out" / "suite" / "run.json") == dict.fromkeys(ALL_IDS, "passed")
    # then the rest of the check: lazy isolated, evidence, diff, report
    assert (root / "out" / "isolated" / "run.json").exists()
    verdict = json.loads((root / "out" / "verdict.json").read_text(encoding="utf-8"))
    assert verdict["verdict"] == "pass"
    assert verdict["summary"]["passed"] == len(ALL_IDS)
    assert (root / "out" / "report.html").exists()


@pytest.mark.slow
def test_check_resume_continues_its_lazy_isolated_pass(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite")
    # every test errs in parallel, so the lazy isolated pass runs every file, side by side
    fail = "import os, pytest\n\n@pytest.fixture(autouse=True)\ndef parallel_breaks():\n"
    fail += '    assert os.environ.get("GPUCI_MODE") != "parallel", "breaks in parallel"\n'
    (root / "conftest.py").write_text(fail, encoding="utf-8")
    # what the parallel errors are is not asked here: no evidence (the alone-runs of every
    # test cost four times the rest of the check)
    modes = ("--modes", "suite,parallel,isolated", "--evidence-budget", "0")
    args = ("check", ".", "--out", "out", "--workers", "2", *modes)
    interrupt_while_blocked(root, "isolated", *args)
    first = _read(root / "out" / "isolated" / "run.json")
    assert first["interrupted"] is True
    assert first["workers"] == 2  # side by side
    running = {t["id"] for t in first["tests"] if "interrupted while this test ran" in t["message"]}
    assert "test_c.py::test_blocks" in running
    finished_before = {t["id"] for t in first["tests"] if t["outcome"] == "passed"}

    resumed = gpuci(*args, "--resume", cwd=root)
    # no evidence: the parallel errors stand as isolation problems, unexplained
    assert resumed.returncode == 1, resumed.stderr + resumed.stdout
    assert "verdict: fail (9 isolation problems; 9 tests not rerun: budget)" in resumed.stdout
    assert "suite: finished earlier, kept" in resumed.stderr
    assert "parallel: finished earlier, kept" in resumed.stderr
    assert f"resuming: {len(finished_before)} finished earlier" in resumed.stderr
    isolated = root / "out" / "isolated" / "run.json"
    assert outcomes(isolated) == dict.fromkeys(ALL_IDS, "passed")
    assert _read(isolated)["resumed"] is True
    started, finished = counts(root, "isolated")
    # no finished test ran again; those running at the Ctrl-C once or twice (see above)
    assert {i: n for i, n in finished.items() if i not in running} == dict.fromkeys(
        ALL_IDS - running, 1
    )
    assert started["test_c.py::test_blocks"] == 2
    assert all(started[i] in (1, 2) for i in running)
    junit = (root / "out" / "isolated" / "junit.xml").read_text(encoding="utf-8")
    assert junit.count("<testcase") == len(ALL_IDS)


@pytest.mark.slow
def test_a_finished_check_is_kept_by_resume(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite")
    args = ("check", ".", "--out", "out", "--modes", "parallel,suite", "--workers", "2")
    done = gpuci(*args, cwd=root)
    assert done.returncode == 0, done.stderr
    (root / "counter.txt").unlink()
    again = gpuci(*args, "--resume", cwd=root)
    assert again.returncode == 0, again.stderr
    assert "parallel: finished earlier, kept" in again.stderr
    assert "suite: finished earlier, kept" in again.stderr
    assert not (root / "counter.txt").exists()  # no test ran again
    assert (root / "out" / "verdict.json").exists()


@pytest.mark.slow
def test_without_resume_an_earlier_out_is_replaced_and_said_so(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite")
    args = ("run", ".", "--mode", "isolated", "--out", "out")
    first = gpuci(*args, cwd=root)
    assert first.returncode == 0, first.stderr
    assert "replacing" not in first.stderr
    second = gpuci(*args, cwd=root)
    assert second.returncode == 0, second.stderr
    said = [line for line in second.stderr.splitlines() if "replacing" in line]
    assert said == [
        f"gpuci: replacing the earlier isolated results in {Path('out') / 'isolated'}"
        " (--resume continues an interrupted run instead)"
    ]
    assert "resumed" not in _read(root / "out" / "isolated" / "run.json")
    started, _ = counts(root, "isolated")
    assert started == Counter(dict.fromkeys(ALL_IDS, 2))  # all of it ran again

    check = ("check", ".", "--out", "out", "--modes", "suite")
    first = gpuci(*check, cwd=root)
    said = [line for line in first.stderr.splitlines() if "replacing" in line]
    assert said == [
        "gpuci: replacing the earlier results in out: isolated"
        " (--resume continues an interrupted check instead)"
    ]
    assert not (root / "out" / "isolated").exists()  # not part of this check: replaced
    again = gpuci(*check, cwd=root)
    said = [line for line in again.stderr.splitlines() if "replacing" in line]
    assert len(said) == 1
    assert said[0].startswith("gpuci: replacing the earlier results in out: suite, verdict.json")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("paths", "pytest_args", "says"),
    [
        (["test_a.py"], [], "was run with PATHS"),
        (["."], ["--", "-k", "one"], "this command gives PATHS"),
    ],
)
def test_a_resume_with_other_arguments_is_refused_and_loses_nothing(
    tmp_path: Path, paths: list[str], pytest_args: list[str], says: str
) -> None:
    root = write_suite(tmp_path / "suite")
    interrupt_while_blocked(root, "isolated", "run", ".", "--mode", "isolated", "--out", "out")
    mode_dir = root / "out" / "isolated"
    before = {p: p.read_bytes() for p in mode_dir.rglob("*") if p.is_file()}
    ran = (root / "counter.txt").read_text(encoding="utf-8")
    args = ["run", *paths, "--mode", "isolated", "--out", "out", "--resume", *pytest_args]
    refused = gpuci(*args, cwd=root)
    assert refused.returncode == 4, refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1, refused.stderr
    assert lines[0].startswith("gpuci: error: --resume: out/isolated was run with PATHS")
    assert says in lines[0]
    assert {p: p.read_bytes() for p in mode_dir.rglob("*") if p.is_file()} == before
    assert (root / "counter.txt").read_text(encoding="utf-8") == ran  # no test ran


@pytest.mark.slow
def test_resume_without_a_run_json_says_how_to_start_over(tmp_path: Path) -> None:
    """gpuci killed with SIGKILL writes no run.json: nothing to resume from, nothing lost."""
    root = write_suite(tmp_path / "suite")
    journal = root / "out" / "isolated" / "journal" / "test_a.py.jsonl"
    journal.parent.mkdir(parents=True)
    journal.write_text('{"e": "start", "id": "test_a.py::test_one"}\n', encoding="utf-8")
    refused = gpuci("run", ".", "--mode", "isolated", "--out", "out", "--resume", cwd=root)
    assert refused.returncode == 4, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "gpuci: error: --resume: out/isolated has no run.json (gpuci was killed before it"
        " could write one); run without --resume to start it over"
    ]
    assert journal.exists()
    assert not (root / "counter.txt").exists()


@pytest.mark.slow
def test_check_resume_keeps_the_shuffle_it_drew(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite")
    args = ("check", ".", "--out", "out", "--workers", "2", "--modes", "suite,shuffled")
    interrupt_while_blocked(root, "shuffled", *args)
    first = _read(root / "out" / "shuffled" / "run.json")
    seed = first["shuffle_seed"]
    assert first["interrupted"] is True and isinstance(seed, int)
    order = [t["id"] for t in first["tests"]]

    resumed = gpuci(*args, "--resume", cwd=root)
    assert resumed.returncode == 0, resumed.stderr + resumed.stdout
    assert f"shuffled: seed {seed} (shuffled:{seed} runs this order again)" in resumed.stderr
    run = _read(root / "out" / "shuffled" / "run.json")
    assert run["resumed"] is True and run["shuffle_seed"] == seed
    assert [t["id"] for t in run["tests"]] == order  # the drawn order, not a new one
    started, finished = counts(root, "shuffled")
    assert finished == Counter(dict.fromkeys(ALL_IDS, 1))
    assert started == Counter({**dict.fromkeys(ALL_IDS, 1), "test_c.py::test_blocks": 2})
