#!/bin/sh
# The verdict job: merge the GPU jobs' results, diff them against the target branch's
# verdict, write the reports, and update the merge request's note. The CI/CD component
# (templates/gpuci.yml) runs it from the installed package, so it ships in the wheel.
#
#   sh verdict.sh RESULTS_DIR [GPUCI_DIFF_ARGS...]      e.g. sh verdict.sh out/gpu --allow known
#
# The exit code is gpuci diff's when it is not 0 (1: the verdict failed), taken only after
# the report and the note are written, because a failing verdict is when they matter
# most; else the first failure of merge, report or publish. Fetching the baseline may
# fail: the diff then runs without one.
#
# Reads GitLab's CI_API_V4_URL, CI_PROJECT_ID, CI_PIPELINE_ID,
# CI_MERGE_REQUEST_TARGET_BRANCH_NAME (or CI_DEFAULT_BRANCH), and CI_JOB_TOKEN or
# GPUCI_GITLAB_TOKEN; GPUCI_VERDICT_JOB names the job whose artifact is the baseline
# (default: verdict), taken from the branch's latest finished pipeline that ran it, failed
# or not; GPUCI_POST_NOTE=false posts no note. A token goes to curl on
# stdin, never on a command line, and only to CI_API_V4_URL's host: a redirect (to object
# storage) is followed without it. Never run this script under `set -x`.

set -u

say() {
    printf 'verdict.sh: %s\n' "$*"
}

# Print a command, then run it; its exit status is ours.
run() {
    say "\$ $*"
    "$@"
}

# Percent-encode one path segment (a branch name may hold "/").
urlencode() {
    LC_ALL=C awk -v s="$1" 'BEGIN {
        for (i = 0; i < 256; i++) ord[sprintf("%c", i)] = i
        for (i = 1; i <= length(s); i++) {
            c = substr(s, i, 1)
            if (c ~ /[A-Za-z0-9._~-]/) printf "%s", c
            else printf "%%%02X", ord[c]
        }
    }'
}

# GET $3 into $4 with header "$1: $2"; prints "HTTP-CODE REDIRECT-URL", or "failed".
# The header goes to curl on stdin (-H @-): printf is a shell builtin, so the token is in
# no process's arguments. Without --location, curl hands a redirect back to us.
get() {
    got=$(printf '%s: %s\n' "$1" "$2" \
        | curl --silent --show-error --max-time 60 --retry 2 --header @- \
            --output "$4" --write-out '%{http_code} %{redirect_url}' "$3") || got="failed"
    printf '%s\n' "$got"
}

# GET $1 into $2: with the job token, else (none, or refused) GPUCI_GITLAB_TOKEN (the
# token gpuci publish posts the note with; GitLab Free refuses the job token on these
# endpoints). A redirect (object storage) is followed without a token. 0 when it arrived.
api_get() {
    partial="$2.part"
    answer="no job token"
    if [ -n "${CI_JOB_TOKEN:-}" ]; then
        answer=$(get JOB-TOKEN "$CI_JOB_TOKEN" "$1" "$partial")
    fi
    case $answer in
        401\ * | 403\ * | 404\ * | "no job token")
            if [ -n "${GPUCI_GITLAB_TOKEN:-}" ]; then
                [ -n "${CI_JOB_TOKEN:-}" ] && say "the job token got HTTP ${answer%% *}; once more with GPUCI_GITLAB_TOKEN"
                answer=$(get PRIVATE-TOKEN "$GPUCI_GITLAB_TOKEN" "$1" "$partial")
            fi
            ;;
    esac
    case $answer in
        30[1278]\ ?*)
            # To object storage or a CDN, which must not see a token.
            curl --silent --show-error --fail --location --max-time 60 --retry 2 \
                --output "$partial" "${answer#* }" || answer="failed to follow the redirect"
            ;;
    esac
    case $answer in
        200\ * | 30[1278]\ ?*)
            mv "$partial" "$2"
            return 0
            ;;
    esac
    rm -f "$partial"
    case $answer in
        [0-9][0-9][0-9]\ *) say "GitLab answered HTTP ${answer%% *}" ;;
        *) say "the download $answer" ;;
    esac
    return 1
}

