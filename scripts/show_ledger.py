"""The state ledger of a results directory, told: what each file (and each named test) left
behind, each root's culprits with what they left and how they were found.

    python3 scripts/show_ledger.py OUT [TEST_ID...]

Reads the journals' `left` events (gpuci.state.left) and, where there is one, verdict.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from gpuci.state.left import describe, read_ledger


def main(argv: list[str]) -> int:
    """Print the ledger of OUT: per file, the named tests', then the roots'."""
    out = Path(argv[0])
    ledger = read_ledger(out)
    print(f"ledger: {len(ledger.files)} file(s) and {len(ledger.tests)} test(s) left something")
    for file, left in sorted(ledger.files.items()):
        print(f"  {file}: " + "; ".join(describe(left) or ["(nothing worth telling)"]))
        print(f"      raw: {json.dumps(left)[:400]}")
    for file, left in sorted(ledger.imports.items()):
        print(f"  importing {file}: " + "; ".join(describe(left) or ["(nothing worth telling)"]))
    for test_id in argv[1:]:
        own, by_file = ledger.entries(test_id)
        told = describe(own) + [f"its file {line}" for line in describe(by_file)]
        print(f"  {test_id}: " + ("; ".join(told) if told else "left nothing the ledger saw"))
    verdict = out / "verdict.json"
    if verdict.exists():
        data = json.loads(verdict.read_text())
        searches = {t["id"]: t.get("search", "") for t in data["tests"]}
        for root in data.get("roots", ()):
            how = "; ".join(dict.fromkeys(searches.get(v, "") for v in root["victims"]))
            print(f"root {root['culprits']} -> {root['victims']} ({how})")
            for line in root.get("left", ()):
                print(f"    {line}")
        for file, lines in data.get("left_behind", {}).items():
            print(f"left behind: {file}: {'; '.join(lines)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
