"""The terminal summary of a verdict: counts, each finding with its evidence, the verdict."""

from __future__ import annotations

from gpuci.model import ISOLATION_CATEGORIES, Category, Verdict, printable
from gpuci.strays import verdict_lines

MAX_LISTED = 25  # tests format_summary lists, two lines each
LISTED = ISOLATION_CATEGORIES | {
    Category.FAILED,
    Category.CRASHED,
    Category.TIMED_OUT,
    Category.FLAKY,
}


def format_summary(verdict: Verdict) -> str:
    """The terminal summary: counts, each finding with its evidence, then the verdict."""
    counts = [f"{n} {c.value}" for c in Category if (n := verdict.summary.get(c.value, 0))]
    lines = [", ".join(counts) if counts else "no tests"]
    listed = [t for t in verdict.tests if t.category in LISTED]
    for test in listed[:MAX_LISTED]:
        tag = "" if test.new is None else ("new" if test.new else "known")
        evidence = " ".join(f"{mode}={outcome}" for mode, outcome in test.outcomes.items())
        if test.reruns:
            evidence += f" reruns={','.join(test.reruns)}"
        if test.inferred:
            evidence += f" inferred={','.join(test.inferred)}"
        if test.cut:
            evidence += f" ({test.cut})"
        lines.append(printable(f"{test.category.value:<17} {tag:<5} {test.id}  {evidence}"))
        if test.reproduce:
            lines.append(printable(f"    reproduce: {test.reproduce}"))
    if len(listed) > MAX_LISTED:
        lines.append(f"... and {len(listed) - MAX_LISTED} more (see verdict.json)")
    spent = verdict.evidence.get("spent_s")
    if spent is not None:
        budget = verdict.evidence.get("budget_s")
        limit = f" of a {budget:.0f}s budget" if isinstance(budget, int | float) else ""
        lines.append(
            f"evidence: {verdict.evidence.get('runs', 0)} alone-run(s) in {spent:.1f}s{limit}"
        )
    lines += [
        printable(f"warning: {line}") for line in verdict_lines(verdict.modes, verdict.evidence)
    ]
    why = f" ({'; '.join(verdict.reasons)})" if verdict.reasons else ""
    lines.append(printable(f"verdict: {verdict.verdict}{why}"))
    return "\n".join(lines)
