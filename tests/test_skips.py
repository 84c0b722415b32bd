"""gpuci.verdict.skips: when no test ran, and how the verdict says why."""

from __future__ import annotations

import pytest

from gpuci.model import Category
from gpuci.verdict.skips import nothing_ran, nothing_ran_reason

S, N, P = Category.SKIPPED, Category.NOT_RUN, Category.PASSED


@pytest.mark.parametrize(
    ("categories", "expected"),
    [
        ([S, S], True),
        ([S, N], True),  # the rest never ran either
        ([S, P], False),
        ([N, N], False),  # pytest's own failure: told as such, exit 3
        ([], False),
        ([S, Category.FAILED], False),
    ],
)
def test_nothing_ran_means_skipped_and_nothing_else_ran(
    categories: list[Category], expected: bool
) -> None:
    assert nothing_ran(categories) is expected


def test_the_reasons_are_grouped_most_common_first_with_the_rest_counted() -> None:
    reasons = ["no GPU"] * 3 + ["CuPy is not installed"] * 5 + ["", "a", "b"]
    assert nothing_ran_reason(reasons) == (
        "no test ran: 11 skipped (5: CuPy is not installed; 3: no GPU;"
        " 1: (no reason given); 2 other reasons)"
    )
