"""Probe: the evidence's one runner; every run a fresh interpreter with the check's environment.

Every evidence run (alone-runs, culprit searches, poisoned runs, compute-sanitizer) goes
through the check's one `Prober`, built once from its results (`start_prober`), so they
share one environment (the GPUs of the check's serial interpreters, unless a concurrency
pair replays the parallel slots' own), one budget, the interpreters started ahead of their
turn, and one account of what the runs left behind; each run hands back what it did
(`ProbeRun`). Runs share the check's slots as `gpuci.evidence.admission` admits them;
`run_together` replays interpreters that ran side by side. The kinds of evidence
(`gpuci.evidence.kinds`) ask it for runs; none starts an interpreter itself.
"""

from __future__ import annotations

import dataclasses
import os
import tempfile
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from gpuci.evidence.account import Account, Ended
from gpuci.evidence.admission import EXPENSIVE_START_S, Admission, evidence_slots
from gpuci.evidence.ahead import AHEAD_START_S, Ahead, ahead_limit, evidence_launch
from gpuci.evidence.reproduce import serial_gpu
from gpuci.evidence.requests import Request, run_files
from gpuci.model import ModeRun, Outcome, TestResult
from gpuci.processes import Leftover, Stranger
from gpuci.run.disk.side_outputs import seed_args
from gpuci.run.proc.attempts import UNSTABLE_ID
from gpuci.run.proc.discover import POISON_ENV, child_env
from gpuci.run.proc.endings import NO_START
from gpuci.run.proc.gpumem import narrow_files, screen_peaks
from gpuci.run.proc.held import Held, end_held
from gpuci.run.proc.interpreter import Interpreters
from gpuci.run.proc.launch import Attempt
from gpuci.run.proc.supervisor import Supervisor
from gpuci.run.sched.views import visible_gpus


@dataclass(frozen=True, slots=True, kw_only=True)
class ProbeRun:
    """What one evidence interpreter did: each test's outcome, and where its output is."""

    outcomes: dict[str, Outcome]
    log: Path  # the interpreter's capped log (shared by the runs of one file)
    log_from: int  # where this run's output begins in it
    results: dict[str, TestResult] = field(default_factory=dict)  # messages, frames
    beside: bool = False  # another evidence run overlapped it (its failure is not strict)
    killed: bool = False  # a speculated run ended once its answer was no longer needed
    pending: Ended | None = None  # a speculated run's account, until `Prober.settle`

    def outcome(self, test_id: str) -> Outcome:
        """The test's outcome; `not-run` where the interpreter never got to it."""
        return self.outcomes.get(test_id, Outcome.NOT_RUN)

    def output(self) -> str:
        """This run's output (the capped log from where it began)."""
        try:
            with self.log.open("rb") as f:
                f.seek(self.log_from)
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""


@dataclass(frozen=True, slots=True)
class Handed:
    """An interpreter the runner started for a run a search declared as it went (`Prober.hand`),
    handed to the search: its run takes it (`Prober.run(handed=)`), or the search lets it go
    (`Prober.let_go`)."""

    held: Held


