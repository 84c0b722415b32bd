"""The compile signal (`gpuci.run.sched.compiles`): a test that compiles a kernel weighs
COMPILE_TESTS tests, one that compiles in a loop LOOPED_COMPILE_TESTS, read from its body
and one level deeper, for each family of entry points; a name that is only imported,
written in a string or comment, or called where no test reaches it weighs nothing."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpuci.run.sched.compiles import COMPILE_TESTS, LOOPED_COMPILE_TESTS
from gpuci.run.sched.source_tests import SourceWeight, weigh_source

ONCE, LOOPED = COMPILE_TESTS, LOOPED_COMPILE_TESTS


def weighed(tmp_path: Path, source: str) -> SourceWeight:
    path = tmp_path / "test_x.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    return weigh_source(path)


def one_test(body: str, *, before: str = "") -> str:
    """A module holding `before` and one test whose body is `body`."""
    indented = textwrap.indent(textwrap.dedent(body), "    ")
    return f"{textwrap.dedent(before)}\ndef test_it():\n{indented}"


# each family's entry points, called once in a test's body, then in a loop
CALLS = {
    # CuPy
    "nvcc": "cupy.cuda.compiler.compile_using_nvcc(CODE, arch=80)",
    "nvrtc": "compiler.compile_using_nvrtc(CODE)",
    "cache": "cupy.cuda.compile_with_cache(CODE)",
    "raw module": "cupy.RawModule(code=CODE)",
    "raw kernel": "cp.RawKernel(CODE, 'k')",
    "elementwise": "cupy.ElementwiseKernel('T x', 'T y', 'y = x', 'copy')",
    "reduction": "cupy.ReductionKernel('T x', 'T y', 'x', 'a + b', 'y = a', '0', 'sum')",
    "fuse call": "f = cupy.fuse()(lambda x: x + 1)",
    # PyTorch
    "torch.compile": "model = torch.compile(model)",
    "cpp_extension.load": "torch.utils.cpp_extension.load(name='ext', sources=['ext.cpp'])",
    "load_inline": "cpp_extension.load_inline(name='ext', cpp_sources=CODE)",
    "jit.script": "scripted = torch.jit.script(model)",
    "jit.trace": "traced = torch.jit.trace(model, example)",
    # Numba
    "numba.cuda.jit call": "k = numba.cuda.jit(f)",
    "numba.jit": "k = numba.jit(nopython=True)(f)",
    "njit": "k = njit(f)",
    # nvcc as a subprocess
    "subprocess.run": "subprocess.run(['nvcc', '-c', 'k.cu'], check=True)",
    "check_call by path": "subprocess.check_call(['/usr/local/cuda/bin/nvcc', 'k.cu'])",
    "os.system": "os.system('nvcc -o k k.cu')",
}
DECORATORS = {
    "cupy.fuse": "@cupy.fuse()",
    "cp.fuse bare": "@cp.fuse",
    "jit.rawkernel": "@jit.rawkernel()",
    "cupyx.jit.rawkernel": "@cupyx.jit.rawkernel()",
    "torch.compile": "@torch.compile(mode='max-autotune')",
    "cuda.jit": "@cuda.jit",
    "cuda.jit signature": "@cuda.jit('void(float32[:])')",
    "njit": "@numba.njit",
    "triton.jit": "@triton.jit",
}


@pytest.mark.parametrize("call", CALLS.values(), ids=CALLS.keys())
def test_a_test_that_compiles_weighs_more_and_more_in_a_loop(tmp_path: Path, call: str) -> None:
    once = SourceWeight(tests=1, compiles=ONCE - 1, compiling={"test_it": ONCE})
    assert weighed(tmp_path, one_test(call)) == once
    looped = one_test(f"for arch in ARCHS:\n    {call}")
    in_a_loop = SourceWeight(tests=1, compiles=LOOPED - 1, compiling={"test_it": LOOPED})
    assert weighed(tmp_path, looped) == in_a_loop


@pytest.mark.parametrize("decorator", DECORATORS.values(), ids=DECORATORS.keys())
def test_a_kernel_decorated_in_a_test_or_at_module_level_and_called_weighs_more(
    tmp_path: Path, decorator: str
) -> None:
    nested = one_test(f"{decorator}\ndef kernel(x):\n    return x\nkernel(1)")
    assert weighed(tmp_path, nested).weight == ONCE
    # a module-level kernel (Triton's, Numba's way) that the test launches
    kernel = f"{decorator}\ndef kernel(x):\n    return x\n"
    assert weighed(tmp_path, one_test("kernel[1, 1](x)", before=kernel)).weight == ONCE
    launched = one_test("for n in SIZES:\n    kernel[(n,)](x)", before=kernel)
    assert weighed(tmp_path, launched).weight == LOOPED


def test_cupys_test_include_weighs_as_many_tests_as_its_loops_of_compiles(tmp_path: Path) -> None:
    # CuPy v14.2.0's tests/cupy_tests/core_tests/test_include.py, its shape: two tests,
    # each compiling for every architecture, with helpers on the class
    source = """
        import cupy

        class TestIncludesCompileCUDA:
            def _get_cuda_archs(self):
                return tuple(cupy.cuda.nvrtc.getSupportedArchs())

            def _get_options(self):
                return ('-std=c++17',)

            def test_nvcc(self):
                options = self._get_options()
                for arch in self._get_cuda_archs():
                    cupy.cuda.compiler.compile_using_nvcc(_code_nvcc, options=options, arch=arch)

            def test_nvrtc(self, monkeypatch):
                for arch in self._get_cuda_archs():
                    monkeypatch.setattr(cupy.cuda.compiler, "x", lambda _: arch)
                    cupy.cuda.compiler.compile_using_nvrtc(_code_nvrtc, options=())
    """
    assert weighed(tmp_path, source) == SourceWeight(
        tests=2,
        compiles=2 * (LOOPED - 1),
        compiling={
            "TestIncludesCompileCUDA::test_nvcc": LOOPED,
            "TestIncludesCompileCUDA::test_nvrtc": LOOPED,
        },
    )


@pytest.mark.parametrize(
    ("source", "worth"),
    [
        # a method of its class, called as self._x()
        (
            "class TestK:\n"
            "    def _build(self):\n        return cupy.RawKernel(CODE, 'k')\n"
            "    def test_k(self):\n        self._build()\n",
            ONCE,
        ),
        # ... that compiles in a loop, or is called in one
        (
            "class TestK:\n"
            "    def _build(self):\n"
            "        for arch in ARCHS:\n            compile_using_nvcc(CODE, arch=arch)\n"
            "    def test_k(self):\n        self._build()\n",
            LOOPED,
        ),
        (
            "class TestK:\n"
            "    def _build(self, arch):\n        compile_using_nvcc(CODE, arch=arch)\n"
            "    def test_k(self):\n        [self._build(a) for a in ARCHS]\n",
            LOOPED,
        ),
        # a module-level function it calls
        (
            "def build():\n    return torch.compile(model)\ndef test_k():\n    build()\n",
            ONCE,
        ),
        # a loop's sequence is computed once: a compile there is not in the loop
        (
            "def test_k():\n    for name in cupy.RawModule(code=CODE).names:\n        pass\n",
            ONCE,
        ),
        # a while loop compiles each time round
        (
            "def test_k():\n    while more():\n        cupy.RawKernel(CODE, 'k')\n",
            LOOPED,
        ),
        # CuPy's testing.for_*: the body once per dtype (or order); other decorators do not
        (
            "@testing.for_all_dtypes()\n"
            "def test_k(dtype):\n    cupy.ElementwiseKernel('T x', 'T y', 'y = x', 'k')\n",
            LOOPED,
        ),
        (
            "@cupy.testing.for_orders('CF')\ndef test_k(order):\n    cupy.RawKernel(CODE, 'k')\n",
            LOOPED,
        ),
        (
            "@testing.numpy_cupy_allclose()\n@pytest.mark.for_all\n"
            "def test_k(xp):\n    cupy.RawKernel(CODE, 'k')\n",
            ONCE,
        ),
        # what runs with each test: a fixture of the default scope its arguments name...
        (
            "@pytest.fixture\ndef module():\n    return cupy.RawModule(code=CODE)\n"
            "def test_k(module):\n    module.get_function('k')\n",
            ONCE,
        ),
        (
            "@pytest.fixture()\ndef kernels():\n"
            "    return [torch.compile(m) for m in MODELS]\n"
            "def test_k(kernels):\n    pass\n",
            LOOPED,
        ),
        (
            "class TestK:\n"
            "    @pytest.fixture(scope='function')\n"
            "    def kernel(self):\n        return cuda.jit(f)\n"
            "    def test_k(self, kernel):\n        pass\n",
            ONCE,
        ),
        # ... or that pytest uses for every test of its module (autouse)
        (
            "@pytest.fixture(autouse=True)\ndef build():\n"
            "    cupy.ElementwiseKernel('T x', 'T y', 'y = x', 'k')\n"
            "def test_k():\n    pass\n",
            ONCE,
        ),
        # ... but not one that runs once for many tests
        (
            "@pytest.fixture(scope='module')\ndef module():\n"
            "    return cupy.RawModule(code=CODE)\n"
            "def test_k(module):\n    pass\n",
            1,
        ),
        # its class's setUp (unittest) or setup_method (pytest)
        (
            "class TestK(unittest.TestCase):\n"
            "    def setUp(self):\n        self.k = cupy.RawKernel(CODE, 'k')\n"
            "    def test_k(self):\n        pass\n",
            ONCE,
        ),
        (
            "class TestK:\n"
            "    def setup_method(self):\n"
            "        for arch in ARCHS:\n            compile_using_nvcc(CODE, arch=arch)\n"
            "    def test_k(self):\n        pass\n",
            LOOPED,
        ),
    ],
    ids=[
        "method",
        "method looping",
        "method in a loop",
        "module function",
        "for's iter",
        "while",
        "for_all_dtypes",
        "for_orders",
        "other decorators",
        "fixture",
        "fixture looping",
        "fixture of a class",
        "autouse fixture",
        "wider fixture",
        "setUp",
        "setup_method",
    ],
)
def test_one_level_deeper_and_what_a_loop_is(tmp_path: Path, source: str, worth: int) -> None:
    assert weighed(tmp_path, source).weight == worth


@pytest.mark.parametrize(
    "source",
    [
        # imports cupy, torch, numba, triton; uses arrays: compiles nothing the source names
        "import cupy\nimport torch\nimport numba\nimport triton\n"
        "def test_k():\n    assert cupy.arange(3).sum() == 3\n",
        # the names in a string, a comment, a docstring
        'def test_k():\n    """compile_using_nvcc and torch.compile"""\n'
        "    # cupy.RawKernel(CODE, 'k') would compile\n"
        "    assert 'nvcc' in 'cupy.cuda.compiler.compile_using_nvcc'\n",
        # a compile in a function no test calls, and at module level
        "def build():\n    compile_using_nvcc(CODE, arch=80)\n"
        "KERNEL = cupy.RawKernel(CODE, 'k')\n"
        "def test_k():\n    pass\n",
        # two levels deep: a helper's helper is not read
        "def inner():\n    compile_using_nvcc(CODE)\n"
        "def outer():\n    inner()\n"
        "def test_k():\n    outer()\n",
        # a method of another class, and a non-compiler subprocess
        "class Builder:\n    def build(self):\n        cupy.RawKernel(CODE, 'k')\n"
        "def test_k():\n    subprocess.run(['gcc', '-c', 'nvcc.c'])\n"
        "    shutil.which('nvcc')\n",
    ],
    ids=["imports", "strings and comments", "uncalled", "two levels", "others"],
)
def test_what_does_not_compile_weighs_one_test(tmp_path: Path, source: str) -> None:
    assert weighed(tmp_path, source) == SourceWeight(tests=1)


def test_each_parametrized_case_compiles(tmp_path: Path) -> None:
    source = """
        import pytest

        @pytest.mark.parametrize("dtype", ["f", "d", "e"])
        def test_k(dtype):
            cupy.ElementwiseKernel("T x", "T y", "y = x", "copy")

        def test_plain():
            pass
    """
    assert weighed(tmp_path, source) == SourceWeight(
        tests=4, compiles=3 * (ONCE - 1), compiling={"test_k": ONCE}
    )


def test_the_plan_weighs_each_collected_test_by_its_source(tmp_path: Path) -> None:
    source = """
        import pytest

        @pytest.mark.parametrize("dtype", ["f", "d", "e"])
        def test_k(dtype):
            cupy.ElementwiseKernel("T x", "T y", "y = x", "copy")

        class TestLoops:
            def test_k(self):
                for arch in ARCHS:
                    compile_using_nvcc(CODE, arch=arch)

        class TestPlain:
            def test_k(self):
                pass
    """
    weight = weighed(tmp_path, source)
    assert weight.compiling == {"test_k": ONCE, "TestLoops::test_k": LOOPED}
    # what pytest collected: 2 of test_k's 3 cases (the third deselected), TestLoops's
    # test as a class decorator renamed its class (CuPy's testing.parameterize), and a
    # test of the same name in a class that compiles nothing
    ids = [
        "test_x.py::test_k[f]",
        "test_x.py::test_k[d]",
        "test_x.py::TestLoops_param_0_{arch=80}::test_k",
        "test_x.py::TestPlain::test_k",
        "test_x.py",  # an id without a test's name weighs one
    ]
    assert weight.weigh_collected(ids) == 2 * ONCE + LOOPED + 1 + 1


def test_a_compile_weighs_more_than_a_test_and_a_loop_of_them_more_still() -> None:
    assert 1 < COMPILE_TESTS < LOOPED_COMPILE_TESTS
