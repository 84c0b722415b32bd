#!/usr/bin/env bash
# The state ledger on a GPU (issue 41), each step timed in one command; logs and results
# under $OUT (one tarball and the summaries).
#   scripts/device_ledger.sh STEP...   steps: probes firstlimit polluted overhead subset
# probes:   the snapshot in a process that imported CuPy and ran nothing (no device keys; no
#           context created by the probe); after a pool limit set with nothing allocated
#           (CUDA started, no context: the limit read, still no context); then after CuPy
#           work, a pool limit and a stream, with the descriptors the context opened (the
#           driver's: none of them in `changes`)
# firstlimit: a CuPy suite whose first file's first test sets a 64 MiB pool limit and
#           allocates nothing (the first CUDA call of the plain run's interpreter), its
#           victims in two later files; `gpuci check`, then FIRSTLIMIT OK or FIRSTLIMIT
#           WRONG: one root, its culprit that test, found by the ledger's hint, its card
#           naming the limit and no descriptor or process line
# polluted: examples/gpu_polluted checked; each planted CuPy bug's culprit with what the
#           ledger says it left (pool limit: test_fits_in_budget; stale buffer:
#           test_reference_fill; non-blocking stream: test_async_pipeline; illegal address:
#           test_scatter_rows), each root's `left` and how its culprit was found (ledger: N
#           runs, or bisection: N runs), then the same check with the ledger off
#           (GPUCI_STATE=off) for the bisection's count
# overhead: CuPy's 18-file subset, the suite screen (`gpuci run --mode suite`) with the
#           ledger off, per file and per test, interleaved, 5 times each
#           (benchmarks/ledger_overhead.py: walls, CPU, the ledger's own journaled cost)
# subset:   the subset's ledger: what each real file leaves behind (verify two by hand)
WORK=/tmp/dev-ledger
. "$(dirname "$0")/device_setup.sh"  # OUT, WORK, the wheels, SUBSET and MARK, timed

PLANTED=(test_pool_limit.py::test_fits_in_budget test_uninitialized.py::test_reference_fill
         test_stream_race.py::test_async_pipeline test_write_past_end.py::test_scatter_rows)
for step in "$@"; do
    case "$step" in
    probes)
        python3 - <<'PY' 2>&1 | tee "$OUT/probes.txt"
import cupy
from gpuci.state.changes import changes, snapshot
bare = snapshot(full=True)
print("imported, nothing run:", sorted(k for k in bare if k.startswith(("cupy", "cuda", "gpu"))))
def context():  # 0, or "CUDA not started" (the driver raises before cuInit)
    try:
        return cupy.cuda.driver.ctxGetCurrent()
    except cupy.cuda.driver.CUDADriverError:
        return "CUDA not started"
print("context after the probe (must be CUDA not started):", context())
cupy.get_default_memory_pool().set_limit(size=64 << 20)
limited = snapshot(full=True)
print("limit set, nothing allocated: context (must be 0):", context())
print("  read:", {k: v for k, v in limited.items() if k.startswith(("cupy", "cuda", "gpu"))})
print("  changes (must hold cupy.pool_limit [0, 67108864]):", changes(bare, limited))
print("  after the probe, context (must still be 0):", context())
before = snapshot(full=True)
x = cupy.ones(1 << 28, dtype=cupy.float32)  # 1 GiB
cupy.get_default_memory_pool().set_limit(size=2 << 30)
cupy.cuda.Stream(non_blocking=True).use()
after = snapshot(full=True)
print("after:", {k: v for k, v in after.items() if k.startswith(("cupy", "cuda", "gpu"))})
opened = sorted(set(after["fds"]) - set(before["fds"]))
print(f"the context opened {len(opened)} descriptor(s):", [t for _, t in opened])
print("changes (no fds: they are the driver's):", changes(before, after))
import os, importlib.util
nspid = [l for l in open("/proc/self/status") if l.startswith("NSpid")]
print("own pid", os.getpid(), nspid)
if importlib.util.find_spec("pynvml"):  # NVML's ids: this namespace's (own listed) or not
    import pynvml
    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    print("NVML lists:", [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(handle)])
PY
        ;;
    firstlimit)
        suite="$WORK/firstlimit"
        mkdir -p "$suite"
        printf '[pytest]\naddopts = -p no:randomly\n' > "$suite/pytest.ini"
        cat > "$suite/test_a_budget.py" <<'PY'
import cupy as cp


