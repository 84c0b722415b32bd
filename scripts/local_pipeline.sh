#!/bin/sh
# Run a project's pipeline on this machine with gitlab-ci-local (4.70.1, shell executor),
# the gpuci CI/CD component taken from this checkout instead of fetched from a GitLab:
#
#   scripts/local_pipeline.sh [PROJECT_DIR] [GITLAB_CI_LOCAL_ARGS...]
#
# PROJECT_DIR (default examples/gitlab_project) is copied, never changed: gitlab-ci-local
# writes its .gitlab-ci-local/ (artifacts, logs) into the copy, GPUCI_LOCAL_WORK or a new
# temporary directory, which the last line names. gpuci itself is the one on PATH (an
# activated environment with this checkout installed: `python3 -m gpuci` must work), so
# the jobs install nothing unless GPUCI_INSTALL says how. No request leaves the machine:
# without CI_API_V4_URL there is no baseline to fetch and no note to post, and the log
# says so. The exit code is gitlab-ci-local's: 1 where a job failed (a failing verdict).
set -eu

checkout=$(cd "$(dirname "$0")/.." && pwd)
project=$(cd "${1:-$checkout/examples/gitlab_project}" && pwd)
[ $# -eq 0 ] || shift
if ! command -v gitlab-ci-local >/dev/null 2>&1; then
    echo "local_pipeline.sh: gitlab-ci-local is not installed: npm install --global gitlab-ci-local@4.70.1" >&2
    exit 2
fi
if ! python3 -c 'import gpuci' 2>/dev/null; then
    echo "local_pipeline.sh: python3 cannot import gpuci: activate the environment gpuci is installed in" >&2
    exit 2
fi

work=${GPUCI_LOCAL_WORK:-$(mktemp -d)}
mkdir -p "$work"
copy="$work/$(basename "$project")"
rm -rf "$copy"
cp -R "$project" "$copy"
cd "$copy"
rm -rf .gitlab-ci-local
# gitlab-ci-local reads the project's git data: the branch (main, the default branch) and
# the origin, whose host is CI_SERVER_FQDN.
if [ ! -d .git ]; then
    git init -q -b main
    git add -A
    git -c user.name=gpuci -c user.email=gpuci@localhost -c commit.gpgsign=false \
        commit -q -m "the project as copied"
fi
if ! git remote get-url origin >/dev/null 2>&1; then
    git remote add origin https://gitlab.example.com/local/project.git
    git update-ref refs/remotes/origin/main HEAD
    git symbolic-ref refs/remotes/origin/HEAD refs/remotes/origin/main
fi
host=$(git remote get-url origin | sed -e 's|^[a-z+]*://||' -e 's|^[^@/]*@||' -e 's|[:/].*||')

# gitlab-ci-local resolves `include: component:` by a git clone into its include cache,
# and reuses what it finds there: every gpuci component the pipeline includes is this
# checkout's templates/gpuci.yml, where that clone would have left it.
sed -n 's|^ *- *component: *\$CI_SERVER_FQDN/\(.*\)/gpuci@\([^ ]*\) *$|\1 \2|p' .gitlab-ci.yml |
    while read -r path version; do
        mkdir -p ".gitlab-ci-local/includes/$host/$path/$version/templates"
        cp "$checkout/templates/gpuci.yml" ".gitlab-ci-local/includes/$host/$path/$version/templates/"
        echo "local_pipeline.sh: component $host/$path/gpuci@$version: $checkout/templates/gpuci.yml"
    done

status=0
gitlab-ci-local --shell-isolation --force-shell-executor \
    --ignore-predefined-vars CI_API_V4_URL,CI_JOB_TOKEN \
    --variable "GPUCI_INSTALL=${GPUCI_INSTALL:-true}" "$@" || status=$?
echo "local_pipeline.sh: the project's copy, its artifacts and logs: $copy/.gitlab-ci-local/"
exit "$status"
