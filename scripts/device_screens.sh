#!/usr/bin/env bash
# This session's device runs (issues 18, 19, 20), each step timed in one command; logs and
# results under $OUT (the device returns few files: one tarball and a summary).
#   scripts/device_screens.sh STEP...   steps: subset subset2 floor versus polluted storm section
# floor:    a clean second check's wall: collection, the suite screen and the rest, timed
# subset2:  the same checks twice each into one OUT: the second orders by the first's times;
#           then a first check into a new OUT with the first OUT's durations.json
# subset:   CuPy v14.2.0's 18-file subset (cupy-tests/): plain pytest warm, gpuci check
#           (default: screens, no threads), gpuci check with threads on, plain pytest again
# versus:   the subset's check by the gpuci in old/ (the fork server's, 8ae2ad3: carry old/)
#           against this one (fresh interpreters started ahead), first and second check
#           each, between plain pytest runs, all warm, in one command (VERSUS_SECTION: a
#           real section too)
# polluted: examples/gpu_polluted at the default budget against expected.json, then the
#           same with --serial-modes (its wall beside the screens')
# polluted-before: gpu_polluted by this gpuci and by old/'s (the code before a redesign)
# storm:    the failure-storm replica (scripts/device_storm.sh)
# torch-starts: N PyTorch interpreters collecting at once (N = 1..16), each one's start-up
# torch:    examples/torch_polluted, plain pytest and gpuci check (scripts/device_torch.sh)
# pace:     issue 54: the subset's and a GPU-bound section's ($PACE_SECTION) first and second
#           check against plain pytest warm, the suite interpreter's pace and wall
# pace-cold: the subset's first check with CuPy's kernel cache empty, persistence mode
# gpus:     N GPUs (issue 40): the subset with its multi-GPU tests (-m 'not slow'), plain
#           pytest warm, gpuci check default and with --gpus-per-slot 1, plain again
# gpus-section: a real section with findings ($SECTION) on every GPU against --gpus 0
#           (and plain pytest on every GPU and on GPU 0), each timed in this command
# section:  a real CuPy section outside the subset ($SECTION, under cupy-tests/): plain pytest
#           warm twice, gpuci check at default settings, plain pytest again; every finding
WORK=/tmp/dev
. "$(dirname "$0")/device_setup.sh"  # OUT, WORK, the wheels, SUBSET and MARK, timed

findings() {  # the verdict's line, the modes it ran, and every finding
    python3 - "$1" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
print("verdict:", v["verdict"], v["reasons"])
print("evidence:", {k: v["evidence"].get(k) for k in ("runs", "spent_s", "notes")})
print("summary:", {k: n for k, n in v["summary"].items() if n})
print("checked:", {m: c.get("ran") for m, c in v.get("checked", {}).items()})
print("modes:", {m: d["wall_s"] for m, d in v["modes"].items()})
for t in v["tests"]:
    if t["category"] not in ("passed", "skipped") or t.get("notes"):
        print(" ", t["category"], t["id"], t["outcomes"], t.get("notes", ""),
              "culprits:", t.get("culprits", []), "providers:", t.get("providers", []))
PY
}

forks() {  # per mode: interpreters, the longest one's wall (the suite's)
    python3 - "$1" <<'PY'
import json, sys, pathlib
for mode in ("suite", "parallel", "threads", "isolated"):
    path = pathlib.Path(sys.argv[1]) / mode / "run.json"
    if path.exists():
        its = [i for f in json.loads(path.read_text())["files"] for i in f["interpreters"]]
        longest = max((i["end"] - i["start"] for i in its), default=0)
        print(f"{mode}: {len(its)} interpreters,"
              f" longest {longest:.1f} s, first start {min((i['start'] for i in its), default=0):.1f} s"
              f" (start-up {its[0].get('startup_s') if its else None} s),"
              f" last end {max((i['end'] for i in its), default=0):.1f} s")
PY
}

for step in "$@"; do
    case "$step" in
    subset)
        cd "$ROOT/cupy-tests" || exit 3
        python3 -c "import cupy; print('warm', int(cupy.arange(10).sum()))"
        for run in 1 2; do  # the first warms CuPy's kernel cache
            timed pytest-$run 400 python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$MARK"
            tail -1 "$WORK/pytest-$run.log"
        done
        timed check-default 500 python3 -m gpuci check "${SUBSET[@]}" --out "$WORK/o-default" \
            --timeout 120 -- -m "$MARK"
        grep "^gpuci: modes\|^gpuci: screens\|^verdict" "$WORK/check-default.log"
        findings "$WORK/o-default/verdict.json"
        timed check-threads 500 python3 -m gpuci check "${SUBSET[@]}" --out "$WORK/o-threads" \
            --modes suite,parallel,threads,isolated --timeout 120 -- -m "$MARK"
        grep "^verdict" "$WORK/check-threads.log"
        findings "$WORK/o-threads/verdict.json"
        timed pytest-3 400 python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$MARK"
        tail -1 "$WORK/pytest-3.log"
        python3 - "$WORK/walls.txt" <<'PY'
import re, sys
walls = dict(re.findall(r"^(\S+): exit \d+, wall ([\d.]+) s", open(sys.argv[1]).read(), re.M))
plain = (float(walls["pytest-2"]) + float(walls["pytest-3"])) / 2
for name in ("check-default", "check-threads"):
    print(f"{name}: {float(walls[name]) / plain:.2f}x plain pytest (warm mean {plain:.1f} s)")
PY
        python3 - "$WORK/o-default" <<'PY'
