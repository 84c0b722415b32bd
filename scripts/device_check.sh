#!/usr/bin/env bash
# What gpuci proves on a real GPU, in one command (the device machine of our workplace:
# CuPy and pytest there, junitparser carried as a wheel in .whl/). Writes logs to $OUT.
#   scripts/device_check.sh [crash] [gpu] [polluted] [bench]   (default: all)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-out/device}"
mkdir -p "$OUT"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 3
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
steps=("${@:-crash gpu polluted bench}")
steps=(${steps[*]})
work=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"

compare() {  # compare a verdict with an expected.json: prints mismatches
    python3 scripts/compare_expected.py "$1" "$2"
}

for step in "${steps[@]}"; do
    case "$step" in
    crash)  # gpuci run, each mode, on a small CuPy suite with a planted crash
        for mode in isolated parallel suite; do
            python3 -m gpuci run examples/gpu_crash --mode "$mode" --out "$work/crash" --timeout 120
            echo "gpuci run --mode $mode: exit $?"
        done 2>&1 | tee "$OUT/crash.log"
        python3 -m gpuci diff "$work/crash" -o "$work/crash/verdict.json" >/dev/null
        compare "$work/crash/verdict.json" examples/gpu_crash/expected.json | tee -a "$OUT/crash.log"
        ;;
    gpu)  # the kernels' own suite: plain pytest, then gpuci check (no isolation finding)
        python3 -m pytest tests/gpu -q -p no:cacheprovider 2>&1 | tail -4 | tee "$OUT/gpu.log"
        python3 -m gpuci check tests/gpu --out "$work/gpu" --timeout 300 2>&1 | tail -40 | tee -a "$OUT/gpu.log"
        ;;
    polluted)  # the planted GPU isolation bugs: every category as expected.json says
        GPU_POLLUTED_STATE="$work/state" python3 -m gpuci check examples/gpu_polluted \
            --out "$work/polluted" --timeout 120 >"$OUT/polluted.log" 2>&1
        echo "gpuci check exit $?" >>"$OUT/polluted.log"
        compare "$work/polluted/verdict.json" examples/gpu_polluted/expected.json | tee -a "$OUT/polluted.log"
        ;;
    bench)
        python3 benchmarks/bench_kernels.py 2>&1 | tee "$OUT/bench_kernels.txt"
        ;;
    esac
done
tar -czf "$OUT/results.tgz" -C "$work" . 2>/dev/null
