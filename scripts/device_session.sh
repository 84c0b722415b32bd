#!/usr/bin/env bash
# One device command for a session's GPU evidence; everything lands in $OUT/device.tgz
# (the device returns few files) and a summary is printed.
#   scripts/device_session.sh STEP...   steps: reaper sanitizer polluted threads subset
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-out/device}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=/tmp/dev
rm -rf "$WORK"  # a warm machine keeps the last command's files (the flaky test's counter)
mkdir -p "$WORK"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="/tmp/site:$PWD"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$WORK/gpu.txt"
for step in "$@"; do
    start=$(date +%s)
    case "$step" in
    reaper)  # issue 12: a leftover holding 1 GiB of CuPy memory
        OUT="$WORK/reaper" timeout 400 bash scripts/device_reaper.sh > "$WORK/reaper.txt" 2>&1
        tail -12 "$WORK/reaper.txt" ;;
    sanitizer)  # compute-sanitizer's own output on the planted out-of-bounds write
        (cd examples/gpu_polluted && timeout 200 compute-sanitizer --tool memcheck \
            python3 -m pytest -q -p no:cacheprovider test_write_past_end.py::test_scatter_rows) \
            > "$WORK/sanitizer_raw.txt" 2>&1
        echo "compute-sanitizer: exit $?"; grep -m3 "=========" "$WORK/sanitizer_raw.txt" ;;
    polluted|polluted-default)  # gpuci check on the GPU example, against its expected.json
        args=${POLLUTED_ARGS:-}
        [ "$step" = polluted-default ] && args=""  # the default evidence budget
        GPU_POLLUTED_STATE="$WORK/state-$step" timeout 540 python3 -m gpuci check examples/gpu_polluted \
            --out "$WORK/$step" --timeout 120 $args > "$WORK/$step.log" 2>&1
        echo "gpuci check $args: exit $?"
        grep -v "^gpuci:   \|^    reproduce\|^      \|^gpuci: \[" "$WORK/$step.log" | tail -25
        python3 scripts/compare_expected.py "$WORK/$step/verdict.json" examples/gpu_polluted/expected.json ;;
    threads|subset)  # CuPy's 18-file subset (cupy-tests/): --modes threads, or the ratio
        OUT="$WORK/cupy" timeout 560 bash scripts/device_cupy.sh "$step" > "$WORK/cupy-$step.txt" 2>&1
        tail -30 "$WORK/cupy-$step.txt" ;;
    esac
    echo "== $step: $(( $(date +%s) - start )) s"
done
find "$WORK" -name '*.jsonl' -path '*journal*' -size +1M -delete
tar -czf "$OUT/device.tgz" -C "$WORK" . 2>/dev/null
ls -la "$OUT"
