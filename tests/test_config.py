"""`[tool.gpuci]` in pyproject.toml, and threads as an opt-in mode, with the real CLI.

The suite here has a shared-workspace race (thread-unsafe), a test that takes 60% of a
fake device (in 4 threads at once it runs out of memory: not a thread-safety bug) and
plain tests. With pytest-run-parallel installed and nothing asking for threads, no
threads mode runs, and every output says so.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci, needs_run_parallel

from gpuci.config import find_pyproject, load_config, parse_config
from gpuci.model import UsageError

SUITE = {
    "pytest.ini": "[pytest]\n",
    "test_workspace.py": """
        import threading
        import time

        WORKSPACE = []  # one scratch buffer for every caller: the planted bug


        def test_shared_workspace():
            me = threading.get_ident()
            WORKSPACE.append(me)
            try:
                time.sleep(0.05)  # every other thread appends meanwhile
                assert WORKSPACE == [me]
            finally:
                WORKSPACE.remove(me)
    """,
    "test_hog.py": """
        import threading
        import time

        DEVICE = 1000  # the fake device's memory
        USED = [0]
        LOCK = threading.Lock()


        class OutOfMemoryError(RuntimeError):
            pass


        def malloc(n):
            with LOCK:
                if USED[0] + n > DEVICE:
                    raise OutOfMemoryError(f"Out of memory allocating {n} bytes")
                USED[0] += n


        def test_hold_most_memory():
            malloc(600)  # 60%: one copy fits, two do not
            try:
                time.sleep(0.05)
            finally:
                with LOCK:
                    USED[0] -= 600
    """,
    "test_plain.py": """
        def test_add():
            assert 1 + 1 == 2
    """,
}
RACE = "test_workspace.py::test_shared_workspace"
HOG = "test_hog.py::test_hold_most_memory"
PLAIN = "test_plain.py::test_add"
NOT_ASKED = "not asked for"


def build(root: Path, files: dict[str, str] = SUITE) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (root / name).write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return root


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def categories(out: Path) -> dict[str, str]:
    return {t["id"]: t["category"] for t in read(out / "verdict.json")["tests"]}


# --- reading the table --------------------------------------------------------------


def test_a_full_table_is_read_with_every_key(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [tool.gpuci]
            modes = ["suite", "parallel", "threads", "isolated"]
            workers = 4
            timeout = 120
            threads = 8
            reruns = 3
            evidence-budget = 600
            gpus = [0, 1]
            gpus-per-slot = 1
            fail-on = ["order-dependent", "failed"]
            allow = ["known", "flaky"]
            secrets = ["GITLAB_TOKEN", "AWS_SECRET_ACCESS_KEY"]
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "tests").mkdir()
    config = load_config([tmp_path / "tests"])
    assert config.path == tmp_path / "pyproject.toml"
    assert config.modes == "suite,parallel,threads,isolated"  # as --modes spells them
    assert (config.workers, config.timeout, config.threads, config.reruns) == ("4", 120.0, 8, 3)
    assert (config.evidence_budget, config.gpus, config.gpus_per_slot) == (600.0, "0,1", 1)
    assert (config.fail_on, config.allow) == ("order-dependent,failed", "known,flaky")
    assert config.secrets == ("GITLAB_TOKEN", "AWS_SECRET_ACCESS_KEY")


def test_the_search_stops_at_the_suites_own_rootdir(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.gpuci]\nworkers = 2\n", encoding="utf-8")
    inner = tmp_path / "suite"
    inner.mkdir()
    assert find_pyproject([inner]) == tmp_path / "pyproject.toml"
    (inner / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    assert find_pyproject([inner]) is None  # its own pytest.ini makes it the rootdir
    # a pyproject.toml without [tool.gpuci] configures nothing of gpuci's
    (inner / "pyproject.toml").write_text("[project]\nname = 'x'\n", encoding="utf-8")
    assert find_pyproject([inner]) is None


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ({"worker": 2}, "unknown key 'worker'"),
        ({"workers": "many"}, "workers: expected a whole number"),
        ({"workers": 0}, "workers: expected a whole number"),
        ({"timeout": "30"}, "timeout: expected a number of seconds"),
        ({"timeout": 0}, "timeout: expected a number of seconds"),
        ({"threads": 1}, "threads: expected a whole number, at least 2"),
        ({"threads": True}, "threads: expected a whole number"),
        ({"modes": "suite"}, "modes: expected a list of modes"),
        ({"modes": ["suite", "serial"]}, "modes: expected a list of modes"),
        ({"modes": []}, "modes: expected at least one mode"),
        ({"modes": ["suite", "shuffled:x"]}, "whole number from 0 to"),
        ({"modes": ["reversed:3"]}, "only shuffled takes a seed"),
        ({"evidence-budget": -1}, "evidence-budget: expected a number of seconds"),
        ({"gpus": {}}, "gpus: expected a list of GPU indices"),
        ({"gpus-per-slot": 0}, "gpus-per-slot: expected a whole number"),
        ({"preload": ["numpy"]}, "'preload' is gone: every interpreter is a fresh"),
        ({"fail-on": ["bad"]}, "fail-on: expected a list of categories"),
        ({"allow": "known"}, "allow: expected a list of categories"),
        ({"secrets": ["A-B"]}, "secrets: expected a list of environment variable names"),
    ],
)
def test_a_wrong_key_or_type_names_the_key_and_the_file(
    tmp_path: Path, table: dict[str, Any], named: str
) -> None:
    path = tmp_path / "pyproject.toml"
    with pytest.raises(UsageError) as caught:
        parse_config(table, path)
    assert str(caught.value).startswith(f"{path}: [tool.gpuci] ")
    assert named in str(caught.value)


def test_bad_configuration_is_one_line_and_exit_2(tmp_path: Path) -> None:
    root = build(tmp_path / "suite")
    (root / "pyproject.toml").write_text("[tool.gpuci]\ntimeout = 'long'\n", encoding="utf-8")
    proc = gpuci("check", ".", "--out", "out", cwd=root)
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuci: error: "), lines
    assert str(root / "pyproject.toml") in lines[0] and "timeout" in lines[0]
    assert not (root / "out").exists()


# --- threads: opt-in ----------------------------------------------------------------


@pytest.mark.slow
@needs_run_parallel
def test_installed_but_not_asked_for_no_threads_mode_and_every_output_says_so(
    tmp_path: Path,
) -> None:
    root = build(tmp_path / "suite")
    proc = gpuci("check", ".", "--out", "out", cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]  # one thread at a time, nothing races
    out = root / "out"
    assert not (out / "threads").exists()
    verdict = read(out / "verdict.json")
    assert set(verdict["modes"]) == {"suite", "parallel", "isolated"}
    assert verdict["checked"]["threads"]["ran"] is False
    assert NOT_ASKED in verdict["checked"]["threads"]["why"]
    assert verdict["checked"]["suite"] == {"ran": True, "why": "default"}
    assert "thread-unsafe" not in verdict["summary"]  # no count of a check not made
    assert verdict["summary"]["concurrency"] == 0  # parallel ran: its 0 is a finding's count
    assert set(categories(out).values()) == {"passed"}
    assert f"modes: threads not run: {NOT_ASKED}" in proc.stdout
    assert "gpuci: modes: suite runs (default)" in proc.stderr
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "threads not run: not asked for" in html
    assert '<span class="c-thread-unsafe">thread-unsafe</span>' not in html  # no chip
    assert '<span class="c-concurrency">concurrency</span>' in html
    comment = (out / "comment.md").read_text(encoding="utf-8")
    assert "threads not run: not asked for" in comment
    assert "thread-unsafe" not in comment  # no count
    run = read(out / "suite" / "run.json")
    assert run["settings"]["modes"]["value"] == ["suite", "parallel", "isolated"]
    assert run["settings"]["workers"] == {"value": "auto", "from": "default"}
    # no child of a mode without threads printed pytest-run-parallel's header
    logs = "".join(p.read_text(encoding="utf-8") for p in out.glob("*/logs/*.log"))
    assert "to run in parallel" not in logs


@pytest.mark.slow
@needs_run_parallel
def test_modes_in_the_table_run_threads_the_race_is_thread_unsafe_the_hog_is_not(
    tmp_path: Path,
) -> None:
    root = build(tmp_path / "suite")
    (root / "pyproject.toml").write_text(
        '[tool.gpuci]\nmodes = ["suite", "threads", "isolated"]\ntimeout = 60\n',
        encoding="utf-8",
    )
    proc = gpuci("check", ".", "--out", "out", cwd=root)
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = root / "out"
    assert categories(out) == {RACE: "thread-unsafe", HOG: "passed", PLAIN: "passed"}
    verdict = read(out / "verdict.json")
    hog = next(t for t in verdict["tests"] if t["id"] == HOG)
    assert hog["outcomes"]["threads"] == "failed"
    assert hog["notes"] == [
        "failed in 4 threads only by running out of device memory: 4 copies at once do not"
        " fit; not a thread-safety bug"
    ]
    # no baseline: nothing regressed, these are problems
    assert verdict["reasons"] == ["1 isolation problem"]
    source = f"{root / 'pyproject.toml'} [tool.gpuci]"
    assert verdict["checked"]["threads"] == {"ran": True, "why": f"modes in {source}"}
    assert verdict["checked"]["parallel"] == {
        "ran": False,
        "why": f"left out of modes in {source}",
    }
    assert "concurrency" not in verdict["summary"]  # parallel did not run
    settings = read(out / "threads" / "run.json")["settings"]
    assert settings["timeout"] == {"value": 60.0, "from": source}
    assert settings["threads"] == {"value": 4, "from": "default"}
    # the command line overrides the table, and run.json says so
    proc = gpuci("check", ".", "--out", "out", "--modes", "suite", "--timeout", "30", cwd=root)
    assert proc.returncode == 0, proc.stderr[-3000:]
    settings = read(out / "suite" / "run.json")["settings"]
    assert settings["timeout"] == {"value": 30.0, "from": "command line"}
    assert settings["modes"]["from"] == "command line"


@pytest.mark.slow
@needs_run_parallel
def test_the_suites_own_parallel_threads_asks_for_threads(tmp_path: Path) -> None:
    files = {**SUITE, "pytest.ini": "[pytest]\naddopts = --parallel-threads=3\n"}
    root = build(tmp_path / "suite", files)
    proc = gpuci("check", ".", "--out", "out", cwd=root)
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = root / "out"
    # the other modes run each test once, whatever the suite's addopts say
    assert categories(out) == {RACE: "thread-unsafe", HOG: "passed", PLAIN: "passed"}
    verdict = read(out / "verdict.json")
    assert verdict["checked"]["threads"] == {
        "ran": True,
        "why": "the suite's pytest configuration sets --parallel-threads 3",
    }
    assert read(out / "threads" / "run.json")["threads"] == 3


WARNING_SUITE = {
    "pytest.ini": "[pytest]\nfilterwarnings = error\n",
    "test_deprecated.py": """
        import warnings

        import pytest


        @pytest.mark.parametrize("n", range(6))
        def test_old_api(n):
            warnings.warn(f"old_api({n}) is deprecated", DeprecationWarning)


        def test_new_api():
            assert True
    """,
}


@pytest.mark.slow
@needs_run_parallel
def test_failing_by_a_warning_is_failed_though_threads_passes_it(tmp_path: Path) -> None:
    root = build(tmp_path / "suite", WARNING_SUITE)
    proc = gpuci("check", ".", "--out", "out", "--modes", "suite,threads,isolated", cwd=root)
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = root / "out"
    found = categories(out)
    old = {i: c for i, c in found.items() if "test_old_api" in i}
    assert len(old) == 6 and set(old.values()) == {"failed"}, found
    assert found["test_deprecated.py::test_new_api"] == "passed"
    verdict = read(out / "verdict.json")
    assert verdict["reasons"][0] == "6 failed tests"  # then what the evidence budget cut
    assert not [r for r in verdict["reasons"] if "isolation" in r]
    for test in verdict["tests"]:
        if test["id"] in old:
            assert test["outcomes"]["threads"] == "passed"  # pytest-run-parallel 0.10
            assert test["notes"] == [
                "passed in threads, where the threads harness did not see the failure: it"
                " fails by a warning, which pytest-run-parallel reports as a pass in threads"
            ]
