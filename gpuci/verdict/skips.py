"""A check or a run where no test ran: every test skipped (or not run), none passed or failed.

Plain pytest exits 0 over 107 skipped tests, and a CI job goes green having tested nothing:
a GPU suite on a runner without CuPy, or without a GPU, skips every test. gpuci does not
call that a pass. It fails, naming what kept the tests from running (the skip reasons,
grouped, with their counts), unless the user's policy allows skips (`--allow skipped`,
`allow = ["skipped"]` in `[tool.gpuci]`). Nothing collected at all, or every test
deselected, never gets this far: pytest's exit 5 is refused at discovery (exit 2).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from gpuci.model import Category

REASONS_SHOWN = 3  # the most common skip reasons a verdict names; the rest are counted
NO_REASON = "(no reason given)"
ALLOW_HINT = 'allow skips with --allow skipped, or allow = ["skipped"] in [tool.gpuci]'


def nothing_ran(categories: Iterable[Category]) -> bool:
    """Whether tests were there but none ran: each skipped or not run, at least one skipped
    (every test not run is pytest's own failure, told elsewhere)."""
    seen = set(categories)
    return Category.SKIPPED in seen and seen <= {Category.SKIPPED, Category.NOT_RUN}


def nothing_ran_reason(skip_reasons: Iterable[str]) -> str:
    """`no test ran: 107 skipped (107: CuPy is not installed)`: the reasons grouped, the
    most common first, each with its count; `skip_reasons` one per skipped test."""
    counts = Counter(reason.strip() or NO_REASON for reason in skip_reasons)
    total = sum(counts.values())
    shown = [f"{n}: {reason}" for reason, n in counts.most_common(REASONS_SHOWN)]
    rest = len(counts) - REASONS_SHOWN
    if rest > 0:
        shown.append(f"{rest} other reason{'s' if rest != 1 else ''}")
    return f"no test ran: {total} skipped ({'; '.join(shown)})"
