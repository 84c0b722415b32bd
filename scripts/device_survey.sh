#!/usr/bin/env bash
# Which CuPy sections fail on this machine, and how: a storm (many tests failing one way)
# is what a real-section check needs. Each section under cupy-tests/ runs once with xdist
# (16 workers: a cold kernel cache compiles in parallel), bounded; its summary line and
# its failures' messages, counted, go to $OUT/survey.txt.
#   OUT=... bash scripts/device_survey.sh SECTION...
set -uo pipefail
OUT="${OUT:-out/device}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LIMIT="${SURVEY_LIMIT:-90}"
. "$(dirname "$0")/cupy_subset.sh"  # MARK
cd cupy-tests || exit 3
for section in "$@"; do
    log="$OUT/survey-$(echo "$section" | tr '/' '_').log"
    start=$(date +%s)
    timeout "$LIMIT" python3 -m pytest -q -p no:cacheprovider -n 16 --tb=no -rfE \
        "tests/$section" -m "$MARK" > "$log" 2>&1
    rc=$?
    {
        echo "== $section: exit $rc, $(( $(date +%s) - start )) s: $(tail -1 "$log")"
        python3 - "$log" <<'PY'
import collections, re, sys
lines = [l for l in open(sys.argv[1], errors="replace") if re.match(r"^(FAILED|ERROR) ", l)]
by = collections.Counter()
files = collections.defaultdict(set)
for line in lines:
    what, _, rest = line.partition(" ")
    test, _, msg = rest.partition(" - ")
    key = (what, re.sub(r"\d+", "N", msg.strip())[:140])
    by[key] += 1
    files[key].add(test.split("::")[0])
for (what, msg), n in by.most_common(6):
    print(f"  {n:5d} {what} in {len(files[(what, msg)])} file(s): {msg}")
PY
    } | tee -a "$OUT/survey.txt"
done
