"""The fork server: forked interpreters end, and are judged, as fresh ones do."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from cli_runner import gpuci, write_files

from gpuci.run.discover import child_env
from gpuci.run.forkaudit import children, children_by_parent
from gpuci.run.forkserver import ForkServer
from gpuci.run.preloads import guess_test_files, top_level_imports

ROOT = Path(__file__).resolve().parent.parent


def env_with(site: Path | None = None) -> dict[str, str]:
    """This environment, with gpuci from this checkout and `site` importable."""
    parts = [str(site)] if site is not None else []
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*parts, str(ROOT)])}


def run_json(root: Path, mode: str = "parallel") -> dict[str, Any]:
    data: dict[str, Any] = json.loads((root / "out" / mode / "run.json").read_text())
    return data


def forked(run: dict[str, Any]) -> list[bool]:
    return [i.get("forked", False) for f in run["files"] for i in f["interpreters"]]


def test_top_level_imports_are_read_from_module_level_only(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "test_a.py": """
                from __future__ import annotations
                import numpy as np, json
                from cupy.testing import assert_array_equal
                from . import helpers
                from .util import thing
                try:
                    import torch
                except ImportError:
                    import fallback
                if True:
                    import yaml
                def test_x():
                    import inside_a_function
                class TestY:
                    import inside_a_class
                import conftest
                import hypothesis_helpers.strategies
                import myplugin
            """,
            "test_broken.py": "import good\ndef (:\n",
            "conftest.py": """
                import pytest
                pytest.register_assert_rewrite("hypothesis_helpers")
                pytest_plugins = ["myplugin"]
            """,
        },
    )
    files = [tmp_path / "test_a.py", tmp_path / "test_broken.py", tmp_path / "conftest.py"]
    found = top_level_imports(files)
    # pytest rewrites the asserts of the last two: imported early, it could not
    assert found == ["numpy", "json", "cupy.testing", "torch", "fallback", "yaml", "pytest"]


SCRIPTS = {
    "passes": "def test_ok():\n    pass\n",
    "fails": "def test_no():\n    assert False\n",
    "aborts_in_del": """
        import os

        class Handle:
            def __del__(self):  # like a CUDA context torn down at module unload
                os.abort()

        HANDLE = Handle()

        def test_ok():
            pass
    """,
    "killed_at_exit": """
        import atexit, os, signal

        atexit.register(lambda: os.kill(os.getpid(), signal.SIGKILL))

        def test_ok():
            pass
    """,
    "sees_its_own_environment": """
        import os

        def test_ok():
            assert "ONLY_IN_THE_PARENT" not in os.environ
            assert os.environ["PYTHONUNBUFFERED"] == "1"
    """,
    "exits_3_at_exit": """
        import atexit, os

        atexit.register(lambda: os._exit(3))

        def test_ok():
            pass
    """,
}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Any:
    root = tmp_path_factory.mktemp("suite")
    (root / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    served = ForkServer(
        python=sys.executable,
        environ={**child_env(os.environ), "ONLY_IN_THE_PARENT": "1"},
        modules=["json"],
        roots=[root],
    )
    try:
        yield served, root
    finally:
        served.close()


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_a_forked_child_ends_with_the_status_popen_gives(server: Any, name: str) -> None:
    served, root = server
    write_files(root, {f"test_{name}.py": SCRIPTS[name]})
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"test_{name}.py"]
    env = child_env(os.environ)
    fresh = subprocess.run(argv, cwd=root, env=env, capture_output=True, check=False)
    child = served.spawn(argv, env, str(root))
    assert child is not None, served.failure
    output = b""
    while chunk := child.stdout.read(1 << 16):  # the log pipe: all the child wrote
        output += chunk
    child.stdout.close()
    assert child.wait(timeout=60) == fresh.returncode
    assert (b"1 passed" in output) == (b"1 passed" in fresh.stdout)
    assert os.getsid(0) != child.pid  # it had its own session


def test_a_forked_child_is_a_fresh_pytest(tmp_path: Path) -> None:
    # one file asserts what a fresh `python -m pytest` is; it must pass forked and fresh
    root = write_files(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "mine.py": "VALUE = 1\n",
            "conftest.py": "import sys\nSEEN_MINE = 'mine' in sys.modules\n",
            "test_fresh.py": """
                import os, signal, sys, threading
                from pathlib import Path

                import conftest
                import mine

                def test_like_a_fresh_interpreter():
                    assert not conftest.SEEN_MINE  # nothing of the suite's was preloaded
                    assert os.getsid(0) == os.getpid()  # its own session and group
                    assert os.getpgid(0) == os.getpid()
                    assert os.readlink("/proc/self/fd/0") == os.devnull
                    assert Path.cwd() == Path(os.environ["SUITE_ROOT"])
                    assert sys.path[0] == os.getcwd()
                    assert Path(sys.argv[0]).parent.name == "pytest"
                    assert os.environ["GPUCI_MODE"] == "parallel" and "GPUCI_ONLY" in os.environ
                    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
                    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL
                    assert not signal.pthread_sigmask(signal.SIG_BLOCK, [])
                    assert threading.active_count() == 1
            """,
        },
    )
    env = {**env_with(), "SUITE_ROOT": str(root)}
    for extra, was_forked in ((), True), (("--no-preload",), False):
        proc = gpuci("run", ".", "--mode", "parallel", "--out", "out", *extra, cwd=root, env=env)
        assert proc.returncode == 0, (
            proc.stderr + (root / "out/parallel/logs").joinpath("test_fresh.py.log").read_text()
        )
        assert forked(run_json(root)) == [was_forked]


@pytest.mark.parametrize("preload", [False, True])
def test_a_death_at_exit_is_a_crash_through_the_fork_server(tmp_path: Path, preload: bool) -> None:
    root = write_files(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "test_teardown.py": SCRIPTS["aborts_in_del"],
            "test_exit.py": SCRIPTS["killed_at_exit"],
        },
    )
    extra = () if preload else ("--no-preload",)
    proc = gpuci(
        "run", ".", "--mode", "parallel", "--out", "out", "--reruns", "0", *extra, cwd=root
    )
    assert proc.returncode == 1, proc.stderr
    run = run_json(root, "parallel")
    assert forked(run) == [preload, preload]
    files = {f["file"]: f for f in run["files"]}
    assert files["test_teardown.py"]["status"] == "crashed"
    assert files["test_teardown.py"]["interpreters"][0]["signal"] == signal.SIGABRT
    assert files["test_exit.py"]["interpreters"][0]["signal"] == signal.SIGKILL
    tests = {t["id"]: t for t in run["tests"]}
    for file in files:
        assert tests[f"{file}::test_ok"]["outcome"] == "passed"
        assert tests[f"{file}::[interpreter exit]"]["outcome"] == "crashed"


FAKE_TORCH = {
    "torch/__init__.py": "from . import cuda\n",
    "torch/cuda.py": "def is_initialized():\n    return True\n",
}
FAKE_DRIVER = r"""
/* The CUDA driver as a process that called cuInit and made a context on device 0 sees it. */
int cuDeviceGetCount(int *count) { *count = 1; return 0; }
int cuDeviceGet(int *device, int ordinal) { *device = ordinal; return 0; }
int cuDevicePrimaryCtxGetState(int device, unsigned *flags, int *active) {
    *flags = 0; *active = device == 0; return 0;
}
"""


def fallback_suite(tmp_path: Path, module: str) -> Path:
    return write_files(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "test_uses.py": f"import {module}\n\ndef test_one():\n    pass\n",
            "test_other.py": f"import {module}\n\ndef test_two():\n    pass\n",
        },
    )


def check_falls_back(root: Path, site: Path, says: str) -> None:
    proc = gpuci("check", ".", "--out", "out", "--modes", "parallel", cwd=root, env=env_with(site))
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "fork server off" in line]
    assert len(notes) == 1, proc.stderr
    assert says in notes[0]
    assert forked(run_json(root)) == [False, False]
    verdict = json.loads((root / "out" / "verdict.json").read_text())
    assert verdict["summary"]["passed"] == 2


def test_a_preload_that_initializes_torch_cuda_falls_back(tmp_path: Path) -> None:
    site = write_files(tmp_path / "site", FAKE_TORCH)
    root = fallback_suite(tmp_path, "torch")
    check_falls_back(root, site, "importing torch created CUDA state: torch.cuda.is_initialized()")


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler for the fake CUDA driver")
def test_a_preload_that_creates_a_cuda_context_falls_back(tmp_path: Path) -> None:
    # a fake libcuda.so.1 answers as an initialized driver: the real check reads it
    site = write_files(
        tmp_path / "site",
        {
            "fake_driver.c": FAKE_DRIVER,
            "gpulib.py": """
                import ctypes, pathlib
                ctypes.CDLL(str(pathlib.Path(__file__).with_name("libcuda.so.1")))
            """,
        },
    )
    subprocess.run(
        ["cc", "-shared", "-fPIC", "-o", site / "libcuda.so.1", site / "fake_driver.c"], check=True
    )
    root = fallback_suite(tmp_path, "gpulib")
    check_falls_back(root, site, "a CUDA context is active on device 0")


def test_a_preload_that_fails_to_import_falls_back(tmp_path: Path) -> None:
    site = write_files(tmp_path / "site", {"broken.py": "raise RuntimeError('no driver here')\n"})
    root = fallback_suite(tmp_path, "json")
    proc = gpuci(
        "check", ".", "--out", "out", "--modes", "parallel", "--preload", "json,broken",
        cwd=root, env=env_with(site),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "fork server off" in line]
    assert notes == [
        "gpuci: note: fork server off, every interpreter starts fresh:"
        " importing broken failed: RuntimeError: no driver here"
    ]
    assert forked(run_json(root)) == [False, False]


def test_preload_of_a_missing_module_is_one_note_and_the_check_goes_on(tmp_path: Path) -> None:
    root = fallback_suite(tmp_path, "json")
    proc = gpuci(
        "check", ".", "--out", "out", "--modes", "parallel", "--preload", "json,no_such_mod",
        cwd=root, env=env_with(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    notes = [line for line in proc.stderr.splitlines() if "note" in line]
    assert notes == ["gpuci: note: --preload: no module named no_such_mod; not preloaded"]
    assert forked(run_json(root)) == [True, True]


def test_the_suites_own_modules_are_never_preloaded(tmp_path: Path) -> None:
    # `mine` is importable from the rootdir (the working directory): it must stay out
    root = write_files(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "mine.py": "import os\nos.environ['MINE_IMPORTED_IN'] = str(os.getpid())\n",
            "test_mine.py": """
                import os
                import mine

                def test_imported_here():
                    assert os.environ["MINE_IMPORTED_IN"] == str(os.getpid())
            """,
        },
    )
    proc = gpuci("run", ".", "--mode", "parallel", "--out", "out", cwd=root, env=env_with())
    assert proc.returncode == 0, proc.stderr
    assert forked(run_json(root)) == [True]


def test_a_pytest_plugin_is_left_to_pytests_assertion_rewriter(tmp_path: Path) -> None:
    # pytest imports a plugin's distribution through its assertion rewriter and warns where
    # a module of it was imported before: preloaded, it broke every filterwarnings=error suite
    site = write_files(
        tmp_path / "site",
        {
            "myplug.py": "def pytest_configure(config):\n    pass\n",
            "myplug-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: myplug\nVersion: 1.0\n",
            "myplug-1.0.dist-info/entry_points.txt": "[pytest11]\nmyplug = myplug\n",
            "myplug-1.0.dist-info/RECORD": "myplug.py,,\n",
        },
    )
    root = write_files(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\nfilterwarnings = error\n",
            "test_plugged.py": """
                import json
                import myplug

                def test_rewritten():
                    assert type(myplug.__loader__).__name__ == "AssertionRewritingHook"
            """,
        },
    )
    proc = gpuci("run", ".", "--mode", "parallel", "--out", "out", cwd=root, env=env_with(site))
    assert proc.returncode == 0, proc.stderr
    assert forked(run_json(root)) == [True]


def test_a_plugins_plain_dependency_is_imported_once_by_the_parent(tmp_path: Path) -> None:
    # pytest-run-parallel imports NumPy as it loads: every forked child paid for it again
    site = write_files(
        tmp_path / "site",
        {
            "plugdep.py": """
                import os
                with open(os.environ["IMPORTS_LOG"], "a") as log:
                    log.write(f"{os.getpid()}\\n")
            """,
            "depplug/__init__.py": "",
            # an integration the plugin never imports as it loads: never the parent's either
            "depplug/extra.py": "import plugextra\n",
            "plugextra.py": "raise RuntimeError('imported, though pytest never would')\n",
            "depplug/plugin.py": "import plugdep\n\ndef pytest_configure(config):\n    pass\n",
            "depplug-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: depplug\n",
            "depplug-1.0.dist-info/entry_points.txt": "[pytest11]\ndepplug = depplug.plugin\n",
            "depplug-1.0.dist-info/RECORD": "depplug/__init__.py,,\ndepplug/plugin.py,,\n"
            "depplug/extra.py,,\n",
        },
    )
    test = """
        import sys

        def test_loaded():
            assert "plugdep" in sys.modules
            assert type(sys.modules["depplug.plugin"].__loader__).__name__ == (
                "AssertionRewritingHook"
            )
    """
    root = write_files(
        tmp_path / "suite", {"test_a.py": test, "test_b.py": test, "test_c.py": test}
    )
    log = tmp_path / "imports.log"
    env = {**env_with(site), "IMPORTS_LOG": str(log)}
    proc = gpuci("run", ".", "--mode", "parallel", "--out", "out", cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr
    assert forked(run_json(root)) == [True, True, True]
    # the parent once: neither the collection (forked too) nor any child imported it again
    assert len(log.read_text(encoding="utf-8").split()) == 1


def test_a_child_whose_python_settings_differ_starts_fresh(server: Any) -> None:
    # PYTHONPATH, PYTHONHASHSEED...: read as an interpreter starts; a fork keeps the parent's
    served, root = server
    write_files(root, {"test_fresh_one.py": SCRIPTS["passes"]})
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_fresh_one.py"]
    env = {**child_env(os.environ), "PYTHONHASHSEED": "123"}
    assert served.spawn(argv, env, str(root)) is None
    assert served.failure is None  # the next one may fork


def test_a_local_module_shadowing_an_installed_one_is_not_preloaded(tmp_path: Path) -> None:
    # pytest puts tests/ first on sys.path: its `helpers.py` wins over an installed one
    site = write_files(tmp_path / "site", {"helpers.py": "WHO = 'installed'\n"})
    root = write_files(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "tests/helpers.py": "WHO = 'local'\n",
            "tests/test_local.py": """
                import helpers

                def test_local_helpers():
                    assert helpers.WHO == "local"
            """,
        },
    )
    proc = gpuci("run", "tests", "--mode", "parallel", "--out", "out", cwd=root, env=env_with(site))
    assert proc.returncode == 0, proc.stderr
    assert forked(run_json(root)) == [True]


def test_a_local_module_is_not_preloaded_when_gpuci_runs_from_elsewhere(tmp_path: Path) -> None:
    # the parent started while pytest collects takes the working directory for the rootdir;
    # where the real one lies elsewhere, the modules beside its tests are the suite's own
    site = write_files(tmp_path / "site", {"helpers.py": "WHO = 'installed'\n"})
    root = write_files(
        tmp_path / "suite",
        {
            "pytest.ini": "[pytest]\n",
            "tests/helpers.py": "WHO = 'local'\n",
            "tests/test_local.py": """
                import helpers

                def test_local_helpers():
                    assert helpers.WHO == "local"
            """,
        },
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = elsewhere / "out"
    proc = gpuci(
        "run", str(root), "--mode", "parallel", "--out", str(out), cwd=elsewhere, env=env_with(site)
    )
    assert proc.returncode == 0, proc.stderr
    run = json.loads((out / "parallel" / "run.json").read_text())
    assert forked(run) == [True]


def test_stopping_while_the_parent_imports_starts_nothing(tmp_path: Path) -> None:
    site = write_files(tmp_path / "site", {"slow.py": "import time\ntime.sleep(30)\n"})
    environ = {**child_env(os.environ), "PYTHONPATH": f"{site}{os.pathsep}{ROOT}"}
    served = ForkServer(python=sys.executable, environ=environ, modules=["slow"], roots=[])
    stopping = threading.Event()
    stopping.set()
    try:
        assert not served.usable(stopping)
        assert served.failure is None  # not refused: asked again later, it would wait
    finally:
        served.close()


def test_a_child_of_a_dead_parent_is_adopted_and_its_status_kept(tmp_path: Path) -> None:
    # gpuci is a subreaper: when the fork server dies, its children re-parent to gpuci,
    # which collects their exit status itself
    write_files(
        tmp_path,
        {
            "pytest.ini": "[pytest]\n",
            "test_slow.py": """
                import atexit, os, time

                atexit.register(lambda: os._exit(7))

                def test_slow():
                    time.sleep(1)
            """,
        },
    )
    script = f"""
