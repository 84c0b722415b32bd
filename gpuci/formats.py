"""File formats: `run.json` (schema ``gpuci.run/1``) and `verdict.json` (``gpuci.verdict/1``);
their shape lives here alone (`evidence.json`'s in `gpuci.evidence_file`): another schema or
malformed is an InputError."""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuci.model import (
    Category,
    FileRun,
    FileStatus,
    InputError,
    Interpreter,
    Mode,
    ModeRun,
    Outcome,
    Probe,
    Root,
    TestResult,
    TestVerdict,
    Verdict,
)
from gpuci.processes import Leftover, Stranger

RUN_SCHEMA = "gpuci.run/1"
VERDICT_SCHEMA = "gpuci.verdict/1"
EVIDENCE_SCHEMA = "gpuci.evidence/1"
EVIDENCE_DIR = "evidence"  # OUT/evidence/: the runs after the main passes
EVIDENCE_FILE = "evidence.json"


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader never sees half a file, even if we are killed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(_by_lines(data))
            f.write("\n")
        Path(tmp).replace(path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _by_lines(data: Any) -> str:
    """`data` as JSON with each top-level key, and each item of a list under one, on a line
    of its own: as readable in a diff as an indented file, and written by the json module's
    C encoder (which indenting turns off: thousands of tests took a check 0.3 s)."""
    if not isinstance(data, dict) or not data:
        return json.dumps(data, ensure_ascii=False)
    lines = []
    for key, value in data.items():
        name = json.dumps(key, ensure_ascii=False)
        if isinstance(value, list) and value:
            items = ",\n  ".join(json.dumps(item, ensure_ascii=False) for item in value)
            lines.append(f" {name}: [\n  {items}\n ]")
        else:
            lines.append(f" {name}: {json.dumps(value, ensure_ascii=False)}")
    return "{\n" + ",\n".join(lines) + "\n}"


def read_json(path: Path, schema: str) -> dict[str, Any]:
    """Read a gpuci JSON file, checking that it is one of ours and of this version."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not readable as JSON ({exc})") from None
    found = data.get("schema") if isinstance(data, dict) else None
    if found != schema:
        raise InputError(
            f"{path}: schema is {found!r}, expected {schema!r}"
            " (written by another gpuci version, or not a gpuci file)"
        )
    return data  # type: ignore[no-any-return]


def mode_run_to_json(run: ModeRun) -> dict[str, Any]:
    """The `run.json` form of a mode's run."""
    return {
        "schema": RUN_SCHEMA,
        **({"run_id": run.run_id} if run.run_id else {}),
        "mode": run.mode.value,
        "command": list(run.command),
        "pytest_args": list(run.pytest_args),
        "rootdir": run.rootdir,
        **({"workdir": run.workdir} if run.workdir else {}),
        "workers": run.workers,
        "gpus": list(run.gpus),
        "gpus_per_slot": run.gpus_per_slot,
        "shard": list(run.shard) if run.shard else None,
        "timeout": run.timeout,
        "reruns": run.reruns,
        "wall_s": round(run.wall_s, 3),
        "started_at": run.started_at,
        "interrupted": run.interrupted,
        "environment": run.environment,
        "files": [
            {
                "file": f.file,
                "status": f.status.value,
                "slot": f.slot,
                "gpu": f.gpu,
                "start": round(f.start, 3),
                "end": round(f.end, 3),
                "duration": round(f.duration, 3),
                "tests": f.tests,
                **({"inferred": True} if f.inferred else {}),
                **({"leftovers": [x.to_json() for x in f.leftovers]} if f.leftovers else {}),
                **({"strangers": [x.to_json() for x in f.strangers]} if f.strangers else {}),
                "interpreters": [i.to_json() for i in f.interpreters],
            }
            for f in run.files
        ],
        "tests": [
            {
                "id": t.id,
                "file": t.file,
                "outcome": t.outcome.value,
                "duration": round(t.duration, 4),
                "message": t.message,
                **({"where": t.where} if t.where else {}),
                "reruns": [r.value for r in t.reruns],
                **({"log": t.log} if t.log else {}),
                **({"inferred": True} if t.inferred else {}),
                **({"cut": t.cut} if t.cut else {}),
                **({"pytest": list(t.counted)} if t.counted else {}),
                **({"inferred_from": list(t.inferred_from)} if t.inferred_from else {}),
            }
            for t in run.tests
        ],
        **({"paths": list(run.paths)} if run.paths else {}),
        **({"resumed": True} if run.resumed else {}),
        **({"gpu_check": run.gpu_check} if run.gpu_check else {}),
        **({"beside": [m.value for m in run.beside]} if run.beside else {}),
        **({"threads": run.threads} if run.threads else {}),
        **({"poison": True} if run.poison else {}),
        **({"randomly_seed": run.randomly_seed} if run.randomly_seed is not None else {}),
        **({"shuffle_seed": run.shuffle_seed} if run.shuffle_seed is not None else {}),
        **({"settings": run.settings} if run.settings else {}),
        **({"pace": run.pace} if run.pace else {}),
    }


def mode_run_from_json(data: dict[str, Any], source: Path) -> ModeRun:
    """Parse `run.json` content; a missing or mistyped field is an InputError naming `source`."""
    try:
        shard = data.get("shard")
        return ModeRun(
            mode=Mode(data["mode"]),
            run_id=str(data.get("run_id", "")),
            command=tuple(data["command"]),
            pytest_args=tuple(data.get("pytest_args", ())),
            rootdir=data["rootdir"],
            workdir=str(data.get("workdir", "")),
            workers=int(data["workers"]),
            gpus=tuple(data.get("gpus", ())),
            gpus_per_slot=data.get("gpus_per_slot"),
            shard=(int(shard[0]), int(shard[1])) if shard else None,
            timeout=data.get("timeout"),
            reruns=int(data.get("reruns", 0)),
            wall_s=float(data.get("wall_s", 0.0)),
            started_at=data.get("started_at", ""),
            interrupted=bool(data.get("interrupted", False)),
            environment=dict(data.get("environment", {})),
            files=tuple(
                FileRun(
                    file=f["file"],
                    status=FileStatus(f["status"]),
                    slot=int(f["slot"]),
                    gpu=f.get("gpu"),
                    start=float(f["start"]),
                    end=float(f["end"]),
                    tests=int(f.get("tests", 0)),
                    inferred=bool(f.get("inferred", False)),
                    leftovers=tuple(Leftover.from_json(x) for x in f.get("leftovers", ())),
                    strangers=tuple(Stranger.from_json(x) for x in f.get("strangers", ())),
                    interpreters=tuple(Interpreter.from_json(i) for i in f.get("interpreters", ())),
                )
                for f in data["files"]
            ),
            tests=tuple(
                TestResult(
                    id=t["id"],
                    file=t["file"],
                    outcome=Outcome(t["outcome"]),
                    duration=float(t.get("duration", 0.0)),
                    message=t.get("message", ""),
                    where=str(t.get("where", "")),
                    reruns=tuple(Outcome(r) for r in t.get("reruns", ())),
                    log=t.get("log", ""),
                    inferred=bool(t.get("inferred", False)),
                    cut=str(t.get("cut", "")),
                    counted=tuple(str(w) for w in t.get("pytest", ())),
                    inferred_from=tuple(str(i) for i in t.get("inferred_from", ())),
                )
                for t in data["tests"]
            ),
            paths=tuple(str(p) for p in data.get("paths", ())),
            resumed=bool(data.get("resumed", False)),
            gpu_check=str(data.get("gpu_check", "")),
            beside=tuple(Mode(m) for m in data.get("beside", ())),
            threads=int(data["threads"]) if data.get("threads") else None,
            poison=bool(data.get("poison", False)),
            randomly_seed=_seed(data.get("randomly_seed")),
            shuffle_seed=_seed(data.get("shuffle_seed")),
            settings=dict(data.get("settings", {})),
            pace=dict(data.get("pace", {})),
        )
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise InputError(f"{source}: malformed run.json ({type(exc).__name__}: {exc})") from None


def read_mode_run(path: Path) -> ModeRun:
    """Read one `run.json`: parsed once while the file stays the same (a check reads each
    mode's several times over: its peaks, its durations, its results)."""
    try:
        stat = path.stat()
    except OSError:  # read_json says what is wrong with it
        return mode_run_from_json(read_json(path, RUN_SCHEMA), path)
    # a rewrite (write_json_atomic: a new file moved over it) changes the inode
    key = (str(path.resolve()), stat.st_ino, stat.st_mtime_ns, stat.st_size)
    run = _READ_RUNS.get(key)
    if run is None:
        run = mode_run_from_json(read_json(path, RUN_SCHEMA), path)
        if len(_READ_RUNS) >= _READ_RUNS_KEPT:
            _READ_RUNS.pop(next(iter(_READ_RUNS)))
        _READ_RUNS[key] = run
    return run


# the runs read so far (ModeRun is frozen: shared by every reader), the oldest dropped first
_READ_RUNS: dict[tuple[str, int, int, int], ModeRun] = {}
_READ_RUNS_KEPT = 32


def verdict_to_json(verdict: Verdict) -> dict[str, Any]:
    """The `verdict.json` form of a verdict."""
    return {
        "schema": VERDICT_SCHEMA,
        "verdict": verdict.verdict,
        "reasons": list(verdict.reasons),
        "summary": {
            c.value: verdict.summary[c.value] for c in Category if c.value in verdict.summary
        },
        **({"checked": verdict.checked} if verdict.checked else {}),
        "modes": verdict.modes,
        "environment": verdict.environment,
        "evidence": verdict.evidence,
        "tests": [
            {
                "id": t.id,
                "file": t.file,
                "category": t.category.value,
                "outcomes": t.outcomes,
                **({"pytest": {m: list(w) for m, w in t.pytest.items()}} if t.pytest else {}),
                "reruns": list(t.reruns),
                "new": t.new,
                **({"latent": True, "found_in": t.found_in} if t.found_in else {}),
                "message": t.message,
                "reproduce": t.reproduce,
                **({"inferred": list(t.inferred)} if t.inferred else {}),
                **({"cut": t.cut} if t.cut else {}),
                **({"log": t.log} if t.log else {}),
                **({"culprits": list(t.culprits)} if t.culprits else {}),
                **({"providers": list(t.providers)} if t.providers else {}),
                **({"search": t.search} if t.search else {}),
                **({"probes": [p.to_json() for p in t.probes]} if t.probes else {}),
                **({"poisoned": t.poisoned} if t.poisoned is not None else {}),
                **({"threaded": t.threaded} if t.threaded is not None else {}),
                **({"diagnosis": t.diagnosis} if t.diagnosis else {}),
                **({"sanitizer": t.sanitizer} if t.sanitizer else {}),
                **({"notes": list(t.notes)} if t.notes else {}),
                **({"with_provider": t.with_provider} if t.with_provider else {}),
                **({"passes_alone": t.passes_alone} if t.passes_alone else {}),
                **({"fingerprint": t.fingerprint} if t.fingerprint else {}),
                **({"inferred_from": list(t.inferred_from)} if t.inferred_from else {}),
                **({"strict": t.strict} if t.strict else {}),
            }
            for t in verdict.tests
        ],
        **({"roots": [_root_to_json(r) for r in verdict.roots]} if verdict.roots else {}),
        **(
            {"left_behind": {f: list(x) for f, x in verdict.left_behind.items()}}
            if verdict.left_behind
            else {}
        ),
    }


def _root_to_json(root: Root) -> dict[str, Any]:
    return {
        "culprits": list(root.culprits),
        "category": root.category.value,
        "victims": list(root.victims),
        "reproduce": root.reproduce,
        **({"left": list(root.left)} if root.left else {}),
    }


def verdict_from_json(data: dict[str, Any], source: Path) -> Verdict:
    """Parse `verdict.json` content; malformed content is an InputError naming `source`."""
    try:
        return Verdict(
            verdict=str(data["verdict"]),
            reasons=tuple(data.get("reasons", ())),
            summary={str(k): int(v) for k, v in data["summary"].items()},
            modes=dict(data.get("modes", {})),
            checked={str(k): dict(v) for k, v in data.get("checked", {}).items()},
            environment=dict(data.get("environment", {})),
            evidence=dict(data.get("evidence", {})),
            tests=tuple(
                TestVerdict(
                    id=t["id"],
                    file=t["file"],
                    category=Category(t["category"]),
                    outcomes=dict(t["outcomes"]),
                    pytest={
                        str(m): tuple(str(w) for w in words)
                        for m, words in t.get("pytest", {}).items()
                    },
                    reruns=tuple(t.get("reruns", ())),
                    new=t.get("new"),
                    message=t.get("message", ""),
                    log=t.get("log", ""),
                    reproduce=t.get("reproduce", ""),
                    inferred=tuple(t.get("inferred", ())),
                    cut=t.get("cut", ""),
                    culprits=tuple(str(c) for c in t.get("culprits", ())),
                    providers=tuple(str(c) for c in t.get("providers", ())),
                    search=str(t.get("search", "")),
                    probes=tuple(Probe.from_json(p) for p in t.get("probes", ())),
                    poisoned=t.get("poisoned"),
                    threaded=t.get("threaded"),
                    diagnosis=str(t.get("diagnosis", "")),
                    sanitizer=str(t.get("sanitizer", "")),
                    notes=tuple(str(n) for n in t.get("notes", ())),
                    with_provider=str(t.get("with_provider", "")),
                    passes_alone=str(t.get("passes_alone", "")),
                    fingerprint=str(t.get("fingerprint", "")),
                    inferred_from=tuple(str(i) for i in t.get("inferred_from", ())),
                    strict=str(t.get("strict", "")),
                    found_in=str(t.get("found_in", "")),
                )
                for t in data["tests"]
            ),
            roots=tuple(
                Root(
                    culprits=tuple(str(c) for c in r["culprits"]),
                    category=Category(r["category"]),
                    victims=tuple(str(v) for v in r["victims"]),
                    reproduce=str(r.get("reproduce", "")),
                    left=tuple(str(x) for x in r.get("left", ())),
                )
                for r in data.get("roots", ())
            ),
            left_behind={
                str(f): tuple(str(x) for x in lines)
                for f, lines in data.get("left_behind", {}).items()
            },
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(
            f"{source}: malformed verdict.json ({type(exc).__name__}: {exc})"
        ) from None


def read_verdict(path: Path) -> Verdict:
    """Read one `verdict.json`."""
    return verdict_from_json(read_json(path, VERDICT_SCHEMA), path)


def strays_to_json(found: Mapping[str, Sequence[Leftover | Stranger]]) -> dict[str, Any]:
    """Leftovers or strangers by file, in their JSON form (evidence.json, verdict.json)."""
    return {file: [x.to_json() for x in entries] for file, entries in found.items()}


def _seed(value: Any) -> int | None:
    """run.json's `randomly_seed`: an integer, or none."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
