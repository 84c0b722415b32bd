"""End-to-end: the real `gpuci run` on suites built in tmp_path, in all three modes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from gpuci.run.proc.journal import JournalReader
from gpuci.run.proc.logs import LOG_HEAD_BYTES, LOG_TAIL_BYTES, CappedLog

TROUBLED_SUITE = {
    "pytest.ini": """
        [pytest]
        markers =
            gpu_serial: runs alone
    """,
    "test_crash.py": """
        import os, signal

        def test_before():
            pass

        def test_segfault():
            os.kill(os.getpid(), signal.SIGSEGV)

        def test_after_segfault():
            pass

        def test_exit_zero():
            os._exit(0)

        def test_after_exit():
            pass
    """,
    "test_hang.py": """
        import time

        def test_hang():
            time.sleep(120)

        def test_after_hang():
            pass
    """,
    "test_flood.py": """
        import sys

        def test_flood():
            line = "flood " * 20 + "\\n"
            for _ in range(60_000):  # ~7 MB, shown when the test fails
                sys.stdout.write(line)
            assert False, "flooded"
    """,
    "test_broken_import.py": """
        import a_module_that_does_not_exist  # noqa: F401

        def test_never():
            pass
    """,
    "test_order.py": """
        STATE = []

        def test_polluter():
            STATE.append("dirty")

        def test_victim():
            assert STATE == [], "state left behind by an earlier test"
    """,
}
LEAKING_SUITE = {
    "pytest.ini": "[pytest]\n",
    "test_a_leak.py": """
        import builtins

        def test_leaks_global():
            builtins.gpuci_leaked = True
    """,
    "test_z_victim.py": """
        import builtins

        def test_sees_no_leak():
            assert not hasattr(builtins, "gpuci_leaked"), "leaked by another file"
    """,
}


def write_suite(root: Path, files: dict[str, str]) -> Path:
    """Write a test suite from dedented sources."""
    root.mkdir(parents=True, exist_ok=True)
    for name, source in files.items():
        (root / name).write_text(textwrap.dedent(source).lstrip(), encoding="utf-8")
    return root


def gpuci(*args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """The real CLI in a real subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "gpuci", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        stdin=subprocess.DEVNULL,
    )


def outcomes(run_json: Path) -> dict[str, dict[str, Any]]:
    """Test id -> its entry in run.json."""
    data = json.loads(run_json.read_text(encoding="utf-8"))
    return {t["id"]: t for t in data["tests"]}


@pytest.fixture(scope="module", params=["isolated", "parallel", "suite"])
def troubled(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, subprocess.CompletedProcess[str]]:
    """One run of the troubled suite per mode, shared by the assertions below."""
    mode = request.param
    root = write_suite(tmp_path_factory.mktemp(mode) / "suite", TROUBLED_SUITE)
    proc = gpuci(
        "run",
        ".",
        "--mode",
        mode,
        "--out",
        "out",
        "--timeout",
        "2",
        "--reruns",
        "1",
        "--workers",
        "2",
        # the user's own: the plain run (suite) goes on past the broken file, as pytest does
        "--",
        "--continue-on-collection-errors",
        cwd=root,
    )
    return mode, root / "out" / mode, proc


@pytest.mark.slow
def test_every_file_ran_and_the_run_failed(troubled: tuple[str, Path, Any]) -> None:
    mode, out, proc = troubled
    assert proc.returncode == 1, proc.stderr
    data = json.loads((out / "run.json").read_text(encoding="utf-8"))
    assert data["schema"] == "gpuci.run/1"
    assert data["mode"] == mode
    assert data["interrupted"] is False
    expected_units = 1 if mode == "suite" else 5
    assert len(data["files"]) == expected_units
    assert (out / "junit.xml").exists()


