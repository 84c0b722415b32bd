"""Ids: one test's id in two interpreters, matched where pytest computed it differently.

A parameter computed at import (`datetime.now()`, a random value, an object's address)
gives a test a different id in every interpreter. The screens run files, not lists of
ids, so such a test still runs; its outcome is matched to the id discovery collected by
its stable part: the id up to its parameters (`file::Class::test`) and its place among the
ids of that stem, where both interpreters collected as many of them. An id with no such
match stays as reported: an unstable id, never a failure of its file.

Imported by the child-side plugin (a run by ids matches its own collection the same way),
so it imports nothing of gpuci.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def stem_of(test_id: str) -> str:
    """The id up to its parameters: `f.py::test_x` for `f.py::test_x[a-1]`."""
    head, bracket, _ = test_id.partition("[")
    return head if bracket else test_id


def _by_stem(ids: Iterable[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for test_id in ids:
        found.setdefault(stem_of(test_id), []).append(test_id)
    return found


def match_ids(reported: Sequence[str], known: Sequence[str]) -> dict[str, str]:
    """Each reported id that is not one of `known` but stands for one: the known id of the
    same stem in the same place among that stem's ids, where both lists hold as many of
    them and the stem's ids differ. Ids that match exactly are left out (they need none)."""
    known_set = set(known)
    reported_set = set(reported)
    if reported_set <= known_set:
        return {}
    mine, theirs = _by_stem(reported), _by_stem(known)
    matched: dict[str, str] = {}
    for stem, ids in mine.items():
        other = theirs.get(stem, [])
        if len(other) != len(ids) or set(ids) == set(other):
            continue
        for own, known_id in zip(ids, other, strict=True):
            if own not in known_set and known_id not in reported_set:
                matched[own] = known_id
    return matched


def select_ids(wanted: Sequence[str], collected: Sequence[str]) -> list[str]:
    """The collected ids that `wanted` names: exactly, else by stable part (`match_ids`:
    `wanted` is a whole stem's ids from another interpreter of the same files)."""
    chosen = set(wanted) & set(collected)
    by_wanted = {w: c for c, w in match_ids(collected, known=list(wanted)).items()}
    chosen |= {by_wanted[w] for w in wanted if w not in chosen and w in by_wanted}
    return [c for c in collected if c in chosen]