@dataclass(slots=True)
class Prober:
    """Starts evidence interpreters, up to the check's slots at once, within one budget."""

    interpreters: Interpreters
    rootdir: Path
    gpu: str | None  # what every serial evidence run sees
    budget_s: float | None
    poisoned: bool = False  # every run fills fresh device allocations (a --poison check)
    # what a run beside others sees, by the GPU it starts on first (`Admission.devices`):
    # every GPU, rotated to start there; the first is the serial view
    views: tuple[str | None, ...] = (None,)
    admission: Admission = field(default_factory=Admission)
    expensive: bool = False  # a start-up takes EXPENSIVE_START_S or more: worth holding ahead
    ahead: Ahead | None = None  # interpreters started before their turn (`gpuci.evidence.ahead`)
    zero: float = field(default_factory=time.monotonic)
    account: Account = field(default_factory=Account)  # runs counted, phases, the timeline
    leftovers: dict[str, list[Leftover]] = field(default_factory=dict)  # by file
    strangers: dict[str, list[Stranger]] = field(default_factory=dict)  # by file
    notes: list[str] = field(default_factory=list)  # what the report must say of the runs
    unstable: set[str] = field(default_factory=set)  # tests whose id no run collected again
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _lanes: dict[str, set[int]] = field(default_factory=dict)  # by file: runs in flight

    @property
    def hides_start_ups(self) -> bool:
        """Whether a start-up is worth hiding: likely runs start ahead (`prepare`)."""
        return self.ahead is not None and self.ahead.on

    def close(self) -> None:
        """End the interpreters started ahead and never taken; remove scratch files; collect
        adopted zombies."""
        if self.ahead is not None:
            self.ahead.close()
        self.interpreters.close()

    def lane_views(self) -> dict[str, str]:
        """By victim file: the CUDA_VISIBLE_DEVICES its strict runs saw, where they kept a
        GPU other than the serial view's first (the commands printed for it carry it)."""
        return {
            key: view
            for key, device in self.admission.lanes.items()
            if (view := self.views[device]) is not None and view != self.gpu
        }

    def concurrency(self) -> dict[str, int]:
        """evidence.json's `concurrency`: the slots, the runs beside others, started ahead."""
        ahead = self.ahead.to_json() if self.ahead is not None else {}
        return {**self.admission.to_json(), **ahead}

    def spent(self) -> float:
        """Seconds since the prober started."""
        return time.monotonic() - self.zero

    def left(self) -> float | None:
        """Seconds of budget left (None: no limit)."""
        return None if self.budget_s is None else max(0.0, self.budget_s - self.spent())

    def exhausted(self) -> bool:
        """Whether the budget is spent."""
        left = self.left()
        return left is not None and left <= 0

    def stopping(self) -> bool:
        """Whether gpuci was asked to stop (Ctrl-C, SIGTERM)."""
        return self.interpreters.supervisor.stopping.is_set()

    def run(
        self,
        ids: Sequence[str],
        *,
        phase: str,
        label: str,
        env: Mapping[str, str] | None = None,
        wrapper: tuple[str, ...] = (),
        timeout: float | None = None,
        strict: bool = False,
        collect: Sequence[str] = (),
        cancel: threading.Event | None = None,
        handed: Handed | None = None,
    ) -> ProbeRun:
        """Run `ids` in one fresh interpreter with the serial GPUs, in the order given. A
        `strict` run has nothing beside it; any other may share the GPUs (its `beside` says
        whether it did). With `cancel` the run is speculated: killed once `cancel` is set,
        and counted only once `settle` says its answer was used. `handed`: its interpreter,
        started for it as its search declared it (`hand`).

        The order must be collection order within each file: pytest is handed the files in
        the order they first appear, and runs only `ids` of them (GPUCI_ONLY); the files in
        `collect` come first, collected (imported) with none of their tests run.
        """
        files = run_files(ids, collect)
        need = self.admission.need(files)
        held = handed.held if handed is not None else None
        # its start-up hidden where it waits for its turn (or its caller offered it one)
        ahead = None
        if self.ahead is not None and held is None and not wrapper:
            ahead = self.ahead.for_run(ids, files, strict=strict, env=env, need_mib=need)
        # a held interpreter started seeing the serial GPUs: it keeps them all
        admitted = self.admission.admitted(
            strict=strict,
            need_mib=need,
            files=files if held is None else (),
            key=files[-1] if held is None else "",
            prefer=self.views.index(ahead[1]) if ahead and ahead[1] in self.views else None,
        )
        with admitted as flight:
            gpu = self.gpu if held is not None else self.views[flight.device]
            if self.ahead is not None and ahead is not None:  # unless a loser, or memory
                used = ahead[1] == gpu and not (cancel is not None and cancel.is_set())
                self.ahead.released(ahead[0], used=used)  # chose another GPU than its view
                held = ahead[0] if used else None
            if cancel is not None and cancel.is_set():  # a loser before its turn: not started
                return ProbeRun(outcomes={}, log=self.interpreters.out / "logs", log_from=0)
            ran = self._run(
                ids,
                phase=phase,
                label=label,
                gpu=gpu,
                env=env,
                wrapper=wrapper,
                timeout=timeout,
                collect=collect,
                cancel=cancel,
                held=held,
            )
        return dataclasses.replace(ran, beside=flight.beside)

    def _run(
        self,
        ids: Sequence[str],
        *,
        phase: str,
        label: str,
        gpu: str | None,
        env: Mapping[str, str] | None = None,
        wrapper: tuple[str, ...] = (),
        timeout: float | None = None,
        collect: Sequence[str] = (),
        cancel: threading.Event | None = None,
        held: Held | None = None,
        rendezvous: str | None = None,
    ) -> ProbeRun:
        files = run_files(ids, collect)
        key = files[-1]  # the victim's file: its journal and log
        with self._lock:  # runs of one file at once each get a journal and log of their own
            lanes = self._lanes.setdefault(key, set())
            lane = next(n for n in range(len(lanes) + 1) if n not in lanes)
            lanes.add(lane)
            at_once = self.admission.running()
        try:
            launch = dataclasses.replace(
                evidence_launch(self.rootdir, ids, files, gpu=gpu, label=label, env=env),
                wrapper=wrapper,
                timeout=timeout,
                lane=lane,
                rendezvous=rendezvous,
            )
            log = self.interpreters.out / "logs" / f"{launch.stem}.log"
            started = time.monotonic()
            log_from = log.stat().st_size if log.exists() else 0
            attempt = self.interpreters.run(launch, cancel=cancel, held=held)
            cancelled = cancel is not None and cancel.is_set()
            if _never_started(attempt) and not cancelled and not launch.wrapper:
                # the time limit cut its start-up (a loaded machine): it asked nothing, and
                # a test it never ran is neither way; once more, as it was. Not a run under
                # a tool (compute-sanitizer): its limit is the tool's, and a tool that hung
                # hangs again
                if cancel is None:
                    self.account.count(self._ended(label, phase, started, at_once, gpu))
                started = time.monotonic()
                attempt = self.interpreters.run(launch, cancel=cancel)
        finally:
            with self._lock:
                lanes.discard(lane)
        self.unstable.update(r.id for r in attempt.results if UNSTABLE_ID in r.message)
        if len(files) == 1:  # its peak is its file's alone
            self.admission.learn(key, attempt.interpreter.gpu_peak_mib)
        ended = self._ended(label, phase, started, at_once, gpu)
        with self._lock:  # what it left behind is real, whether or not its answer is used
            if attempt.leftovers:
                self.leftovers.setdefault(launch.key, []).extend(attempt.leftovers)
            if attempt.strangers:
                self.strangers.setdefault(launch.key, []).extend(attempt.strangers)
        if cancel is None:
            self.account.count(ended)
        return ProbeRun(
            outcomes={r.id: r.outcome for r in attempt.results},
            log=log,
            log_from=log_from,
            results={r.id: r for r in attempt.results},
            killed=cancel is not None and cancel.is_set(),
            pending=None if cancel is None else ended,
        )

    def _ended(
        self, label: str, phase: str, started: float, at_once: int, gpu: str | None
    ) -> Ended:
        return Ended(
            label=label,
            phase=phase,
            start=round(started - self.zero, 3),
            end=round(time.monotonic() - self.zero, 3),
            at_once=at_once,
            gpu=gpu,
        )

    def hand(self, request: Request, *, label: str) -> Handed:
        """The interpreter of a run a search declares as it goes (`request`: its next
        level's, known once the current one answered), handed to it, held after its
        collection until that run takes it (`run(handed=)`) or `let_go` ends it: one of its
        files started ahead for a run the kinds declared (a hinted search's confirmation),
        else one started now. It sees the serial GPUs, whatever its run's admission."""
        files = run_files(request.ids, request.collect)
        if self.ahead is not None and not request.env:
            pooled = self.ahead.take(files, self.gpu)
            if pooled is not None:
                return Handed(pooled)
        launch = evidence_launch(
            self.rootdir, request.ids, files, gpu=self.gpu, label=label, env=dict(request.env)
        )
        return Handed(self.interpreters.hold(launch))

    def prepare(
        self,
        ids: Sequence[str],
        *,
        strict: bool = False,
        collect: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        copies: int = 1,
        certain: bool = False,
    ) -> None:
        """Start ahead the interpreter of a later `run` with these arguments (the next of a
        caller's runs one after another; `copies`: as many, for as many runs): its start-up
        is paid while the runs before it go on (`gpuci.evidence.ahead`; `certain`: a run
        that comes whatever the others find, never ended to make room)."""
        if self.ahead is not None and not self.stopping() and not self.exhausted():
            files = run_files(ids, collect)
            self.ahead.offer(ids, files, strict=strict, env=env, copies=copies, certain=certain)

    def start_ahead(self, requests: Iterable[Request]) -> None:
        """Start the interpreters of the runs the kinds declared (`Request`), each where a
        start-up is worth hiding, admitted by `gpuci.evidence.ahead` within the slots and
        charged to the budget when its run takes it; one already waiting counts."""
        for request in requests:
            if request.side:
                self.prepare_together([(request.ids, request.side_gpu)], copies=request.copies)
            else:
                self.prepare(
                    request.ids,
                    strict=request.strict,
                    collect=request.collect,
                    env=dict(request.env) or None,
                    copies=request.copies,
                    certain=request.certain,
                )

    def withdraw(
        self, ids: Sequence[str], *, strict: bool = False, collect: Sequence[str] = ()
    ) -> None:
        """One interpreter `prepare`d for a run that will not come after all, ended."""
        if self.ahead is not None:
            self.ahead.withdraw(ids, run_files(ids, collect), strict=strict, env=None)

    def let_go(self, handed: Handed, *, phase: str, label: str) -> None:
        """End an interpreter handed to a search and not taken: a loser, killed, never
        counted."""
        held = handed.held
        self.interpreters.supervisor.discard(held.proc)
        end_held(held)
        self.admission.lost(killed=True)
        start = round(held.started - self.zero, 3)
        end = round(time.monotonic() - self.zero, 3)
        entry = {"label": label, "phase": phase, "start": start, "end": end, "at_once": 0}
        self.account.lose(entry, "killed")

    def settle(self, ran: ProbeRun, *, used: bool) -> None:
        """A speculated run's account: a run of its phase where its answer was `used`;
        otherwise a loser (`runs.jsonl` says so), which no run count includes."""
        if ran.pending is None:
            return
        if used:
            self.account.count(ran.pending)
            return
        self.admission.lost(killed=ran.killed)
        self.account.lose(dataclasses.asdict(ran.pending), "killed" if ran.killed else "unused")

    def run_together(
        self,
        groups: Sequence[tuple[Sequence[str], str | None]],
        *,
        phase: str,
        label: str,
    ) -> tuple[list[ProbeRun], int]:
        """Run each group of ids in its own interpreter, all at once, each with its GPUs,
        their first tests held at a rendezvous until every interpreter has reached its own
        (so that they overlap, whatever each start-up costs), with nothing else beside
        them. The runs, and how many interpreters reached the rendezvous (all of them:
        their first tests overlapped)."""
        with (
            tempfile.TemporaryDirectory(prefix="gpuci-pair-") as scratch,
            self.admission.admitted(strict=True, size=len(groups)),
        ):
            folder = Path(scratch) / "met"
            meet = f"{folder}:{len(groups)}"
            # each side's interpreter where one waits started ahead (`prepare_together`):
            # the rendezvous is handed over with its ids
            held = [self._take_ahead(ids, gpu) for ids, gpu in groups]
            with ThreadPoolExecutor(max_workers=max(1, len(groups))) as pool:
                futures = [
                    pool.submit(
                        self._run, ids, phase=phase, label=label, gpu=gpu, rendezvous=meet, held=h
                    )
                    for (ids, gpu), h in zip(groups, held, strict=True)
                ]
                runs = [f.result() for f in futures]
            met = sum(1 for _ in folder.iterdir()) if folder.is_dir() else 0
        return runs, met

    def prepare_together(
        self, groups: Sequence[tuple[Sequence[str], str | None]], *, copies: int = 1
    ) -> None:
        """Start ahead the interpreters of a later `run_together` of `groups` (`copies` of
        each side: a pair's run and its confirmation)."""
        if self.ahead is not None and not self.stopping() and not self.exhausted():
            for ids, gpu in groups:
                self.ahead.offer_seeing(ids, run_files(ids, ()), gpu, copies=copies)

    def _take_ahead(self, ids: Sequence[str], gpu: str | None) -> Held | None:
        """An interpreter started ahead for `ids` seeing `gpu`, taken (None where none)."""
        if self.ahead is None:
            return None
        return self.ahead.take(run_files(ids, ()), gpu)


