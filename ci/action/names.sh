# Sourced by the action's steps: how they split the args input and name what a job keeps.

# Splits LEAKCHECK_ARGS as a shell would into the array `args`, so quoted filters stay
# whole; false when it cannot be split.
split_args() {
  eval "args=(${LEAKCHECK_ARGS:-})"
}

# The job's name for what it keeps: LEAKCHECK_ARTIFACT_NAME, else `leakcheck-<job>` plus
# the shard of a `--partition M/N` argument in `args` (shards of one job check different
# tests). Without the attempt, which the artifact name adds and a cache must not.
job_name() {
  local name="${LEAKCHECK_ARTIFACT_NAME:-}"
  if [ -n "$name" ]; then
    echo "$name"
    return
  fi
  name="leakcheck-${GITHUB_JOB:-job}"
  local prev="" part arg shard
  for arg in "${args[@]}"; do
    part=""
    case "$arg" in
      --partition=*) part="${arg#--partition=}" ;;
      *) if [ "$prev" = "--partition" ]; then part="$arg"; fi ;;
    esac
    if [ -n "$part" ]; then
      # hash:2/3 -> shard-2-of-3
      shard="${part#*:}"
      name="$name-shard-${shard%/*}-of-${shard#*/}"
    fi
    prev="$arg"
  done
  echo "$name"
}
