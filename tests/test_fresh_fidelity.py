"""Every interpreter of a check is a fresh `python -m pytest`: a differential corpus.

Each `fid_*` package is installed outside the suite (a folder on PYTHONPATH, as a venv's
site-packages would be), and its import has one side effect that a forked interpreter (the
fork server gpuci once had) did not copy or got in the wrong order. Each test passes (or
fails) under plain pytest; a check gives every test the category fresh interpreters give.
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
# with two GPUs reversed runs by default: there test_data_c reads the first line, and the
# first reader of the plain order fails after it, a latent finding
LATENT = {"test_data_a.py::test_first_line": "order-dependent"}


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


@pytest.mark.slow
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


@pytest.mark.slow
def test_a_check_gives_every_row_the_category_fresh_interpreters_give(
    corpus: tuple[Path, dict[str, str]],
) -> None:
    root, env = corpus
    out = "out"
    marks = root.parent / f"marks-{out}.txt"
    proc = gpuci(
        "check", ".", "--out", out, "--gpus", "0,1", "--timeout", "60",
        cwd=root, env={**env, "FID_MARKS": str(marks)}, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    found = categories(root, out)
    got = {i: t["category"] for i, t in found.items() if t["category"] != "passed"}
    assert got == EXPECTED | LATENT, proc.stderr
    assert {i for i, t in found.items() if t.get("latent")} == set(LATENT), proc.stderr
    latent = found["test_data_a.py::test_first_line"]
    assert latent["found_in"] == "reversed"
    assert latent["culprits"] in (
        ["test_data_c.py::test_first_line"],
        ["test_data_b.py::test_first_line"],
    )
    # the provider is named: the registry's filler, whose import (collected, none of its
    # tests run) is what the test needs
    assert found["test_reg_b.py::test_b"]["providers"] == ["test_reg_a.py"], proc.stderr
    # the atexit handler ran only in interpreters whose files import it
    lines = marks.read_text().splitlines() if marks.exists() else []
    assert lines, "no interpreter ran fid_atexit's handler"
    assert all("test_atexit" in line.split() for line in lines), lines
    assert not _forked(root / out)


ENV_ROWS = {
    # conftest.py sets a variable that the module reads at import
    "conftest": (
        "import fid_env\n\ndef test_mode():\n    assert fid_env.MODE == 'suite'\n",
        "passed",
    ),
    # each parallel slot sees the GPUs in its own order
    "slots": (
        textwrap.dedent("""
            import fid_devices, pytest

            @pytest.mark.skipif(fid_devices.COUNT < 2, reason="needs two GPUs")
            def test_two_gpus():
                assert False, "a real failure, on two GPUs"
        """),
        "failed",
    ),
}


def _forked(out: Path) -> list[str]:
    """The interpreters any run.json of `out` records as forked (none may be)."""
    return [
        f"{run.parent.name} {file['file']}"
        for run in out.glob("*/run.json")
        for file in json.loads(run.read_text())["files"]
        for i in file["interpreters"]
        if "forked" in i
    ]


@pytest.mark.slow
@pytest.mark.parametrize("row", sorted(ENV_ROWS))
def test_a_variable_a_module_read_at_import_is_what_plain_pytest_gives_it(
    corpus: tuple[Path, dict[str, str]], tmp_path: Path, row: str
) -> None:
    # every file imports the module; it reads a variable that conftest.py sets, or one
    # each parallel slot sets (the GPUs, rotated)
    _, env = corpus
    test, category = ENV_ROWS[row]
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
    assert not _forked(root / "out")


# Import behaviours a forked interpreter got wrong, each a false pass (2026-11-26): every
# file fails alone in plain pytest; the check must say what fresh interpreters say.
IMPORT_ROWS: dict[str, tuple[dict[str, str], dict[str, str], dict[str, str]]] = {
    # a provider imported only for the type checker: never at run time
    "type-checking": (
        {
            "fid_typed_reg.py": "REGISTRY = set()\n",
            "fid_typed_provider.py": "import fid_typed_reg\nfid_typed_reg.REGISTRY.add('p')\n",
        },
        {
            "pytest.ini": "[pytest]\n",
            "test_a_user.py": "import fid_typed_provider\n\ndef test_user():\n    pass\n",
            "test_b_typed.py": """
                from typing import TYPE_CHECKING
                import fid_typed_reg
                if TYPE_CHECKING:
                    import fid_typed_provider

                def test_registered():
                    assert "p" in fid_typed_reg.REGISTRY
            """,
        },
        {"test_b_typed.py::test_registered": "depends-on-others"},
    ),
    # a module that warns at import, under the suite's `filterwarnings = error`
    "warning-at-import": (
        {"fid_warns.py": "import warnings\nwarnings.warn('old API', DeprecationWarning)\n"},
        {
            "pytest.ini": "[pytest]\nfilterwarnings = error\n",
            "test_ok.py": "def test_ok():\n    pass\n",
            "test_warns.py": "import fid_warns\n\ndef test_uses():\n    pass\n",
        },
        {"test_warns.py": "failed"},
    ),
    # a sub-folder's conftest.py imports a library before the test file's imports run
    "conftest-first": (
        {
            "fid_np.py": "ARRAY = True\n",
            "fid_backend.py": "import sys\nBACKEND = 'np' if 'fid_np' in sys.modules else 'pure'\n",
        },
        {
            "pytest.ini": "[pytest]\n",
            "test_top.py": "import fid_backend\n\ndef test_top():\n    pass\n",
            "sub/conftest.py": "import fid_np\n",
            "sub/test_backend.py": """
                import fid_backend

                def test_pure():
                    assert fid_backend.BACKEND == "pure"
            """,
        },
        {"sub/test_backend.py::test_pure": "failed"},
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("row", sorted(IMPORT_ROWS))
def test_an_import_behaviour_a_fork_got_wrong_gives_what_fresh_pytest_gives(
    tmp_path: Path, row: str
) -> None:
    site_files, suite, expected = IMPORT_ROWS[row]
    site = write_files(tmp_path / "site", site_files)
    root = write_files(tmp_path / "suite", suite)
    env = clean_env()
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    alone = [f for f in expected if "::" in f] or list(expected)
    plain = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", alone[0].split("::")[0]],
        cwd=root, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert plain.returncode != 0, plain.stdout  # it fails alone in plain pytest
    whole = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "."],
        cwd=root, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    proc = gpuci("check", ".", "--out", "out", cwd=root, env=env, timeout=600)
    # the check exits as the plain run of the whole suite where pytest's own code passes
    # through (a collection error: 2), else 1 for what it found
    assert proc.returncode == (whole.returncode if whole.returncode > 1 else 1), proc.stderr
    found = categories(root, "out")
    got = {
        key: next(t["category"] for i, t in found.items() if i == key or i.startswith(key + "::"))
        for key in expected
    }
    assert got == expected, proc.stderr
    assert not _forked(root / "out")