import json, sys, pathlib, statistics
for mode in ("suite", "parallel", "isolated"):
    path = pathlib.Path(sys.argv[1]) / mode / "run.json"
    if path.exists():
        run = json.loads(path.read_text())
        its = [i for f in run["files"] for i in f["interpreters"]]
        print(mode, "interpreters", len(its),
              "peak MiB", max((i.get("gpu_peak_mib") or 0) for i in its) if its else 0)
PY
        cd "$ROOT" ;;
    subset2)  # each check twice into one OUT: the second orders by the first's times (CI)
        cd "$ROOT/cupy-tests" || exit 3
        for run in 1 2; do
            timed pytest-$run 400 python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$MARK"
        done
        for run in a b; do
            timed check-default-$run 300 python3 -m gpuci check "${SUBSET[@]}" \
                --out "$WORK/o-default" --timeout 120 -- -m "$MARK"
            findings "$WORK/o-default/verdict.json" > "$WORK/findings-$run.txt"
            head -3 "$WORK/findings-$run.txt"
            forks "$WORK/o-default"
        done
        # another first check with nothing known: the order the parallel files started in
        timed check-first2 300 python3 -m gpuci check "${SUBSET[@]}" --out "$WORK/o-first2" \
            --timeout 120 -- -m "$MARK"
        forks "$WORK/o-first2"
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); [print(f\"  {f['start']:5.1f} {f['end']:5.1f} {f['file']}\") for f in sorted(r['files'], key=lambda f: f['start'])]" "$WORK/o-first2/parallel/run.json"
        # a pipeline's first check, with the durations a check elsewhere wrote (issue 29)
        [ -n "${SKIP_CARRIED:-}" ] || timed check-carried 300 python3 -m gpuci check "${SUBSET[@]}" --out "$WORK/o-carried" \
            --durations "$WORK/o-default/durations.json" --timeout 120 -- -m "$MARK"
        [ -n "${SKIP_CARRIED:-}" ] || findings "$WORK/o-carried/verdict.json" | head -3
        timed pytest-3 400 python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$MARK"
        python3 - "$WORK/walls.txt" <<'PY'
import re, sys
walls = dict(re.findall(r"^(\S+): exit \d+, wall ([\d.]+) s", open(sys.argv[1]).read(), re.M))
plain = (float(walls["pytest-2"]) + float(walls["pytest-3"])) / 2
for name in sorted(w for w in walls if w.startswith("check")):
    print(f"{name}: {float(walls[name]) / plain:.2f}x plain pytest (warm mean {plain:.1f} s)")
PY
        cd "$ROOT" ;;
    floor)  # where a clean second check's wall goes: collection, the suite screen, the rest
        cd "$ROOT/cupy-tests" || exit 3
        for run in 1 2; do
            timed pytest-$run 400 python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$MARK"
        done
        timed collect 120 python3 -m pytest -q -p no:cacheprovider --collect-only "${SUBSET[@]}" -m "$MARK"
        for run in a b; do  # each line of the check's output with its second since the start
            timed floor-$run 300 bash -c 'python3 -m gpuci check "$@" 2>&1 | python3 -uc "
import sys, time
t = time.monotonic()
for line in sys.stdin: print(f\"{time.monotonic() - t:6.1f} {line}\", end=\"\")"' _ \
                "${SUBSET[@]}" --out "$WORK/o-floor" --timeout 120 -- -m "$MARK"
            grep "fork from\|modes: suite\|suite (suite)\|verdict\|reproduce this" "$WORK/floor-$run.log"
            forks "$WORK/o-floor"
        done
        timed pytest-3 400 python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$MARK"
        cd "$ROOT" ;;
    versus)  # the fork server's gpuci (old/) against fresh interpreters started ahead
        cd "$ROOT/cupy-tests" || exit 3
        timed warm 400 python3 -m pytest -q -p no:cacheprovider -n 8 "${SUBSET[@]}" -m "$MARK"
        tail -1 "$WORK/warm.log"
        timed pytest-1 400 python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$MARK"
        tail -1 "$WORK/pytest-1.log"
        for run in a b; do  # each gpuci's first check, then its second into the same OUT
            PYTHONPATH="/tmp/site:$ROOT/old" timed forked-$run 300 python3 -m gpuci check \
                "${SUBSET[@]}" --out "$WORK/o-forked" --timeout 120 -- -m "$MARK"
            grep "^verdict" "$WORK/forked-$run.log"
            timed fresh-$run 300 python3 -m gpuci check "${SUBSET[@]}" --out "$WORK/o-fresh" \
                --timeout 120 -- -m "$MARK"
            grep "^verdict" "$WORK/fresh-$run.log"
            forks "$WORK/o-fresh"
        done
        findings "$WORK/o-fresh/verdict.json"
        timed pytest-2 400 python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$MARK"
        tail -1 "$WORK/pytest-2.log"
        cp "$WORK/fresh-a.log" "$OUT/versus-fresh-a.log"
        python3 - "$WORK/walls.txt" <<'PY'
import re, sys
walls = dict(re.findall(r"^(\S+): exit \d+, wall ([\d.]+) s", open(sys.argv[1]).read(), re.M))
plain = (float(walls["pytest-1"]) + float(walls["pytest-2"])) / 2
for name in ("forked-a", "fresh-a", "forked-b", "fresh-b"):
    print(f"{name}: {float(walls[name]) / plain:.2f}x plain pytest (warm mean {plain:.1f} s)")
for run in "ab":
    gain = 1 - float(walls[f"forked-{run}"]) / float(walls[f"fresh-{run}"])
    print(f"check {run}: the fork server buys {100 * gain:.0f} % of the fresh check's wall")
PY
        python3 - "$WORK/o-fresh" "$WORK/o-forked" <<'PY'
import json, sys, pathlib
for out in sys.argv[1:]:
    for mode in ("suite", "parallel"):
        run = json.loads((pathlib.Path(out) / mode / "run.json").read_text())
        its = [i for f in run["files"] for i in f["interpreters"]]
        print(out, mode, "wall", run["wall_s"], "interpreters", len(its),
              "visible start-up", round(sum(i.get("startup_s") or 0 for i in its), 1))
PY
        cd "$ROOT" ;;
    leftovers)  # what holds the GPU before the steps: processes an earlier call left
        nvidia-smi --query-compute-apps=pid,used_memory,process_name --format=csv,noheader
        nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader
        ps -eo pid,sid,etimes,args | grep -i "pytest\|gpuci" | grep -v grep | head -20 ;;
    section-versus)  # a real CuPy section with findings: this gpuci, then the fork server's
        cd "$ROOT/cupy-tests" || exit 3
        sect=(${SECTION:-tests/cupyx_tests/test_cusparse.py tests/cupy_tests/test_init.py tests/cupy_tests/cuda_tests/test_nccl.py})
        timed section-warm 200 python3 -m pytest -q -p no:cacheprovider -n 16 "${sect[@]}" -m "$MARK"
        timed section-pytest-1 200 python3 -m pytest -q -p no:cacheprovider "${sect[@]}" -m "$MARK"
        tail -1 "$WORK/section-pytest-1.log"
        for who in fresh forked; do
            path="$PYTHONPATH"; [ "$who" = forked ] && path="/tmp/site:$ROOT/old"
            PYTHONPATH="$path" timed section-$who 240 python3 -m gpuci check "${sect[@]}" \
                --out "$WORK/s-$who" --timeout 120 -- -m "$MARK"
            grep "^evidence\|^verdict" "$WORK/section-$who.log"
            findings "$WORK/s-$who/verdict.json" | grep -v "^  failed" | head -12
        done
        cp "$WORK/section-fresh.log" "$OUT/section-fresh.log"
        timed section-pytest-2 200 python3 -m pytest -q -p no:cacheprovider "${sect[@]}" -m "$MARK"
        tail -1 "$WORK/section-pytest-2.log"
        python3 - "$WORK/walls.txt" <<'PY'
