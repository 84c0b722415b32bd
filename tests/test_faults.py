"""Faults a new user hit (issue 17), each through the real CLI in real subprocesses.

Stale results that survived "replacing", two checks mixing into one OUT, the GitLab token
reaching the merge request, a file that ends pytest at import, and the smaller ones.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuci.gitlab.publish import publish_comment
from gpuci.model import UsageError
from gpuci.run.disk.outdir import check_run_id, prepare_out, replace_earlier
from tests.cli_runner import as_foreground_job, clean_env, gpuci, write_files
from tests.gitlab_server import FakeGitLab

MODES = ("--modes", "suite,parallel,isolated")  # the modes every check here runs
TOKEN = "glpat-Fault3Token-0123456789"  # noqa: S105 (a test token)
JOB_TOKEN = "jobtok-Fault3-abcdef0123"  # noqa: S105 (a test token)
# holds a test while the file named in HOLD exists, in the suite mode only
HOLDING_TEST = """
    import os, time
    from pathlib import Path

    def test_wait():
        hold = Path(os.environ["HOLD"])
        end = time.monotonic() + 60
        while os.environ.get("GPUCI_MODE") == "suite" and hold.exists() and time.monotonic() < end:
            time.sleep(0.05)
"""


def start_check(root: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    """`gpuci check . --out out` in the background."""
    return subprocess.Popen(
        as_foreground_job(
            sys.executable, "-m", "gpuci", "check", ".", "--out", "out", *MODES, *args
        ),
        cwd=root,
        env=clean_env(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_suite_test(out: Path, proc: subprocess.Popen[str]) -> None:
    """Until the suite interpreter of the check `proc` (not an earlier one) started a test."""
    earlier = check_id(out)
    journal = out / "suite" / "journal" / "suite.jsonl"
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            # the check's id first: it is written after the earlier results were moved
            # aside, so a journal read once it changed is the new check's (read the other
            # way round, the earlier check's journal could pass, and Ctrl-C land before the
            # screens)
            new = check_id(out) != earlier
            if new and journal.exists() and '"e": "start"' in journal.read_text("utf-8"):
                return
            time.sleep(0.05)
    except BaseException:  # no check left running, nor its pipes open, past this test
        proc.kill()
        proc.communicate()
        raise
    proc.kill()
    pytest.fail(f"the suite never started a test: {proc.communicate()}")


def check_id(out: Path) -> str | None:
    """The run id of the check that last started in `out`."""
    try:
        return str(json.loads((out / ".gpuci" / "check.json").read_text("utf-8"))["run_id"])
    except FileNotFoundError:
        return None


def verdict_tests(out: Path) -> dict[str, dict[str, object]]:
    data = json.loads((out / "verdict.json").read_text(encoding="utf-8"))
    return {t["id"]: t for t in data["tests"]}


def run_ids(out: Path) -> set[str]:
    return {json.loads(p.read_text(encoding="utf-8"))["run_id"] for p in out.glob("*/run.json")}


# --- 1. stale results -------------------------------------------------------------------


def test_a_reader_of_the_checks_id_never_sees_it_half_written(tmp_path: Path) -> None:
    # a new check's id replaces the file whole: a reader that opened the earlier one reads
    # it whole (written in place, it read the new id, or nothing: seen as `corrupt, not
    # JSON` by a --resume, and by test_an_interrupted_fresh_check_... on a busy machine)
    out = tmp_path / "out"
    replace_earlier(out, "first")
    with (out / ".gpuci" / "check.json").open(encoding="utf-8") as reader:
        replace_earlier(out, "second")
        assert json.loads(reader.read())["run_id"] == "first"
    assert check_run_id(out) == "second"


@pytest.mark.slow
def test_an_interrupted_fresh_check_leaves_nothing_of_the_previous_one(tmp_path: Path) -> None:
    flag, hold = tmp_path / "broken", tmp_path / "hold"
    root = write_files(
        tmp_path / "suite",
        {
            "test_fix.py": """
                import os
                from pathlib import Path

                def test_fixed():
                    assert not Path(os.environ["FLAG"]).exists(), "still broken"
            """,
            "test_slow.py": HOLDING_TEST,
        },
    )
    env = clean_env() | {"FLAG": str(flag), "HOLD": str(hold)}
    out = root / "out"
    flag.touch()
    first = gpuci("check", ".", "--out", "out", *MODES, cwd=root, env=env)
    assert first.returncode == 1, first.stderr
    assert verdict_tests(out)["test_fix.py::test_fixed"]["category"] == "failed"

    first_id = check_id(out)
    flag.unlink()  # fixed; the next check is stopped during its suite pass
    hold.touch()
    second = start_check(root, env)
    wait_for_suite_test(out, second)
    # what is in OUT now is the new check's: the screens beside the suite, nothing else
    assert not (out / "isolated").exists() and not (out / "verdict.json").exists()
    assert first_id not in run_ids(out)
    second.send_signal(signal.SIGINT)
    _, err = second.communicate(timeout=60)
    assert second.returncode == 2, err  # pytest's interrupt (it was 130)
    assert "replacing the earlier results" in err
    again = "gpuci check . --out out --modes suite,parallel,isolated --resume"
    assert f"gpuci: to go on from there: {again}" in err
    interrupted = check_id(out)
    assert run_ids(out) == {interrupted}

    hold.unlink()
    resumed = gpuci("check", ".", "--out", "out", *MODES, "--resume", cwd=root, env=env)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "finished earlier, kept" not in resumed.stderr
    assert verdict_tests(out)["test_fix.py::test_fixed"]["category"] == "passed"
    assert run_ids(out) == {interrupted}
    assert not list((out / ".gpuci").glob("replaced-*"))  # removed once the check had its own


@pytest.mark.slow
def test_resume_keeps_only_the_interrupted_checks_own_results(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    root = write_files(tmp_path / "suite", {"test_slow.py": HOLDING_TEST})
    env = clean_env() | {"HOLD": str(hold)}
    out = root / "out"
    assert gpuci("check", ".", "--out", "out", *MODES, cwd=root, env=env).returncode == 0
    hold.touch()
    second = start_check(root, env)
    wait_for_suite_test(out, second)
    second.send_signal(signal.SIGINT)
    second.communicate(timeout=60)
    # the previous check's parallel results put back where the interrupted one's were
    (replaced,) = (out / ".gpuci").glob("replaced-*")
    shutil.rmtree(out / "parallel", ignore_errors=True)
    (replaced / "parallel").rename(out / "parallel")
    hold.unlink()
    resumed = gpuci("check", ".", "--out", "out", *MODES, "--resume", cwd=root, env=env)
    assert resumed.returncode == 0, resumed.stderr
    assert "parallel: its results in out/parallel are another run's" in resumed.stderr
    assert len(run_ids(out)) == 1


@pytest.mark.slow
def test_resume_without_a_check_in_out_is_refused(tmp_path: Path) -> None:
    root = write_files(tmp_path / "suite", {"test_a.py": "def test_a():\n    pass\n"})
    proc = gpuci("check", ".", "--out", "out", "--resume", cwd=root)
    assert proc.returncode == 4
    assert "--resume: out holds no check that gpuci started" in proc.stderr


# --- 2. one command at a time in OUT ----------------------------------------------------


@pytest.mark.slow
def test_a_second_command_into_a_busy_out_is_refused_naming_the_holder(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    root = write_files(tmp_path / "suite", {"test_slow.py": HOLDING_TEST})
    env = clean_env() | {"HOLD": str(hold)}
    out = root / "out"
    hold.touch()
    first = start_check(root, env)
    try:
        wait_for_suite_test(out, first)
        for command in (("check", ".", "--out", "out", *MODES), ("diff", "out")):
            second = gpuci(*command, cwd=root, env=env)
            assert second.returncode == 4, second.stderr
            assert f"gpuci: error: out: in use by pid {first.pid} (gpuci check)" in second.stderr
    finally:
        hold.unlink()
        _, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert len(run_ids(out)) == 1


@pytest.mark.slow
def test_a_lock_left_by_a_dead_process_is_taken_over_with_a_note(tmp_path: Path) -> None:
    root = write_files(tmp_path / "suite", {"test_a.py": "def test_a():\n    pass\n"})
    lock = root / "out" / ".gpuci" / "lock"
    lock.parent.mkdir(parents=True)
    lock.write_text("pid 4194000 (gpuci check)\n", encoding="utf-8")
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=root)
    assert proc.returncode == 0, proc.stderr
    assert "took over the lock on out left by pid 4194000 (gpuci check)" in proc.stderr
    assert lock.read_text(encoding="utf-8") == ""  # released in order


# --- 3. secrets -------------------------------------------------------------------------


@pytest.mark.slow
def test_a_suite_printing_its_environment_posts_no_secret(tmp_path: Path) -> None:
    root = write_files(
        tmp_path / "suite",
        {
            "test_env.py": """
                import os

                def test_prints_environment():
                    print(dict(os.environ))
                    job, own = os.environ.get("CI_JOB_TOKEN"), os.environ.get("GPUCI_GITLAB_TOKEN")
                    assert False, f"job {job} own {own} {dict(os.environ)!r}"
            """
        },
    )
    env = clean_env() | {"GPUCI_GITLAB_TOKEN": TOKEN, "CI_JOB_TOKEN": JOB_TOKEN}
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=root, env=env)
    assert proc.returncode == 1, proc.stderr
    out = root / "out"
    # the test saw the job's token (GitLab's, left to tests) and printed it: masked
    assert "job [MASKED] own None" in (out / "verdict.json").read_text(encoding="utf-8")
    for path in out.rglob("*"):
        if path.is_file():  # gpuci's own token reached no test: it is in no file at all
            assert TOKEN not in path.read_text(encoding="utf-8", errors="replace"), path
    for name in ("verdict.json", "report.html", "comment.md"):  # the job's token is masked
        assert JOB_TOKEN not in (out / name).read_text(encoding="utf-8"), name
    assert TOKEN not in proc.stdout + proc.stderr

    # a comment and report written elsewhere (an older gpuci) still post nothing secret
    (out / "comment.md").write_text(f"leak {TOKEN} {JOB_TOKEN}\n", encoding="utf-8")
    (out / "report.html").write_text(f"<p>{TOKEN} {JOB_TOKEN}</p>\n", encoding="utf-8")
    with FakeGitLab(token=TOKEN) as gitlab:
        environ = gitlab.environ() | {"CI_JOB_TOKEN": JOB_TOKEN}
        assert publish_comment(out / "comment.md", dry_run=False, environ=environ) == 0
        (note,) = gitlab.notes
    assert TOKEN not in note["body"] and JOB_TOKEN not in note["body"]
    assert "leak [MASKED] [MASKED]" in note["body"]
    report = (out / "report.html").read_text(encoding="utf-8")
    assert TOKEN not in report and JOB_TOKEN not in report


@pytest.mark.slow
def test_variables_the_configuration_names_secret_reach_no_test(tmp_path: Path) -> None:
    root = write_files(
        tmp_path / "suite",
        {
            "pyproject.toml": '[tool.gpuci]\nsecrets = ["DEPLOY_KEY"]\n',
            "test_env.py": """
                import os

                def test_sees_no_deploy_key():
                    print(dict(os.environ))
                    assert "DEPLOY_KEY" not in os.environ, os.environ["DEPLOY_KEY"]
            """,
        },
    )
    env = clean_env() | {"DEPLOY_KEY": "deploy-Key-0123456789"}
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=root, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for path in (root / "out").rglob("*"):
        if path.is_file():
            assert "deploy-Key-0123456789" not in path.read_text("utf-8", errors="replace")


# --- 4. collection ----------------------------------------------------------------------


@pytest.mark.slow
def test_a_file_that_exits_at_import_is_its_own_collection_error(tmp_path: Path) -> None:
    root = write_files(
        tmp_path / "suite",
        {
            "test_exit.py": "import sys\nsys.exit(0)\n\n\ndef test_never():\n    pass\n",
            "test_ok.py": "def test_ok():\n    pass\n",
        },
    )
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=root)
    # plain pytest ends with INTERNALERROR there (exit 3), no test run: so does the plain
    # run, and the check exits so; each file's own interpreter shows the file's error
    assert proc.returncode == 3, proc.stderr
    assert "verdict: fail (plain pytest exited 3 (internal error): SystemExit: 0" in proc.stdout
    tests = verdict_tests(root / "out")
    assert tests["test_ok.py::test_ok"]["category"] == "passed"
    assert tests["test_exit.py"]["category"] == "failed"
    assert tests["test_exit.py"]["message"] == "collection error: SystemExit: 0 (test_exit.py:2)"
    outcomes = tests["test_exit.py"]["outcomes"]
    assert outcomes == {"isolated": "failed", "parallel": "failed", "suite": "not-run"}
    assert "caught unexpected SystemExit" not in proc.stdout + proc.stderr
    assert "SystemExit: 0 (test_exit.py:2)" in (root / "out" / "comment.md").read_text("utf-8")


@pytest.mark.slow
def test_a_conftest_that_fails_to_import_names_its_file_and_line(tmp_path: Path) -> None:
    broken = "import os\n\nimport no_such_module_here\n"
    root = write_files(
        tmp_path / "suite",
        {"sub/conftest.py": broken, "sub/test_in.py": "def test_in():\n    pass\n"},
    )
    (root / "test_top.py").write_text("def test_top():\n    pass\n", encoding="utf-8")
    proc = gpuci("check", ".", "--out", "out", *MODES, cwd=root)
    # the plain run stops at the broken conftest.py, as pytest does (exit 2, nothing run)
    assert proc.returncode == 2, proc.stderr
    assert "Interrupted: 1 error during collection" in proc.stdout
    tests = verdict_tests(root / "out")
    assert tests["test_top.py::test_top"]["category"] == "passed"  # its own file's screens
    assert tests["sub"]["message"] == (
        "collection error: ModuleNotFoundError: No module named 'no_such_module_here'"
        " (sub/conftest.py:3)"
    )

    (root / "conftest.py").write_text(broken, encoding="utf-8")  # the suite's own: nothing runs
    top = gpuci("check", ".", "--out", "out", *MODES, cwd=root)
    assert top.returncode == 4
    assert top.stderr == (
        "gpuci: error: conftest.py:3: conftest.py failed to import: ModuleNotFoundError:"
        " No module named 'no_such_module_here'\n"
    )
    assert verdict_tests(root / "out")["sub"]  # the earlier check's results are not lost


# --- the smaller ones -------------------------------------------------------------------


def test_bare_gpuci_lists_its_commands(tmp_path: Path) -> None:
    proc = gpuci(cwd=tmp_path)
    assert proc.returncode == 4
    for command in ("run", "merge", "diff", "report", "publish", "check", "explain"):
        assert f"\n    {command} " in proc.stderr


@pytest.mark.slow
def test_bad_options_are_refused_at_once_and_touch_nothing(tmp_path: Path) -> None:
    # collecting test_a.py imports it, and the import leaves a mark: proof, not a stopwatch
    mark = "from pathlib import Path\n\nPath(__file__).with_name('collected').touch()\n\n\n"
    root = write_files(tmp_path / "suite", {"test_a.py": mark + "def test_a():\n    pass\n"})
    proc = gpuci("check", ".", "--out", "out", "--workers", "0", cwd=root)
    assert proc.returncode == 4
    assert proc.stderr == "gpuci: error: --workers 0: at least one interpreter must run\n"
    assert not (root / "collected").exists()  # refused before any collection
    assert not (root / "out").exists()

    (root / "empty").mkdir()
    empty = gpuci("check", "empty", "--out", "out", cwd=root)
    assert empty.returncode == 5
    assert "does it hold files that pytest's python_files setting matches?" in empty.stderr
    assert "is it a test file" not in empty.stderr

    (root / "a_file").write_text("", encoding="utf-8")
    unwritable = gpuci("check", ".", "--out", "a_file/out", cwd=root)
    assert unwritable.returncode == 4
    assert unwritable.stderr.startswith("gpuci: error: a_file/out: cannot write results there")


@pytest.mark.slow
def test_a_fresh_check_still_orders_its_files_by_the_replaced_checks_times(
    tmp_path: Path,
) -> None:
    root = write_files(
        tmp_path / "suite",
        {
            "test_long.py": "def test_long():\n    pass\n",
            "test_many.py": "".join(f"def test_{n}():\n    pass\n\n\n" for n in range(6)),
        },
    )
    run_json = root / "out" / "parallel" / "run.json"

    def first_in_parallel() -> str:
        run = json.loads(run_json.read_text("utf-8"))
        return str(min(run["files"], key=lambda f: f["start"])["file"])

    # the parallel screen alone, the one the times order (no suite interpreter beside it
    # teaches the screen anything meanwhile)
    check = ("check", ".", "--out", "out", "--modes", "parallel", "--workers", "1")
    assert gpuci(*check, cwd=root).returncode == 0
    assert first_in_parallel() == "test_many.py"  # no history: the most tests first
    # the times the first check recorded, made unmistakable: test_long.py took longest (as
    # measured, each file's time is mostly its interpreter's start-up, which a busy machine
    # varies more than the files differ)
    run = json.loads(run_json.read_text("utf-8"))
    for file in run["files"]:
        file["end"] = file["start"] + (30.0 if file["file"] == "test_long.py" else 0.5)
    run_json.write_text(json.dumps(run), "utf-8")
    assert gpuci(*check, cwd=root).returncode == 0
    # the second check read the first one's times, moved aside: the longest file first
    assert first_in_parallel() == "test_long.py"


def test_a_mode_folder_holding_only_what_gpuci_writes_is_gpucis(tmp_path: Path) -> None:
    # an interpreter started ahead for a file that is gone ends at once and writes its
    # JUnit part into the mode's folder before the mode starts: that folder is the check's
    # own (it failed a second check now and then, "exists and is not a gpuci result
    # directory"); one holding anything else is refused, and nothing in it is touched
    mode = tmp_path / "out" / "parallel"
    (mode / "junit").mkdir(parents=True)
    (mode / "junit" / "tests-test_c.py-1.xml").write_text("<testsuites/>", encoding="utf-8")
    prepare_out(mode)
    assert [p.name for p in mode.iterdir()] == []
    mine = tmp_path / "mine"
    (mine / "junit").mkdir(parents=True)
    (mine / "notes.txt").write_text("mine", encoding="utf-8")
    with pytest.raises(UsageError, match="exists and is not a gpuci result directory"):
        prepare_out(mine)
    assert sorted(p.name for p in mine.iterdir()) == ["junit", "notes.txt"]
