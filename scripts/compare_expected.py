"""Compare a verdict.json with an example's expected.json; print each mismatch, exit 1 if any.

expected.json maps a test id to its category, or to an object with the category and what
the evidence must show: `culprits` (exactly: who it names, its `providers` for
depends-on-others; for concurrency the files, since a contention's partner names its
victim's test), `diagnosis` (exactly), `sanitizer` (a part of compute-sanitizer's first
error block).

    python scripts/compare_expected.py OUT/verdict.json examples/gpu_polluted/expected.json
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def mismatches(verdict: dict[str, Any], expected: dict[str, Any]) -> list[str]:
    """One line per test whose verdict differs from what expected.json says."""
    got = {t["id"]: t for t in verdict["tests"]}
    found = []
    for test_id in sorted(set(got) | set(expected)):
        want = expected.get(test_id)
        want = {"category": want} if isinstance(want, str) else (want or {})
        test = dict(got.get(test_id, {}))
        named = test.get("culprits") or test.get("providers")
        if named is not None and test.get("category") == "concurrency":
            named = [c.partition("::")[0] for c in named]
        test["culprits"] = named
        for key in ("category", "culprits", "diagnosis"):
            if key in want and test.get(key) != want[key]:
                found.append(f"{test_id}: {key} {test.get(key)!r}, expected {want[key]!r}")
        if "sanitizer" in want and want["sanitizer"] not in test.get("sanitizer", ""):
            found.append(
                f"{test_id}: sanitizer {test.get('sanitizer', '')!r} lacks {want['sanitizer']!r}"
            )
    return found


def main(argv: list[str]) -> int:
    verdict, expected = (json.loads(Path(p).read_text(encoding="utf-8")) for p in argv[1:3])
    bad = mismatches(verdict, expected)
    print("\n".join(f"MISMATCH {line}" for line in bad) or "every test as expected.json says")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