import re, sys
walls = dict(re.findall(r"^(\S+): exit \d+, wall ([\d.]+) s", open(sys.argv[1]).read(), re.M))
plain = (float(walls["section-pytest-1"]) + float(walls["section-pytest-2"])) / 2
for who in ("fresh", "forked"):
    print(f"section-{who}: {float(walls['section-' + who]) / plain:.2f}x plain pytest (warm mean {plain:.1f} s)")
PY
        cd "$ROOT" ;;
    polluted-before)  # issue 52: examples/gpu_polluted by this gpuci, then by the gpuci in old/
        # (carried: the code before the evidence became kinds), each once, warm, one command
        for who in ${POLLUTED_ORDER:-now before}; do  # before now: the other order
            path="$PYTHONPATH"; [ "${who%%[0-9]}" = before ] && path="/tmp/site:$ROOT/old"
            PYTHONPATH="$path" GPU_POLLUTED_STATE="$WORK/state-$who" timed polluted-$who 290 \
                python3 -m gpuci check examples/gpu_polluted --out "$WORK/p-$who" --timeout 120
            grep "^evidence\|^verdict" "$WORK/polluted-$who.log"
            python3 scripts/compare_expected.py "$WORK/p-$who/verdict.json" \
                examples/gpu_polluted/expected.json | tail -2
            python3 -c "import json,sys; e=json.load(open(sys.argv[1])); print('phases', {k: (v['runs'], v['seconds']) for k, v in e.get('phases', {}).items()})" "$WORK/p-$who/evidence/evidence.json"
        done ;;
    polluted)
        # POLLUTED_WARM: CuPy's kernel cache filled by one plain run first (a machine starts cold)
        [ -z "${POLLUTED_WARM:-}" ] || GPU_POLLUTED_STATE="$WORK/state-warm" timed polluted-warm 200 \
            python3 -m pytest -q -p no:cacheprovider examples/gpu_polluted
        for how in ${POLLUTED_HOW:-default serial}; do
            extra=(); [ "$how" = serial ] && extra=(--serial-modes)  # default, default2...: default
            [ "$how" = one ] && extra=(--gpus 0)  # issue 40: the same on GPU 0 alone
            GPU_POLLUTED_STATE="$WORK/state-$how" timed polluted-$how 450 python3 -m gpuci check \
                examples/gpu_polluted --out "$WORK/p-$how" --timeout 120 "${extra[@]}"
            grep "^gpuci: modes\|^gpuci: evidence budget\|^evidence\|^verdict" "$WORK/polluted-$how.log"
            python3 scripts/compare_expected.py "$WORK/p-$how/verdict.json" \
                examples/gpu_polluted/expected.json | tee "$WORK/polluted-$how.txt"
            findings "$WORK/p-$how/verdict.json" | grep -v "^  \(failed\|order-dep\|thread-unsafe\)"
            python3 -c "import json,sys; e=json.load(open(sys.argv[1])); print('phases', e.get('phases'), 'concurrency', e.get('concurrency'))" "$WORK/p-$how/evidence/evidence.json"
            cp "$WORK/polluted-$how.log" "$OUT/polluted-$how.log"  # the progress, whole
            cp "$WORK/p-$how/evidence/runs.jsonl" "$OUT/polluted-$how-runs.jsonl"
        done ;;
    gpus)  # issue 40: the subset with its multi-GPU tests on every GPU, by default and windowed
        cd "$ROOT/cupy-tests" || exit 3
        multi="not slow"
        timed gpus-warm 200 python3 -m pytest -q -p no:cacheprovider -n 16 "${SUBSET[@]}" -m "$multi"
        for run in 1 2; do
            timed gpus-pytest-$run 300 python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$multi"
            tail -1 "$WORK/gpus-pytest-$run.log"
        done
        for how in default window; do
            extra=(); [ "$how" = window ] && extra=(--gpus-per-slot 1)
            timed gpus-check-$how 300 python3 -m gpuci check "${SUBSET[@]}" --out "$WORK/g-$how" \
                --timeout 120 "${extra[@]}" -- -m "$multi"
            grep "^gpuci: suite\|^gpuci: parallel\|^gpuci: isolated\|^verdict" "$WORK/gpus-check-$how.log"
            findings "$WORK/g-$how/verdict.json" | head -30
            forks "$WORK/g-$how"
        done
        timed gpus-pytest-3 300 python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -m "$multi"
        tail -1 "$WORK/gpus-pytest-3.log"
        python3 - "$WORK/walls.txt" <<'PY'
