"""A test file's tests counted from its source, before pytest has collected it.

A first check (no durations from an earlier one) starts the parallel screen's first files
beside discovery, before pytest's collection says how many tests each file has. Counting
them in the source tells a file of 40 parametrized cases from one of 2 tests as collection
would, so that the files started first are the ones the plan starts first: the test
functions and methods pytest's default names collect, each times its parametrizations where
the source spells their cases out (a list or tuple literal, one named at module level,
`range(N)`, CuPy's `testing.product({...})`); a case list the source computes counts as
one case. Guesses only order the files started ahead; the plan counts what pytest collected.
"""

from __future__ import annotations

import ast
import math
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

# pytest's default python_functions / python_classes prefixes
TEST_PREFIX = "test"
CLASS_PREFIX = "Test"
# the most a check spends reading sources before it starts its first files: the files
# after that count one test each, and wait for collection to tell (a guess, not a plan)
SOURCE_BUDGET_S = 1.0


def count_source_tests(path: Path) -> int:
    """How many tests `path` likely holds (at least 1: pytest may find what this misses)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (OSError, SyntaxError, ValueError):
        return 1  # pytest's collection will say what is wrong with it
    names = _module_lists(tree.body)
    total = 0
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name.startswith(TEST_PREFIX):
                total += _factor(node.decorator_list, names)
        elif isinstance(node, ast.ClassDef) and _is_test_class(node):
            methods = [
                n
                for n in node.body
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
                and n.name.startswith(TEST_PREFIX)
            ]
            per_class = _factor(node.decorator_list, names)
            total += per_class * sum(_factor(m.decorator_list, names) for m in methods)
    return max(total, 1)


def source_counts(
    paths: Iterable[Path], clock: Callable[[], float] = time.monotonic
) -> dict[Path, int]:
    """`count_source_tests` of each of `paths`, in order, for at most SOURCE_BUDGET_S; one
    for each file after that."""
    deadline = clock() + SOURCE_BUDGET_S
    return {path: count_source_tests(path) if clock() < deadline else 1 for path in paths}


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
