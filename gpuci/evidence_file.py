"""evidence.json (schema ``gpuci.evidence/1``): what the evidence runs found, written by
`gpuci.evidence.kinds.engine` and read by the diff. Beside `gpuci.formats`, whose JSON helpers it
uses: run.json and verdict.json are formats', this file is the evidence's own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpuci.formats import EVIDENCE_SCHEMA, read_json, strays_to_json
from gpuci.model import Evidence, InputError, Outcome, Probe, TestEvidence
from gpuci.processes import Leftover, Stranger
from gpuci.steps import Steps


def evidence_to_json(evidence: Evidence) -> dict[str, Any]:
    """The `evidence.json` form of a check's evidence."""
    return {
        "schema": EVIDENCE_SCHEMA,
        "gpu": evidence.gpu,
        "budget_s": evidence.budget_s,
        "spent_s": round(evidence.spent_s, 3),
        "runs": evidence.runs,
        **({"phases": evidence.phases} if evidence.phases else {}),
        "concurrency": dict(evidence.concurrency),
        "tests": [_test_evidence_to_json(t) for t in evidence.tests],
        **({"leftovers": strays_to_json(evidence.leftovers)} if evidence.leftovers else {}),
        **({"strangers": strays_to_json(evidence.strangers)} if evidence.strangers else {}),
        **({"notes": list(evidence.notes)} if evidence.notes else {}),
    }


def _test_evidence_to_json(test: TestEvidence) -> dict[str, Any]:
    return {
        "id": test.id,
        "alone": [o.value for o in test.alone],
        **({"cut": test.cut} if test.cut else {}),
        **({"culprits": list(test.culprits)} if test.culprits else {}),
        **({"search": test.search} if test.search else {}),
        **({"probes": [p.to_json() for p in test.probes]} if test.probes else {}),
        **({"steps": test.steps.to_json()} if test.steps is not None else {}),
        **({"poisoned": test.poisoned.value} if test.poisoned is not None else {}),
        **({"threaded": test.threaded.value} if test.threaded is not None else {}),
        **({"sanitizer": test.sanitizer} if test.sanitizer else {}),
        **({"fingerprint": test.fingerprint} if test.fingerprint else {}),
        **({"inferred_from": list(test.inferred_from)} if test.inferred_from else {}),
        **({"group": list(test.group)} if test.group else {}),
        **({"gpu": test.gpu} if test.gpu is not None else {}),
        **({"pair_gpu": test.pair_gpu} if test.pair_gpu is not None else {}),
    }


def read_evidence(path: Path) -> Evidence:
    """Read one `evidence.json`; malformed content is an InputError naming it."""
    data = read_json(path, EVIDENCE_SCHEMA)
    try:
        budget = data.get("budget_s")
        return Evidence(
            gpu=data.get("gpu"),
            budget_s=None if budget is None else float(budget),
            spent_s=float(data.get("spent_s", 0.0)),
            runs=int(data.get("runs", 0)),
            concurrency={str(k): int(v) for k, v in data.get("concurrency", {}).items()},
            notes=tuple(str(n) for n in data.get("notes", ())),
            phases={
                str(k): {str(n): float(x) for n, x in v.items()}
                for k, v in data.get("phases", {}).items()
            },
            tests=tuple(
                TestEvidence(
                    id=str(t["id"]),
                    alone=tuple(Outcome(o) for o in t.get("alone", ())),
                    cut=str(t.get("cut", "")),
                    culprits=tuple(str(c) for c in t.get("culprits", ())),
                    search=str(t.get("search", "")),
                    probes=tuple(Probe.from_json(p) for p in t.get("probes", ())),
                    steps=Steps.from_json(t["steps"]) if t.get("steps") else None,
                    poisoned=Outcome(t["poisoned"]) if t.get("poisoned") else None,
                    threaded=Outcome(t["threaded"]) if t.get("threaded") else None,
                    sanitizer=str(t.get("sanitizer", "")),
                    fingerprint=str(t.get("fingerprint", "")),
                    inferred_from=tuple(str(i) for i in t.get("inferred_from", ())),
                    group=tuple(str(i) for i in t.get("group", ())),
                    gpu=str(t["gpu"]) if t.get("gpu") is not None else None,
                    pair_gpu=str(t["pair_gpu"]) if t.get("pair_gpu") is not None else None,
                )
                for t in data["tests"]
            ),
            leftovers={
                str(file): tuple(Leftover.from_json(x) for x in entries)
                for file, entries in data.get("leftovers", {}).items()
            },
            strangers={
                str(file): tuple(Stranger.from_json(x) for x in entries)
                for file, entries in data.get("strangers", {}).items()
            },
        )
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise InputError(f"{path}: malformed evidence.json ({type(exc).__name__}: {exc})") from None
