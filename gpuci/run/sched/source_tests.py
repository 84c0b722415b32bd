"""A test file's tests counted from its source, before pytest has collected it, and what
its kernel compiles add to them.

A first check (no durations from an earlier one) starts the parallel screen's first files
beside discovery, before pytest's collection says how many tests each file has. Counting
them in the source tells a file of 40 parametrized cases from one of 2 tests as collection
would, so that the files started first are the ones the plan starts first: the test
functions and methods pytest's default names collect, each times its parametrizations where
the source spells their cases out (a list or tuple literal, one named at module level,
`range(N)`, CuPy's `testing.product({...})`); a case list the source computes counts as
one case. A test that compiles a kernel weighs more than one test (`gpuci.run.sched.compiles`):
its file's weight is its tests plus what its compiles add. Guesses only order the files
started ahead and the files no time is known for; the plan counts what pytest collected,
and a file's measured time, once there is one, replaces its weight.
"""

from __future__ import annotations

import ast
import functools
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from gpuci.run.sched.compiles import FunctionNode, ModuleCompiles

# pytest's default python_functions / python_classes prefixes
TEST_PREFIX = "test"
CLASS_PREFIX = "Test"
# the most a check spends reading sources before it starts its first files: the files
# after that count one test each, and wait for collection to tell (a guess, not a plan)
SOURCE_BUDGET_S = 1.0


@dataclass(frozen=True, slots=True)
class SourceWeight:
    """A test file as its source tells: its tests, and what its kernel compiles add."""

    tests: int  # the test cases the source spells out (at least 1: pytest may find more)
    compiles: int = 0  # in tests: each case that compiles weighs COMPILE_TESTS, not 1
    # each test that compiles, named as in pytest's ids after the file (`TestX::test_a`,
    # `test_b`), and what one of its cases weighs
    compiling: Mapping[str, int] = field(default_factory=dict)

    @property
    def weight(self) -> int:
        """The file's likely length, in tests."""
        return self.tests + self.compiles

    def weigh_collected(self, ids: Iterable[str]) -> int:
        """The weight of the tests pytest collected (`ids`, of this file): each one, each
        case of a test that compiles as much as its source says."""
        by_name: dict[str, list[tuple[str | None, int]]] = {}
        for qualified, worth in self.compiling.items():
            source_class, _, name = qualified.rpartition("::")
            by_name.setdefault(name, []).append((source_class or None, worth))
        total = 0
        for test_id in ids:
            *outer, name = test_id.split("[", 1)[0].split("::")  # file, its classes, test
            collected_class = outer[1] if len(outer) > 1 else None
            found = by_name.get(name, ()) if outer else ()
            total += next((w for c, w in found if _same_class(c, collected_class)), 1)
        return total


def weigh_source(path: Path) -> SourceWeight:
    """`path`'s tests and what its compiles add, from its source."""
    try:
        stat = path.stat()
    except OSError:
        return SourceWeight(tests=1)  # pytest's collection will say what is wrong with it
    return _weigh(path, stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=4096)  # the files started ahead, then the plan, read each once
def _weigh(path: Path, mtime_ns: int, size: int) -> SourceWeight:
    try:
        source = path.read_bytes()
        tree = ast.parse(source, filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return SourceWeight(tests=1)
    names = _module_lists(tree.body)
    compiles = ModuleCompiles(source, _helpers(tree.body))
    tests = weight = 0
    compiling: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, FunctionNode) and node.name.startswith(TEST_PREFIX):
            cases, worth = _factor(node.decorator_list, names), compiles.test_worth(node)
            tests, weight = tests + cases, weight + cases * worth
            if worth > 1:
                compiling[node.name] = worth
        elif isinstance(node, ast.ClassDef) and _is_test_class(node):
            per_class = _factor(node.decorator_list, names)
            methods = _helpers(node.body)
            for method in node.body:
                if isinstance(method, FunctionNode) and method.name.startswith(TEST_PREFIX):
                    cases = per_class * _factor(method.decorator_list, names)
                    worth = compiles.test_worth(method, methods)
                    tests, weight = tests + cases, weight + cases * worth
                    if worth > 1:
                        compiling[f"{node.name}::{method.name}"] = worth
    return SourceWeight(tests=max(tests, 1), compiles=weight - tests, compiling=compiling)


