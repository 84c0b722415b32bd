#!/usr/bin/env bash
# Why a threads check of CuPy's subset took 140 s: each file's threads interpreters, how
# they ended, and gpuci's notes (fork server, fresh reruns, time-outs).
set -uo pipefail
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 3
export PYTHONPATH="/tmp/site:$PWD"
. "$(dirname "$0")/cupy_subset.sh"  # SUBSET and MARK
cd cupy-tests || exit 3
python3 -c "import cupy; print('warm', int(cupy.arange(10).sum()))"
timeout 300 python3 -m gpuci check "${SUBSET[@]}" --out /tmp/o-threads --modes suite,parallel,threads,isolated \
    --timeout ${THREADS_TIMEOUT:-30} -- -m "$MARK" > /tmp/threads.log 2>&1
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
