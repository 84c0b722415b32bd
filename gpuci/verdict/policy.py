"""Policy: which categories fail a verdict, which only warn, and what `--allow` lets pass
(`--fail-on`, `--allow`, `[tool.gpuci] fail-on` / `allow`)."""

from __future__ import annotations

from dataclasses import dataclass

from gpuci.model import ISOLATION_CATEGORIES, Category, TestVerdict, UsageError

DEFAULT_FAIL_ON = ISOLATION_CATEGORIES | {Category.FAILED, Category.CRASHED, Category.TIMED_OUT}
DEFAULT_WARN_ON = frozenset({Category.FLAKY, Category.NOT_RUN})
KNOWN = "known"  # --allow's word for isolation regressions the baseline already had


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Which categories fail the verdict, which only warn, and whether known ones count."""

    fail_on: frozenset[Category] = DEFAULT_FAIL_ON
    warn_on: frozenset[Category] = DEFAULT_WARN_ON
    allow_known: bool = False  # isolation regressions the baseline already had never fail
    allow_skipped: bool = False  # a check where every test skipped passes (else it fails)

    def fails(self, test: TestVerdict) -> bool:
        """Whether this test alone would fail the verdict."""
        if test.category not in self.fail_on:
            return False
        return not (self.allow_known and test.new is False)

    def warns(self, test: TestVerdict) -> bool:
        """Whether this test alone would make a passing verdict a warning."""
        return test.category in self.warn_on


def parse_policy(fail_on: str | None, allow: str | None) -> Policy:
    """The policy of `--fail-on` and `--allow` (comma lists of category names)."""
    fail = DEFAULT_FAIL_ON
    if fail_on is not None:
        fail, _ = _parse_categories("--fail-on", fail_on, words=())
    allowed: frozenset[Category] = frozenset()
    allow_known = False
    if allow is not None:
        allowed, words = _parse_categories("--allow", allow, words=(KNOWN,))
        allow_known = KNOWN in words
    return Policy(
        fail_on=fail - allowed,
        warn_on=DEFAULT_WARN_ON - allowed - fail,
        allow_known=allow_known,
        allow_skipped=Category.SKIPPED in allowed,
    )


def _parse_categories(
    option: str, text: str, *, words: tuple[str, ...]
) -> tuple[frozenset[Category], frozenset[str]]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    valid = [c.value for c in Category]
    unknown = [n for n in names if n not in valid and n not in words]
    if unknown:
        raise UsageError(
            f"{option} {text!r}: unknown {', '.join(map(repr, unknown))};"
            f" choose from {', '.join([*valid, *words])}"
        )
    return (
        frozenset(Category(n) for n in names if n in valid),
        frozenset(n for n in names if n in words),
    )
