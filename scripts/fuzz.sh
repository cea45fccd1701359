#!/usr/bin/env bash
# Coverage-guided fuzzing of the parsers a client or an upstream can reach (fuzz/: chat request
# through the offline request phase, ext_proc message sequences into a stream's state, PII
# detectors and masker, event-stream restorer / usage scanner / assembler, de-obfuscator,
# config compiler, outcomes body, bundle archive import). Each target runs SECONDS (default 60)
# from its committed seed corpus (fuzz/seeds/TARGET) plus what earlier runs found (kept under
# .cache/fuzz, git-ignored); a crash input lands in fuzz/artifacts/TARGET/ and stops the run
# (commit it and a regression test). Prints executions per target. Needs the nightly toolchain
# (rustup) and cargo-fuzz (installed here from crates.io, pinned).
#
#   ./scripts/fuzz.sh [SECONDS] [TARGET]...
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(chat_request extproc pii sse deobfuscate config outcomes bundle)

rustup toolchain list | grep -q '^nightly' || die "cargo fuzz needs the nightly toolchain: rustup toolchain install nightly"
if ! cargo fuzz --version 2>/dev/null | grep -q '0.13.1'; then
  say "installing cargo-fuzz 0.13.1 from crates.io"
  cargo install --locked --quiet cargo-fuzz --version 0.13.1
fi
export CARGO_TARGET_DIR="$(default_target_dir)/fuzz"
cd fuzz
for target in "${TARGETS[@]}"; do
  corpus="$MOM_CACHE/fuzz/corpus/$target"
  mkdir -p "$corpus" "seeds/$target"
  say "fuzzing $target for ${SECONDS_PER_TARGET}s"
  log=$(mktemp)
  if ! cargo +nightly fuzz run --release "$target" "$corpus" "seeds/$target" -- \
      -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 -rss_limit_mb=4096 -print_final_stats=1 \
      >"$log" 2>&1; then
    tail -40 "$log"
    die "$target crashed; the input is in fuzz/artifacts/$target/"
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  echo "  $target: $runs executions in ${SECONDS_PER_TARGET}s, no crash"
  rm -f "$log"
done
