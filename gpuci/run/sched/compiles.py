"""Which tests compile GPU kernels, read from their source: the compile signal.

A test that builds a kernel (nvcc, NVRTC, a JIT) can take seconds where its neighbours take
milliseconds: CuPy's `test_include.py` holds 2 tests, each compiling CuPy's headers for
every GPU architecture. Its number of tests calls it short, so a first check (nothing
timed yet) would start it late and wait for it at the end. This reads, in a test's body
and one level deeper (a method of its class called as `self._x()`, a module-level function
it calls, with that function's decorators, and what runs again with each test: the
function-scoped fixtures it takes or that are autouse, its class's setUp), the calls of the
known compile, JIT and build entry points, by the name the source calls them by (the module
they were imported from is not looked up), and nvcc run as a subprocess. A test that compiles is
worth COMPILE_TESTS tests; one that compiles in a loop (`for arch in ...`, a comprehension,
CuPy's `@testing.for_all_dtypes()`), or calls what compiles in one, LOOPED_COMPILE_TESTS.
Like the count of tests, this is a guess that only orders files no time is known for.
"""

from __future__ import annotations

import ast
import bisect
import re
from collections.abc import Callable, Iterator, Mapping
from pathlib import PurePosixPath

# what one test that compiles a kernel weighs, in tests: a compile is seconds where a test
# of a GPU suite is milliseconds; in a loop it is one compile per architecture, dtype or
# option set
COMPILE_TESTS = 10
LOOPED_COMPILE_TESTS = 100

# the compile, JIT and build entry points, as a call or decorator names them: the name
# itself or its dotted end (`cupy.cuda.compiler.compile_using_nvcc`, `numba.cuda.jit`)
ENTRY_POINTS = frozenset(
    {
        # CuPy
        "compile_using_nvcc",
        "compile_using_nvrtc",
        "compile_with_cache",
        "RawModule",
        "RawKernel",
        "ElementwiseKernel",
        "ReductionKernel",
        "cupy.fuse",
        "cp.fuse",
        "jit.rawkernel",
        # PyTorch
        "torch.compile",
        "cpp_extension.load",
        "load_inline",
        "jit.script",
        "jit.trace",
        # Numba
        "cuda.jit",
        "numba.jit",
        "njit",
        # Triton
        "triton.jit",
    }
)
# a subprocess started with one of these programs (a string of its arguments) compiles
COMPILERS = frozenset({"nvcc", "nvrtc"})
SUBPROCESS_CALLS = frozenset({"run", "call", "check_call", "check_output", "Popen", "system"})

# any of them in a line of the source: that line may compile (a comment or a string too:
# the syntax tree decides)
NAMED = re.compile(b"|".join(re.escape(name.encode()) for name in sorted(ENTRY_POINTS | COMPILERS)))

# a test class's methods pytest (or unittest) runs before each of its tests
SETUPS = ("setUp", "setup_method")

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
COMPREHENSIONS = (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)


