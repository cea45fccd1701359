#!/usr/bin/env bash
# Coverage-guided fuzzing of the parsers a client or an upstream can reach (fuzz/: chat request
# through the offline request phase, ext_proc message sequences into a stream's state, PII
# detectors and masker, event-stream restorer / usage scanner / assembler, de-obfuscator,
# config compiler, outcomes body, bundle archive import). Each target runs SECONDS (default 60)
# from its committed seed corpus (fuzz/seeds/TARGET) plus what earlier runs found (kept under
# .cache/fuzz, git-ignored); a crash input lands in fuzz/artifacts/TARGET/ and stops the run
# (commit it and a regression test). Prints executions per target.
#
# libFuzzer (the libfuzzer-sys crate) with rustc's coverage instrumentation, built by the
# machine's stable toolchain: the same codegen flags cargo-fuzz passes, without a sanitizer
# (mom-router forbids unsafe code). `./scripts/test.sh` runs a short smoke of every target.
#
#   ./scripts/fuzz.sh [SECONDS] [TARGET]...
#   FUZZ_RUNS=1000000 ./scripts/fuzz.sh 3600 config   (stop each target after that many
#                                                       executions, SECONDS still the cap)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
SECONDS_PER_TARGET=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(chat_request extproc pii sse deobfuscate config outcomes bundle)

export CARGO_TARGET_DIR="$(default_target_dir)/fuzz"
TRIPLE=$(rustc -vV | sed -n 's/^host: //p')
say "building the fuzz targets (libFuzzer, coverage-instrumented, release)"
# --target keeps the flags off build scripts and proc macros, which must not be instrumented.
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks" \
  cargo build --quiet --locked --release --manifest-path fuzz/Cargo.toml --target "$TRIPLE" \
  $(printf -- '--bin %s ' "${TARGETS[@]}")
BIN="$CARGO_TARGET_DIR/$TRIPLE/release"
cd fuzz
for target in "${TARGETS[@]}"; do
  corpus="$MOM_CACHE/fuzz/corpus/$target"
  mkdir -p "$corpus" "seeds/$target" "artifacts/$target"
  say "fuzzing $target for ${SECONDS_PER_TARGET}s"
  log=$(mktemp)
  if ! "$BIN/$target" "$corpus" "seeds/$target" -artifact_prefix="artifacts/$target/" \
      -max_total_time="$SECONDS_PER_TARGET" -max_len=65536 -rss_limit_mb=4096 \
      ${FUZZ_RUNS:+-runs="$FUZZ_RUNS"} -print_final_stats=1 >"$log" 2>&1; then
    tail -40 "$log"
    die "$target crashed; the input is in fuzz/artifacts/$target/"
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  took=$(grep -o 'Done [0-9]* runs in [0-9]* second' "$log" | grep -o '[0-9]* second' || echo "${SECONDS_PER_TARGET} second")
  echo "  $target: $runs executions in ${took}s, no crash"
  rm -f "$log"
done
