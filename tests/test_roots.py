"""Tests of gpuci/verdict/roots.py: which roots are told, with which victims, in which words."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from gpuci.formats import read_verdict
from gpuci.model import Category, Root, TestVerdict, Verdict
from gpuci.verdict.roots import (
    CULPRITS_SHOWN,
    blame_of,
    blamed_roots,
    culprit_note,
    headline,
    reproduce_of,
    sanitizer_line,
)

VERDICT_ROOTS = Path(__file__).parent / "data" / "report" / "verdict_roots.json"
UNINITIALIZED = "reads uninitialized device memory (fails alone with poisoned allocations)"


def victim(test_id: str, *, new: bool | None = None, **fields: object) -> TestVerdict:
    return TestVerdict(
        id=test_id,
        file=test_id.split("::", maxsplit=1)[0],
        category=Category.ORDER_DEPENDENT,
        outcomes={"suite": "failed"},
        new=new,
        **fields,  # type: ignore[arg-type]
    )


def test_the_fixture_tells_each_root_once_new_first_without_diagnosed_victims() -> None:
    blames = blamed_roots(read_verdict(VERDICT_ROOTS))
    assert [(b.key, b.headline.text(), b.new) for b in blames] == [
        ("root-1", "tests/gpu/test_oob.py::test_scatter_oob broke 5 later tests", True),
        ("root-2", "2 tests pass only after tests/gpu/test_compile.py::test_compile_softmax", True),
        (
            "root-3",
            "tests/gpu/test_evil.py::test_a[<img src=x onerror=alert(1)>] and"
            " tests/gpu/test_evil.py::test_b[@all `tick` a|b ``two``] broke 1 later test",
            True,
        ),
        ("root-4", "1 test fails beside tests/gpu/test_hog_infer.py", True),
        # Its other victim reads uninitialized memory: not blamed, and the root is known.
        ("root-5", "tests/gpu/test_pool.py::test_fill_and_release broke 1 later test", False),
    ]
    assert [v.id for v in blames[4].victims] == ["tests/gpu/test_pool.py::test_pad_to_multiple"]
    # test_early's only victim is diagnosed: that root is not told at all.
    assert not [b for b in blames if "test_early" in b.headline.text()]
    assert blames[0].culprits[0] is not None and blames[0].culprits[0].sanitizer
    assert blames[3].culprits == (None,)  # a file beside it, not a test


def test_a_root_is_told_with_its_first_blamed_victims_command() -> None:
    blames = blamed_roots(read_verdict(VERDICT_ROOTS))
    fill = blames[4]
    # The diff's root names the diagnosed victim first; its command is not the card's.
    assert fill.root.reproduce.endswith("test_reads_pool")
    assert reproduce_of(fill).endswith(
        "tests/gpu/test_pool.py::test_fill_and_release tests/gpu/test_pool.py::test_pad_to_multiple"
    )
    bare = replace(fill, victims=(replace(fill.victims[0], reproduce=""),))
    assert reproduce_of(bare) == fill.root.reproduce


@pytest.mark.parametrize(
    ("category", "victims", "expected"),
    [
        (Category.ORDER_DEPENDENT, 1, "t.py::x broke 1 later test"),
        (Category.ORDER_DEPENDENT, 7, "t.py::x broke 7 later tests"),
        (Category.DEPENDS_ON_OTHERS, 1, "1 test passes only after t.py::x"),
        (Category.DEPENDS_ON_OTHERS, 3, "3 tests pass only after t.py::x"),
        (Category.CONCURRENCY, 1, "1 test fails beside t.py::x"),
        (Category.CONCURRENCY, 2, "2 tests fail beside t.py::x"),
        (Category.FAILED, 2, "t.py::x came before 2 tests"),
    ],
)
def test_headline_words(category: Category, victims: int, expected: str) -> None:
    assert headline(category, ["t.py::x"], victims).text() == expected


def test_a_provider_file_is_one_imported_not_one_run_before() -> None:
    words = headline(Category.DEPENDS_ON_OTHERS, ["t.py"], 2).text()
    assert words == "2 tests pass only where pytest imported t.py"


def test_headline_names_a_few_culprits_and_counts_the_rest() -> None:
    culprits = [f"c{i}" for i in range(CULPRITS_SHOWN + 3)]
    words = headline(Category.ORDER_DEPENDENT, culprits, 2)
    assert words.culprits == tuple(culprits[:CULPRITS_SHOWN])
    assert words.more == 3
    assert words.text() == "c0 and c1 and c2 and c3 and 3 more broke 2 later tests"


def test_blamed_roots_skip_unknown_and_diagnosed_victims_and_order_new_first() -> None:
    tests = (
        victim("a.py::v1", new=False),
        victim("a.py::v2", new=True),
        victim("a.py::v3", new=True, diagnosis=UNINITIALIZED),
    )
    roots = (
        Root(culprits=("a.py::c",), category=Category.ORDER_DEPENDENT, victims=("a.py::v1",),
             reproduce="r1"),
        Root(culprits=("a.py::d",), category=Category.ORDER_DEPENDENT,
             victims=("a.py::v3", "a.py::gone"), reproduce="r2"),
        Root(culprits=("a.py::e",), category=Category.ORDER_DEPENDENT,
             victims=("a.py::v2", "a.py::v3"), reproduce="r3"),
    )  # fmt: skip
    blames = blamed_roots(Verdict(verdict="fail", tests=tests, roots=roots))
    assert [(b.key, b.root.culprits, [v.id for v in b.victims]) for b in blames] == [
        ("root-1", ("a.py::e",), ["a.py::v2"]),
        ("root-2", ("a.py::c",), ["a.py::v1"]),
    ]
    assert [b.new for b in blames] == [True, False]
    assert blames[1].culprits == (None,)  # no verdict of its own in this one
    assert set(blame_of(blames)) == {"a.py::v1", "a.py::v2"}
    untold = blamed_roots(Verdict(verdict="fail", tests=tests[:1], roots=roots))
    assert [b.root.culprits for b in untold] == [("a.py::c",)]
    assert blamed_roots(Verdict(verdict="pass")) == []


def test_new_is_none_without_a_baseline() -> None:
    tests = (victim("a.py::v"),)
    roots = (Root(culprits=("c",), category=Category.ORDER_DEPENDENT, victims=("a.py::v",),
                  reproduce=""),)  # fmt: skip
    (blame,) = blamed_roots(Verdict(verdict="fail", tests=tests, roots=roots))
    assert blame.new is None


def test_culprit_note_only_where_the_search_found_none() -> None:
    blames = blamed_roots(read_verdict(VERDICT_ROOTS))
    by_id = {t.id: t for t in read_verdict(VERDICT_ROOTS).tests}
    blamed = blame_of(blames)
    notes = {i: culprit_note(t, blamed) for i, t in by_id.items() if culprit_note(t, blamed)}
    assert notes == {
        "tests/gpu/test_late.py::test_unsearched": "culprit: not searched (budget)",
        "tests/gpu/test_late.py::test_not_reproduced": (
            "culprit: not reproduced: it never failed after the tests before it (2 runs)"
        ),
    }


def test_sanitizer_line_is_the_first_line_without_the_tools_prefix() -> None:
    assert sanitizer_line("") == ""
    assert sanitizer_line("Invalid __global__ write of size 4 bytes\n at k+0x70") == (
        "Invalid __global__ write of size 4 bytes"
    )
    raw = "========= \n========= Invalid __shared__ read of size 8 bytes\n=========     at k\n"
    assert sanitizer_line(raw) == "Invalid __shared__ read of size 8 bytes"
