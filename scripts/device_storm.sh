#!/usr/bin/env bash
# The failure storm on a GPU (issue 19): examples/gpu_polluted plus 200 parametrized CuPy
# tests that raise the same error in every mode, generated into a temporary folder, then
# one `gpuci check` at the default evidence budget. Prints the check's wall, its main
# passes, the evidence budget, the alone-runs spent on the storm, and whether every test
# of the example is as its expected.json says (culprits, diagnosis, sanitizer block).
#   OUT=out/storm scripts/device_storm.sh        (on the device: CuPy and pytest there)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-out/storm}"
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 3
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
work=$(mktemp -d)
suite="$work/suite"
cp -r examples/gpu_polluted "$suite"
cat >"$suite/test_storm.py" <<'PY'
"""The storm: 200 parametrized tests that raise the same CuPy error in every mode (as
when a library upgrade turns a warning into an error for a whole class)."""

import cupy as cp
import pytest


@pytest.mark.parametrize("n", range(200))
def test_reshape_to_a_deprecated_layout(n: int) -> None:
    x = cp.arange(n + 1, dtype=cp.float32)
    x.reshape((n + 2, -1, 3))  # the same ValueError, with n in its message, every time
PY
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
start=$(date +%s.%N)
GPU_POLLUTED_STATE="$work/state" python3 -m gpuci check "$suite" --out "$work/out" \
    --timeout 120 >"$OUT/storm.log" 2>&1
echo "gpuci check exit $?" >>"$OUT/storm.log"
end=$(date +%s.%N)
python3 - "$work/out" "$start" "$end" <<'PY' | tee "$OUT/storm-summary.txt"
import json, sys
from pathlib import Path
out, start, end = Path(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3])
verdict = json.loads((out / "verdict.json").read_text())
evidence = json.loads((out / "evidence" / "evidence.json").read_text())
main = sum(m["wall_s"] for m in verdict["modes"].values())
storm = [t for t in evidence["tests"] if t["id"].startswith("test_storm.py")]
inferred = sum(1 for t in verdict["tests"] if t.get("inferred_from"))
print(f"check wall {end - start:.1f} s; main passes {main:.1f} s")
print(f"evidence: budget {evidence['budget_s']} s, spent {evidence['spent_s']} s, {evidence['runs']} runs, phases {evidence.get('phases')}")
print(f"storm: {sum(len(t['alone']) for t in storm)} alone-runs on {len(storm)} evidence entries; {inferred} tests failed, inferred")
PY
python3 - "$work/out/verdict.json" examples/gpu_polluted/expected.json "$work/expected.json" <<'PY'
import json, sys
verdict, expected, merged = sys.argv[1:]
want = json.loads(open(expected).read())
want.update({f"test_storm.py::test_reshape_to_a_deprecated_layout[{n}]": "failed" for n in range(200)})
open(merged, "w").write(json.dumps(want))
PY
python3 scripts/compare_expected.py "$work/out/verdict.json" "$work/expected.json" | tee -a "$OUT/storm-summary.txt"
cp "$work/out/verdict.json" "$work/out/comment.md" "$OUT/" 2>/dev/null
tail -80 "$OUT/storm.log" >"$OUT/storm-terminal.txt"  # the summary: the 200 as one group
