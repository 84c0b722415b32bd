"""The durations file: what one check measured per test file, for a later check's order.

`gpuci check` (and `gpuci explain`) write `OUT/durations.json` once the modes have run, a
failing check too. A later check, on another machine and into another OUT, takes it with
`--durations` to start its longest files first and to admit them by GPU memory; `gpuci
run --durations` balances its shards by it. Test files are named relative to the rootdir,
so the file travels (a CI cache carries it from one pipeline to the next).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuci.formats import read_json, read_mode_run, write_json_atomic
from gpuci.model import InputError, Mode

SCHEMA = "gpuci.durations/1"
DURATIONS_FILE = "durations.json"
# the modes whose files are interpreters of their own, timed with their start-up; where a
# file has no time of the mode being planned, the others stand in, in this order
TIMED = (Mode.PARALLEL, Mode.ISOLATED, Mode.THREADS)
PEAK = "gpu_peak_mib"


@dataclass(frozen=True, slots=True, kw_only=True)
class Durations:
    """Per mode, each test file's wall time in seconds; each file's peak device memory."""

    seconds: Mapping[Mode, Mapping[str, float]]
    peaks: Mapping[str, int]
    run_id: str = ""  # the check that measured them

    def of(self, mode: Mode) -> dict[str, float]:
        """The seconds to order `mode`'s files by: its own, else parallel's, else isolated's."""
        merged: dict[str, float] = {}
        # lowest preference first: each later one overwrites
        for timed in (*reversed([m for m in TIMED if m is not mode]), mode):
            merged.update(self.seconds.get(timed, {}))
        return merged


def collect_durations(out: Path, earlier_suite: Mapping[str, float] | None = None) -> Durations:
    """What the modes in OUT measured: run files' times (not inferred ones), the suite
    interpreter's tests' seconds per file (held to `earlier_suite`: `suite_pace`), and
    peaks."""
    seconds: dict[Mode, dict[str, float]] = {}
    peaks: dict[str, int] = {}
    run_id = ""
    for mode in TIMED:
        directory = out / mode.value
        for place in [*directory.glob("run.json"), *sorted(directory.glob("shard-*/run.json"))]:
            run = read_mode_run(place)
            run_id = run_id or run.run_id
            for file_run in run.files:
                if file_run.inferred:
                    continue  # not run: its time says nothing
                seconds.setdefault(mode, {})[file_run.file] = round(file_run.duration, 3)
                seen = [i.gpu_peak_mib for i in file_run.interpreters if i.gpu_peak_mib]
                if seen:
                    peaks[file_run.file] = max(peaks.get(file_run.file, 0), *seen)
    # the suite interpreter's own pace, its tests' seconds per file (gpuci.run.sched.pace):
    # what a later check's suite interpreter is told against
    for place in [*(out / Mode.SUITE.value).glob("run.json")]:
        run = read_mode_run(place)
        run_id = run_id or run.run_id
        suite = seconds.setdefault(Mode.SUITE, {})
        for test in run.tests:
            if not test.inferred:
                suite[test.file] = suite.get(test.file, 0.0) + test.duration
        seconds[Mode.SUITE] = suite_pace(suite, earlier_suite or {})
    return Durations(seconds=seconds, peaks=peaks, run_id=run_id)


def suite_pace(now: Mapping[str, float], earlier: Mapping[str, float]) -> dict[str, float]:
    """The suite interpreter's pace a later check is held to, per file: the fastest its
    tests were seen to run, rising halfway towards a slower time each check. Every check's
    suite interpreter runs beside screens, so this check's time alone would hold the next
    to a pace already slowed; a suite that really got slower is not held to its old pace
    for long."""
    return {
        file: round(min(seconds, (seconds + earlier[file]) / 2) if file in earlier else seconds, 3)
        for file, seconds in now.items()
    }


def write_durations(out: Path, earlier_suite: Mapping[str, float] | None = None) -> Path | None:
    """Write OUT/durations.json from OUT's modes (the suite's pace held to `earlier_suite`);
    its path, or None where no mode timed a file."""
    durations = collect_durations(out, earlier_suite)
    files: dict[str, dict[str, float | int]] = {}
    for mode, times in durations.seconds.items():
        for name, seconds in times.items():
            files.setdefault(name, {})[mode.value] = seconds
    for name, peak in durations.peaks.items():
        files.setdefault(name, {})[PEAK] = peak
    if not files:
        return None
    path = out / DURATIONS_FILE
    write_json_atomic(
        path, {"schema": SCHEMA, "run_id": durations.run_id, "files": dict(sorted(files.items()))}
    )
    return path


def is_durations_file(path: Path) -> bool:
    """Whether `path` is a JSON file of this schema (else a run.json or a results directory)."""
    if not path.is_file():
        return False
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False  # the run.json reader names what is wrong with it
    return isinstance(data, dict) and data.get("schema") == SCHEMA


def read_durations_file(path: Path) -> Durations:
    """A durations file read back; InputError naming the file and the entry that is wrong."""
    data = read_json(path, SCHEMA)
    files = data.get("files")
    if not isinstance(files, dict):
        raise InputError(f"{path}: no 'files' object; write it again with gpuci check")
    seconds: dict[Mode, dict[str, float]] = {}
    peaks: dict[str, int] = {}
    modes = {m.value: m for m in Mode}
    for name, entry in files.items():
        if not isinstance(entry, dict):
            raise InputError(f"{path}: {name!r} is not an object of times per mode")
        for key, value in entry.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
                raise InputError(f"{path}: {name!r} {key}: {value!r} is not a number of seconds")
            if key == PEAK:
                peaks[name] = int(value)
            elif key in modes:
                seconds.setdefault(modes[key], {})[name] = float(value)
    run_id = data.get("run_id")
    return Durations(seconds=seconds, peaks=peaks, run_id=run_id if isinstance(run_id, str) else "")