class ModuleCompiles:
    """Where one test module's source compiles kernels: what each of its tests weighs."""

    def __init__(self, source: bytes, functions: Mapping[str, FunctionNode]) -> None:
        self._functions = functions  # the module-level ones its tests may call by name
        # the lines naming an entry point or a compiler: only a function spanning one of
        # them is walked (most test files name none, and walking costs more than parsing)
        self._lines = _named_lines(source)
        self._inside: dict[int, bool | None] = {}
        self._any_named: dict[tuple[int, ...], bool] = {}  # helpers: does one name any

    def test_worth(
        self, test: FunctionNode, methods: Mapping[str, FunctionNode] | None = None
    ) -> int:
        """What one case of `test` weighs, in tests: 1, COMPILE_TESTS where its body, or a
        module-level function or a method of its class (`methods`) that it calls or that
        runs with each test (a fixture of its arguments, its class's setUp), compiles a
        kernel, LOOPED_COMPILE_TESTS where it does so in a loop."""
        methods = methods or {}
        reached = self._any_names(self._functions) or self._any_names(methods)
        if not reached and not self._names(test):
            return 1
        worth = 1
        for helper in _run_with_each(test, self._functions, methods):
            with_each = self._compiles_inside(helper)
            if with_each:
                return LOOPED_COMPILE_TESTS
            if with_each is not None:
                worth = COMPILE_TESTS
        repeated = any(_repeats(d) for d in test.decorator_list)
        # where no function it may call names one, only what spans a named line can compile
        for called, looped in _calls(test.body, None if reached else self._names):
            if _compiles(called):
                inside: bool | None = False
            else:
                inside = self._compiles_inside(_helper(called, self._functions, methods))
            if inside is not None:
                if looped or inside or repeated:
                    return LOOPED_COMPILE_TESTS
                worth = COMPILE_TESTS
        return worth

    def _any_names(self, helpers: Mapping[str, FunctionNode]) -> bool:
        """Whether any of `helpers` names an entry point or a compiler (asked once)."""
        key = tuple(id(h) for h in helpers.values())  # the nodes live as long as their tree
        if key not in self._any_named:
            self._any_named[key] = any(self._names(h) for h in helpers.values())
        return self._any_named[key]

    def _names(self, node: ast.AST) -> bool:
        """Whether `node`'s lines (a function's decorators' too) name an entry point or a
        compiler; True for a node without lines of its own (a function's arguments)."""
        first: int | None = getattr(node, "lineno", None)
        if first is None:
            return True
        if isinstance(node, FunctionNode | ast.ClassDef):
            first = min((d.lineno for d in node.decorator_list), default=first)
        at = bisect.bisect_left(self._lines, first)
        last: int = getattr(node, "end_lineno", None) or first
        return at < len(self._lines) and self._lines[at] <= last

    def _compiles_inside(self, function: FunctionNode | None) -> bool | None:
        """Whether `function` compiles a kernel when called (its decorators, or a call in
        its body): None where it does not, True where it does so in a loop."""
        if function is None or not self._names(function):
            return None
        if id(function) not in self._inside:
            self._inside[id(function)] = self._compiles_in(function)
        return self._inside[id(function)]

    def _compiles_in(self, function: FunctionNode) -> bool | None:
        found: bool | None = None
        decorators = [
            (d.func if isinstance(d, ast.Call) else d, False) for d in function.decorator_list
        ]
        for called, looped in [*decorators, *_calls(function.body, self._names)]:
            if _compiles(called):
                if looped:
                    return True
                found = False
        return found


def _run_with_each(
    test: FunctionNode,
    functions: Mapping[str, FunctionNode],
    methods: Mapping[str, FunctionNode],
) -> Iterator[FunctionNode]:
    """What pytest runs again for each test: the function-scoped fixtures its arguments
    name, or that are `autouse` (a fixture of a wider scope runs once for many tests, as
    a module-level kernel does: not counted), and its class's own setUp or setup_method."""
    arguments = {a.arg for a in (*test.args.posonlyargs, *test.args.args, *test.args.kwonlyargs)}
    for name, function in (*functions.items(), *methods.items()):
        keywords = _fixture_keywords(function)
        if keywords is None or not _constant(keywords.get("scope"), "function"):
            continue
        if name in arguments or _constant(keywords.get("autouse"), True, absent=False):
            yield function
    yield from (methods[name] for name in SETUPS if name in methods)


def _fixture_keywords(function: FunctionNode) -> dict[str, ast.expr] | None:
    """The keywords of `function`'s `@pytest.fixture(...)` (or `@fixture`); None where it
    is no fixture."""
    for decorator in function.decorator_list:
        call = decorator if isinstance(decorator, ast.Call) else None
        name = _dotted(call.func if call else decorator)
        if name is not None and (name == "fixture" or name.endswith(".fixture")):
            return {k.arg: k.value for k in call.keywords if k.arg} if call else {}
    return None


def _constant(node: ast.expr | None, value: object, *, absent: bool = True) -> bool:
    """Whether `node` is the constant `value` (`absent` where there is no node)."""
    if node is None:
        return absent
    return isinstance(node, ast.Constant) and node.value == value


def _repeats(decorator: ast.expr) -> bool:
    """Whether a test's decorator runs its body in a loop: CuPy's `testing.for_all_dtypes()`
    and its kin (`for_dtypes`, `for_orders`, ...), once per dtype or order."""
    name = _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator)
    if name is None:
        return False
    *outer, last = name.split(".")
    return bool(outer) and outer[-1] == "testing" and last.startswith("for_")