@pytest.mark.slow
def test_a_segfault_is_a_crash_and_the_run_resumes(troubled: tuple[str, Path, Any]) -> None:
    _, out, _ = troubled
    tests = outcomes(out / "run.json")
    assert tests["test_crash.py::test_before"]["outcome"] == "passed"
    crash = tests["test_crash.py::test_segfault"]
    assert crash["outcome"] == "crashed"
    assert "SIGSEGV" in crash["message"]
    assert "Fatal Python error" in crash["log"]  # pytest's faulthandler, from the log tail
    assert crash["reruns"] == ["crashed"]
    assert tests["test_crash.py::test_after_segfault"]["outcome"] == "passed"


@pytest.mark.slow
def test_exit_zero_mid_test_is_a_crash_not_a_success(troubled: tuple[str, Path, Any]) -> None:
    _, out, _ = troubled
    tests = outcomes(out / "run.json")
    assert tests["test_crash.py::test_exit_zero"]["outcome"] == "crashed"
    assert "exit code 0" in tests["test_crash.py::test_exit_zero"]["message"]
    assert tests["test_crash.py::test_after_exit"]["outcome"] == "passed"


@pytest.mark.slow
def test_a_hang_is_killed_and_the_run_resumes(troubled: tuple[str, Path, Any]) -> None:
    mode, out, _ = troubled
    tests = outcomes(out / "run.json")
    assert tests["test_hang.py::test_hang"]["outcome"] == "timed-out"
    # --reruns 1: in isolated, the hang was the first test of its interpreter, which is
    # one alone observation already; other modes rerun a timed-out test once at most.
    assert tests["test_hang.py::test_hang"]["reruns"] == (
        [] if mode == "isolated" else ["timed-out"]
    )
    assert tests["test_hang.py::test_after_hang"]["outcome"] == "passed"


@pytest.mark.slow
def test_a_flood_is_capped_in_the_log(troubled: tuple[str, Path, Any]) -> None:
    _, out, _ = troubled
    tests = outcomes(out / "run.json")
    assert tests["test_flood.py::test_flood"]["outcome"] == "failed"
    assert "flooded" in tests["test_flood.py::test_flood"]["message"]
    # the alone-rerun's output goes to the file's log in every mode (in suite mode the
    # main run's flood is never printed: the hang after it gets that interpreter killed)
    log = out / "logs" / "test_flood.py.log"
    # each interpreter (the main run, the resumes, the rerun) keeps at most head + tail
    interpreters = log.read_bytes().count(b"=== gpuci: ")
    assert log.stat().st_size <= interpreters * (LOG_HEAD_BYTES + LOG_TAIL_BYTES + 4096)
    assert b"bytes of output omitted" in log.read_bytes()


@pytest.mark.slow
def test_a_collection_error_is_reported_against_its_file(troubled: tuple[str, Path, Any]) -> None:
    _, out, _ = troubled
    tests = outcomes(out / "run.json")
    broken = tests["test_broken_import.py"]
    assert broken["outcome"] == "failed"
    assert broken["message"].startswith("collection error:")
    assert "a_module_that_does_not_exist" in broken["message"]


@pytest.mark.slow
def test_a_test_that_passes_only_alone(troubled: tuple[str, Path, Any]) -> None:
    _, out, _ = troubled
    tests = outcomes(out / "run.json")
    victim = tests["test_order.py::test_victim"]
    assert victim["outcome"] == "failed"
    assert victim["reruns"] == ["passed"]  # alone, in a fresh interpreter, it passes


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["isolated", "suite"])
def test_a_leak_across_files_shows_only_in_suite_mode(tmp_path: Path, mode: str) -> None:
    root = write_suite(tmp_path / "suite", LEAKING_SUITE)
    proc = gpuci("run", ".", "--mode", mode, "--out", "out", "--reruns", "1", cwd=root)
    tests = outcomes(root / "out" / mode / "run.json")
    victim = tests["test_z_victim.py::test_sees_no_leak"]
    if mode == "suite":
        assert proc.returncode == 1
        assert victim["outcome"] == "failed"
        assert victim["reruns"] == ["passed"]
    else:
        assert proc.returncode == 0, proc.stderr
        assert victim["outcome"] == "passed"


