#!/usr/bin/env bash
# examples/torch_polluted on a GPU: plain pytest, then gpuci check, timed in one command
# (issue 38's target: the check at most 5x plain pytest). Needs PyTorch with CUDA there.
#   OUT=out/torch scripts/device_torch.sh
# Writes to $OUT: torch_times.txt (both walls and the ratio), plain.log, check.log,
# expected.txt (the verdict against expected.json), searches.txt (each culprit search's
# runs against ceil(log2 n) and its waves), and the check's OUT as check.tgz.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-out/torch}"
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 3
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
python3 -c "import torch; assert torch.cuda.is_available(), 'no CUDA GPU'" || {
    echo "PyTorch with a CUDA GPU is needed" | tee "$OUT/torch_times.txt"; exit 3; }
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
nproc | tee -a "$OUT/gpu.txt"
work=$(mktemp -d)
suite=examples/torch_polluted

t0=$EPOCHREALTIME
(cd "$suite" && python3 -m pytest -p no:cacheprovider -q) >"$OUT/plain.log" 2>&1
plain_rc=$?
t1=$EPOCHREALTIME
python3 -m gpuci check "$suite" --out "$work/check" >"$OUT/check.log" 2>&1
check_rc=$?
t2=$EPOCHREALTIME

python3 - "$t0" "$t1" "$t2" "$plain_rc" "$check_rc" "$work/check/evidence/evidence.json" <<'PY' \
    | tee "$OUT/torch_times.txt"
import json, sys
t0, t1, t2 = (float(x) for x in sys.argv[1:4])
plain, check = t1 - t0, t2 - t1
print(f"plain pytest: {plain:.1f}s (exit {sys.argv[4]})")
print(f"gpuci check:  {check:.1f}s (exit {sys.argv[5]})")
print(f"ratio: {check / plain:.2f}x (target <= 5x)")
e = json.load(open(sys.argv[6]))
print(f"evidence: {e['runs']} runs, {e['spent_s']}s, concurrency {e['concurrency']}")
print("phases:", {k: (v["runs"], v["seconds"]) for k, v in e.get("phases", {}).items()})
PY
python3 scripts/compare_expected.py "$work/check/verdict.json" "$suite/expected.json" \
    | tee "$OUT/expected.txt"
python3 benchmarks/bench_searches.py "$work/check" | tee "$OUT/searches.txt"
tar -czf "$OUT/check.tgz" -C "$work" check 2>/dev/null
