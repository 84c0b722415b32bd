#!/usr/bin/env bash
# Issue 12 on a real GPU: a test leaves a child process holding 1 GiB of CuPy memory and
# never ends it; gpuci must end it when the file's interpreter ends, record it on the file
# in run.json, and the next file must see the GPU's memory free again.
#   scripts/device_reaper.sh            (writes everything under $OUT, default out/device)
# Prints: what run.json recorded (leftovers, strangers, gpu_check), free memory before,
# while held and after, whether the leftover's pid survived gpuci, nvidia-smi's view.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT="${OUT:-out/device}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)  # the suite runs elsewhere
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl || exit 3
    export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's gpuci
work=$(mktemp -d)
suite="$work/suite"
mkdir -p "$suite"
export GPUCI_DEVICE_OUT="$OUT"
nvidia-smi --query-gpu=index,name,memory.total,memory.used --format=csv,noheader | tee "$OUT/gpu.txt"

printf '[pytest]\n' > "$suite/pytest.ini"
cat > "$suite/test_1_leak.py" <<'PY'
import json, os, subprocess, sys
from pathlib import Path

import cupy

HOLD = (
    "import time, cupy\n"
    "a = cupy.empty(1 << 30, dtype=cupy.uint8)\n"  # 1 GiB from CuPy's pool, never freed
    "a.fill(1)\n"
    "cupy.cuda.runtime.deviceSynchronize()\n"
    "print('holding', flush=True)\n"
    "time.sleep(600)\n"
)


def test_leaves_a_gpu_holder_behind():
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD], start_new_session=True,
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )
    assert child.stdout.readline().strip() == "holding"
    free, total = cupy.cuda.runtime.memGetInfo()
    Path(os.environ["GPUCI_DEVICE_OUT"], "held.json").write_text(
        json.dumps({"pid": child.pid, "free_while_held": free, "total": total})
    )
    # returns without ending it: the interpreter exits, the holder lives on
PY
cat > "$suite/test_2_free.py" <<'PY'
import json, os
from pathlib import Path

import cupy

GiB = 1 << 30


def test_the_gpu_memory_is_free_again():
    out = Path(os.environ["GPUCI_DEVICE_OUT"])
    held = json.loads((out / "held.json").read_text())
    free, total = cupy.cuda.runtime.memGetInfo()
    baseline = int((out / "baseline_free.txt").read_text())
    result = {
        "baseline_free": baseline, "free_while_held": held["free_while_held"],
        "free_after": free, "total": total,
        "came_back_mib": (free - held["free_while_held"]) // (1 << 20),
        "leftover_alive": Path(f"/proc/{held['pid']}").exists(),
    }
    with (out / "after.jsonl").open("a") as log:  # one line per run: the first one counts
        log.write(json.dumps(result) + "\n")
    assert not result["leftover_alive"], "the holder outlived its file's interpreter"
    assert free - held["free_while_held"] >= 0.9 * GiB, result  # the 1 GiB came back
PY

# free memory as one fresh CUDA context sees it, before the check
python3 -c "import cupy; print(cupy.cuda.runtime.memGetInfo()[0])" > "$OUT/baseline_free.txt" || exit 3
nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader > "$OUT/apps_before.txt" 2>&1

(cd "$suite" && timeout 600 python3 -m gpuci run . --mode isolated --out "$OUT/reaper-out" --gpus 0 \
    --timeout 120) > "$OUT/reaper.log" 2>&1
echo "gpuci run --mode isolated: exit $?" | tee -a "$OUT/reaper.log"
sleep 1
nvidia-smi --query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader > "$OUT/apps_after.txt" 2>&1
grep "gpuci: warning\|passed\|failed\|error" "$OUT/reaper.log"

python3 - "$OUT" <<'PY' | tee "$OUT/summary.txt"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
run = json.loads((out / "reaper-out" / "isolated" / "run.json").read_text())
print("gpu_check:", run.get("gpu_check"))
for f in run["files"]:
    print(f["file"], f["status"], "exit codes", [i["exit_code"] for i in f["interpreters"]])
    for x in f.get("leftovers", []):
        print("  leftover:", x)
    for x in f.get("strangers", []):
        print("  stranger:", x)
print("tests:", {t["id"]: (t["outcome"], t.get("message", "")[:300]) for t in run["tests"]})
held = json.loads((out / "held.json").read_text()) if (out / "held.json").exists() else {}
runs = (out / "after.jsonl").read_text().splitlines() if (out / "after.jsonl").exists() else []
after = [json.loads(line) for line in runs]
print("held:", held)
for n, seen in enumerate(after, 1):
    print(f"after (run {n} of test_2):", seen)
pid = held.get("pid")
print("leftover pid", pid, "alive after gpuci:", bool(pid) and Path(f"/proc/{pid}").exists())
print("nvidia-smi apps before:", (out / "apps_before.txt").read_text().strip() or "-")
print("nvidia-smi apps after:", (out / "apps_after.txt").read_text().strip() or "-")
PY
pid=$(python3 -c "import json; print(json.load(open('$OUT/held.json'))['pid'])" 2>/dev/null)
if [ -n "$pid" ] && [ -d "/proc/$pid" ]; then kill -9 "$pid"; echo "killed the surviving holder $pid"; fi