@pytest.mark.slow
def test_junit_is_rebuilt_for_dead_interpreters(troubled: tuple[str, Path, Any]) -> None:
    mode, out, _ = troubled
    text = (out / "junit.xml").read_text(encoding="utf-8")
    assert 'name="test_segfault"' in text  # pytest never wrote it: the interpreter died
    assert 'name="test_after_segfault"' in text
    assert 'name="test_hang"' in text
    if mode != "suite":
        assert (out / "junit" / "test_crash.py.xml").exists()
        assert not list((out / "junit").glob("*.part*.xml"))


@pytest.mark.slow
def test_progress_is_one_line_per_file(troubled: tuple[str, Path, Any]) -> None:
    mode, _, proc = troubled
    lines = [line for line in proc.stderr.splitlines() if line.startswith("gpuci: [")]
    assert len(lines) == (1 if mode == "suite" else 5)
    assert all("elapsed" in line for line in lines)


# --- scheduling, GPUs and serial files -----------------------------------------------

GPU_SUITE = {
    "pytest.ini": "[pytest]\n",
    **{
        f"test_gpu{i}.py": f"""
            import os, time, json, pathlib

            def test_record():
                time.sleep(0.3)
                pathlib.Path("seen-{i}.json").write_text(json.dumps({{
                    "gpu": os.environ.get("CUDA_VISIBLE_DEVICES"),
                    "slot": os.environ["GPUCI_SLOT"], "start": time.time()}}))
        """
        for i in range(4)
    },
    "test_serial.py": """
        import os, time, json, pathlib
        import pytest

        @pytest.mark.gpu_serial
        def test_alone():
            pathlib.Path("seen-serial.json").write_text(json.dumps({"start": time.time()}))
    """,
}


