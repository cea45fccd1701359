#!/usr/bin/env bash
# Fetches the encoder models, ONNX Runtime and the labelled data sets into .cache/ (pinned,
# sha256-checked packages).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
install_encoders
install_openvino_runtime
install_datasets
say "encoders in $MOM_CACHE/models, ONNX Runtime at $ORT_DYLIB_PATH (with OpenVINO: $MOM_ORT_OPENVINO), data in $MOM_CACHE/data"