def _named_lines(source: bytes) -> list[int]:
    """The lines (from 1) of `source` where an entry point or a compiler is named."""
    lines: list[int] = []
    line, offset = 1, 0
    for match in NAMED.finditer(source):
        line += source.count(b"\n", offset, match.start())
        offset = match.start()
        if not lines or lines[-1] != line:
            lines.append(line)
    return lines


def _helper(
    called: ast.expr,
    functions: Mapping[str, FunctionNode],
    methods: Mapping[str, FunctionNode],
) -> FunctionNode | None:
    """The function of this module a call reaches: `name(...)` (or a kernel launched as
    `name[grid](...)`), `self.name(...)`."""
    if isinstance(called, ast.Subscript):
        called = called.value
    if isinstance(called, ast.Name):
        return functions.get(called.id)
    if (
        isinstance(called, ast.Attribute)
        and isinstance(called.value, ast.Name)
        and called.value.id == "self"
    ):
        return methods.get(called.attr)
    return None


def _compiles(called: ast.expr) -> bool:
    """Whether calling (or decorating with) `called` compiles a kernel: an entry point by
    its name, or a subprocess running a compiler (`called` is then the Call itself)."""
    if isinstance(called, ast.Call):
        return _runs_a_compiler(called)
    name = _dotted(called)
    if name is None:
        return False
    return any(name == entry or name.endswith(f".{entry}") for entry in ENTRY_POINTS)


def _runs_a_compiler(call: ast.Call) -> bool:
    """`subprocess.run(["nvcc", ...])`, `os.system("nvcc ...")` and the like."""
    name = _dotted(call.func)
    if name is None or name.rsplit(".", 1)[-1] not in SUBPROCESS_CALLS:
        return False
    for node in ast.walk(ast.Tuple(elts=list(call.args), ctx=ast.Load())):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            words = node.value.split()
            if words and PurePosixPath(words[0]).name in COMPILERS:
                return True
    return False


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` of a name or attribute chain; None for anything else."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return None if inner is None else f"{inner}.{node.attr}"
    return None


def _calls(
    body: list[ast.stmt], keep: Callable[[ast.AST], bool] | None = None
) -> Iterator[tuple[ast.expr, bool]]:
    """What `body` calls or decorates with, each with whether it runs in a loop there:
    a call's callee, a decorator without arguments, and a call whose callee is a
    subprocess starter (as the Call: its arguments name the program); only in the nodes
    `keep` keeps, where given."""
    for statement in body:
        if keep is None or keep(statement):
            yield from _walk(statement, looped=False, keep=keep)


def _walk(
    node: ast.AST, *, looped: bool, keep: Callable[[ast.AST], bool] | None
) -> Iterator[tuple[ast.expr, bool]]:
    if isinstance(node, ast.Call):
        yield node.func, looped
        yield node, looped  # a subprocess: its arguments say which program
    if isinstance(node, FunctionNode):
        yield from ((d, looped) for d in node.decorator_list if not isinstance(d, ast.Call))
    for child, child_looped in _children(node, looped):
        if keep is None or keep(child):
            yield from _walk(child, looped=child_looped, keep=keep)


def _children(node: ast.AST, looped: bool) -> Iterator[tuple[ast.AST, bool]]:
    """`node`'s children, each with whether it runs once per iteration of a loop: a loop's
    body and condition do, the sequence it iterates over and its `else` do not."""
    once: list[ast.AST] = []
    each: list[ast.AST] = []
    if isinstance(node, ast.For | ast.AsyncFor):
        once, each = [node.iter, node.target, *node.orelse], list(node.body)
    elif isinstance(node, ast.While):
        once, each = list(node.orelse), [node.test, *node.body]
    elif isinstance(node, COMPREHENSIONS):
        first = node.generators[0]
        once = [first.iter]
        each = [first.target, *first.ifs]
        each += [c for c in ast.iter_child_nodes(node) if c is not first]
    else:
        once = list(ast.iter_child_nodes(node))
    yield from ((child, looped) for child in once)
    yield from ((child, True) for child in each)
