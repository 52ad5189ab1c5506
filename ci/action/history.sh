#!/usr/bin/env bash
# The action's history step (`test` only). Says where the previous run's timings are kept
# between jobs and under which cache key: a file under the runner's temporary directory,
# restored from the newest cache of the same job, shard and working directory, and saved
# under a key of this run's own after the check. cargo-leakcheck reads it with `--history`
# to start the slowest tests first and a leaking test's stacks process beside its counting
# process; a verdict never depends on it. Without it, a CI job whose target directory is
# not cached starts as on a first run.
set -uo pipefail

output="${GITHUB_OUTPUT:-/dev/null}"
# shellcheck source=names.sh
. "$(dirname "$0")/names.sh"
if ! split_args; then
  # The check step reports the args it cannot split.
  exit 0
fi
name="$(job_name)"
# Two checks in one job (two workspaces) keep two histories.
where="$(printf '%s' "${LEAKCHECK_WORKDIR:-.}" | cksum | cut -d' ' -f1)"
prefix="leakcheck-history-${RUNNER_OS:-os}-$name-$where-"
dir="${RUNNER_TEMP:-${TMPDIR:-/tmp}}/leakcheck-history/$name-$where"
mkdir -p "$dir"
{
  echo "dir=$dir"
  echo "file=$dir/metrics.json"
  echo "restore-prefix=$prefix"
  echo "key=$prefix${GITHUB_RUN_ID:-local}-${GITHUB_RUN_ATTEMPT:-1}"
} >>"$output"
