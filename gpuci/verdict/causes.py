"""Causes: a verdict's isolation problems counted by root cause, not by victim.

One polluter that breaks five later tests is one problem in five tests; two tests that run
one device out of memory together are one contention, whichever of them failed. The
headline says both: "3 isolation problems — 2 polluters, 1 provider — in 5 tests".
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuci.model import Category, TestVerdict

# what a root cause of each category is called, singular and plural
CAUSE_WORDS = {
    Category.ORDER_DEPENDENT: ("polluter", "polluters"),
    Category.DEPENDS_ON_OTHERS: ("provider", "providers"),
    Category.CONCURRENCY: ("contention", "contentions"),
    Category.THREAD_UNSAFE: ("thread-unsafe test", "thread-unsafe tests"),
}
OWN_BUG = ("uninitialized read", "uninitialized reads")  # fails alone when poisoned
UNEXPLAINED = ("without a culprit", "without a culprit")


def root_cause(test: TestVerdict) -> tuple[str, ...]:
    """The cause a test is a victim of: tests that share one are one problem."""
    if test.diagnosis:  # it reads memory it never wrote, whoever ran before it
        return ("own", test.id)
    named = test.culprits or test.providers
    if test.category is Category.THREAD_UNSAFE:
        return (test.category.value, test.id)
    if not named:
        return ("unexplained", test.id)
    if test.category is Category.CONCURRENCY:
        # both sides of a contention name each other: the files of the pair, in any order
        files = sorted({test.file, *(c.partition("::")[0] for c in named)})
        return (test.category.value, *files)
    return (test.category.value, *named)


def isolation_headline(what: str, tests: Sequence[TestVerdict]) -> str:
    """`N <what>s — 2 polluters, 1 provider — in M tests` for these isolation findings;
    `what` is "isolation problem" or "new isolation regression"."""
    causes: dict[tuple[str, ...], TestVerdict] = {}
    for test in tests:
        causes.setdefault(root_cause(test), test)
    kinds: dict[tuple[str, str], int] = {}
    for key, test in causes.items():
        words = (
            OWN_BUG
            if key[0] == "own"
            else UNEXPLAINED
            if key[0] == "unexplained"
            else CAUSE_WORDS[test.category]
        )
        kinds[words] = kinds.get(words, 0) + 1
    order = [*CAUSE_WORDS.values(), OWN_BUG, UNEXPLAINED]
    shown = sorted(kinds.items(), key=lambda item: order.index(item[0]))
    parts = ", ".join(f"{n} {one if n == 1 else many}" for (one, many), n in shown)
    head = f"{len(causes)} {what}{'' if len(causes) == 1 else 's'}"
    if all(words in (UNEXPLAINED, CAUSE_WORDS[Category.THREAD_UNSAFE]) for words in kinds):
        return head  # one test each, no cause known: nothing more to say
    tail = f"in {len(tests)} test{'' if len(tests) == 1 else 's'}"
    return f"{head} — {parts} — {tail}"
