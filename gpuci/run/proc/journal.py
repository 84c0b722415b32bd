"""The journal: the events a child interpreter's plugin appends, read and folded.

The child writes one JSON line per event (see `gpuci.pytest_plugin`) and flushes at once;
the parent reads complete lines while the child runs, so it knows which test was running
when the child died or hung.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuci.model import Outcome, TestResult
from gpuci.run.proc.discover import file_of

COLLECTION_ERROR = "collection error"  # the message's start for a file pytest could not collect
COLLECTED = "collected"  # the message of a file that collected where it was asked for
ERROR = "error"  # pytest's word for a failure outside a test's call: setup, teardown, collection


class JournalReader:
    """Reads the events a child appends, complete lines only, from where it left off."""

    def __init__(self, path: Path, offset: int | None = None) -> None:
        """Read `path` from `offset` (default: its end now, so an earlier attempt's events
        are not read again)."""
        self._path = path
        if offset is None:
            offset = path.stat().st_size if path.exists() else 0
        self._offset = offset
        self._partial = b""

    def read(self) -> list[dict[str, Any]]:
        """The events written since the last call."""
        try:
            with self._path.open("rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        events = []
        for line in lines:
            with contextlib.suppress(ValueError):  # a line torn by a kill is not an event
                events.append(json.loads(line))
        return events


@dataclass(slots=True)
class JournalState:
    """The journal of one interpreter, folded: what was collected, started, finished."""

    collected: list[str] | None = None
    started: str | None = None
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)  # files that skipped themselves
    ended: dict[str, Any] | None = None

    @classmethod
    def from_events(cls, events: list[dict[str, Any]]) -> JournalState:
        """Fold the events in the order they were written."""
        state = cls()
        for event in events:
            kind, test_id = event.get("e"), str(event.get("id"))
            if kind == "collected":
                state.collected = [str(i) for i in event.get("ids", [])]
            elif kind == "collect-error":
                state.errors[test_id] = str(event.get("message", ""))
            elif kind == "collect-skip":
                state.skipped[test_id] = str(event.get("message", ""))
            elif kind == "start":
                state.started = test_id
            elif kind == "finish":
                state.finished[test_id] = event
                state.started = None
            elif kind == "end":
                state.ended = event
        return state

    def results(self) -> list[TestResult]:
        """Collection errors, files that skipped themselves and finished tests; the
        unfinished one is the caller's call."""
        errors = [collection_error(i, message) for i, message in self.errors.items()]
        errors += [skipped_file(i, message) for i, message in self.skipped.items()]
        return errors + [
            TestResult(
                id=i,
                file=file_of(i),
                outcome=Outcome(e.get("outcome", "failed")),
                duration=float(e.get("duration", 0.0)),
                message=str(e.get("message", "")),
                where=str(e.get("where", "")),
                counted=tuple(str(w) for w in e.get("pytest", ())),
            )
            for i, e in self.finished.items()
        ]

    def remaining(self) -> list[str]:
        """Collected tests that neither finished nor were running, in order."""
        done = set(self.finished) | {self.started}
        return [i for i in self.collected or () if i not in done]


def collection_error(node_id: str, message: str) -> TestResult:
    """A file or directory pytest could not import or collect, as a failed pseudo test:
    pytest's summary counts it as an error."""
    return TestResult(
        id=node_id,
        file=file_of(node_id),
        outcome=Outcome.FAILED,
        message=f"{COLLECTION_ERROR}: {message}",
        counted=(ERROR,),
    )


def uncollectable(test: TestResult) -> bool:
    """Whether it stands for a file (or folder) pytest could not collect in its run."""
    return "::" not in test.id and test.message.startswith(COLLECTION_ERROR)


def collected_file(node_id: str) -> TestResult:
    """A file asked for by its id (it could not be collected in another interpreter) that
    pytest imported and collected here: passed, as its collection."""
    return TestResult(id=node_id, file=file_of(node_id), outcome=Outcome.PASSED, message=COLLECTED)


def skipped_file(node_id: str, reason: str) -> TestResult:
    """A file (or folder) that skipped itself as pytest imported it: one skip in pytest's
    summary, with its reason, and no test of its own."""
    return TestResult(id=node_id, file=file_of(node_id), outcome=Outcome.SKIPPED, message=reason)


def not_run(test_id: str, message: str) -> TestResult:
    return TestResult(id=test_id, file=file_of(test_id), outcome=Outcome.NOT_RUN, message=message)


def startup_of(events: list[dict[str, Any]], started_at: float) -> float | None:
    """Seconds from the interpreter's start (wall clock) to its first stamped journal event:
    interpreter start-up, imports and collection; None where it never got that far."""
    stamp = next((e["t"] for e in events if isinstance(e.get("t"), int | float)), None)
    return None if stamp is None else max(0.0, float(stamp) - started_at)