@pytest.mark.slow
def test_parallel_slots_get_gpus_round_robin_and_serial_files_run_last(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite", GPU_SUITE)
    proc = gpuci(
        "run",
        ".",
        "--mode",
        "parallel",
        "--out",
        "out",
        "--workers",
        "2",
        "--gpus",
        "0,1",
        cwd=root,
    )
    assert proc.returncode == 0, proc.stderr
    seen = [json.loads((root / f"seen-{i}.json").read_text()) for i in range(4)]
    # every slot sees both GPUs, rotated: slot k starts at GPU k
    assert {s["gpu"] for s in seen} == {"0,1", "1,0"}
    assert all(s["gpu"] == ("0,1" if s["slot"] == "0" else "1,0") for s in seen)
    serial = json.loads((root / "seen-serial.json").read_text())
    assert serial["start"] > max(s["start"] for s in seen)
    run = json.loads((root / "out" / "parallel" / "run.json").read_text())
    assert run["files"][-1]["file"] == "test_serial.py"
    assert run["gpus"] == ["0", "1"]


@pytest.mark.slow
def test_shards_split_the_files_and_write_side_by_side(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite", GPU_SUITE)
    ran: list[str] = []
    for index in (1, 2):
        proc = gpuci(
            "run", ".", "--mode", "isolated", "--out", "out", "--shard", f"{index}/2", cwd=root
        )
        assert proc.returncode == 0, proc.stderr
        run = json.loads(
            (root / "out" / "isolated" / f"shard-{index}-of-2" / "run.json").read_text()
        )
        assert run["shard"] == [index, 2]
        ran += [f["file"] for f in run["files"]]
    assert sorted(ran) == sorted(f for f in GPU_SUITE if f.startswith("test_"))


@pytest.mark.slow
def test_shard_defaults_from_gitlab_variables(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "suite", GPU_SUITE)
    env = dict(os.environ, CI_NODE_INDEX="2", CI_NODE_TOTAL="3")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuci",
            "run",
            ".",
            "--mode",
            "isolated",
            "--out",
            "out",
            "--reruns",
            "0",
        ],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (root / "out" / "isolated" / "shard-2-of-3" / "run.json").exists()


@pytest.mark.slow
def test_sigterm_ends_children_and_writes_what_finished(tmp_path: Path) -> None:
    root = write_suite(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "test_fast.py": "def test_fast():\n    pass\n",
            "test_slow.py": "import time\n\ndef test_slow():\n    time.sleep(60)\n",
        },
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuci", "run", ".", "--mode", "isolated", "--out", "out"],
        cwd=root,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    journal = root / "out" / "isolated" / "journal" / "test_slow.py.jsonl"
    deadline = time.monotonic() + 60
    # until its test starts: started ahead, its interpreter journals its collection (the
    # id) while test_fast.py still runs
    started = b'{"e": "start", "id": "test_slow.py::test_slow"}'
    while time.monotonic() < deadline and started not in (
        journal.read_bytes() if journal.exists() else b""
    ):
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 2, stderr
    assert "interrupted" in stderr
    run = json.loads((root / "out" / "isolated" / "run.json").read_text())
    assert run["interrupted"] is True
    tests = {t["id"]: t["outcome"] for t in run["tests"]}
    assert tests["test_fast.py::test_fast"] == "passed"
    assert tests["test_slow.py::test_slow"] == "not-run"
    assert (
        "sleep(60)"
        not in subprocess.run(
            ["ps", "-eo", "args"], capture_output=True, text=True, check=False
        ).stdout
    )


# --- bad input -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(
    ("args", "says", "code"),
    [
        (["nope/"], "nope/: no such file or directory", 4),
        (["empty_test.py"], "no tests collected", 5),  # plain pytest's 5: no tests ran
        ([".", "--workers", "0"], "--workers 0", 4),
        ([".", "--workers", "many"], "--workers 'many'", 4),
        ([".", "--shard", "3/2"], "--shard '3/2'", 4),
        ([".", "--shard", "x"], "--shard 'x'", 4),
        ([".", "--timeout", "-1"], "--timeout", 4),
        ([".", "--gpus", "0;rm"], "--gpus", 4),
        ([".", "--out", "/proc/gpuci-cannot-write-here"], "cannot write results", 4),
        ([".", "--mode", "serial"], "invalid choice", 4),
    ],
)
def test_bad_input_is_one_line_and_exits_as_pytest(
    tmp_path: Path, args: list[str], says: str, code: int
) -> None:
    root = write_suite(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "test_ok.py": "def test_ok():\n    pass\n",
            "empty_test.py": "x = 1\n",
        },
    )
    full = ["run", *args]
    if "--mode" not in args:
        full += ["--mode", "isolated"]
    if "--out" not in args:
        full += ["--out", "out"]
    proc = gpuci(*full, cwd=root)
    assert proc.returncode == code, proc.stderr  # pytest's usage error (4), or its 5
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("gpuci: error: ")
    assert says in lines[0]
    assert "Traceback" not in proc.stderr


# --- the pieces that read a child's output -------------------------------------------


def test_journal_reader_returns_only_complete_lines(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    path.write_text('{"e": "start", "id": "a"}\n{"e": "fin', encoding="utf-8")
    reader = JournalReader(tmp_path / "j.jsonl")
    reader._offset = 0  # read from the start, as for a journal created after the reader
    assert reader.read() == [{"e": "start", "id": "a"}]
    with path.open("a", encoding="utf-8") as f:
        f.write('ish", "id": "a"}\n')
    assert reader.read() == [{"e": "finish", "id": "a"}]
    assert reader.read() == []


def test_capped_log_keeps_head_and_tail(tmp_path: Path) -> None:
    log = CappedLog(tmp_path / "x.log", "header\n")
    chunk = b"0123456789abcdef" * 4096  # 64 KiB
    total = 0
    while total < LOG_HEAD_BYTES + 3 * LOG_TAIL_BYTES:
        log.write(chunk)
        total += len(chunk)
    log.write(b"THE END")
    assert log.excerpt().endswith("THE END")
    log.close()
    data = (tmp_path / "x.log").read_bytes()
    assert data.startswith(b"header\n0123")
    assert data.endswith(b"THE END")
    assert len(data) < LOG_HEAD_BYTES + LOG_TAIL_BYTES + 200
    assert b"bytes of output omitted" in data


@pytest.mark.slow
def test_skip_reasons_are_summed_up(tmp_path: Path) -> None:
    root = write_suite(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "test_skips.py": """
                import pytest

                @pytest.mark.parametrize("n", range(3))
                def test_needs_gpu(n):
                    pytest.skip("no CUDA GPU: cudaErrorNoDevice")
            """,
        },
    )
    proc = gpuci("run", ".", "--mode", "isolated", "--out", "out", cwd=root)
    assert proc.returncode == 1, proc.stderr  # every test skipped: it tested nothing
    lines = proc.stderr.splitlines()
    assert "gpuci:   3 skipped: no CUDA GPU: cudaErrorNoDevice" in lines
    assert "gpuci: no test ran: 3 skipped (3: no CUDA GPU: cudaErrorNoDevice)" in lines


