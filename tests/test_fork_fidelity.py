"""A forked interpreter behaves as a fresh one, or it is not used: a differential corpus.

Each `fid_*` package is installed outside the suite (a folder on PYTHONPATH, as a venv's
site-packages would be), so the fork server preloads it, and its import has one side
effect a fork does not copy. Each test passes (or fails) under plain pytest; a default
check, a check that preloads every package (`--preload`) and a `--no-preload` check must
all give every test the same category.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from cli_runner import clean_env, gpuci, write_files

ROOT = Path(__file__).resolve().parent.parent

PACKAGES = {
    "fid_env.py": "import os\nMODE = os.environ.get('FID_MODE')\n",
    "fid_devices.py": """
        import os
        COUNT = len([d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d])
    """,
    "fid_thread.py": """
        import threading, time
        WORKER = threading.Thread(target=time.sleep, args=(600,), daemon=True, name="worker")
        WORKER.start()
    """,
    "fid_lock.py": """
        import threading, time
        LOCK = threading.Lock()
        def hold():
            while True:
                with LOCK:
                    time.sleep(0.05)
                time.sleep(0.001)
        threading.Thread(target=hold, daemon=True).start()
    """,
    "fid_signal.py": """
        import signal
        SEEN = []
        signal.signal(signal.SIGUSR1, lambda *_: SEEN.append(1))
    """,
    "fid_seed.py": "import random\nrandom.seed(1234)\n",
    "fid_datafile.py": """
        from pathlib import Path
        FILE = open(Path(__file__).with_name("fid_data.txt"), encoding="utf-8")
    """,
    "fid_data.txt": "line1\nline2\nline3\n",
    "fid_registry/__init__.py": "REGISTRY = set()\n",
    "fid_registry/plugin_a.py": "from fid_registry import REGISTRY\nREGISTRY.add('a')\n",
    "fid_atexit.py": """
        import atexit, os, sys
        def _mark():
            loaded = sorted(m for m in sys.modules if m.startswith("test_"))
            with open(os.environ["FID_MARKS"], "a", encoding="utf-8") as f:
                f.write(" ".join(loaded) + "\\n")
        atexit.register(_mark)
    """,
    "fid_argv.py": "import sys\nARGV0 = sys.argv[0]\n",
    "fid_mp.py": """
        import multiprocessing, time
        WORKER = multiprocessing.get_context("spawn").Process(
            target=time.sleep, args=(600,), daemon=True
        )
        WORKER.start()
    """,
    "fid_clib.c": """
        #include <pthread.h>
        #include <unistd.h>
        static volatile long ticks = 0;
        static void *run(void *arg) { for (;;) { ticks++; usleep(1000); } return 0; }
        int fid_start(void) { pthread_t t; return pthread_create(&t, 0, run, 0); }
        long fid_ticks(void) { return ticks; }
    """,
    "fid_ctypes.py": """
        import ctypes
        from pathlib import Path
        LIB = ctypes.CDLL(str(Path(__file__).with_name("libfid.so")))
        LIB.fid_ticks.restype = ctypes.c_long
        LIB.fid_start()
    """,
}

SUITE = {
    "pytest.ini": "[pytest]\nfilterwarnings = error\n",
    "conftest.py": "import os\nos.environ['FID_MODE'] = 'suite'\n",
    "test_env.py": "import fid_env\n\ndef test_env():\n    assert fid_env.MODE == 'suite'\n",
    "test_devices.py": """
        import fid_devices, pytest

        @pytest.mark.skipif(fid_devices.COUNT < 2, reason="needs two GPUs")
        def test_two_gpus():
            assert False, "a real failure, on two GPUs"
    """,
    "test_thread.py": "import fid_thread\n\n"
    "def test_alive():\n    assert fid_thread.WORKER.is_alive()\n",
    "test_lock.py": "import fid_lock\n\n"
    "def test_lock():\n    assert fid_lock.LOCK.acquire(timeout=5)\n",
    "test_signal.py": """
        import os, signal, time
        import fid_signal

        def test_handler():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.05)
            assert fid_signal.SEEN
    """,
    "test_seed.py": """
        import random
        import fid_seed

        def test_seeded():
            assert random.random() == random.Random(1234).random()
    """,
    **{
        f"test_data_{x}.py": "import fid_datafile\n\n"
        "def test_first_line():\n    assert fid_datafile.FILE.readline() == 'line1\\n'\n"
        for x in "abc"
    },
    "test_reg_a.py": "import fid_registry.plugin_a\n\n"
    "def test_a():\n    assert 'a' in fid_registry.REGISTRY\n",
    "test_reg_b.py": "import fid_registry\n\n"
    "def test_b():\n    assert 'a' in fid_registry.REGISTRY\n",
    "test_atexit.py": "import fid_atexit\n\ndef test_atexit():\n    pass\n",
    "test_argv.py": """
        import fid_argv

        def test_argv():
            assert fid_argv.ARGV0.endswith("__main__.py")
    """,
    "test_mp.py": "import fid_mp\n\ndef test_worker():\n    assert fid_mp.WORKER.is_alive()\n",
    "test_ctypes.py": """
        import time
        import fid_ctypes

        def test_ticks():
            before = fid_ctypes.LIB.fid_ticks()
            time.sleep(0.05)
            assert fid_ctypes.LIB.fid_ticks() > before
    """,
}

PRELOAD_ALL = (
    "fid_env,fid_devices,fid_thread,fid_lock,fid_signal,fid_seed,fid_datafile,fid_registry,"
    "fid_registry.plugin_a,fid_atexit,fid_argv,fid_mp,fid_ctypes"
)
# plain pytest in one interpreter: the data file's later readers get later lines; the
# registry was filled by test_reg_a's import, collected first
PLAIN_FAILS = {
    "test_devices.py::test_two_gpus",
    *(f"test_data_{x}.py::test_first_line" for x in "bc"),
}
EXPECTED = {
    "test_devices.py::test_two_gpus": "failed",
    "test_data_b.py::test_first_line": "order-dependent",
    "test_data_c.py::test_first_line": "order-dependent",
    "test_reg_b.py::test_b": "depends-on-others",
}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    if shutil.which("cc") is None:
        if os.environ.get("CI"):
            pytest.fail("CI needs a C compiler (cc) for the ctypes row of the corpus")
        pytest.skip("no C compiler (cc) for the ctypes row of the corpus")
    base = tmp_path_factory.mktemp("fidelity")
    site = write_files(base / "site", PACKAGES)
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-pthread", "-o", site / "libfid.so", site / "fid_clib.c"],
        check=True,
    )
    root = write_files(base / "suite", SUITE)
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    return root, env


def categories(root: Path, out: str) -> dict[str, Any]:
    verdict = json.loads((root / out / "verdict.json").read_text())
    return {t["id"]: t for t in verdict["tests"]}


def test_plain_pytest_passes_every_row_but_the_real_bugs(
    corpus: tuple[Path, dict[str, str]],
) -> None:
    root, env = corpus
    marks = root.parent / "marks-plain.txt"
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA"],
        cwd=root,
        env={**env, "CUDA_VISIBLE_DEVICES": "0,1", "FID_MARKS": str(marks)},
        capture_output=True,
        text=True,
        check=False,
    )
    failed = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("FAILED")}
    assert failed == PLAIN_FAILS, proc.stdout


@pytest.mark.parametrize(
    "extra",
    [(), ("--preload", PRELOAD_ALL), ("--no-preload",)],
    ids=["default", "preload-all", "no-preload"],
)
def test_a_check_gives_every_row_the_category_fresh_interpreters_give(
    corpus: tuple[Path, dict[str, str]], extra: tuple[str, ...]
) -> None:
    root, env = corpus
    out = f"out-{len(extra)}{extra[0] if extra else ''}".replace("-", "_")
    marks = root.parent / f"marks-{out}.txt"
    proc = gpuci(
        "check", ".", "--out", out, "--gpus", "0,1", "--timeout", "60", *extra,
        cwd=root, env={**env, "FID_MARKS": str(marks)}, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    found = categories(root, out)
    got = {i: t["category"] for i, t in found.items() if t["category"] != "passed"}
    assert got == EXPECTED, proc.stderr
    # the provider is named: the registry's filler, whose import (collected, none of its
    # tests run) is what the test needs
    assert found["test_reg_b.py::test_b"]["providers"] == ["test_reg_a.py"], proc.stderr
    # the atexit handler ran only in interpreters whose files import it
    lines = marks.read_text().splitlines() if marks.exists() else []
    assert lines, "no interpreter ran fid_atexit's handler"
    assert all("test_atexit" in line.split() for line in lines), lines
    if extra and extra[0] == "--preload":
        for module in ("fid_thread", "fid_lock", "fid_signal", "fid_datafile", "fid_argv",
                       "fid_mp", "fid_ctypes"):  # fmt: skip
            assert f"note: {module} not preloaded: its import left" in proc.stderr, proc.stderr


ENV_ROWS = {
    "conftest": (
        "import fid_env\n\ndef test_mode():\n    assert fid_env.MODE == 'suite'\n",
        "passed",
        "FID_MODE (fid_env read it at import) differs in its environment",
    ),
    "slots": (
        textwrap.dedent("""
            import fid_devices, pytest

            @pytest.mark.skipif(fid_devices.COUNT < 2, reason="needs two GPUs")
            def test_two_gpus():
                assert False, "a real failure, on two GPUs"
        """),
        "failed",
        "CUDA_VISIBLE_DEVICES (fid_devices read it at import) differs in the interpreter",
    ),
}


@pytest.mark.parametrize("row", sorted(ENV_ROWS))
def test_a_variable_a_preloaded_module_read_sends_its_file_to_a_fresh_interpreter(
    corpus: tuple[Path, dict[str, str]], tmp_path: Path, row: str
) -> None:
    # every file imports the module, so it is preloaded; it read a variable that conftest.py
    # sets, or one each parallel slot sets (the GPUs, rotated)
    _, env = corpus
    test, category, note = ENV_ROWS[row]
    root = write_files(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "conftest.py": SUITE["conftest.py"],
            **{f"test_{n}.py": test for n in "ab"},
        },
    )
    proc = gpuci(
        "check", ".", "--out", "out", "--gpus", "0,1", "--modes", "parallel",
        cwd=root, env=env, timeout=600,
    )  # fmt: skip
    found = categories(root, "out")
    assert {t["category"] for t in found.values()} == {category}, proc.stderr
    assert len(found) == 2
    assert note in proc.stderr, proc.stderr
    run = json.loads((root / "out" / "parallel" / "run.json").read_text())
    assert not any(i.get("forked") for f in run["files"] for i in f["interpreters"])


def test_a_finding_whose_forked_evidence_a_fresh_run_contradicts_is_decided_fresh(
    tmp_path: Path,
) -> None:
    # fid_pid keeps the pid of the interpreter that imported it (the parent, when forked):
    # after the decoy, a forked victim fails; a fresh one fails only after the real polluter
    pid = "import os\nPID = os.getpid()\nDECOY = []\n"
    site = write_files(tmp_path / "site", {"fid_pid.py": pid})
    root = write_files(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "test_a.py": "import fid_pid\n\ndef test_decoy():\n    fid_pid.DECOY.append(1)\n",
            "test_b.py": """
                import os
                import fid_pid

                def test_polluter():
                    os.environ["FID_POLLUTED"] = "1"
            """,
            "test_v.py": """
                import os
                import fid_pid

                def test_victim():
                    assert "FID_POLLUTED" not in os.environ
                    assert not (fid_pid.DECOY and fid_pid.PID != os.getpid())
            """,
        },
    )
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    proc = gpuci("check", ".", "--out", "out", cwd=root, env=env, timeout=600)
    assert proc.returncode == 1, proc.stderr
    victim = categories(root, "out")["test_v.py::test_victim"]
    assert victim["category"] == "order-dependent", proc.stderr
    assert victim["culprits"] == ["test_b.py::test_polluter"], proc.stderr
    evidence = json.loads((root / "out" / "evidence" / "evidence.json").read_text())
    assert len(evidence["notes"]) == 1, evidence
    assert "fork server off for the rest of the check" in evidence["notes"][0]
    assert "test_v.py::test_victim" in evidence["notes"][0]
    for report in ("report.html", "comment.md"):
        assert "fork server off for the rest of the check" in (root / "out" / report).read_text()
