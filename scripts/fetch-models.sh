#!/usr/bin/env bash
# Fetches the encoder models and ONNX Runtime into .cache/ (pinned, sha256-checked wheels).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
install_encoders
say "encoders in $MOM_CACHE/models, ONNX Runtime at $ORT_DYLIB_PATH"