@pytest.mark.slow
def test_a_death_at_interpreter_exit_is_a_crash_of_the_file(tmp_path: Path) -> None:
    # like a CUDA error in the context's teardown: every test passed, then the process died
    root = write_suite(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "test_teardown.py": """
                import atexit, os

                atexit.register(lambda: os.abort())

                def test_fine():
                    pass
            """,
        },
    )
    proc = gpuci("run", ".", "--mode", "isolated", "--out", "out", "--reruns", "0", cwd=root)
    assert proc.returncode == 1, proc.stderr
    run = json.loads((root / "out" / "isolated" / "run.json").read_text())
    assert run["files"][0]["status"] == "crashed"
    assert run["files"][0]["interpreters"][0]["signal"] == signal.SIGABRT
    tests = {t["id"]: t for t in run["tests"]}
    assert tests["test_teardown.py::test_fine"]["outcome"] == "passed"
    exit_crash = tests["test_teardown.py::[interpreter exit]"]
    assert exit_crash["outcome"] == "crashed"
    assert "at exit after pytest finished" in exit_crash["message"]
    assert "SIGABRT" in exit_crash["message"]


@pytest.mark.slow
def test_a_malformed_junit_file_is_rebuilt_from_the_journal(tmp_path: Path) -> None:
    root = write_suite(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "conftest.py": """
                import pytest

                @pytest.hookimpl(trylast=True)
                def pytest_sessionfinish(session):
                    # pytest has written its JUnit by now: leave it truncated
                    path = session.config.option.xmlpath
                    if path:
                        with open(path, "w") as f:
                            f.write("<testsuites><testsuite name=")
            """,
            "test_two.py": "def test_a():\n    pass\n\ndef test_b():\n    assert 0\n",
        },
    )
    proc = gpuci("run", ".", "--mode", "isolated", "--out", "out", "--reruns", "0", cwd=root)
    assert proc.returncode == 1, proc.stderr
    from junitparser import JUnitXml

    xml = JUnitXml.fromfile(str(root / "out" / "isolated" / "junit.xml"))
    cases = {case.name: case for suite in xml for case in suite}
    assert set(cases) == {"test_a", "test_b"}
    assert cases["test_a"].is_passed
    assert not cases["test_b"].is_passed
    assert xml.tests == 2


@pytest.mark.slow
def test_every_interpreter_records_its_startup(troubled: tuple[str, Path, Any]) -> None:
    _, out, _ = troubled
    data = json.loads((out / "run.json").read_text(encoding="utf-8"))
    started = [i for f in data["files"] for i in f["interpreters"] if "startup_s" in i]
    assert started, "no interpreter measured its start-up"
    # from its start to collection, within its own lifetime: one started ahead (while its
    # slot's previous file ran) counts what was not hidden, 0 where it had collected
    assert any(i["startup_s"] > 0 for i in started), started
    for interpreter in started:
        assert 0 <= interpreter["startup_s"] <= interpreter["end"] - interpreter["start"] + 0.1
