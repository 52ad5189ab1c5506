#!/usr/bin/env bash
# The action's check step. Runs cargo-leakcheck and records, as step outputs, its exit code,
# the report's location (written by cargo-leakcheck itself to $GITHUB_OUTPUT) and the
# artifact name. It never fails itself, so that the upload step can run; the action's last
# step fails the job with the recorded code.
set -uo pipefail

command="${LEAKCHECK_COMMAND:-test}"
output="${GITHUB_OUTPUT:-/dev/null}"

case "$command" in
  test | nextest | merge | bench | run) ;;
  *)
    echo "::error title=cargo-leakcheck::the action's command must be test, nextest, merge, bench or run, not '$command'"
    echo "exit-code=2" >>"$output"
    exit 0
    ;;
esac

# shellcheck source=names.sh
. "$(dirname "$0")/names.sh"
if ! split_args; then
  echo "::error title=cargo-leakcheck::cannot split the args input: ${LEAKCHECK_ARGS:-}"
  echo "exit-code=2" >>"$output"
  exit 0
fi

# A name unique per job, shard and attempt: artifact names must be unique in a run.
name="$(job_name)"
if [ -z "${LEAKCHECK_ARTIFACT_NAME:-}" ] && [ "${GITHUB_RUN_ATTEMPT:-1}" != "1" ]; then
  name="$name-attempt-$GITHUB_RUN_ATTEMPT"
fi
echo "artifact-name=$name" >>"$output"

# A base run to compare with: only when there is one (until main has run once there is
# none, and the run is judged as without it).
case "$command" in
  test | nextest | merge)
    # First: what follows `--` in the args is the test filters' (or nextest's).
    if [ -n "${LEAKCHECK_BASELINE:-}" ] && [ -e "$LEAKCHECK_BASELINE" ]; then
      own=(--baseline "$LEAKCHECK_BASELINE")
      if [ -n "${LEAKCHECK_FAIL_ON:-}" ]; then own+=(--fail-on "$LEAKCHECK_FAIL_ON"); fi
      args=("${own[@]}" "${args[@]}")
    elif [ -n "${LEAKCHECK_BASELINE:-}" ]; then
      echo "::notice title=cargo-leakcheck::no base report at '$LEAKCHECK_BASELINE' yet: every leak counts"
    fi
    ;;
esac

# The previous run's timings, kept by the history step (`test` only).
history="${LEAKCHECK_HISTORY:-}"
if [ "$command" = test ] && [ -n "$history" ]; then
  args=(--history "$history" "${args[@]}")
fi

echo "cargo leakcheck $command --annotations github ${args[*]}"
cargo leakcheck "$command" --annotations github "${args[@]}"
code=$?
echo "exit-code=$code" >>"$output"
if [ "$command" = test ] && [ -n "$history" ] && [ -s "$history" ]; then
  echo "history-written=true" >>"$output"
fi
exit 0
