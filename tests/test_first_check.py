"""A first check (no durations from an earlier one) starts the files a second check would:
the long ones first, told by their tests counted in their source before collection
(`gpuci.run.sched.source_tests`), by pytest's collection once it has run, and by the
suite interpreter's first seconds (`gpuci.run.sched.learning`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_runner import gpuci, write_files

from gpuci.model import Mode
from gpuci.run.proc.discover import Discovery
from gpuci.run.sched.compiles import LOOPED_COMPILE_TESTS
from gpuci.run.sched.learning import LearnedOrder, SuiteClock
from gpuci.run.sched.plan_mode import file_weights
from gpuci.run.sched.source_tests import SOURCE_BUDGET_S, SourceWeight, weigh_source, weigh_sources


def counted(tmp_path: Path, source: str) -> int:
    path = write_files(tmp_path, {"test_x.py": source}) / "test_x.py"
    return weigh_source(path).tests


@pytest.mark.parametrize(
    ("source", "tests"),
    [
        ("def test_a():\n    pass\ndef helper():\n    pass\n", 1),
        ("import pytest\n@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_a(n):\n    pass\n", 3),
        # two parametrizations multiply; argvalues by keyword
        (
            "import pytest\n"
            "@pytest.mark.parametrize('a', (1, 2))\n"
            "@pytest.mark.parametrize(argnames='b', argvalues=[1, 2, 3])\n"
            "def test_a(a, b):\n    pass\n",
            6,
        ),
        # cases named at module level, and range(N)
        (
            "import pytest\nCASES = [1, 2, 3, 4]\n"
            "@pytest.mark.parametrize('n', CASES)\ndef test_a(n):\n    pass\n"
            "@pytest.mark.parametrize('n', range(10))\ndef test_b(n):\n    pass\n",
            14,
        ),
        # a class's methods, times the class's own parametrization
        (
            "import pytest\n@pytest.mark.parametrize('x', [1, 2])\nclass TestX:\n"
            "    def test_a(self, x):\n        pass\n    def test_b(self, x):\n        pass\n"
            "    def helper(self):\n        pass\n",
            4,
        ),
        # CuPy's testing.parameterize(*testing.product({...})): every combination
        (
            "from cupy import testing\n"
            "@testing.parameterize(*testing.product({'a': [1, 2, 3], 'b': [True, False]}))\n"
            "class TestY:\n    def test_a(self):\n        pass\n",
            6,
        ),
        # a unittest TestCase by its base, whatever its name
        (
            "import unittest\nclass Checks(unittest.TestCase):\n"
            "    def test_a(self):\n        pass\n",
            1,
        ),
        # cases the source computes: one, as collection will say how many
        (
            "import pytest\n@pytest.mark.parametrize('n', list(range(5)))\n"
            "def test_a(n):\n    pass\n",
            1,
        ),
        ("def test_a(:\n", 1),  # pytest's collection says what is wrong with it
        ("", 1),
    ],
)
def test_the_source_counts_a_files_tests_as_collection_would(
    tmp_path: Path, source: str, tests: int
) -> None:
    assert counted(tmp_path, source) == tests


def test_reading_sources_stops_at_its_budget(tmp_path: Path) -> None:
    many = "import pytest\n@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_a(n):\n    pass\n"
    paths = [write_files(tmp_path, {f"test_{i}.py": many}) / f"test_{i}.py" for i in range(4)]
    ticks = iter([0.0, 0.0, 0.5, SOURCE_BUDGET_S, 5.0])  # the budget ends at the third file
    weights = weigh_sources(paths, clock=lambda: next(ticks))
    assert list(weights.values()) == [SourceWeight(tests=3)] * 2 + [SourceWeight(tests=1)] * 2


def test_the_suite_interpreters_first_seconds_order_a_first_check() -> None:
    now = [0.0]
    suite = SuiteClock(lambda: now[0])
    counts = {"many.py": 20, "few.py": 10, "slow.py": 2, "done.py": 10}
    order = LearnedOrder(["many.py", "few.py", "done.py", "slow.py"], {}, counts, suite)
    assert order.choose(["few.py", "slow.py"]) == "few.py"  # nothing measured: by tests
    # the suite ran done.py's 10 tests in 1 s, and is 4 s into slow.py's first of 2 tests:
    # slow.py is at least 8 s, few.py's 10 tests about 1 s
    suite.observe([{"e": "start", "id": "done.py::t"}])
    now[0] = 1.0
    suite.observe([{"e": "start", "id": "slow.py::t"}])
    now[0] = 5.0
    assert order.choose(["few.py", "slow.py"]) == "slow.py"


LONG_AMONG_SHORT = {
    "pytest.ini": "[pytest]\n",
    "tests/test_a.py": "def test_a():\n    pass\n",
    "tests/test_b.py": "def test_b():\n    pass\n",
    "tests/test_c.py": "def test_c():\n    pass\n",
    "tests/test_long.py": """
        import pytest

        @pytest.mark.parametrize("n", [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
        def test_long(n):
            pass
    """,
}


def started(out: Path) -> tuple[list[str], list[str]]:
    """The parallel screen's first files, one per slot (each slot's file that ended first),
    and the files whose interpreters started beside discovery."""
    run = json.loads((out / "parallel" / "run.json").read_text(encoding="utf-8"))
    first: dict[int, dict[str, object]] = {}
    for entry in run["files"]:
        slot = entry["slot"]
        if slot not in first or entry["end"] < first[slot]["end"]:
            first[slot] = entry
    early = [f["file"] for f in run["files"] if f["interpreters"][0]["start"] < 0]
    return sorted(str(f["file"]) for f in first.values()), sorted(early)


@pytest.mark.slow
def test_a_first_check_starts_the_long_file_first_as_a_second_does(tmp_path: Path) -> None:
    root = write_files(tmp_path / "suite", LONG_AMONG_SHORT)
    out = tmp_path / "out"
    check = ("check", "tests", "--out", str(out), "--workers", "2", "--modes", "suite,parallel")
    first = gpuci(*check, cwd=root)
    assert first.returncode == 0, first.stderr
    # two file slots: the long file (12 tests) and the first short one, started before
    # collection
    first_wave = ["tests/test_a.py", "tests/test_long.py"]
    assert started(out) == (first_wave, first_wave)
    # a second check, whose durations say the long file is long (on a GPU its tests take
    # seconds; here they take none), starts the same files
    times = {"long": 6.0, "a": 1.0, "b": 1.0, "c": 1.0}
    files = {f"tests/test_{name}.py": {"parallel": s} for name, s in times.items()}
    durations = tmp_path / "durations.json"
    durations.write_text(json.dumps({"schema": "gpuci.durations/1", "files": files}))
    second = gpuci(*check, "--durations", str(durations), cwd=root)
    assert second.returncode == 0, second.stderr
    assert started(out) == (first_wave, first_wave)


@pytest.mark.slow
def test_a_guess_the_source_could_not_make_is_not_started_before_the_long_file(
    tmp_path: Path,
) -> None:
    suite = dict(LONG_AMONG_SHORT)
    # its cases computed: the source counts one, pytest's collection twelve
    suite["tests/test_long.py"] = """
        import pytest

        @pytest.mark.parametrize("n", list(range(12)))
        def test_long(n):
            pass
    """
    root = write_files(tmp_path / "suite", suite)
    out = tmp_path / "out"
    check = ("check", "tests", "--out", str(out), "--workers", "2", "--modes", "suite,parallel")
    result = gpuci(*check, cwd=root)
    assert result.returncode == 0, result.stderr
    # test_b.py was guessed before collection, but the plan starts test_long.py and
    # test_a.py first: test_b.py's early interpreter waits its turn, and its file's time
    # counts from then (the wait is no part of it: the next check orders by it)
    first_wave, early = started(out)
    assert first_wave == ["tests/test_a.py", "tests/test_long.py"]
    assert early == ["tests/test_a.py"]
    run = json.loads((out / "parallel" / "run.json").read_text(encoding="utf-8"))
    waited = next(f for f in run["files"] if f["file"] == "tests/test_b.py")
    assert waited["interpreters"][0]["ahead"] is True


THREE_TESTS = "import pytest\n@pytest.mark.parametrize('n', [1, 2, 3])\ndef test_it(n):\n    pass\n"
COMPILES_AMONG_MORE_TESTS = {
    "pytest.ini": "[pytest]\n",
    "tests/test_a.py": THREE_TESTS,
    "tests/test_b.py": THREE_TESTS,
    # 2 tests that compile for every architecture (CuPy's test_include.py): here a stand-in
    # compiler that compiles nothing, so no time tells it apart
    "tests/test_include.py": """
        ARCHS = (50, 60, 70, 80, 90)


        class compiler:  # cupy.cuda.compiler's entry points, doing nothing
            @staticmethod
            def compile_using_nvcc(source, *, arch):
                return b""

            @staticmethod
            def compile_using_nvrtc(source, *, arch):
                return b""


        class TestIncludes:
            def test_nvcc(self):
                for arch in ARCHS:
                    compiler.compile_using_nvcc("int main() {}", arch=arch)

            def test_nvrtc(self):
                for arch in ARCHS:
                    compiler.compile_using_nvrtc("__device__ void k() {}", arch=arch)
    """,
    # 2 tests that only name a compiler: in a string, a comment, a function nobody calls
    "tests/test_mentions.py": """
        import subprocess


        def build():
            subprocess.run(["nvcc", "-c", "k.cu"], check=True)


        def test_names():
            # compile_using_nvcc would compile
            assert "compile_using_nvcc" != "cupy.RawKernel"


        def test_other():
            pass
    """,
}


@pytest.mark.slow
def test_a_first_check_starts_the_file_that_compiles_first(tmp_path: Path) -> None:
    root = write_files(tmp_path / "suite", COMPILES_AMONG_MORE_TESTS)
    out = tmp_path / "out"
    check = ("check", "tests", "--out", str(out), "--workers", "2", "--modes", "suite,parallel")
    result = gpuci(*check, cwd=root)
    assert result.returncode == 0, result.stderr
    # two file slots: the file of 2 tests that compiles in loops weighs more than the files
    # of 3 tests, both before collection (started beside discovery) and in the plan
    first_wave = ["tests/test_a.py", "tests/test_include.py"]
    assert started(out) == (first_wave, first_wave)


def test_a_files_measured_time_replaces_its_weight() -> None:
    now = [0.0]
    suite = SuiteClock(lambda: now[0])
    counts = {"compiles.py": 2, "many.py": 50, "done.py": 10}
    # compiles.py's 2 tests compile in loops: weighed as 200 tests before anything is timed
    weights = counts | {"compiles.py": 200}
    planned = ["compiles.py", "many.py", "done.py"]
    order = LearnedOrder(planned, {}, counts, suite, weights=weights)
    assert order.choose(["compiles.py", "many.py"]) == "compiles.py"
    # a parallel file of 10 tests took 1 s: at that rate compiles.py's weight is 20 s,
    # many.py's 5 s
    order.finished("done.py", 1.0)
    assert order.seconds()["compiles.py"] == pytest.approx(20.0)
    assert order.choose(["compiles.py", "many.py"]) == "compiles.py"
    # the suite interpreter ran compiles.py in 0.5 s (its compiles were cached): that
    # replaces the guess, and many.py is the longer
    suite.observe([{"e": "start", "id": "compiles.py::t"}])
    now[0] = 0.5
    suite.observe([{"e": "start", "id": "many.py::t"}])
    assert order.seconds()["compiles.py"] == pytest.approx(0.5)
    assert order.choose(["compiles.py", "many.py"]) == "many.py"


def test_the_plan_weighs_compiles_only_where_it_orders_untimed_files(tmp_path: Path) -> None:
    root = write_files(tmp_path, COMPILES_AMONG_MORE_TESTS)
    tests = {
        "tests/test_a.py": tuple(f"tests/test_a.py::test_it[{n}]" for n in (1, 2, 3)),
        "tests/test_include.py": (
            "tests/test_include.py::TestIncludes::test_nvcc",
            "tests/test_include.py::TestIncludes::test_nvrtc",
        ),
        "tests/test_mentions.py": (
            "tests/test_mentions.py::test_names",
            "tests/test_mentions.py::test_other",
        ),
    }
    discovery = Discovery(rootdir=root, files=tuple(tests), tests=tests)
    counts = {f: len(ids) for f, ids in tests.items()}
    # its 2 tests compile in loops
    weighed = counts | {"tests/test_include.py": 2 * LOOPED_COMPILE_TESTS}
    assert file_weights(Mode.PARALLEL, discovery, counts, {}, sharded=False) == weighed
    assert file_weights(Mode.THREADS, discovery, counts, {}, sharded=False) == weighed
    # a new file among timed ones is estimated from its weight too
    timed = {"tests/test_a.py": 1.0, "tests/test_mentions.py": 1.0}
    assert file_weights(Mode.PARALLEL, discovery, counts, timed, sharded=False) == weighed
    # every file timed: nothing to guess; a shard: its tests alone, so that every shard,
    # whatever it read of the sources within its budget, plans alike; isolated and suite
    # keep collection order
    every = timed | {"tests/test_include.py": 9.0}
    assert file_weights(Mode.PARALLEL, discovery, counts, every, sharded=False) == counts
    assert file_weights(Mode.PARALLEL, discovery, counts, {}, sharded=True) == counts
    assert file_weights(Mode.ISOLATED, discovery, counts, {}, sharded=False) == counts
