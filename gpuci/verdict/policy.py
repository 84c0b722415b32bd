"""Policy: which categories fail a verdict, which only warn, and what `--allow` lets pass
(`--fail-on`, `--allow`, `[tool.gpuci] fail-on` / `allow`).

A latent finding (shown only in an order plain pytest did not run: `reversed`, `shuffled`)
warns by default, as the plain run passed it; `--fail-on latent` makes every latent finding
fail (of the categories that fail: the default ones, or those named beside it), and
`--fail-on CATEGORY` that category's, latent or not.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuci.model import ISOLATION_CATEGORIES, Category, TestVerdict, UsageError

DEFAULT_FAIL_ON = ISOLATION_CATEGORIES | {Category.FAILED, Category.CRASHED, Category.TIMED_OUT}
DEFAULT_WARN_ON = frozenset({Category.FLAKY, Category.NOT_RUN})
KNOWN = "known"  # --allow's word for isolation regressions the baseline already had
LATENT = "latent"  # --fail-on's word for every latent finding


@dataclass(frozen=True, slots=True, kw_only=True)
class Policy:
    """Which categories fail the verdict, which only warn, and whether known ones count."""

    fail_on: frozenset[Category] = DEFAULT_FAIL_ON
    warn_on: frozenset[Category] = DEFAULT_WARN_ON
    allow_known: bool = False  # isolation regressions the baseline already had never fail
    allow_skipped: bool = False  # a check where every test skipped passes (else it fails)
    # the categories whose latent findings fail (--fail-on latent, or the category named)
    latent_fail_on: frozenset[Category] = frozenset()

    def fails(self, test: TestVerdict) -> bool:
        """Whether this test alone would fail the verdict."""
        if test.category not in self.fail_on:
            return False
        if test.latent and test.category not in self.latent_fail_on:
            return False
        return not (self.allow_known and test.new is False)

    def warns(self, test: TestVerdict) -> bool:
        """Whether this test alone would make a passing verdict a warning: a latent finding
        of a category that fails does, where it does not fail."""
        return test.category in self.warn_on or (test.latent and test.category in self.fail_on)


def parse_policy(fail_on: str | None, allow: str | None) -> Policy:
    """The policy of `--fail-on` and `--allow` (comma lists of category names)."""
    fail = DEFAULT_FAIL_ON
    latent_fail: frozenset[Category] = frozenset()
    if fail_on is not None:
        named, fail_words = _parse_categories("--fail-on", fail_on, words=(LATENT,))
        # `latent` alone keeps the default categories; a category named fails latent or not
        fail = DEFAULT_FAIL_ON if LATENT in fail_words and not named else named
        latent_fail = fail if LATENT in fail_words else named
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
        latent_fail_on=latent_fail - allowed,
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
