"""Describe: verdict.json's account of each mode and of the evidence runs.

Plain data for the report: what each mode ran and how its files ended, what the evidence
cost and what the budget cut.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuci.evidence.results import ModeResults
from gpuci.formats import strays_to_json
from gpuci.model import Evidence, Mode, TestVerdict, whole_suite_unit
from gpuci.run.sched.progress import count_tests


def describe_checked(results: Mapping[Mode, ModeResults]) -> dict[str, dict[str, Any]]:
    """Every mode: whether it ran and why, or why not (from the check's run.json settings;
    a mode without results in OUT, where no check says more, was not run here)."""
    why: dict[str, str] = {}
    for mode_results in results.values():
        recorded = mode_results.run.settings.get("modes", {})
        if isinstance(recorded, dict) and isinstance(recorded.get("why"), dict):
            why = {str(k): str(v) for k, v in recorded["why"].items()}
            break
    return {
        m.value: {
            "ran": m in results,
            "why": why.get(m.value) or ("results in OUT" if m in results else "no results in OUT"),
        }
        for m in Mode
    }


def describe_evidence(evidence: Evidence | None, tests: Sequence[TestVerdict]) -> dict[str, Any]:
    """verdict.json's account of the evidence runs: their cost and what the budget cut."""
    cut = sum(1 for t in tests if t.cut)
    if evidence is None:
        return {"cut": cut} if cut else {}
    return {
        "gpu": evidence.gpu,
        "budget_s": evidence.budget_s,
        "spent_s": round(evidence.spent_s, 3),
        "runs": evidence.runs,
        "concurrency": dict(evidence.concurrency),
        "cut": cut,
        **({"leftovers": strays_to_json(evidence.leftovers)} if evidence.leftovers else {}),
        **({"strangers": strays_to_json(evidence.strangers)} if evidence.strangers else {}),
        **({"notes": list(evidence.notes)} if evidence.notes else {}),
    }


def describe_mode(results: ModeResults) -> dict[str, Any]:
    """verdict.json's entry for one mode."""
    run = results.run
    files = {f.file for f in run.files if not whole_suite_unit(f.file)} | {
        t.file for t in run.tests
    }
    return {
        "wall_s": round(run.wall_s, 3),
        "files": len(files),
        "tests": len(run.tests),
        "counts": count_tests(run.tests),  # what pytest's own summary line would say
        "workers": run.workers,
        **({"threads": run.threads} if run.threads else {}),
        "gpus": list(run.gpus),
        "shards": results.total_shards,
        "missing_shards": list(results.missing_shards),
        "interrupted": run.interrupted,
        "inferred_files": sum(1 for f in run.files if f.inferred),
        **({"beside": list(run.beside)} if run.beside else {}),  # screened at once, one clock
        **({"pace": dict(run.pace)} if run.pace else {}),  # the suite's, against an earlier check
        "file_runs": [
            {
                "file": f.file,
                "status": f.status.value,
                "slot": f.slot,
                "gpu": f.gpu,
                "start": round(f.start, 3),
                "end": round(f.end, 3),
                "duration": round(f.duration, 3),
                "shard": shard,
                "exit_codes": [i.exit_code for i in f.interpreters if i.exit_code is not None],
                "signals": [i.signal for i in f.interpreters if i.signal is not None],
                **({"inferred": True} if f.inferred else {}),  # no interpreter ran it
                **({"leftovers": [x.to_json() for x in f.leftovers]} if f.leftovers else {}),
                **({"strangers": [x.to_json() for x in f.strangers]} if f.strangers else {}),
            }
            for part, shard in zip(results.parts, results.part_shards, strict=True)
            for f in part.files
        ],
    }


def checked_lines(checked: Mapping[str, Any]) -> list[str]:
    """`suite, parallel, isolated ran: default`, `threads not run: not asked for ...`: which
    modes ran and which did not, grouped by why."""
    groups: dict[tuple[bool, str], list[str]] = {}
    for mode, entry in checked.items():
        if isinstance(entry, Mapping):
            key = (bool(entry.get("ran")), str(entry.get("why", "")))
            groups.setdefault(key, []).append(str(mode))
    ordered = sorted(groups.items(), key=lambda item: not item[0][0])  # ran first
    return [
        f"{', '.join(modes)} {'ran' if ran else 'not run'}{': ' + why if why else ''}"
        for (ran, why), modes in ordered
    ]
