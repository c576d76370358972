#!/usr/bin/env bash
# The project's test command (README, .ci/run):
#  1. every package under the race detector;
#  2. without the race detector, what it would distort: the heavy
#     hostile-traffic tests (TestFlood*: a million datagrams through a real
#     server, files built only without -race), every zero-allocation test
#     (by convention their names contain "Alloc": the race detector
#     allocates, so they skip under it) and the heap-per-connection test;
#  3. every fuzz target for FUZZTIME (default 10s) from its committed seed
#     corpus, found by name so a new target is never forgotten.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== race tests"
go test -race -count=1 -timeout 15m ./...

echo "== heavy, allocation and memory tests without the race detector"
go test -count=1 -timeout 10m -run '^TestFlood|Alloc|^TestHeapPerConnection' ./...

echo "== fuzzing, ${FUZZTIME:=10s} per target"
fuzzlog=$(mktemp)
trap 'rm -f "$fuzzlog"' EXIT
for file in $(git ls-files '*_test.go' 2>/dev/null || find . -name '*_test.go'); do
  dir=./$(dirname "$file")
  for target in $(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$file"); do
    echo "-- $dir $target"
    # The full output is kept and shown on failure. Go 1.26's fuzzing
    # coordinator can report "context deadline exceeded" as the -fuzztime
    # window closes, with no failing input (go.dev/issue/75804, fixed in Go
    # 1.27): such a run gets one retry. A real failure saves its input under
    # testdata/fuzz and so fails the retry too.
    if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$dir" >"$fuzzlog" 2>&1; then
      cat "$fuzzlog"
      echo "-- $dir $target failed; once more"
      go test -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "$dir" >"$fuzzlog" 2>&1 || { cat "$fuzzlog"; exit 1; }
    fi
    tail -n 3 "$fuzzlog"
  done
done
