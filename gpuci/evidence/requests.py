"""Requests: the runs a kind of evidence declares ahead, for the one runner
(`gpuci.evidence.ahead`, through `Prober.start_ahead`) to start their interpreters before
their turn. A kind counts the interpreters its own runs need; where several kinds (or one
kind's searches) declare runs of the same files at once, their counts add up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuci.run.proc.discover import file_of


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """A run a kind of evidence will make, declared ahead to the runner (`Prober.start_ahead`),
    which alone starts its interpreter, admits it and charges it: the tests it will run
    (`ids`, after the files of `collect` imported), with nothing beside it or not
    (`strict`), in which environment (`env`), seeing which GPUs where it is one side of
    a pair run (`side_gpu`, with `side`), how many interpreters of its files the runs
    declared so far need (`copies`: one serves any run of its files), and how certain it
    is (`certain`: it comes whatever the others find; else a guess, ended where another
    run needs the place, killed where never taken)."""

    ids: tuple[str, ...]
    collect: tuple[str, ...] = ()
    strict: bool = False
    env: tuple[tuple[str, str], ...] = ()
    copies: int = 1
    certain: bool = False
    side: bool = False
    side_gpu: str | None = None


def run_files(ids: Sequence[str], collect: Sequence[str] = ()) -> list[str]:
    """A run's files, in the order pytest is handed them: `collect` first, then the files
    of `ids` as they first appear (the last is the victim's: its journal and log). One
    interpreter, started ahead with them, serves any run of the same files."""
    return list(dict.fromkeys([*collect, *(file_of(i) for i in ids)]))


def next_alone(after: str, current: str, *, strict: bool) -> Request:
    """The alone-run of `after`, started while `current`'s goes on: where both are of one
    file, one of its interpreters still waits for `current`, so one more."""
    copies = 2 if file_of(after) == file_of(current) else 1
    return Request(ids=(after,), strict=strict, copies=copies)


def side_requests(
    sides: Iterable[tuple[Sequence[str], str | None]], *, copies: int = 1
) -> list[Request]:
    """The sides of a later run together (a pair's: each side's tests and the GPUs it sees),
    `copies` of each (a pair's run and its confirmation)."""
    return [Request(ids=tuple(ids), side=True, side_gpu=gpu, copies=copies) for ids, gpu in sides]


def requests_each(runs: Iterable[tuple[Sequence[str], int]]) -> list[Request]:
    """The strict runs of `runs` (ids, copies) as requests: one interpreter serves any run
    of its files, so the copies of runs of the same files add up (two searches whose runs
    share a file each get theirs; else the second one's starts cold)."""
    return added_up(*([Request(ids=tuple(ids), strict=True, copies=n)] for ids, n in runs))


def added_up(*groups: Sequence[Request]) -> list[Request]:
    """The requests of `groups`, each group's copies counted on top of the earlier groups'
    of the same files and environment: each group counts the interpreters its own runs
    need (`Request.copies`), and the runner keeps that many waiting, so two groups whose
    runs share an interpreter's files would otherwise share one (a victim's alone-runs and
    its hinted search's runs of its own file alone: the later started cold)."""
    carried: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], int] = {}
    out: list[Request] = []
    for group in groups:
        most: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], int] = {}
        for request in group:
            key = (tuple(run_files(request.ids, request.collect)), request.env)
            copies = request.copies + carried.get(key, 0)
            most[key] = max(most.get(key, 0), copies)
            out.append(dataclasses.replace(request, copies=copies))
        carried.update(most)
    return out
