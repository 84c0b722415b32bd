"""Groups: findings told as one row where they are one story.

Tests of one category that failed the same way (one fingerprint), or, failing that, that
sit in one test class or file, are one group once there are MIN_GROUP of them: 288
identical setup errors, or 33 thread-unsafe tests of one class, are one row with a
count, not a screenful. The terminal summary, the merge-request note and the HTML report
all group the same way, from here.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gpuci.model import Category, TestVerdict

MIN_GROUP = 3  # fewer findings than this read better one by one
# Outcomes a mode may show that it took from another without running the test (a lazy
# isolated pass): a pass or skip of a fresh interpreter of the same file stands for
# isolated's; a failure copied from a screen does not, and every teller leaves it out.
INFERRED_SOUND = frozenset({"passed", "skipped"})


@dataclass(frozen=True, slots=True, kw_only=True)
class FindingGroup:
    """Findings of one category with one fingerprint, or in one class or file."""

    category: Category
    fingerprint: str  # "" where the group is by place
    members: tuple[TestVerdict, ...]  # in the verdict's order

    @property
    def places(self) -> tuple[str, ...]:
        """The classes (or files) of its members, in order."""
        return tuple(dict.fromkeys(place_of(t.id) for t in self.members))

    @property
    def reproduce(self) -> str:
        """One command for the group: its first member's."""
        return next((t.reproduce for t in self.members if t.reproduce), "")

    @property
    def inferred(self) -> int:
        """Members whose alone-runs were inferred from the group's representatives."""
        return sum(1 for t in self.members if t.inferred_from)

    def title(self) -> str:
        """`300 tests in tests/test_x.py::TestY`, the places counted past two."""
        places = self.places
        where = ", ".join(places[:2]) + (f" and {len(places) - 2} more" if len(places) > 2 else "")
        return f"{len(self.members)} tests in {where}"

    def evidence(self) -> str:
        """What ran alone for it: `1 ran alone (failed); 299 inferred from it`."""
        reps = {r for t in self.members for r in t.inferred_from}
        alone = [o for t in self.members if t.id in reps for o in t.reruns]
        if not self.inferred:
            ran = sum(1 for t in self.members if t.reruns)
            return f"{ran} of {len(self.members)} ran alone" if ran else ""
        outcomes = ", ".join(sorted(set(alone))) or "not run"
        them = "them" if len(reps) > 1 else "it"
        return f"{len(reps)} ran alone ({outcomes}); {self.inferred} inferred from {them}"


def place_of(test_id: str) -> str:
    """A test's class (`file::Class`), or its file for a test outside a class."""
    parts = test_id.split("::")
    return "::".join(parts[:2]) if len(parts) > 2 else parts[0]


def group_findings(
    tests: Sequence[TestVerdict], *, apart: Collection[str] = ()
) -> list[TestVerdict | FindingGroup]:
    """The tests, in order, with each group of MIN_GROUP or more in one entry where its
    first member was: by fingerprint first, then what is left by class or file. Tests in
    `apart` (a root's victims, which its card tells of) stay one by one."""
    by_print: dict[tuple[Category, str], list[TestVerdict]] = {}
    for test in tests:
        if test.id in apart:
            continue
        if test.fingerprint:
            by_print.setdefault((test.category, test.fingerprint), []).append(test)
    grouped = {t.id: key for key, ts in by_print.items() if len(ts) >= MIN_GROUP for t in ts}
    by_place: dict[tuple[Category, str], list[TestVerdict]] = {}
    for test in tests:
        if test.id not in grouped and test.id not in apart:
            by_place.setdefault((test.category, place_of(test.id)), []).append(test)
    placed = {t.id: key for key, ts in by_place.items() if len(ts) >= MIN_GROUP for t in ts}
    told: set[tuple[str, tuple[Category, str]]] = set()
    found: list[TestVerdict | FindingGroup] = []
    for test in tests:
        if test.id in grouped:
            key, kind, members = grouped[test.id], "print", by_print[grouped[test.id]]
        elif test.id in placed:
            key, kind, members = placed[test.id], "place", by_place[placed[test.id]]
        else:
            found.append(test)
            continue
        if (kind, key) not in told:
            told.add((kind, key))
            fingerprint = key[1] if kind == "print" else ""
            found.append(
                FindingGroup(category=key[0], fingerprint=fingerprint, members=tuple(members))
            )
    return found