import re, sys
walls = dict(re.findall(r"^(\S+): exit \d+, wall ([\d.]+) s", open(sys.argv[1]).read(), re.M))
plain = (float(walls["gpus-pytest-2"]) + float(walls["gpus-pytest-3"])) / 2
for name in ("gpus-check-default", "gpus-check-window"):
    print(f"{name}: {float(walls[name]) / plain:.2f}x plain pytest (warm mean {plain:.1f} s)")
PY
        cd "$ROOT" ;;
    gpus-section)  # issue 40: the same section's check on every GPU and on GPU 0 alone
        cd "$ROOT/cupy-tests" || exit 3
        sect=(${SECTION:-tests/cupyx_tests/test_cusparse.py tests/cupy_tests/test_init.py tests/cupy_tests/cuda_tests/test_nccl.py})
        timed gs-warm 200 python3 -m pytest -q -p no:cacheprovider -n 16 "${sect[@]}" -m "$MARK"
        timed gs-pytest-all 200 python3 -m pytest -q -p no:cacheprovider "${sect[@]}" -m "$MARK"
        tail -1 "$WORK/gs-pytest-all.log"
        # all, one, all, one... (GS_ROUNDS rounds): the two walls compared side by side
        for round in $(seq "${GS_ROUNDS:-1}"); do
            for how in all one; do
                extra=(); [ "$how" = one ] && extra=(--gpus 0)
                timed gs-check-$how-$round 300 python3 -m gpuci check "${sect[@]}" \
                    --out "$WORK/gs-$how-$round" --timeout 120 "${extra[@]}" -- -m "$MARK"
                grep "^gpuci: suite\|^gpuci: parallel\|^evidence\|^verdict" \
                    "$WORK/gs-check-$how-$round.log"
                findings "$WORK/gs-$how-$round/verdict.json" | grep -v "^  failed" | head -12
                python3 -c "import json,sys; [print('   run', r['phase'], r['start'], r['end'], 'at once', r['at_once'], 'gpu', r.get('gpu')) for r in map(json.loads, open(sys.argv[1]))]" \
                    "$WORK/gs-$how-$round/evidence/runs.jsonl"
            done
        done
        CUDA_VISIBLE_DEVICES=0 timed gs-pytest-one 200 python3 -m pytest -q -p no:cacheprovider "${sect[@]}" -m "$MARK"
        tail -1 "$WORK/gs-pytest-one.log"
        cd "$ROOT" ;;
    gs-why)  # issue 40: where the N-GPU check's extra seconds go (nvidia-smi beside plain
             # pytest; the suite interpreter's tests on every GPU against GPU 0, test by test)
        cd "$ROOT/cupy-tests" || exit 3
        sect=(${SECTION:-tests/cupyx_tests/test_cusparse.py tests/cupy_tests/test_init.py tests/cupy_tests/cuda_tests/test_nccl.py})
        for i in 1 2 3; do /usr/bin/time -f "nvidia-smi apps: %e s" nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader; done 2>&1 | grep apps
        timed gw-warm 200 python3 -m pytest -q -p no:cacheprovider -n 16 "${sect[@]}" -m "$MARK"
        for round in 1 2; do
            timed gw-plain-$round 200 python3 -m pytest -q -p no:cacheprovider "${sect[@]}" -m "$MARK" \
                --junitxml "$WORK/gw-plain-$round.xml"
            (while :; do nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader >/dev/null; sleep 0.5; done) &
            smi=$!
            timed gw-smi-$round 200 python3 -m pytest -q -p no:cacheprovider "${sect[@]}" -m "$MARK" \
                --junitxml "$WORK/gw-smi-$round.xml"
            kill $smi; wait $smi 2>/dev/null
        done
        for how in all one; do
            extra=(); [ "$how" = one ] && extra=(--gpus 0)
            timed gw-check-$how 300 python3 -m gpuci check "${sect[@]}" \
                --out "$WORK/gw-$how" --timeout 120 "${extra[@]}" -- -m "$MARK"
            grep "^gpuci: suite\|^gpuci: parallel\|^verdict" "$WORK/gw-check-$how.log"
        done
        python3 - "$WORK" <<'PY'
import json, sys, pathlib, xml.etree.ElementTree as ET
work = pathlib.Path(sys.argv[1])
def times(path):
    return {(c.get("classname"), c.get("name")): float(c.get("time") or 0) for c in ET.parse(path).iter("testcase")}
