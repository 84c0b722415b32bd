"""The modules each file brought (`gpuci.state.modules`), and the files a depends-on-others
victim's failure points at by them (`gpuci.state.hints.module_providers`)."""

from __future__ import annotations

from pathlib import Path

from gpuci.state.hints import looked_up, module_providers
from gpuci.state.left import Ledger
from gpuci.state.modules import MOST_NAMES, gained

VICTIM = "tests/test_v.py::test_victim"


def test_a_gained_package_stands_for_its_submodules() -> None:
    before = {"sys", "cupy", "cupy.cuda"}
    after = before | {"cupy.cuda.nccl", "cupy.cuda.nccl.x", "numpy", "numpy.linalg"}
    assert gained(before, after) == ["cupy.cuda.nccl", "numpy"]


def test_past_the_most_names_only_top_level_names_are_kept() -> None:
    after = {f"pkg{i}.sub" for i in range(MOST_NAMES + 1)}
    assert gained(set(), after) == sorted(f"pkg{i}" for i in range(MOST_NAMES + 1))[:MOST_NAMES]


def ledger(**brought: tuple[str, ...]) -> Ledger:
    found = Ledger()
    for file, names in brought.items():
        found.imported_modules[f"tests/{file}.py"] = set(names)
    return found


FILES = ["tests/test_a.py", "tests/test_b.py", "tests/test_c.py"]
CANDIDATES = ["tests/test_a.py::test_1", "tests/test_b.py::test_2"]


def providers(found: Ledger, text: str, rootdir: Path) -> tuple[str, ...]:
    return module_providers(
        found, VICTIM, files=FILES, candidates=CANDIDATES, text=text, rootdir=rootdir
    )


def test_the_file_that_brought_a_module_the_failure_names_is_hinted(tmp_path: Path) -> None:
    found = ledger(test_a=("json",), test_c=("multiprocessing",))
    text = "AttributeError: module 'multiprocessing' has no attribute 'current_process'"
    assert providers(found, text, tmp_path) == ("tests/test_c.py",)
    # a submodule its parent misses
    found = ledger(test_b=("cupy.cuda.nccl",))
    assert providers(found, "module 'cupy.cuda' has no attribute 'nccl'", tmp_path) == (
        "tests/test_b.py",
    )


def test_a_module_its_own_file_brings_points_at_no_one(tmp_path: Path) -> None:
    found = ledger(test_c=("multiprocessing",), test_v=("multiprocessing",))
    assert providers(found, "No module named 'multiprocessing'", tmp_path) == ()


def test_a_module_brought_by_a_files_tests_hints_its_tests(tmp_path: Path) -> None:
    found = Ledger()
    found.test_modules["tests/test_b.py"] = {"decimal"}
    assert providers(found, "decimal.InvalidOperation", tmp_path) == ("tests/test_b.py::test_2",)


def test_a_module_the_suites_code_looks_up_is_hinted_where_none_is_named(tmp_path: Path) -> None:
    source = tmp_path / "src" / "lib.py"
    source.parent.mkdir()
    source.write_text('import sys\nmp = sys.modules.get("multiprocessing")\n', encoding="utf-8")
    found = ledger(test_a=("json",), test_c=("multiprocessing",))
    assert "multiprocessing" in looked_up(tmp_path)
    assert providers(found, "assert 'n/a' == 'MainProcess'", tmp_path) == ("tests/test_c.py",)
    # nothing looked up, nothing named: no hint
    assert providers(found, "assert 'n/a' == 'MainProcess'", tmp_path / "src" / "none") == ()


def test_a_test_module_itself_is_no_module_it_brought(tmp_path: Path) -> None:
    found = ledger(test_c=("tests.test_c",))
    assert (
        providers(found, "ImportError: cannot import name 'x' from 'tests.test_c'", tmp_path) == ()
    )
