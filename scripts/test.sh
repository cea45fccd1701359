#!/usr/bin/env bash
# mom-router's test command (README command 2, run by .ci/run): installs the pinned Envoy, the
# encoder models, ONNX Runtime (the default build and the OpenVINO one), the labelled data,
# redis-server, and llama.cpp with the tiny GGUF models (tests run a confidence cascade and the
# three protocols on them), the official
# Anthropic and OpenAI SDKs, Helm and kubernetes-validate (the chart's
# checks), checks formatting and lints, validates every Envoy config, and runs every test,
# including the suites that drive a real Envoy and the real encoders, then a short fuzz smoke.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"

command -v cargo >/dev/null || die "cargo is required (https://rustup.rs)"
export CARGO_TARGET_DIR="$(default_target_dir)"
prune_test_binaries "$CARGO_TARGET_DIR"
install_envoy
say "envoy: $("$MOM_ENVOY_BIN" --version | grep -o 'version: [^ ]*')"
install_encoders
install_openvino_runtime
say "encoders: all-MiniLM-L6-v2 (safetensors, int8 onnx), ONNX Runtime $ORT_DYLIB_PATH"
say "ONNX Runtime with the OpenVINO execution provider: $MOM_ORT_OPENVINO"
install_datasets
install_redis
install_llms
install_sdks
say "llama.cpp (xllamacpp) and the GGUF models: $MOM_CACHE/models"
say "redis: $("$MOM_REDIS_BIN" --version | grep -o 'v=[^ ]*')"
install_helm
install_kubernetes_validate
say "helm: $("$MOM_HELM_BIN" version --short), $("$MOM_K8S_VALIDATE" --version)"

say "cargo fmt --check"
cargo fmt --check

say "cargo clippy --all-targets -- -D warnings"
cargo clippy --all-targets --quiet -- -D warnings

say "envoy --mode validate envoy/*.yaml"
for config in envoy/*.yaml; do
  "$MOM_ENVOY_BIN" --mode validate -c "$config" -l error >/dev/null \
    || die "envoy rejected $config"
  echo "  $config OK"
done

say "cargo test (benches are compiled by clippy above, not run)"
cargo test

say "fuzz smoke: every fuzz target for ${MOM_FUZZ_SMOKE_SECONDS:-15}s (long runs: ./scripts/fuzz.sh)"
./scripts/fuzz.sh "${MOM_FUZZ_SMOKE_SECONDS:-15}"
