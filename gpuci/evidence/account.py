"""The evidence's account: the runs counted, per kind of evidence (phase) their runs,
interpreter-seconds and the most at once, and the timeline of every run, counted or lost
(`evidence/runs.jsonl`). Kept by the prober, written by the engine."""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

RUNS_FILE = "runs.jsonl"  # the evidence's timeline: one line per interpreter, as they ended


@dataclass(frozen=True, slots=True, kw_only=True)
class Ended:
    """What the account of one run holds: its label, phase, start and end (seconds since
    the prober started), how many ran at once as it started, and the GPUs it saw."""

    label: str
    phase: str
    start: float
    end: float
    at_once: int
    gpu: str | None


@dataclass(slots=True)
class Phase:
    """The runs and interpreter-seconds one kind of evidence took, and the most at once."""

    runs: int = 0
    seconds: float = 0.0
    at_once: int = 0


@dataclass(slots=True)
class Account:
    """The runs counted, their phases, and the timeline (runs' threads share it)."""

    runs: int = 0
    phases: dict[str, Phase] = field(default_factory=dict)
    timeline: list[dict[str, object]] = field(default_factory=list)  # evidence/runs.jsonl
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, ended: Ended) -> None:
        """One run counted: the timeline, its phase's runs and interpreter-seconds."""
        with self._lock:
            self.runs += 1
            self.timeline.append(dataclasses.asdict(ended))
            phase = self.phases.setdefault(ended.phase, Phase())
            phase.runs += 1
            phase.seconds += ended.end - ended.start
            phase.at_once = max(phase.at_once, ended.at_once)

    def lose(self, entry: Mapping[str, object], how: str) -> None:
        """A run whose answer was not needed (`how`: killed, unused): on the timeline only."""
        with self._lock:
            self.timeline.append({**entry, "lost": how})

    def write_timeline(self, path: Path) -> None:
        """`runs.jsonl`: each run's label, phase, start and end (seconds since the prober
        started), how many ran at once as it started, and the GPUs it saw."""
        with self._lock:
            lines = "".join(json.dumps(run, ensure_ascii=False) + "\n" for run in self.timeline)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(lines, encoding="utf-8")

    def phase_json(self) -> dict[str, dict[str, float]]:
        """evidence.json's `phases`: runs, interpreter-seconds and the most interpreters
        running at once as one of its runs started, per kind of evidence."""
        with self._lock:
            return {
                name: {"runs": p.runs, "seconds": round(p.seconds, 3), "at_once": p.at_once}
                for name, p in self.phases.items()
            }
