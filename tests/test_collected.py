"""End-to-end: a test that passes only where pytest imported another file (collected, none
of its tests run) is depends-on-others, with that file as its provider and a command that
collects it (as CuPy's test_show_config_with_handles passes only beside a file that
imports cupy.cuda.nccl, which preloads NCCL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cli_runner import clean_env, gpuci, write_files

VICTIM = "test_b_init.py::test_with_handles"
# pkg.info(full=True) fills in the library's path only while a preload may still be
# attempted: the first call returns it, the second None, unless a preload was attempted
# already (by an import), when both return None
SUITE = {
    "pytest.ini": "[pytest]\n",
    "pkg/__init__.py": """
        attempted = False

        def preload():
            global attempted
            attempted = True

        def info(full):
            if attempted or not full:
                return None
            preload()
            return "/lib/libnccl.so.2"
    """,
    "test_a_other.py": """
        def test_other():
            pass
    """,
    "test_b_init.py": """
        import pkg

        def test_plain():
            pass

        def test_with_handles():
            first, second = pkg.info(True), pkg.info(True)
            assert first == second, f"{first} != {second}"
    """,
    "PROVIDER": """
        import pkg

        pkg.preload()  # at import, as cupy/cuda/nccl.py does

        def test_n1():
            pass

        def test_n2():
            pass
    """,
}


def check_victim(root: Path) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    """`gpuci check` of the suite at `root` (it fails), and its victim's verdict."""
    proc = gpuci(
        "check", ".", "--out", "out", env={**os.environ, "PYTHONPATH": str(root)}, cwd=root
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    data = json.loads((root / "out" / "verdict.json").read_text(encoding="utf-8"))
    test = next(t for t in data["tests"] if t["id"] == VICTIM)
    assert test["category"] == "depends-on-others"
    return proc, test


def shell(command: str, root: Path) -> subprocess.CompletedProcess[str]:
    env = clean_env({**os.environ, "PYTHONPATH": str(root)})
    return subprocess.run(
        ["bash", "-c", command],
        cwd=root,  # where gpuci ran: commands are relative to it
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


# after the victim in the suite's order no replay of earlier tests shows it; before it, the
# replay finds one of its tests, and the file collected alone is enough
@pytest.mark.slow
@pytest.mark.parametrize("provider", ["test_c_nccl.py", "test_0_nccl.py"])
def test_a_provider_by_import_is_named_as_a_file_with_a_command_that_collects_it(
    tmp_path: Path, provider: str
) -> None:
    files = {provider if k == "PROVIDER" else k: v for k, v in SUITE.items()}
    root = write_files(tmp_path / "suite", files)
    proc, test = check_victim(root)
    assert test["providers"] == [provider], test.get("search")
    assert test["search"].startswith("collection: it passes where pytest has imported")
    assert f"--deselect={provider}::" in test["with_provider"]
    # both printed commands, run as printed: it fails alone, passes with the file collected
    passed = shell(test["with_provider"], root)
    assert passed.returncode == 0 and "1 passed, 2 deselected" in passed.stdout, passed.stdout
    assert shell(test["reproduce"], root).returncode == 1
    assert f"1 test passes only where pytest imported {provider}" in proc.stdout


@pytest.mark.slow
def test_a_provider_whose_test_must_run_stays_a_test(tmp_path: Path) -> None:
    # the preload in a test, not at import: collecting the file is not enough
    files = dict(SUITE)
    files["test_0_nccl.py"] = (
        files.pop("PROVIDER")
        .replace("pkg.preload()  # at import, as cupy/cuda/nccl.py does", "")
        .replace("def test_n1():\n            pass", "def test_n1():\n            pkg.preload()")
    )
    _, test = check_victim(write_files(tmp_path / "suite", files))
    assert test["providers"] == ["test_0_nccl.py::test_n1"], test.get("search")
    assert "--deselect" not in test["with_provider"]


@pytest.mark.slow
def test_one_other_file_costs_its_run_and_one_fresh_confirmation(tmp_path: Path) -> None:
    # the run with the suite's one other file collected is the halving's only step: it is
    # not run again before its fresh confirmation
    files = {k: v for k, v in SUITE.items() if k != "test_a_other.py"}
    files["test_c_nccl.py"] = files.pop("PROVIDER")
    _, test = check_victim(write_files(tmp_path / "suite", files))
    assert test["providers"] == ["test_c_nccl.py"], test.get("search")
    assert [p["outcome"] for p in test["probes"]] == ["passed", "passed"], test["probes"]


# a file that cannot be imported alone, only after another file's import: its per-file
# screens' collection error is the file's result there (pytest's `error`), and its category
# comes from its alone-run: depends-on-others, with that file as its provider
UNCOLLECTABLE_ALONE = {
    # a warning at import under `filterwarnings = error` that an earlier file silences
    "warning": {
        "pytest.ini": "[pytest]\nfilterwarnings =\n    error\n",
        "test_a_silencer.py": """
            import warnings

            warnings.filterwarnings("ignore", message="legacy api", category=DeprecationWarning)

            def test_a():
                pass
        """,
        "test_m_other.py": "def test_m():\n    pass\n",
        "test_p_warns.py": """
            import warnings

            warnings.warn("legacy api", DeprecationWarning)

            def test_p():
                pass

            def test_p2():
                pass
        """,
    },
    # a module attribute an earlier file's import sets (a registry filled at import)
    "registry": {
        "pytest.ini": "[pytest]\n",
        "registry.py": "KINDS = {}\n",
        "test_a_registers.py": """
            import registry

            registry.KINDS["fp16"] = 2

            def test_a():
                pass
        """,
        "test_m_other.py": "def test_m():\n    pass\n",
        "test_p_warns.py": """
            import registry

            SIZE = registry.KINDS["fp16"]

            def test_p():
                assert SIZE == 2

            def test_p2():
                pass
        """,
    },
}


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(UNCOLLECTABLE_ALONE))
def test_a_file_that_imports_only_after_another_depends_on_that_file(
    tmp_path: Path, case: str
) -> None:
    root = write_files(tmp_path / "suite", UNCOLLECTABLE_ALONE[case])
    env = clean_env({**os.environ, "PYTHONPATH": str(root)})
    plain = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert plain.returncode == 0 and "4 passed" in plain.stdout, plain.stdout
    proc = gpuci(
        "check", ".", "--out", "out", env={**os.environ, "PYTHONPATH": str(root)}, cwd=root
    )
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "pytest (suite): 4 passed" in proc.stdout, proc.stdout
    tests = {
        t["id"]: t
        for t in json.loads((root / "out" / "verdict.json").read_text(encoding="utf-8"))["tests"]
    }
    file = tests["test_p_warns.py"]
    assert file["category"] == "depends-on-others", file
    assert file["providers"] == [
        "test_a_silencer.py" if case == "warning" else "test_a_registers.py"
    ]
    assert file["outcomes"] == {"isolated": "failed", "parallel": "failed", "suite": "passed"}
    assert file["pytest"] == {"isolated": ["error"], "parallel": ["error"]}, file
    # its tests ran in the plain run and passed there
    assert tests["test_p_warns.py::test_p"]["category"] == "passed"
    # the printed commands, run as printed: it cannot be collected alone, it passes after
    # its provider's import
    assert shell(file["reproduce"], root).returncode == 2
    passed = shell(file["with_provider"], root)
    assert passed.returncode == 0 and "2 passed, 1 deselected" in passed.stdout, passed.stdout