def test_sets_budget():  # BUG: the limit outlives the test; it allocates nothing
    cp.get_default_memory_pool().set_limit(size=64 * 2**20)


def test_small():
    assert float(cp.ones(1024, dtype=cp.float32).sum()) == 1024
PY
        for name in b c; do
            cat > "$suite/test_${name}_large.py" <<'PY'
import cupy as cp


def test_large():
    x = cp.zeros(128 * 2**20 // 4, dtype=cp.float32)  # 128 MiB: over the limit
    assert float(x.sum()) == 0
PY
        done
        (cd "$suite" && timed firstlimit 450 python3 -m gpuci check . --out "$WORK/fl-out" --timeout 120)
        grep "culprits:\|^verdict\|pool limit\|descriptor\|processes" "$WORK/firstlimit.log"
        python3 scripts/show_ledger.py "$WORK/fl-out" test_a_budget.py::test_sets_budget \
            | tee "$OUT/firstlimit-ledger.txt"
        python3 - "$WORK/fl-out" <<'PY' | tee "$OUT/firstlimit.txt"
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
verdict = json.loads((out / "verdict.json").read_text())
evidence = json.loads((out / "evidence" / "evidence.json").read_text())
roots = verdict.get("roots", [])
searches = {t["id"]: t.get("search", "") for t in evidence["tests"]}
for root in roots:
    print("root", root["culprits"], "->", root["victims"], root.get("left", []))
wrong = []
if len(roots) != 1:
    wrong.append(f"{len(roots)} roots, not 1")
else:
    root = roots[0]
    left = root.get("left", [])
    if root["culprits"] != ["test_a_budget.py::test_sets_budget"]:
        wrong.append(f"culprits {root['culprits']}")
    if sorted(root["victims"]) != ["test_b_large.py::test_large", "test_c_large.py::test_large"]:
        wrong.append(f"victims {root['victims']}")
    if not any("pool limit of 64.0 MiB" in line for line in left):
        wrong.append(f"the card does not name the limit: {left}")
    if any("descriptor" in line or "processes" in line for line in left):
        wrong.append(f"the card says descriptors or processes: {left}")
    how = {v: searches.get(v, "") for v in root["victims"]}
    if not any(h.startswith("ledger:") for h in how.values()):
        wrong.append(f"not found by the ledger's hint: {how}")
print("FIRSTLIMIT " + ("OK" if not wrong else "WRONG: " + "; ".join(wrong)))
PY
        ;;
    polluted)
        for state in test off; do
            GPUCI_STATE=$state GPU_POLLUTED_STATE="$WORK/state-$state" timed polluted-$state 450 \
                python3 -m gpuci check examples/gpu_polluted --out "$WORK/p-$state" --timeout 120
            grep "culprits:\|^verdict" "$WORK/polluted-$state.log"
            python3 scripts/compare_expected.py "$WORK/p-$state/verdict.json" \
                examples/gpu_polluted/expected.json | tail -3
            python3 scripts/show_ledger.py "$WORK/p-$state" "${PLANTED[@]}" \
                | tee "$OUT/polluted-ledger-$state.txt"
        done ;;
    overhead)
        cd "$ROOT/cupy-tests" || exit 3
        python3 -c "import cupy; print('warm', int(cupy.arange(10).sum()))"
        timed overhead 590 python3 "$ROOT/benchmarks/ledger_overhead.py" --reps 5 \
            --out "$WORK/overhead" -- "${SUBSET[@]}" -m "$MARK"
        cat "$WORK/overhead.log" | tee "$OUT/overhead.txt"
        cd "$ROOT" ;;
    subset)
        cd "$ROOT/cupy-tests" || exit 3
        timed subset-run 400 python3 -m gpuci run "${SUBSET[@]}" --mode suite \
            --out "$WORK/subset" --timeout 120 -- -m "$MARK"
        tail -2 "$WORK/subset-run.log"
        python3 "$ROOT/scripts/show_ledger.py" "$WORK/subset" | tee "$OUT/subset-ledger.txt"
        grep -h '"ledger-cost"' "$WORK"/subset/suite/journal/*.jsonl
        cd "$ROOT" ;;
    esac
    echo "== $step done"
done
cat "$WORK/walls.txt"
find "$WORK" -name '*.jsonl' -path '*journal*' -size +1M -delete
tar -czf "$OUT/device-ledger.tgz" -C "$WORK" . 2>/dev/null
ls -la "$OUT"