def weigh_sources(
    paths: Iterable[Path], clock: Callable[[], float] = time.monotonic
) -> dict[Path, SourceWeight]:
    """`weigh_source` of each of `paths`, in order, for at most SOURCE_BUDGET_S; one test
    for each file after that."""
    deadline = clock() + SOURCE_BUDGET_S
    return {
        path: weigh_source(path) if clock() < deadline else SourceWeight(tests=1) for path in paths
    }


def weigh_collected(rootdir: Path, tests: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Each file's weight by what pytest collected (`tests`: each file's ids, as pytest
    names the file, relative to `rootdir`): its tests, each case of one that compiles a
    kernel weighing what its source says (`SourceWeight.weigh_collected`), the sources
    read within SOURCE_BUDGET_S."""
    weights = weigh_sources(rootdir / f for f in tests)
    return {f: weights[rootdir / f].weigh_collected(ids) for f, ids in tests.items()}


def _same_class(source: str | None, collected: str | None) -> bool:
    """Whether a test's class in the source is its class in pytest's id: the same, or one
    a class decorator made of it (CuPy's `testing.parameterize`: `TestX_param_0_...`)."""
    if source is None or collected is None:
        return source == collected
    return collected == source or collected.startswith(f"{source}_")


def _helpers(body: list[ast.stmt]) -> dict[str, FunctionNode]:
    """The functions of a module or class body that are not tests: what a test may call."""
    return {
        n.name: n
        for n in body
        if isinstance(n, FunctionNode) and not n.name.startswith(TEST_PREFIX)
    }


def _is_test_class(node: ast.ClassDef) -> bool:
    """A class pytest collects: named Test..., or a unittest TestCase by its base's name."""
    if node.name.startswith(CLASS_PREFIX):
        return True
    return any(ast.unparse(base).endswith("TestCase") for base in node.bases)


def _module_lists(body: list[ast.stmt]) -> dict[str, ast.expr]:
    """The module's `NAME = <literal>` assignments, which a parametrize may name."""
    found: dict[str, ast.expr] = {}
    for node in body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
            if isinstance(target, ast.Name):
                found[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            found[node.target.id] = node.value
    return found


def _factor(decorators: list[ast.expr], names: Mapping[str, ast.expr]) -> int:
    """How many cases the decorators make of one test: the product of its parametrizations."""
    factor = 1
    for decorator in decorators:
        if isinstance(decorator, ast.Call) and _is_parametrize(ast.unparse(decorator.func)):
            factor *= _parametrized(decorator, names)
    return factor


def _is_parametrize(called: str) -> bool:
    """pytest's `parametrize`, or a `parameterize` (CuPy's, unittest helpers')."""
    name = called.rsplit(".", 1)[-1]
    return name in ("parametrize", "parameterize")


def _parametrized(call: ast.Call, names: Mapping[str, ast.expr]) -> int:
    """The cases of one parametrize decorator: pytest's `parametrize(names, values)`, or a
    `parameterize(*cases)` of dicts (CuPy's, unittest's helpers)."""
    values = next((k.value for k in call.keywords if k.arg == "argvalues"), None)
    if values is None and len(call.args) >= 2:
        values = call.args[1]
    if values is not None:
        return _cases(values, names) or 1
    return max(1, sum(_cases(arg, names) or 1 for arg in call.args))


def _cases(node: ast.expr, names: Mapping[str, ast.expr], depth: int = 0) -> int | None:
    """How many cases `node` spells out; None where the source computes them."""
    if depth > 4:  # a name bound to itself, or deeper than a test's cases go
        return None
    if isinstance(node, ast.Starred | ast.Name):
        inner = node.value if isinstance(node, ast.Starred) else names.get(node.id)
        return None if inner is None else _cases(inner, names, depth + 1)
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return len(node.elts)
    if isinstance(node, ast.Dict):
        return 1  # one case of a parameterize(*dicts)
    if isinstance(node, ast.Call):
        return _called_cases(node, names, depth)
    return None


def _called_cases(call: ast.Call, names: Mapping[str, ast.expr], depth: int) -> int | None:
    """`range(N)` (literal bounds), or every combination of a `product({...})`'s values
    (CuPy's testing.product); None for any other call."""
    called = ast.unparse(call.func)
    if called == "range" and call.args:
        try:
            return len(range(*[int(ast.literal_eval(a)) for a in call.args]))
        except (ValueError, TypeError):
            return None
    if called.endswith("product") and call.args and isinstance(call.args[0], ast.Dict):
        return math.prod(_cases(v, names, depth + 1) or 1 for v in call.args[0].values)
    return None