def by_file(t):
    out = {}
    for (cls, _), s in t.items():
        f = cls.split(".")[-2] if cls.count(".") else cls
        out[f] = out.get(f, 0) + s
    return out
runs = {n: times(work / f"{n}.xml") for n in ("gw-plain-1", "gw-smi-1", "gw-plain-2", "gw-smi-2")}
runs |= {f"suite-{h}": times(work / f"gw-{h}" / "suite" / "junit.xml") for h in ("all", "one")}
for n, t in runs.items():
    print(f"{n}: tests' sum {sum(t.values()):.1f} s", {f: round(s, 1) for f, s in sorted(by_file(t).items())})
a, o = runs["suite-all"], runs["suite-one"]
diff = sorted(((a[k] - o.get(k, 0), k) for k in a), reverse=True)
print("suite interpreter, all GPUs minus GPU 0, the 15 largest:")
for d, k in diff[:15]:
    print(f"  {d:+.2f} s  {k[0]}::{k[1]}  (all {a[k]:.2f}, one {o.get(k, 0):.2f})")
for h in ("all", "one"):
    for mode in ("suite", "parallel", "isolated"):
        p = work / f"gw-{h}" / mode / "run.json"
        if p.exists():
            r = json.loads(p.read_text())
            print(f"  {h} {mode}: wall {r['wall_s']} s, workers {r['workers']}, GPUs {r['gpus']}")
            for f in r["files"]:
                print(f"    {f['file']} gpu={f['gpu']} slot={f['slot']} {f['start']:.1f}-{f['end']:.1f} s ({f['duration']:.1f} s)")
PY
        cd "$ROOT" ;;
    gs-plain)  # issue 40: the section's plain pytest on every GPU and on GPU 0, alternating
        cd "$ROOT/cupy-tests" || exit 3
        sect=(${SECTION:-tests/cupyx_tests/test_cusparse.py tests/cupy_tests/test_init.py tests/cupy_tests/cuda_tests/test_nccl.py})
        timed gp-warm 200 python3 -m pytest -q -p no:cacheprovider -n 16 "${sect[@]}" -m "$MARK"
        for round in 1 2 3; do
            timed gp-all-$round 200 python3 -m pytest -q -p no:cacheprovider "${sect[@]}" -m "$MARK"
            CUDA_VISIBLE_DEVICES=0 timed gp-one-$round 200 python3 -m pytest -q -p no:cacheprovider \
                "${sect[@]}" -m "$MARK"
        done
        cd "$ROOT" ;;
    section)
        cd "$ROOT/cupy-tests" || exit 3
        sect=(${SECTION:-tests/cupyx_tests/scipy_tests/special_tests})
        # CuPy's kernel cache warmed by xdist's 16 workers (compiling is what a cold run
        # spends its time on), then plain pytest warm
        timed section-warm ${SECTION_WARM:-200} python3 -m pytest -q -p no:cacheprovider -n 16 "${sect[@]}" -m "$MARK"
        tail -1 "$WORK/section-warm.log"
        timed section-pytest-2 200 python3 -m pytest -q -p no:cacheprovider "${sect[@]}" -m "$MARK"
        tail -1 "$WORK/section-pytest-2.log"
        timed section-check ${SECTION_LIMIT:-420} python3 -m gpuci check "${sect[@]}" --out "$WORK/o-section" \
            --timeout 120 -- -m "$MARK"
        grep "^gpuci: modes\|^gpuci: evidence budget\|^evidence\|^verdict" "$WORK/section-check.log"
        findings "$WORK/o-section/verdict.json" | head -60
        cp "$WORK/section-check.log" "$OUT/section-check.log"
        python3 -c "import json,sys; e=json.load(open(sys.argv[1])); print('phases', e.get('phases'), 'concurrency', e.get('concurrency'))" "$WORK/o-section/evidence/evidence.json"
        timed section-pytest-3 200 python3 -m pytest -q -p no:cacheprovider "${sect[@]}" -m "$MARK"
        tail -1 "$WORK/section-pytest-3.log"
        python3 - "$WORK/walls.txt" <<'PY'
import re, sys
walls = dict(re.findall(r"^(\S+): exit \d+, wall ([\d.]+) s", open(sys.argv[1]).read(), re.M))
plain = (float(walls["section-pytest-2"]) + float(walls["section-pytest-3"])) / 2
print(f"section-check: {float(walls['section-check']) / plain:.2f}x plain pytest (warm mean {plain:.1f} s)")
PY
        cd "$ROOT" ;;
    ratio)  # issue 53: the subset's first and second check (one OUT) against plain pytest, warm
        cd "$ROOT/cupy-tests" || exit 3
        timed ratio-warm 300 python3 -m pytest -q -p no:cacheprovider -n 8 "${SUBSET[@]}" -m "$MARK"
        timed ratio-pytest-1 300 python3 -m pytest -q "${SUBSET[@]}" -m "$MARK"
        tail -1 "$WORK/ratio-pytest-1.log"
        for run in first second; do
            timed ratio-$run 300 python3 -m gpuci check "${SUBSET[@]}" --out "$WORK/o-ratio" \
                --timeout 120 -- -m "$MARK"
            grep "^verdict" "$WORK/ratio-$run.log"
            findings "$WORK/o-ratio/verdict.json" | head -12
            forks "$WORK/o-ratio"
        done
        timed ratio-pytest-2 300 python3 -m pytest -q "${SUBSET[@]}" -m "$MARK"
        tail -1 "$WORK/ratio-pytest-2.log"
        python3 - "$WORK/walls.txt" <<'PY'
