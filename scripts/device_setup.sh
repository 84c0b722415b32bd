# What every device script does first, sourced after it sets WORK (its scratch folder): strict
# shell, OUT made absolute, WORK emptied, the carried wheels (.whl/) installed on PYTHONPATH,
# gpuci's bytecode, the GPUs listed, CuPy's subset (SUBSET, MARK), and `timed`.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-out/device}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK="${WORK:?set WORK before sourcing device_setup.sh}"
rm -rf "$WORK" && mkdir -p "$WORK"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="/tmp/site:$PWD"
python3 -m compileall -q gpuci >/dev/null  # as an installed gpuci is: its start-up compiles nothing
ROOT=$PWD
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee "$WORK/gpu.txt"
. "$(dirname "$0")/cupy_subset.sh"  # SUBSET and MARK

timed() {  # timed NAME LIMIT COMMAND...: its wall into walls.txt, its output into NAME.log
    local name=$1 limit=$2; shift 2
    local start=$(date +%s.%N)
    timeout "$limit" "$@" > "$WORK/$name.log" 2>&1
    local rc=$?
    local wall=$(python3 -c "print(round($(date +%s.%N) - $start, 1))")
    echo "$name: exit $rc, wall $wall s" | tee -a "$WORK/walls.txt"
}
