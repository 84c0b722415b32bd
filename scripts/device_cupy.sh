#!/usr/bin/env bash
# gpuci on CuPy v14.2.0's own tests (carried in cupy-tests/, see benchmarks/device-runs.md), on the device.
#   scripts/device_cupy.sh [multi] [one] [subset] [threads]   (default: multi one subset)
# multi:  the 4 cuda_tests files with every GPU: the verdict must pass
# one:    the same files seeing one GPU (--gpus 0): multi-GPU tests fail, the hang times out
# subset: the 18-file subset: plain pytest twice, gpuci check, plain pytest again
# threads: the 18-file subset in the threads mode alone (pytest-run-parallel, 4 threads)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-out/device}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # the suite runs in cupy-tests/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="/tmp/site:$PWD"
GPUCI=(python3 -m gpuci)
steps=("${@:-multi one subset}")
steps=(${steps[*]})
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
. "$(dirname "$0")/cupy_subset.sh"  # SUBSET and MARK
cd cupy-tests || exit 3
FOUR=(tests/cupy_tests/cuda_tests/test_stream.py tests/cupy_tests/cuda_tests/test_driver.py
      tests/cupy_tests/cuda_tests/test_memory.py tests/cupy_tests/cuda_tests/test_device.py)

summary() {  # the verdict's counts, reasons and findings
    python3 - "$1" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
print("verdict:", v["verdict"], v["reasons"])
print("summary:", {k: n for k, n in v["summary"].items() if n})
print("modes:", {m: d["wall_s"] for m, d in v["modes"].items()}, "evidence:", v.get("evidence"))
for t in v["tests"]:
    if t["category"] not in ("passed", "skipped"):
        print(" ", t["category"], t["id"], t["outcomes"], t["reruns"], t.get("cut", ""))
        print("    ", t["reproduce"][:300])
PY
}

timed() {  # timed NAME COMMAND...: wall seconds into $OUT/NAME.wall, output into NAME.log
    local name=$1; shift
    local start=$(date +%s.%N)
    timeout 420 "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    local end=$(date +%s.%N)
    echo "$name: exit $rc, wall $(python3 -c "print(round($end - $start, 1))") s" | tee -a "$OUT/walls.txt"
}

for step in "${steps[@]}"; do
    case "$step" in
    multi)
        timed multi "${GPUCI[@]}" check "${FOUR[@]}" --out "$OUT/o-multi" --timeout 60 -- -m "not slow"
        tail -5 "$OUT/multi.log"; summary "$OUT/o-multi/verdict.json" | tee "$OUT/multi.txt" ;;
    one)
        timed one "${GPUCI[@]}" check "${FOUR[@]}" --out "$OUT/o-one" --gpus 0 --timeout 30 -- -m "not slow"
        tail -5 "$OUT/one.log"; summary "$OUT/o-one/verdict.json" | tee "$OUT/one.txt" ;;
    subset)
        # Plain pytest before and after the check; the first run also warms CuPy's kernel
        # cache, so the ratio is against the warm runs (2 and 3).
        for run in 1 2; do
            timed subset-pytest-$run python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$MARK"
            tail -1 "$OUT/subset-pytest-$run.log"
        done
        timed subset-gpuci "${GPUCI[@]}" check "${SUBSET[@]}" --out "$OUT/o-subset" --timeout 120 -- -m "$MARK"
        tail -5 "$OUT/subset-gpuci.log"; summary "$OUT/o-subset/verdict.json" | tee "$OUT/subset.txt"
        # the three modes of earlier sessions, for comparison (the default adds threads)
        timed subset-gpuci3 "${GPUCI[@]}" check "${SUBSET[@]}" --modes suite,parallel,isolated --out "$OUT/o-subset3" --timeout 120 -- -m "$MARK"
        tail -3 "$OUT/subset-gpuci3.log"
        timed subset-pytest-3 python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$MARK"
        tail -1 "$OUT/subset-pytest-3.log" ;;
    threads)
        timed threads "${GPUCI[@]}" check "${SUBSET[@]}" --modes threads --out "$OUT/o-threads" --timeout 120 -- -m "$MARK"
        tail -5 "$OUT/threads.log"; summary "$OUT/o-threads/verdict.json" | tee "$OUT/threads.txt" ;;
    esac
done
cat "$OUT/walls.txt"