# Python reads GitLab's JSON answers (gpuci's own interpreter: it is installed).
# pipelines FILE: "ID STATUS" per pipeline, newest first, but this pipeline's.
# jobs FILE NAME: the id of the newest job named NAME that finished and kept artifacts.
json_pick() {
    python3 - "$@" <<'PYTHON'
import json, os, sys
what, path, name = sys.argv[1], sys.argv[2], sys.argv[3:]
try:
    with open(path, encoding="utf-8") as answer:
        items = json.load(answer)
    if what == "pipelines":
        for pipeline in items:
            if str(pipeline["id"]) != os.environ.get("CI_PIPELINE_ID"):
                print(pipeline["id"], pipeline.get("status", "?"))
    else:
        for job in sorted(items, key=lambda job: -job["id"]):
            kept = any(a.get("file_type") == "archive" for a in job.get("artifacts") or [])
            if [job["name"]] == name and job["status"] in ("success", "failed") and kept:
                print(job["id"])
                break
except (ValueError, TypeError, KeyError, AttributeError) as error:
    print(f"verdict.sh: GitLab's list of {what} is not what its API returns: {error!r}")
    sys.exit(1)
PYTHON
}

# Download to $1 the verdict.json of $VERDICT_JOB in the latest finished pipeline of the
# target branch that ran it, failed or not. Not GitLab's artifacts-by-ref endpoint: it
# serves only the latest *successful* pipeline's, and the default branch's pipeline fails
# while it has findings, so `--allow known` could never see them.
fetch_baseline() {
    ref=${CI_MERGE_REQUEST_TARGET_BRANCH_NAME:-${CI_DEFAULT_BRANCH:-}}
    if [ -z "${CI_API_V4_URL:-}" ] || [ -z "${CI_PROJECT_ID:-}" ] || [ -z "$ref" ] \
        || [ -z "${CI_JOB_TOKEN:-}${GPUCI_GITLAB_TOKEN:-}" ]; then
        say "not in a GitLab job (no CI_API_V4_URL, CI_PROJECT_ID, branch or token)"
        return 1
    fi
    if ! command -v curl >/dev/null 2>&1; then
        say "curl is not installed"
        return 1
    fi
    api="${CI_API_V4_URL%/}/projects/$(urlencode "$CI_PROJECT_ID")"
    answer_file="$1.api"
    say "baseline: the $VERDICT_JOB job of branch $ref's latest finished pipelines"
    if ! api_get "$api/pipelines?ref=$(urlencode "$ref")&scope=finished&order_by=id&sort=desc&per_page=$PIPELINES" "$answer_file"; then
        rm -f "$answer_file"
        return 1
    fi
    if ! pipelines=$(json_pick pipelines "$answer_file"); then
        printf '%s\n' "$pipelines"
        rm -f "$answer_file"
        return 1
    fi
    printf '%s\n' "$pipelines" | while read -r pipeline status; do
        [ -n "$pipeline" ] || continue
        api_get "$api/pipelines/$pipeline/jobs?per_page=100" "$answer_file" || exit 1
        if ! job=$(json_pick jobs "$answer_file" "$VERDICT_JOB"); then
            printf '%s\n' "$job"
            exit 1
        fi
        [ -n "$job" ] || continue
        say "baseline: job $job of pipeline $pipeline ($status)"
        api_get "$api/jobs/$job/artifacts/$VERDICT_PATH" "$1" || exit 1
        exit 0
    done
    found=$?
    rm -f "$answer_file"
    if [ "$found" -ne 0 ] || [ ! -f "$1" ]; then
        [ "$found" -eq 0 ] && say "no $VERDICT_JOB job with artifacts in branch $ref's latest $PIPELINES finished pipelines"
        return 1
    fi
    return 0
}

VERDICT_JOB=${GPUCI_VERDICT_JOB:-verdict} # the job whose artifact is the baseline
PIPELINES=5 # how many of the branch's latest finished pipelines may lack that job
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
VERDICT_PATH=$dir/verdict.json # where this job writes it, and so where the baseline's job did
baseline=$dir/baseline.json

rm -f "$baseline"
if fetch_baseline "$baseline"; then
    say "baseline: $baseline"
else
    say "no baseline: every isolation regression counts as new"
fi

status=0
run gpuci merge "$dir" -o "$dir/junit.xml"
merged=$?

if [ -f "$baseline" ]; then
    run gpuci diff "$dir" --baseline "$baseline" -o "$dir/verdict.json" "$@"
    status=$?
    if [ "$status" -ge 2 ]; then
        say "gpuci diff failed with the baseline (exit $status); once more without it"
        run gpuci diff "$dir" -o "$dir/verdict.json" "$@"
        status=$?
    fi
else
    run gpuci diff "$dir" -o "$dir/verdict.json" "$@"
    status=$?
fi
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
