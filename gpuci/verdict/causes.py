"""Causes: victims grouped under their culprits (the verdict's roots), and a verdict's
isolation problems counted by root cause, not by victim.

One polluter that breaks five later tests is one problem in five tests; two tests that run
one device out of memory together are one contention, whichever of them failed. The
headline says both: "3 isolation problems — 2 polluters, 1 provider — in 5 tests".
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

from gpuci.evidence.results import ModeResults
from gpuci.model import ISOLATION_CATEGORIES, Category, Mode, Root, TestVerdict

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


def group_roots(tests: Sequence[TestVerdict]) -> tuple[Root, ...]:
    """Victims grouped under their culprits: a cascade is one root, most victims first."""
    groups: dict[tuple[tuple[str, ...], Category], list[TestVerdict]] = {}
    for test in tests:
        if (culprits := test.culprits or test.providers) and test.category in ISOLATION_CATEGORIES:
            # the two sides of one contention name each other: one root, both its victims
            key = root_cause(test) if test.category is Category.CONCURRENCY else culprits
            groups.setdefault((key, test.category), []).append(test)
    roots = [
        Root(
            culprits=tuple(dict.fromkeys(c for v in victims for c in v.culprits or v.providers)),
            category=category,
            victims=tuple(v.id for v in victims),
            reproduce=root_command(victims),
        )
        for (_, category), victims in groups.items()
    ]
    roots.sort(key=lambda r: (-len(r.victims), r.culprits))
    return tuple(roots)


def root_command(victims: Sequence[TestVerdict]) -> str:
    """A root's command: the one most of its victims share (victims answered together by
    group runs, `gpuci.evidence.kinds.groups`, share the command that runs them all), else its
    first victim's with one."""
    shared = Counter(v.reproduce for v in victims if v.reproduce).most_common(1)
    return shared[0][0] if shared else ""


def contention_note(
    category: Category, file: str, culprits: Sequence[str], results: Mapping[Mode, ModeResults]
) -> tuple[str, ...]:
    """Where the screens measured each file's device-memory peak: what a concurrency pair
    needs together, against the device's memory where run.json has it ("" elsewhere)."""
    files = list(dict.fromkeys([file, *(c.partition("::")[0] for c in culprits)]))
    if category is not Category.CONCURRENCY or len(files) < 2:
        return ()
    peaks: dict[str, int] = {}
    for mode in (Mode.PARALLEL, Mode.ISOLATED):
        for part in results[mode].parts if mode in results else ():
            for run in part.files:
                for interpreter in run.interpreters:
                    if interpreter.gpu_peak_mib is not None and run.file in files:
                        peaks[run.file] = max(peaks.get(run.file, 0), interpreter.gpu_peak_mib)
    if any(f not in peaks for f in files):
        return ()
    need = sum(peaks.values())
    each = ", ".join(f"{f} {_gib(peaks[f])}" for f in files)
    total = next((r.run.environment.get("gpu_memory_mib", "") for r in results.values()), "")
    if not total.isdigit():
        return (f"together they peaked at {_gib(need)} in the screens ({each})",)
    if need <= int(total):
        return ()  # they fit: whatever they contend for, it is not device memory
    return (f"together they need {_gib(need)} of {_gib(int(total))} ({each}, in the screens)",)


def _gib(mib: int) -> str:
    gib = mib / 1024
    return f"{gib:.0f} GiB" if gib >= 10 else f"{gib:.1f} GiB"
