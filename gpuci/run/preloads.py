"""Preloads: which modules the fork server imports before it forks the interpreters.

The suite's test files and their conftest.py files, read with `ast`: what they import at
module level (`top_level_imports`), or what --preload names, less what a fresh
interpreter would get elsewhere or differently: the suite's own modules (beside its test
files or in the rootdir: pytest's sys.path finds them first) and the modules pytest
imports through its assertion rewriter (`register_assert_rewrite`, `pytest_plugins`).
"""

from __future__ import annotations

import ast
import contextlib
import os
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from gpuci.run.importables import module_level_imports

MAX_SCANNED = 5000  # test files whose imports are read


@dataclass(frozen=True, slots=True)
class Preloads:
    """What the parent imports, and what each test file would import itself."""

    modules: list[str]
    imports: dict[Path, frozenset[str]]  # by test file: it and its conftest.py files

    def covered(
        self,
        files: Iterable[Path],
        imported: Iterable[str],
        brought: Mapping[str, Sequence[str]] = MappingProxyType({}),
    ) -> bool:
        """Whether an interpreter of `files` imports every module of `imported` (what the
        parent imported of `modules`) itself, or through a module it imports (`brought`:
        what importing each brought along), so that one file's imports never stand in for
        another's. pytest imports every file before the first test runs."""
        wanted: set[str] = set()
        for path in files:
            found = self.imports.get(path)
            if found is None:  # a folder: the test files under it
                found = frozenset().union(
                    *(v for k, v in self.imports.items() if k.is_relative_to(path))
                )
            wanted |= found
        wanted |= {m for own in list(wanted) for m in brought.get(own, ())}
        return all(m in wanted for m in imported)


def modules_to_preload(
    rootdir: Path, tests: Sequence[Path], preload: Sequence[str] | None
) -> Preloads:
    """What at least half the test files import at top level (or `preload`), but none of
    the suite's own; a file that does not import all of it starts fresh (`covered`)."""
    tests = [t.resolve() for t in tests]
    per_file = {t: frozenset(_file_imports(rootdir, t)) for t in tests}
    counts = Counter(m for found in per_file.values() for m in found)
    common = [
        m for m in top_level_imports(_with_conftests(rootdir, tests)) if 2 * counts[m] >= len(tests)
    ]
    # pytest puts the test files' directories first on sys.path: a local `utils.py` wins
    # there over an installed `utils`, which a parent that preloaded it would hand over
    local = _local_names(rootdir, tests)
    modules = list(preload) if preload is not None else common
    return Preloads([m for m in modules if m.partition(".")[0] not in local], per_file)


def _file_imports(rootdir: Path, test: Path) -> set[str]:
    """What a test file and its conftest.py files import at top level, with the submodules
    a `from a import b` may import."""
    found: set[str] = set()
    for path in _with_conftests(rootdir, [test]):
        with contextlib.suppress(OSError, SyntaxError, ValueError):
            found.update(module_level_imports(ast.parse(path.read_bytes()), members=True))
    return found


def top_level_imports(files: Iterable[Path]) -> list[str]:
    """The modules the files import at module level (not in functions), in first-seen order.

    `import a.b` gives `a.b`, `from a.b import c` gives `a.b`; relative imports are the
    suite's own and left out, as is everything in a file that does not parse.
    """
    found: dict[str, None] = {}
    rewritten: set[str] = set()
    for path in list(files)[:MAX_SCANNED]:
        try:
            tree = ast.parse(path.read_bytes(), filename=str(path))
        except (OSError, SyntaxError, ValueError):
            continue
        rewritten |= _rewritten(tree)
        found.update((name, None) for name in module_level_imports(tree))
    left_out = {"conftest", *(name.partition(".")[0] for name in rewritten)}
    return [name for name in found if name.partition(".")[0] not in left_out]


def _rewritten(tree: ast.Module) -> set[str]:
    """Modules pytest will import through its assertion rewriter, which warns where one was
    imported before: `pytest.register_assert_rewrite("m")` and `pytest_plugins = [...]`."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called == "register_assert_rewrite":
                names.update(
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                )
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytest_plugins" for t in node.targets
        ):
            names.update(
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            )
    return names


def _local_names(rootdir: Path, tests: Sequence[Path]) -> set[str]:
    """Modules and packages beside the test files, on their way up to the rootdir, in it."""
    dirs = {d for p in tests for d in p.parents if d.is_relative_to(rootdir)} | {rootdir}
    names: set[str] = set()
    for where in dirs:
        with contextlib.suppress(OSError):
            for entry in where.iterdir():
                if entry.suffix == ".py" or (entry.is_dir() and entry.name.isidentifier()):
                    names.add(entry.stem if entry.suffix == ".py" else entry.name)
    return names


def _with_conftests(rootdir: Path, tests: Sequence[Path]) -> list[Path]:
    """The test files, and the conftest.py files on their way up to the rootdir."""
    dirs = {d for p in tests for d in p.parents if d.is_relative_to(rootdir)}
    return [*tests, *sorted(d / "conftest.py" for d in dirs if (d / "conftest.py").is_file())]


def guess_test_files(paths: Sequence[str]) -> list[Path]:
    """The test files PATHS name or hold by pytest's default names (test_*.py, *_test.py),
    skipping what pytest skips by default (hidden, build and virtual-environment folders):
    what the fork server preloads for while pytest collects them."""
    found: list[Path] = []
    for given in paths:
        path = Path(given).resolve()
        if path.is_file():
            found.append(path)
            continue
        for where, dirs, names in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not _skipped(Path(where) / d))
            found += [
                Path(where) / n
                for n in sorted(names)
                if n.endswith(".py") and (n.startswith("test_") or n.endswith("_test.py"))
            ]
            if len(found) >= MAX_SCANNED:
                return found[:MAX_SCANNED]
    return found


def _skipped(folder: Path) -> bool:
    """pytest's default norecursedirs, and any virtual environment."""
    name = folder.name
    return (
        name.startswith((".", "_darcs"))
        or name in {"build", "dist", "node_modules", "venv", "CVS", "{arch}", "site-packages"}
        or name.endswith(".egg")
        or (folder / "pyvenv.cfg").exists()
    )


def parse_preload(text: str) -> list[str]:
    """The module names of `--preload A,B.c`."""
    return [name.strip() for name in text.split(",") if name.strip()]
