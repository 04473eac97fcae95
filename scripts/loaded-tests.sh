#!/usr/bin/env bash
# The test suite beside busy processes, to find tests that a loaded machine
# fails (CI runs on two shared cores; timings that pass on an idle machine
# may not hold there). Starts BUSY processes that spin (default 2, each
# ended by its PID when the run ends, and after 40 minutes in any case),
# then runs `cargo test --workspace --release --no-fail-fast` with any
# further arguments, and prints the failed tests.
#
#   scripts/loaded-tests.sh [BUSY] [-- CARGO TEST ARGS]
#   DUALITY_IO=epoll scripts/loaded-tests.sh     # the loops on epoll, as CI's second pass
#
# Exit status: cargo's. A test that fails here and passes alone is timing
# on scheduling: make it poll for what it waits for, with a deadline far
# beyond what it needs, or assert relations instead of counts.
set -euo pipefail
busy=${1:-2}
shift || true
[[ ${1:-} == -- ]] && shift
pids=()
stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap stop EXIT
for _ in $(seq 1 "$busy"); do
  timeout 2400 sh -c 'while :; do :; done' &
  pids+=($!)
done
log=$(mktemp)
set +e
cargo test --workspace --release --no-fail-fast "$@" >"$log" 2>&1
status=$?
set -e
grep -E '^test .* FAILED$|panicked at' "$log" || echo "no test failed beside $busy busy processes"
rm -f "$log"
exit "$status"
