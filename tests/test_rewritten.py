"""The fork server's parent loads the pytest plugins as pytest does, through its assertion
rewriter, once; a child that would hold them otherwise runs fresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from cli_runner import gpuci, write_files

from gpuci.run.rewritten import ALWAYS_BLOCKED, blocked_plugins

ROOT = Path(__file__).resolve().parent.parent

PLUGIN = {
    "countplug/__init__.py": "",
    "countplug/plugin.py": """
        import os
        import threading

        with open(os.environ["IMPORTS_LOG"], "a") as log:
            log.write(f"{os.getpid()}\\n")
        if os.environ.get("PLUG_THREAD"):
            threading.Thread(target=threading.Event().wait, daemon=True, name="plug").start()

        def check(value):
            assert value == 2

        def pytest_configure(config):
            config.addinivalue_line("markers", "counted: a marker of countplug's")
    """,
    "countplug-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: countplug\nVersion: 1.0\n",
    "countplug-1.0.dist-info/entry_points.txt": "[pytest11]\ncountplug = countplug.plugin\n",
    "countplug-1.0.dist-info/RECORD": "countplug/__init__.py,,\ncountplug/plugin.py,,\n",
}
USES_PLUGIN = """
    import sys

    import pytest

    def test_plugin_is_pytests():
        plugin = sys.modules["countplug.plugin"]
        assert type(plugin.__loader__).__name__ == "AssertionRewritingHook"
        with pytest.raises(AssertionError, match="assert 1 == 2"):  # rewritten, as pytest does
            plugin.check(1)
"""


def _suite(tmp_path: Path, files: dict[str, str]) -> tuple[Path, dict[str, str], Path]:
    site = write_files(tmp_path / "site", PLUGIN)
    root = write_files(tmp_path / "suite", files)
    log = tmp_path / "imports.log"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)]),
        "IMPORTS_LOG": str(log),
    }
    return root, env, log


def _forked(root: Path) -> list[bool]:
    run: dict[str, Any] = json.loads((root / "out" / "parallel" / "run.json").read_text())
    return [i.get("forked", False) for f in run["files"] for i in f["interpreters"]]


def _imports(log: Path) -> list[str]:
    return log.read_text(encoding="utf-8").split() if log.exists() else []


def test_a_plugin_is_imported_once_by_the_parent_and_rewritten_as_pytest_does(
    tmp_path: Path,
) -> None:
    # every child imported (and, without written bytecode, rewrote) every plugin again
    root, env, log = _suite(
        tmp_path,
        {
            "pytest.ini": "[pytest]\nfilterwarnings = error\n",
            "test_a.py": USES_PLUGIN,
            "test_b.py": USES_PLUGIN,
            "test_c.py": USES_PLUGIN,
        },
    )
    proc = gpuci("run", ".", "--mode", "parallel", "--out", "out", cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr
    assert _forked(root) == [True, True, True]
    assert len(_imports(log)) == 1  # the parent's import; no child's, nor the collection's
    assert "countplug.plugin" in proc.stderr  # said among what the parent imported


def test_a_child_that_blocks_a_preloaded_plugin_runs_fresh(tmp_path: Path) -> None:
    # the suite's addopts block it: a fresh pytest never imports it, so the child must not
    # hold it either
    never = """
        import sys

        def test_plugin_never_imported():
            assert "countplug.plugin" not in sys.modules
    """
    root, env, _ = _suite(
        tmp_path,
        {"pytest.ini": "[pytest]\naddopts = -p no:countplug\n", "test_never.py": never},
    )
    proc = gpuci("run", ".", "--mode", "parallel", "--out", "out", cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "the pytest plugin countplug is not loaded here" in proc.stderr
    assert _forked(root) == [False]


def test_a_plugin_blocked_in_pytest_addopts_is_not_preloaded(tmp_path: Path) -> None:
    never = """
        import sys

        def test_plugin_never_imported():
            assert "countplug.plugin" not in sys.modules
    """
    root, env, log = _suite(tmp_path, {"test_never.py": never, "test_again.py": never})
    env["PYTEST_ADDOPTS"] = "-p no:countplug"  # which the helper `gpuci` leaves out
    command = [sys.executable, "-m", "gpuci", "run", ".", "--mode", "parallel", "--out", "out"]
    proc = subprocess.run(
        command, cwd=root, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert _forked(root) == [True, True]
    assert _imports(log) == []


def test_a_plugin_that_starts_a_thread_is_left_to_each_child(tmp_path: Path) -> None:
    # a thread would not survive the fork: the parent starts over without the plugins, and
    # each child imports them itself, thread and all
    alive = (
        USES_PLUGIN
        + """
    import threading

    def test_its_thread_runs_here():
        assert "plug" in [t.name for t in threading.enumerate()]
"""
    )
    root, env, log = _suite(tmp_path, {"test_a.py": alive, "test_b.py": alive})
    env["PLUG_THREAD"] = "1"
    proc = gpuci("run", ".", "--mode", "parallel", "--out", "out", cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "note: pytest plugins not preloaded: the pytest plugin countplug left" in proc.stderr
    assert _forked(root) == [True, True]
    # the first parent's import, then the collection's and each child's own
    assert len(set(_imports(log))) == 4


def test_a_module_pytest_would_rewrite_by_python_files_runs_fresh(tmp_path: Path) -> None:
    # with check_*.py among python_files a fresh pytest rewrites an installed check_lib.py
    # as the test file imports it; the parent imported it plainly
    uses = """
        import check_lib

        def test_check_lib_rewritten():
            assert type(check_lib.__loader__).__name__ == "AssertionRewritingHook"
    """
    ini = "[pytest]\npython_files = test_*.py check_*.py\n"
    root, env, _ = _suite(tmp_path, {"pytest.ini": ini, "test_one.py": uses})
    write_files(tmp_path / "site", {"check_lib.py": "VALUE = 1\n"})
    proc = gpuci("run", ".", "--mode", "parallel", "--out", "out", cwd=root, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "check_lib" in proc.stderr.partition("\n")[0]  # the parent did import it
    assert "python_files would rewrite" in proc.stderr
    assert _forked(root) == [False]


def test_blocked_plugins_come_from_pytest_addopts() -> None:
    environ = {"PYTEST_ADDOPTS": "-p no:one -pno:two -p three --tb=short"}
    assert blocked_plugins(environ) == ALWAYS_BLOCKED | {"one", "two"}
    assert blocked_plugins({}) == ALWAYS_BLOCKED