def start_prober(
    out: Path,
    run: ModeRun,
    *,
    python: str,
    timeout: float | None,
    budget_s: float | None,
    supervisor: Supervisor,
    mode_name: str,
    slots: int = 1,
    start_s: float = 0.0,
) -> Prober:
    """A prober writing journals and logs under `out`, with `run`'s pytest arguments,
    running up to `slots` interpreters at once (each once its GPU has room for its
    file's peak in the check's screens, `out`'s sibling mode directories); where one
    interpreter's start-up takes `start_s` >= EXPENSIVE_START_S, up to the cores."""
    environ = child_env(os.environ)
    environ["GPUCI_MODE"] = mode_name
    if run.poison:  # one environment: the evidence of a poisoned check is poisoned too
        environ[POISON_ENV] = "1"
    interpreters = Interpreters(
        out=out,
        python=python,
        # the plain run's pytest-randomly seed too, as every screen's interpreter had it
        pytest_args=(*run.pytest_args, *seed_args(run.randomly_seed)),
        timeout=timeout,
        environ=environ,
        clock_zero=time.monotonic(),
        supervisor=supervisor,
    )
    total = str(run.environment.get("gpu_memory_mib", ""))
    admission = Admission(
        slots=evidence_slots(slots, start_s, os.cpu_count()),
        capacity_mib=int(total) if total.isdigit() else None,
        devices=max(1, len(run.gpus)),
        peaks=screen_peaks(out.parent),
        # held interpreters (an expensive start-up) see the serial GPUs: no lanes
        narrow=narrow_files(out.parent) if start_s < EXPENSIVE_START_S else set(),
    )
    views = visible_gpus(run.gpus, max(1, len(run.gpus)))
    rootdir = Path(run.rootdir)
    return Prober(
        interpreters,
        rootdir,
        serial_gpu(run),
        budget_s,
        run.poison,
        views=views,
        admission=admission,
        expensive=start_s >= EXPENSIVE_START_S,
        ahead=Ahead(
            interpreters,
            admission,
            views,
            rootdir,
            limit=ahead_limit(admission.slots, os.cpu_count()),
            on=start_s >= AHEAD_START_S,
        ),
    )


def withdraw_each(prober: Prober, runs: Iterable[tuple[Sequence[str], int]]) -> None:
    """`requests_each`' interpreters of `runs` ended: those runs will not come after all."""
    for ids, copies in runs:
        for _ in range(copies):
            prober.withdraw(ids, strict=True)


def _never_started(attempt: Attempt) -> bool:
    """Whether the time limit ended the interpreter before its first test."""
    return any(
        r.outcome is Outcome.TIMED_OUT and r.message.startswith(NO_START) for r in attempt.results
    ) and all(
        r.outcome is Outcome.NOT_RUN or r.message.startswith(NO_START) for r in attempt.results
    )