import os, signal, sys
from gpuci.run.discover import child_env
from gpuci.run.forkserver import ForkServer
from gpuci.run.reaper import become_subreaper

assert become_subreaper()
env = child_env(os.environ)
server = ForkServer(python=sys.executable, environ=env, modules=[], roots=[])
argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_slow.py"]
child = server.spawn(argv, env, {str(tmp_path)!r})
os.kill(server.process.pid, signal.SIGKILL)
print("returncode", child.wait(timeout=60))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env_with(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "returncode 7"
    assert "fork server lost" in proc.stderr


def test_collection_forks_from_the_server_started_for_the_files_paths_hold(tmp_path: Path) -> None:
    # discovery collected in a fresh interpreter before the server started: CuPy's subset
    # imported CuPy twice, one after the other, before any screen began
    root = write_files(
        tmp_path / "suite",
        {
            "conftest.py": """
                import os, sys
                parent = open(f"/proc/{os.getppid()}/cmdline", "rb").read()
                how = "collect" if "--collect-only" in sys.argv else "run"
                with open(os.environ["PARENTS_LOG"], "a") as log:
                    log.write(f"{how} {parent.replace(bytes(1), b' ').decode()}\\n")
            """,
            "tests/test_a.py": "import json\n\ndef test_ok():\n    pass\n",
        },
    )
    log = tmp_path / "parents.log"
    env = {**env_with(), "PARENTS_LOG": str(log)}
    for extra, forked_collection in (((), True), (("--no-preload",), False)):
        log.unlink(missing_ok=True)
        proc = gpuci("run", ".", "--mode", "parallel", "--out", "out", *extra, cwd=root, env=env)
        assert proc.returncode == 0, proc.stderr
        collect = [
            line for line in log.read_text(encoding="utf-8").splitlines() if "collect" in line
        ]
        assert len(collect) == 1
        assert ("gpuci.run.preimport" in collect[0]) is forked_collection


def test_the_files_guessed_while_pytest_collects_skip_what_pytest_skips(tmp_path: Path) -> None:
    write_files(
        tmp_path,
        {
            "tests/test_a.py": "",
            "tests/b_test.py": "",
            "tests/helper.py": "",
            ".venv/pyvenv.cfg": "",
            ".venv/lib/test_site.py": "",
            "env/pyvenv.cfg": "",
            "env/test_env.py": "",
            "build/test_built.py": "",
            "node_modules/test_js.py": "",
        },
    )
    guessed = guess_test_files([str(tmp_path)])
    assert [p.relative_to(tmp_path).as_posix() for p in guessed] == [
        "tests/b_test.py",
        "tests/test_a.py",
    ]
    assert guess_test_files([str(tmp_path / "tests" / "helper.py")]) == [
        tmp_path / "tests" / "helper.py"
    ]


def test_a_child_is_found_with_or_without_the_kernels_children_lists() -> None:
    # the GPU machines' kernel keeps no /proc/PID/task/TID/children: the audit and the
    # server's hangup find children by their parent pid there, and must find the same
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert child.pid in children_by_parent()
        assert child.pid in children()
    finally:
        child.kill()
        child.wait()
    assert child.pid not in children_by_parent()
