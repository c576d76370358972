#!/usr/bin/env bash
# The project's test command (README, .ci/run):
#  1. every package under the race detector;
#  2. without the race detector, what it would distort: the heavy
#     hostile-traffic tests (TestFlood*: a million datagrams through a real
#     server, files built only without -race), every zero-allocation test
#     (by convention their names contain "Alloc": the race detector
#     allocates, so they skip under it) and the heap-per-connection test;
#  3. every fuzz target for FUZZTIME (default 10s) from its committed seed
#     corpus, found by name so a new target is never forgotten; a target
#     fails when the fuzzer finds an input, never for the machine's load
#     (no retries).
# The C client's tests (clients/c) run in step 1: they build the C library
# with the system's compilers (scripts/deps.sh installs them first) and run
# its libFuzzer driver for FUZZTIME_C (60s here; 5s in a plain go test).
# Each step covers every module of the repository: the library (the root)
# and bench/, the benchmark harness, a module of its own so that the peers
# it measures against (kcp-go, quic-go) stay out of the library's go.mod.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/deps.sh
export FUZZTIME_C=${FUZZTIME_C:-60s}

modules=(. bench)

echo "== race tests"
for m in "${modules[@]}"; do
  echo "-- module $m"
  go -C "$m" test -race -count=1 -timeout 15m ./...
done

echo "== heavy, allocation and memory tests without the race detector"
for m in "${modules[@]}"; do
  echo "-- module $m"
  go -C "$m" test -count=1 -timeout 10m -run '^TestFlood|Alloc|^TestHeapPerConnection' ./...
done

# moduleof prints the directory of the go.mod that owns directory $1
# (relative to the root, "." for the root's).
moduleof() {
  local d=$1
  while [ "$d" != "." ] && [ ! -f "$d/go.mod" ]; do d=$(dirname "$d"); done
  echo "$d"
}

# countfiles prints how many files are under directory $1 (0 when there is
# no such directory: a target without a committed corpus).
countfiles() {
  if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi
}

echo "== fuzzing, ${FUZZTIME:=10s} per target"
fuzzlog=$(mktemp)
trap 'rm -f "$fuzzlog"' EXIT
for file in $(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go'); do
  dir=$(dirname "$file")
  mod=$(moduleof "$dir")
  # The package as go test names it from its module's directory.
  if [ "$mod" = "." ]; then pkg=./$dir; else pkg=.${dir#"$mod"}; fi
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "-- ./$dir $target"
    # The full output is kept and shown on failure. The outcome is what
    # the fuzzer found, not how busy the machine was: a failing input is
    # always saved under testdata/fuzz (and reported as "Failing input
    # written to"), and fails the step. Go 1.26's fuzzing coordinator can
    # also exit non-zero with "context deadline exceeded" as the
    # -fuzztime window closes on a loaded machine, having found nothing
    # (go.dev/issue/75804, fixed in Go 1.27): that run passes, said so.
    corpus="$dir/testdata/fuzz/$target"
    saved_before=$(countfiles "$corpus")
    if ! go -C "$mod" test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$pkg" >"$fuzzlog" 2>&1; then
      saved_after=$(countfiles "$corpus")
      if [ "$saved_after" -eq "$saved_before" ] && ! grep -q "Failing input written to" "$fuzzlog" &&
        grep -q "context deadline exceeded" "$fuzzlog"; then
        echo "-- ./$dir $target: nothing found; the coordinator's deadline report at the end of -fuzztime (go.dev/issue/75804) is not a failure"
      else
        cat "$fuzzlog"
        echo "-- ./$dir $target failed"
        exit 1
      fi
    fi
    tail -n 3 "$fuzzlog"
  done
done
