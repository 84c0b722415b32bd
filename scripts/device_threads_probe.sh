#!/usr/bin/env bash
# Why a threads check of CuPy's subset took 140 s: each file's threads interpreters, how
# they ended, and gpuci's notes (fork server, fresh reruns, time-outs).
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="/tmp/site:$PWD"
cd cupy-tests || exit 3
C=tests/cupy_tests/cuda_tests
K=tests/cupy_tests/core_tests
SUBSET=($C/test_device.py $C/test_driver.py $C/test_runtime.py $C/test_stream.py
        $C/test_pinned_memory.py $C/test_memory_hook.py $C/test_memory.py
        $C/test_compiler_cache.py $C/test_graph.py $K/test_iter.py $K/test_flags.py
        $K/test_ndarray_conversion.py $K/test_scan.py $K/test_carray.py $K/test_include.py
        $K/test_core.py $K/test_internal.py tests/cupy_tests/random_tests/test_bit_generator.py)
python3 -c "import cupy; print('warm', int(cupy.arange(10).sum()))"
timeout 300 python3 -m gpuci check "${SUBSET[@]}" --out /tmp/o-threads --modes suite,parallel,threads,isolated \
    --timeout ${THREADS_TIMEOUT:-30} -- -m "not slow and not multi_gpu" > /tmp/threads.log 2>&1
echo "exit $?"
grep -v "^gpuci: \[" /tmp/threads.log | head -40
python3 - <<'PY'
import json
for mode in ("threads", "parallel", "suite"):
    run = json.load(open(f"/tmp/o-threads/{mode}/run.json"))
    rows = sorted(run["files"], key=lambda f: -(f["end"] - f["start"]))[:6]
    for f in rows:
        its = [(i.get("forked"), i.get("exit_code"), i.get("signal"), round(i["end"] - i["start"], 1)) for i in f["interpreters"]]
        print(mode, f["file"][-40:], f["status"], round(f["end"] - f["start"], 1), its)
PY