import re, sys
walls = dict(re.findall(r"^(\S+): exit \d+, wall ([\d.]+) s", open(sys.argv[1]).read(), re.M))
plain = (float(walls["ratio-pytest-1"]) + float(walls["ratio-pytest-2"])) / 2
for name in ("ratio-first", "ratio-second"):
    print(f"{name}: {float(walls[name]) / plain:.2f}x plain pytest (warm mean {plain:.1f} s)")
PY
        cd "$ROOT" ;;
    latent)  # issue 56: with 2+ GPUs the reversed screen is on by default: the subset's first
        # and second check with it (o-rev) and without it (o-base, --modes), against plain
        # pytest warm, all in this command; every latent finding listed for a check by hand
        cd "$ROOT/cupy-tests" || exit 3
        timed latent-warm 300 python3 -m pytest -q -p no:cacheprovider -n 8 "${SUBSET[@]}" -m "$MARK"
        timed latent-pytest-1 300 python3 -m pytest -q "${SUBSET[@]}" -m "$MARK"
        tail -1 "$WORK/latent-pytest-1.log"
        for run in first second; do
            timed latent-base-$run 300 python3 -m gpuci check "${SUBSET[@]}" --out "$WORK/o-base" \
                --timeout 120 --modes suite,parallel,isolated -- -m "$MARK"
            # LATENT_MODES: on one GPU reversed is asked for (suite,reversed,parallel,isolated)
            timed latent-rev-$run 300 python3 -m gpuci check "${SUBSET[@]}" --out "$WORK/o-rev" \
                --timeout 120 ${LATENT_MODES:+--modes "$LATENT_MODES"} -- -m "$MARK"
            grep "^gpuci: modes\|^verdict" "$WORK/latent-rev-$run.log"
            findings "$WORK/o-rev/verdict.json" | head -12
        done
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('reversed run: gpus', r.get('gpus'), [(f.get('slot'), f.get('gpu'), f.get('duration')) for f in r.get('files', [])][:2])" "$WORK/o-rev/reversed/run.json" 2>&1 | head -3
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('suite run: gpus', r.get('gpus'), [(f.get('slot'), f.get('gpu'), f.get('duration')) for f in r.get('files', [])][:2])" "$WORK/o-rev/suite/run.json" 2>&1 | head -3
        python3 - "$WORK/o-rev/verdict.json" <<'PY'
import json, sys
v = json.load(open(sys.argv[1]))
latent = [t for t in v["tests"] if t.get("latent")]
print("latent findings:", len(latent))
for t in latent:
    print(" ", t["category"], t["id"], t.get("found_in"), "culprits", t.get("culprits"))
    print("    reproduce:", t.get("reproduce", "")[:400])
PY
        timed latent-pytest-2 300 python3 -m pytest -q "${SUBSET[@]}" -m "$MARK"
        python3 - "$WORK/walls.txt" <<'PY'
import re, sys
walls = dict(re.findall(r"^(\S+): exit \d+, wall ([\d.]+) s", open(sys.argv[1]).read(), re.M))
plain = (float(walls["latent-pytest-1"]) + float(walls["latent-pytest-2"])) / 2
for name in ("latent-base-first", "latent-rev-first", "latent-base-second", "latent-rev-second"):
    print(f"{name}: {float(walls[name]) / plain:.2f}x plain pytest (warm mean {plain:.1f} s)")
PY
        cp "$WORK/latent-rev-first.log" "$OUT/latent-rev-first.log"
        cd "$ROOT" ;;
    plant)  # issue 52/54: a real CuPy file whose new first test leaves a 4 KiB pool limit
        # (core_tests/test_iter.py, after test_memory.py, which resets the pool's limits);
        # its victims are the later tests that allocate more: one root, the ledger's hint
        rm -rf "$WORK/planted" && cp -r "$ROOT/cupy-tests" "$WORK/planted" && cd "$WORK/planted" || exit 3
        python3 - tests/cupy_tests/core_tests/test_iter.py <<'PY'
import sys
from pathlib import Path
path = Path(sys.argv[1])
lines = path.read_text().splitlines(keepends=True)
last = max(i for i, line in enumerate(lines) if line.startswith(("import ", "from ")))
plant = ("\n\ndef test_planted_budget():  # BUG: the limit outlives the test\n"
         "    cupy.get_default_memory_pool().set_limit(size=4096)\n")
path.write_text("".join(lines[: last + 1]) + plant + "".join(lines[last + 1 :]))
PY
        timed plant-warm 300 python3 -m pytest -q -p no:cacheprovider -n 8 "${SUBSET[@]}" -m "$MARK"
        timed plant-pytest 300 python3 -m pytest -q "${SUBSET[@]}" -m "$MARK"
        tail -3 "$WORK/plant-pytest.log"
        timed plant-check 450 python3 -m gpuci check "${SUBSET[@]}" --out "$WORK/o-plant" \
            --timeout 120 -- -m "$MARK"
        grep "^evidence\|^verdict" "$WORK/plant-check.log"
        findings "$WORK/o-plant/verdict.json" | head -40
        cp "$WORK/plant-check.log" "$OUT/plant-check.log"
        python3 - "$WORK/o-plant" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
verdict = json.loads((out / "verdict.json").read_text())
evidence = json.loads((out / "evidence" / "evidence.json").read_text())
print("evidence runs", evidence.get("runs"), "spent", evidence.get("spent_s"))
searches = {t["id"]: t.get("search", "") for t in evidence.get("tests", [])}
for root in verdict.get("roots", []):
    print("root", root["culprits"], "victims", len(root["victims"]), "left", root.get("left", []))
    print("  found by", sorted({searches.get(v, "") for v in root["victims"]}))
