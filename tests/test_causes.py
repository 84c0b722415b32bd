"""Causes: isolation problems counted by root cause, and what a contention's pair needs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from test_gpumem import write_run

from gpuci.evidence.results import load_mode_results
from gpuci.formats import mode_run_to_json, read_mode_run, write_json_atomic
from gpuci.model import Category, TestVerdict, Verdict
from gpuci.report.comment_data import ReportLinks
from gpuci.report.render import render_markdown
from gpuci.verdict.causes import contention_note, group_roots, isolation_headline
from gpuci.verdict.roots import blamed_roots

A, B = "tests/test_a.py", "tests/test_b.py"


def _test(test_id: str, category: Category, **fields: Any) -> TestVerdict:
    return TestVerdict(
        id=test_id,
        file=test_id.partition("::")[0],
        category=category,
        outcomes={},
        **fields,
    )


def test_one_polluter_of_three_victims_is_one_problem_and_a_pair_is_one_contention() -> None:
    polluter = "tests/test_p.py::test_leak"
    tests = [
        *(_test(f"tests/test_v.py::test_{i}", Category.ORDER_DEPENDENT, culprits=(polluter,))
          for i in range(3)),
        _test("tests/test_n.py::test_needs", Category.DEPENDS_ON_OTHERS, providers=(polluter,)),
        # each side of one contention names the other: its file, or its test
        _test(f"{A}::test_hog", Category.CONCURRENCY, culprits=(B,)),
        _test(f"{B}::test_hog", Category.CONCURRENCY, culprits=(f"{A}::test_hog",)),
        _test("tests/test_x.py::test_unknown", Category.ORDER_DEPENDENT),
    ]  # fmt: skip
    assert isolation_headline("isolation problem", tests) == (
        "4 isolation problems — 1 polluter, 1 provider, 1 contention, 1 without a culprit"
        " — in 7 tests"
    )
    # nothing known of any cause: the count alone
    assert isolation_headline("isolation problem", tests[-1:]) == "1 isolation problem"


def test_a_pair_that_does_not_fit_the_device_says_what_it_needs(tmp_path: Path) -> None:
    out = tmp_path / "out"
    path = write_run(
        out / "parallel" / "run.json", {A: [40_000, 49_152], B: [49_152], "c.py": [10]}
    )
    run = read_mode_run(path)
    environment = {"gpu_memory_mib": "81920"}
    write_json_atomic(path, {**mode_run_to_json(run), "environment": environment})
    results = load_mode_results(out)
    assert contention_note(Category.CONCURRENCY, A, (B,), results) == (
        f"together they need 96 GiB of 80 GiB ({A} 48 GiB, {B} 48 GiB, in the screens)",
    )
    # the partner names the victim's test: the same two files
    assert contention_note(Category.CONCURRENCY, B, (f"{A}::test_hog",), results) == (
        f"together they need 96 GiB of 80 GiB ({B} 48 GiB, {A} 48 GiB, in the screens)",
    )
    assert contention_note(Category.CONCURRENCY, A, ("c.py",), results) == ()  # they fit
    assert contention_note(Category.CONCURRENCY, A, ("d.py",), results) == ()  # not measured
    assert contention_note(Category.ORDER_DEPENDENT, A, (B,), results) == ()


def test_a_contention_both_of_whose_sides_failed_is_one_root_naming_both() -> None:
    a, b = f"{A}::test_hog", f"{B}::test_hog"
    tests = [
        _test(a, Category.CONCURRENCY, culprits=(B,)),
        _test(b, Category.CONCURRENCY, culprits=(a,)),
        _test("tests/test_c.py::test_alone", Category.CONCURRENCY, culprits=(B,)),
    ]
    roots = group_roots(tests)
    assert [(r.victims, r.culprits) for r in roots] == [
        ((a, b), (B, a)),  # the pair, once
        (("tests/test_c.py::test_alone",), (B,)),  # its partner passed: one side
    ]
    verdict = Verdict(verdict="fail", summary={}, tests=tuple(tests), roots=roots)
    told = [b.headline.text() for b in blamed_roots(verdict)]
    assert told == [f"{a} and {b} fail beside each other", f"1 test fails beside {B}"]
    markdown = render_markdown(verdict, links=ReportLinks())
    assert markdown.count("fail beside each other") == 1
    assert markdown.count("#### ") == 2
