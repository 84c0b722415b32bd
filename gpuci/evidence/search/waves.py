"""Waves: the levels of a search speculated, so that interpreters started together
decide several levels at once.

A level runs the first half of its candidates before the victim: where the victim shows
the finding that half is kept, otherwise the second half is (inferred, not run). One run a
level, ceil(log2 n) in all, as detect-test-pollution halves. The levels form a binary
tree of runs, one per node; a wave starts up to `width` of them at once, breadth first
(fresh interpreters side by side: an expensive start-up is paid once per wave, not once
per level). As their answers come in the path through the tree is followed; a run off it
(a loser) is killed where it still runs and never counted. Where a level would keep a
second half of one test, the run of that test is a node of the wave too, so that the
answer comes out of the wave run once (its first confirmation).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from gpuci.evidence.probe import Prober, ProbeRun
from gpuci.model import Probe

# one step of a search: [part..., victim] run, not yet recorded (a speculated one with its
# cancel), and whether its outcome shows the finding
Step = Callable[[Sequence[str], threading.Event | None], tuple[Probe, ProbeRun]]
Shows = Callable[[Probe], bool]


@dataclass(frozen=True, slots=True)
class Node:
    """One level of the halving: the candidates [lo, hi), run as their first half (a node
    of one candidate, a second half inferred at the level above, runs that one)."""

    lo: int
    hi: int

    @property
    def mid(self) -> int:
        """Where the second half begins (the first is the longer, as the parts are cut)."""
        return self.lo + (self.hi - self.lo + 1) // 2

    @property
    def runs(self) -> tuple[int, int]:
        """The candidates its run puts before the victim."""
        return (self.lo, self.hi) if self.hi - self.lo == 1 else (self.lo, self.mid)

    def children(self) -> list[Node]:
        """The next level's nodes: each half that still needs a run."""
        if self.hi - self.lo < 2:
            return []
        first = [Node(self.lo, self.mid)] if self.mid - self.lo > 1 else []
        return [*first, Node(self.mid, self.hi)]

    def holds(self, other: Node) -> bool:
        """Whether `other` is this node or below it."""
        return self.lo <= other.lo and other.hi <= self.hi


@dataclass(slots=True)
class Wave:
    """What one wave decided: the candidates left, whether a run showed the finding after
    exactly them, whether the run of an inferred single candidate did not (the inference
    failed), the runs on the path in order, and the losers."""

    current: list[str]
    confirmed: bool
    refuted: bool = False
    used: list[tuple[Probe, ProbeRun]] = field(default_factory=list)
    losers: int = 0
    killed: int = 0


def plan_wave(n: int, width: int, *, singles: bool = True) -> list[Node]:
    """The nodes of one wave over n candidates: breadth first from the root, `width` at most;
    without `singles`, no run of an inferred single candidate (a search over files goes on
    inside the one file kept: its tests' halving runs what that run would)."""
    nodes: list[Node] = []
    level = [Node(0, n)] if n > 1 else []
    while level and len(nodes) < width:
        nodes += level[: width - len(nodes)]
        level = [c for node in level for c in node.children() if singles or c.hi - c.lo > 1]
    return nodes


def _follow(
    nodes: Sequence[Node], answers: dict[Node, bool], current: list[str]
) -> tuple[list[Node], Node | None, Wave]:
    """The path through the answered nodes from the root; the node it waits on (None: the
    wave has decided); what it decided so far."""
    planned = set(nodes)
    node, path = nodes[0], list[Node]()
    lo, hi, confirmed, refuted = 0, len(current), False, False
    while node in planned:
        if node not in answers:
            return path, node, Wave(current[lo:hi], confirmed)
        path.append(node)
        shows = answers[node]
        if node.hi - node.lo == 1:  # the run of an inferred single candidate
            confirmed, refuted = shows, not shows
            break
        lo, hi = (node.lo, node.mid) if shows else (node.mid, node.hi)
        confirmed = shows  # the run showed it after exactly the half kept
        node = Node(lo, hi)
    return path, None, Wave(current[lo:hi], confirmed, refuted)


def run_wave(
    prober: Prober,
    current: list[str],
    width: int,
    step: Step,
    shows: Shows,
    *,
    singles: bool = True,
) -> Wave:
    """One wave over `current`: its nodes' runs at once (one, counted as it ends, where
    `width` is 1), the losers killed as soon as an answer puts them off the path; without
    `singles`, none runs an inferred single candidate (`plan_wave`)."""
    nodes = plan_wave(len(current), width, singles=singles)

    def part(node: Node) -> list[str]:
        return current[node.runs[0] : node.runs[1]]

    if len(nodes) == 1:
        only = step(part(nodes[0]), None)
        _, _, wave = _follow(nodes, {nodes[0]: shows(only[0])}, current)
        wave.used = [only]
        return wave
    cancels = {node: threading.Event() for node in nodes}
    answers: dict[Node, bool] = {}
    ran: dict[Node, tuple[Probe, ProbeRun]] = {}
    with ThreadPoolExecutor(max_workers=len(nodes), thread_name_prefix="gpuci-wave") as pool:
        futures: dict[Future[tuple[Probe, ProbeRun]], Node] = {
            pool.submit(step, part(node), cancels[node]): node for node in nodes
        }
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                node = futures[future]
                ran[node] = future.result()
                answers[node] = shows(ran[node][0])
            path, waiting, _ = _follow(nodes, answers, current)
            for node in nodes:  # off the path, and not below the node it waits on
                if node not in path and (waiting is None or not waiting.holds(node)):
                    cancels[node].set()
    path, _, wave = _follow(nodes, answers, current)
    for node in nodes:
        probe_run = ran[node][1]
        prober.settle(probe_run, used=node in path)
        if node not in path and probe_run.pending is not None:
            wave.losers += 1
            wave.killed += probe_run.killed
    wave.used = [ran[node] for node in path]
    return wave


def run_wave_with_whole(
    prober: Prober,
    current: list[str],
    width: int,
    step: Step,
    shows: Shows,
    *,
    singles: bool = True,
) -> tuple[Wave, tuple[Probe, ProbeRun] | None]:
    """A wave with every candidate's replay beside it, in one of its places. Where a run of
    the wave showed the finding, the replay is killed (a loser of the wave, never counted);
    otherwise the wave's answer waits for it, and it is returned: where it does not show
    the finding either, the halving has nothing to find."""
    cancel = threading.Event()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="gpuci-whole") as pool:
        replay = pool.submit(step, current, cancel)
        wave = run_wave(prober, current, width - 1, step, shows, singles=singles)
        reproduced = any(shows(probe) for probe, _ in wave.used)
        if reproduced:
            cancel.set()
        probe, ran = replay.result()
    prober.settle(ran, used=not reproduced)
    if not reproduced:
        return wave, (probe, ran)
    wave.losers += 1
    wave.killed += ran.killed
    return wave, None