PY
        timed plant-pytest-2 300 python3 -m pytest -q "${SUBSET[@]}" -m "$MARK"
        python3 - "$WORK/walls.txt" <<'PY'
import re, sys
walls = dict(re.findall(r"^(\S+): exit \d+, wall ([\d.]+) s", open(sys.argv[1]).read(), re.M))
plain = (float(walls["plant-pytest"]) + float(walls["plant-pytest-2"])) / 2
print(f"plant-check: {float(walls['plant-check']) / plain:.2f}x plain pytest (mean {plain:.1f} s)")
PY
        cd "$ROOT" ;;
    pace)  # issue 54 items 1 and 4: the subset, then a section with GPU-bound files
        # ($PACE_SECTION), each: plain pytest warm, a first check (a new OUT, nothing known), a
        # second into the same OUT (its order and the suite interpreter's pace from the
        # first), plain again; the suite interpreter's wall against plain's, its pace line,
        # the parallel screen's first files (PACE_RUNS=subset or section: one of them)
        nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader
        cd "$ROOT/cupy-tests" || exit 3
        for name in ${PACE_RUNS:-subset section}; do
            if [ "$name" = subset ]; then paths=("${SUBSET[@]}"); else
                paths=(${PACE_SECTION:-tests/cupy_tests/linalg_tests tests/cupy_tests/fft_tests}); fi
            timed pace-$name-warm 400 python3 -m pytest -q -p no:cacheprovider -n 8 "${paths[@]}" -m "$MARK"
            timed pace-$name-pytest-1 400 python3 -m pytest -q -p no:cacheprovider "${paths[@]}" -m "$MARK"
            tail -1 "$WORK/pace-$name-pytest-1.log"
            rm -rf "$WORK/o-pace-$name"
            for run in first second; do
                timed pace-$name-$run 500 python3 -m gpuci check "${paths[@]}" \
                    --out "$WORK/o-pace-$name" --timeout 120 -- -m "$MARK"
                grep -a "^plain run:\|^verdict" "$WORK/pace-$name-$run.log"
                forks "$WORK/o-pace-$name"
                python3 - "$WORK/o-pace-$name" <<'PY'
import json, sys
from pathlib import Path
out = Path(sys.argv[1])
suite = json.loads((out / "suite" / "run.json").read_text())
print("suite interpreter wall", suite["wall_s"], "pace", suite.get("pace"))
files = json.loads((out / "parallel" / "run.json").read_text())["files"]
for f in sorted(files, key=lambda f: f["start"])[:6]:
    print(f"  parallel {f['start']:6.1f} {f['end']:6.1f} {f['file']}")
PY
            done
            timed pace-$name-pytest-2 400 python3 -m pytest -q -p no:cacheprovider "${paths[@]}" -m "$MARK"
            python3 - "$WORK/walls.txt" "$name" "$WORK/o-pace-$name" <<'PY'
import json, re, sys
walls = dict(re.findall(r"^(\S+): exit \d+, wall ([\d.]+) s", open(sys.argv[1]).read(), re.M))
name = sys.argv[2]
plain = (float(walls[f"pace-{name}-pytest-1"]) + float(walls[f"pace-{name}-pytest-2"])) / 2
for run in ("first", "second"):
    print(f"pace-{name}-{run}: {float(walls[f'pace-{name}-{run}']) / plain:.2f}x plain pytest"
          f" (warm mean {plain:.1f} s)")
