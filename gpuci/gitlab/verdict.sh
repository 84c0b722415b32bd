#!/bin/sh
# The verdict job of `jobs: modes`: merge the GPU jobs' results, diff them against the
# target branch's verdict, write the reports, and update the merge request's note. The
# CI/CD component (templates/gpuci.yml) runs it from the installed package, so it ships in
# the wheel.
#
#   sh verdict.sh RESULTS_DIR [GPUCI_DIFF_ARGS...]      e.g. sh verdict.sh out/gpu --allow known
#
# The exit code is gpuci diff's when it is not 0 (1: the verdict failed), taken only after
# the report and the note are written, because a failing verdict is when they matter
# most; else the first failure of merge, report or publish. The baseline comes from
# `python3 -m gpuci.gitlab.baseline` (gpuci's interpreter), which reads GitLab's CI
# variables and says why there is none where there is none; GPUCI_POST_NOTE=false posts
# no note.

set -u

say() {
    printf 'verdict.sh: %s\n' "$*"
}

# Print a command, then run it; its exit status is ours.
run() {
    say "\$ $*"
    "$@"
}

if [ $# -lt 1 ] || [ -z "$1" ]; then
    echo "usage: verdict.sh RESULTS_DIR [GPUCI_DIFF_ARGS...]" >&2
    exit 2
fi
dir=${1%/}
shift
if [ ! -d "$dir" ]; then
    say "no results directory $dir: did the GPU jobs run and upload their artifacts?"
    exit 3
fi
baseline=$dir/baseline.json

# the target branch's verdict, where its latest finished pipelines kept one
python3 -m gpuci.gitlab.baseline "$dir" -o "$baseline"

run gpuci merge "$dir" -o "$dir/junit.xml"
merged=$?

if [ -f "$baseline" ]; then
    run gpuci diff "$dir" --baseline "$baseline" -o "$dir/verdict.json" "$@"
else
    run gpuci diff "$dir" -o "$dir/verdict.json" "$@"
fi
status=$?
if [ "$status" -ge 2 ]; then
    say "gpuci diff failed (exit $status): no verdict, no report"
    exit "$status"
fi

run gpuci report "$dir/verdict.json" --html "$dir/report.html" --markdown "$dir/comment.md"
reported=$?
if [ "$reported" -ne 0 ]; then
    say "gpuci report failed (exit $reported): nothing to publish"
    [ "$status" -ne 0 ] && exit "$status"
    exit "$reported"
fi

if [ "${GPUCI_POST_NOTE:-true}" = "false" ]; then
    say "post-note is false: no note on the merge request"
    published=0
else
    run gpuci publish "$dir/comment.md"
    published=$?
fi

for code in "$merged" "$published"; do
    [ "$status" -eq 0 ] && status=$code
done
say "exit $status"
exit "$status"
