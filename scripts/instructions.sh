#!/usr/bin/env bash
# Instructions mom-router spends on one ext_proc stream of the rule path (request headers and
# body answered, each reply encoded as gRPC sends it, the stream closed), counted by callgrind:
# benches/stream_instructions.rs runs at two counts and the difference is divided by the streams
# between them, so start-up (loading the policy) cancels out. Unlike CPU time, the count does not
# move with a busy machine: run it in two checkouts to compare commits exactly. Not a test.
#
#   ./scripts/instructions.sh          (needs valgrind: apt-get install valgrind)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
command -v valgrind >/dev/null || die "valgrind is not installed (apt-get install valgrind)"
export CARGO_TARGET_DIR="$(default_target_dir)"
cargo build --release --quiet --example stream_instructions
BIN="$CARGO_TARGET_DIR/release/examples/stream_instructions"
RUN="$MOM_CACHE/instructions"
mkdir -p "$RUN"
FEW=200 MANY=1200
count() { # N: instructions of a run of N streams
  valgrind --tool=callgrind --callgrind-out-file="$RUN/callgrind.$1" "$BIN" "$1" 2>&1 |
    awk '/Collected/ { print $4 }'
}
few=$(count $FEW); many=$(count $MANY)
say "$(( (many - few) / (MANY - FEW) )) instructions per stream ($(git rev-parse --short HEAD)$(git diff --quiet || echo ', uncommitted changes'))"
echo "Where they go: callgrind_annotate --inclusive=yes $RUN/callgrind.$MANY"