suite = json.load(open(f"{sys.argv[3]}/suite/run.json"))["wall_s"]
print(f"pace-{name}-second: suite interpreter {suite:.1f} s, {suite / plain:.2f}x plain pytest")
PY
            cp "$WORK/pace-$name-second.log" "$OUT/pace-$name-second.log"
        done
        cd "$ROOT" ;;
    suite-cost)  # issue 54 item 1: what slows the suite interpreter on a GPU-bound section
        # ($PACE_SECTION): plain pytest; pytest with gpuci's journal plugin (GPUCI_STATE test,
        # file, off: the ledger's share); `gpuci run --mode suite` (the suite interpreter with
        # nothing beside it); plain again; each one's wall and the ledger's own CPU cost
        cd "$ROOT/cupy-tests" || exit 3
        paths=(${PACE_SECTION:-tests/cupyx_tests/test_*.py})
        timed cost-warm 300 python3 -m pytest -q -p no:cacheprovider -n 8 "${paths[@]}" -m "$MARK"
        timed cost-plain-1 300 python3 -m pytest -q -p no:cacheprovider "${paths[@]}" -m "$MARK"
        for level in test file off; do
            rm -f "$WORK/j-$level.jsonl"
            timed cost-journal-$level 300 env GPUCI_STATE=$level GPUCI_JOURNAL="$WORK/j-$level.jsonl" \
                python3 -m pytest -q -p no:cacheprovider -p gpuci.pytest_plugin "${paths[@]}" -m "$MARK"
            grep -h '"ledger-cost"' "$WORK/j-$level.jsonl"
        done
        timed cost-run-suite 300 python3 -m gpuci run "${paths[@]}" --mode suite --out "$WORK/o-cost" \
            --timeout 120 -- -m "$MARK"
        python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('run suite wall', r['wall_s'], r.get('pace'))" "$WORK/o-cost/run.json" 2>/dev/null || ls "$WORK/o-cost"
        # plain pytest with CuPy's two longest files beside it, as the parallel screen runs them:
        # what sharing the GPU (and the cores) costs a run with no gpuci in it
        python3 -m pytest -q -p no:cacheprovider tests/cupyx_tests/test_cusparse.py -m "$MARK" > "$WORK/beside-1.log" 2>&1 &
        python3 -m pytest -q -p no:cacheprovider tests/cupyx_tests/test_cusolver.py -m "$MARK" > "$WORK/beside-2.log" 2>&1 &
        timed cost-plain-beside 300 python3 -m pytest -q -p no:cacheprovider "${paths[@]}" -m "$MARK"
        wait
        tail -1 "$WORK/beside-1.log" "$WORK/beside-2.log"
        timed cost-plain-2 300 python3 -m pytest -q -p no:cacheprovider "${paths[@]}" -m "$MARK"
        cd "$ROOT" ;;
    section-serial)  # issue 54 item 1: a GPU-bound section ($PACE_SECTION) checked with the
        # screens beside the suite interpreter (default) and after it (--serial-modes), each a
        # second check (the first one's durations in OUT), against plain pytest warm
        cd "$ROOT/cupy-tests" || exit 3
        paths=(${PACE_SECTION:-tests/cupyx_tests/test_*.py})
        timed ser-warm 300 python3 -m pytest -q -p no:cacheprovider -n 8 "${paths[@]}" -m "$MARK"
        timed ser-plain-1 300 python3 -m pytest -q -p no:cacheprovider "${paths[@]}" -m "$MARK"
        for how in first default serial; do
            extra=(); [ "$how" = serial ] && extra=(--serial-modes)
            timed ser-$how 400 python3 -m gpuci check "${paths[@]}" --out "$WORK/o-ser" \
                --timeout 120 "${extra[@]}" -- -m "$MARK"
            grep -a "^plain run:\|^verdict\|^evidence:" "$WORK/ser-$how.log"
            python3 -c "import json,sys; r=json.load(open(sys.argv[1])); v=json.load(open(sys.argv[2])); print('suite interpreter wall', r['wall_s'], 'modes', {m: d['wall_s'] for m, d in v['modes'].items()})" "$WORK/o-ser/suite/run.json" "$WORK/o-ser/verdict.json"
        done
        timed ser-plain-2 300 python3 -m pytest -q -p no:cacheprovider "${paths[@]}" -m "$MARK"
        python3 - "$WORK/walls.txt" <<'PY'
import re, sys
walls = dict(re.findall(r"^(\S+): exit \d+, wall ([\d.]+) s", open(sys.argv[1]).read(), re.M))
plain = (float(walls["ser-plain-1"]) + float(walls["ser-plain-2"])) / 2
for how in ("first", "default", "serial"):
    print(f"ser-{how}: {float(walls[f'ser-{how}']) / plain:.2f}x plain pytest (warm mean {plain:.1f} s)")
PY
        cd "$ROOT" ;;
    pace-cold)  # the subset's first check with CuPy's kernel cache empty: what a fresh
        # machine's first check pays (issue 54: 48 s against 18 s once on a fresh H200)
        nvidia-smi --query-gpu=index,persistence_mode --format=csv,noheader
        cd "$ROOT/cupy-tests" || exit 3
        find "${CUPY_CACHE_DIR:-$HOME/.cupy/kernel_cache}" -type f 2>/dev/null | wc -l
        timed pace-subset-cold 500 env CUPY_CACHE_DIR="$WORK/cold-cache" python3 -m gpuci check \
            "${SUBSET[@]}" --out "$WORK/o-pace-cold" --timeout 120 -- -m "$MARK"
        forks "$WORK/o-pace-cold"
        find "$WORK/cold-cache" -type f | wc -l
        cd "$ROOT" ;;
    torch-starts)  # issue 54 item 3: N fresh interpreters collecting a PyTorch file at once (as
        # held evidence interpreters do: imports, CUDA at import, collection), N = 1..cores:
        # where each one's start-up begins to grow is how many the machine serves at once
        for n in 1 2 4 6 8 12 16; do
            python3 - "$n" > "$WORK/starts-$n.txt" 2>&1 <<'PY'
import subprocess, sys, time
n = int(sys.argv[1])
cmd = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
       "examples/torch_polluted/test_a_matmul.py"]
start = time.monotonic()
procs = [subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(n)]
walls = []
for proc in procs:
    proc.wait()
    walls.append(time.monotonic() - start)
print(f"{n} at once: each {min(walls):.1f}-{max(walls):.1f} s, all in {max(walls):.1f} s,"
      f" {n / max(walls):.2f} start-ups/s, exit codes {sorted({p.returncode for p in procs})}")
PY
            cat "$WORK/starts-$n.txt"
        done ;;
    torch)  # examples/torch_polluted: plain pytest and gpuci check, timed in one command
        OUT="$WORK/torch" timeout 400 bash scripts/device_torch.sh > "$WORK/torch.txt" 2>&1
        cat "$WORK/torch/torch_times.txt" "$WORK/torch/expected.txt" "$WORK/torch/searches.txt"
        cp "$WORK/torch/check.log" "$OUT/torch-check.log" ;;
    storm)
        OUT="$WORK/storm" timeout 500 bash scripts/device_storm.sh > "$WORK/storm.txt" 2>&1
        cat "$WORK/storm/storm-summary.txt"; tail -25 "$WORK/storm/storm-terminal.txt" ;;
    esac
    echo "== $step done"
done
cat "$WORK/walls.txt"
find "$WORK" -name '*.jsonl' -path '*journal*' -size +1M -delete
tar -czf "$OUT/device.tgz" -C "$WORK" . 2>/dev/null
ls -la "$OUT"
