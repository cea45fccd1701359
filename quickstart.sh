#!/usr/bin/env bash
# mom-router quickstart (README command 1): Envoy + mom-router + three model backends on
# loopback, then a handful of requests showing each routing decision and its access-log line.
#
#   ./quickstart.sh          real tiny LLMs served by llama.cpp (downloads ~0.9 GB once, cached)
#   ./quickstart.sh --fake   deterministic FAKE backends that echo the request (no model)
#   add --keep               stay up after the demo until Ctrl-C (Envoy on 127.0.0.1:10000)
#
# Everything started here is stopped on exit, including on Ctrl-C.
set -euo pipefail
source "$(dirname "$0")/scripts/lib.sh"
cd "$MOM_ROOT"

MODE=llm
KEEP=0
for arg in "$@"; do
  case "$arg" in
    --fake) MODE=fake ;;
    --keep) KEEP=1 ;;
    *) die "unknown option $arg (use --fake, --keep)" ;;
  esac
done

command -v cargo >/dev/null || die "cargo is required (https://rustup.rs)"
command -v curl >/dev/null || die "curl is required"
for port in 10000 10001 9901 50051 9190 8101 8102 8103; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    die "port $port is in use; the quickstart needs 8101-8103, 9190, 9901, 10000, 10001, 50051"
  fi
done

export CARGO_TARGET_DIR="$(default_target_dir)"
install_envoy
say "fetching the PII token classifier and ONNX Runtime (pinned, sha256-checked, cached in .cache/)"
install_encoders
say "building mom-router (release)"
cargo build --release --quiet --bin mom-router --example fake_openai
BIN="$CARGO_TARGET_DIR/release"

RUN="$MOM_CACHE/quickstart"
mkdir -p "$RUN"
PIDS=()
cleanup() {
  trap - EXIT INT TERM
  if [ ${#PIDS[@]} -gt 0 ]; then
    say "stopping everything the quickstart started"
    kill "${PIDS[@]}" 2>/dev/null || true
    wait "${PIDS[@]}" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# name port provider-model [chat template]
BACKENDS=(
  "smollm2-135m 8101 SmolLM2-135M-Instruct"
  "qwen2.5-coder-0.5b 8102 Qwen2.5-Coder-0.5B-Instruct"
  "gemma3-270m 8103 gemma-3-270m gemma"
)
if [ "$MODE" = llm ]; then
  say "fetching llama.cpp and the three GGUF models (pinned, sha256-checked, cached in .cache/)"
  install_llms
fi
for line in "${BACKENDS[@]}"; do
  read -r name port provider template <<<"$line"
  if [ "$MODE" = llm ]; then
    say "starting $name on :$port (llama.cpp, $provider)"
    "$MOM_CACHE/llm-venv/bin/python" scripts/llm_backend.py "$port" \
      "$MOM_CACHE/models/$name.gguf" "$provider" ${template:-} >"$RUN/$name.log" 2>&1 &
  else
    say "starting $name on :$port (FAKE backend: echoes the request, no model)"
    "$BIN/examples/fake_openai" "$port" "$name" >"$RUN/$name.log" 2>&1 &
  fi
  PIDS+=($!)
done

say "starting mom-router (ext_proc :50051, admin :9190)"
"$BIN/mom-router" serve --config examples/quickstart/config.yaml >"$RUN/mom-router.log" 2>&1 &
PIDS+=($!)
say "starting Envoy (public :10000, internal :10001, admin :9901)"
"$MOM_ENVOY_BIN" -c envoy/quickstart.yaml --disable-hot-restart --file-flush-interval-msec 100 \
  -l warn >"$RUN/access.log" 2>"$RUN/envoy.log" &
PIDS+=($!)

wait_for() { # URL WHAT SECONDS
  local deadline=$((SECONDS + $3))
  until curl -sf -o /dev/null "$1"; do
    [ $SECONDS -lt $deadline ] || die "$2 did not come up (logs in $RUN)"
    sleep 0.3
  done
}
wait_for http://127.0.0.1:9190/ready mom-router 30
wait_for http://127.0.0.1:9901/ready Envoy 30
for port in 8101 8102 8103; do wait_for "http://127.0.0.1:$port/v1/models" "backend :$port" 120; done

python3 scripts/quickstart_demo.py "$RUN/access.log" "$MODE"

if [ "$KEEP" = 1 ]; then
  say "running; try: curl -s localhost:10000/v1/chat/completions -d '{\"model\":\"mom/auto\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'"
  say "logs in $RUN; Ctrl-C stops everything"
  wait
fi
