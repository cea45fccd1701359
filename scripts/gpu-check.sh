#!/usr/bin/env bash
# The encoder on an NVIDIA GPU, checked and timed against the CPU in one run. For a machine with
# an NVIDIA GPU and CUDA 13's driver, cargo, and PyPI in reach; Candle's GPU build also needs
# CUDA's toolkit (nvcc on PATH). Not a test: CI has no GPU.
#
#   ./scripts/gpu-check.sh            (report also in .cache/gpu-check/report.txt)
#   ROUNDS=5 ./scripts/gpu-check.sh   (timed passes per case; default 20)
#
# 1. ONNX Runtime 1.31.1 with its CUDA provider (onnxruntime-gpu) and the CUDA 13 libraries it
#    loads (the machine's, or NVIDIA's wheels), pinned and hash-checked (scripts/lib.sh).
# 2. benches/encoder_check.rs built with `--features cuda` (Candle's CUDA kernels, compiled by nvcc
#    for this GPU). Without nvcc it is built without, and Candle's GPU is reported unchecked.
# 3. For candle:cpu, onnx:cpu, candle:cuda and onnx:cuda (one runtime library, onnxruntime-gpu's,
#    which also holds the CPU provider): the reference embeddings, forward passes and domain
#    classification end to end at batch 1, 8 and 32, and the labels compared with the CPU's.
# 4. Where python3 has PyTorch with CUDA and sentence-transformers, the same model through them
#    on the GPU (benches/reference_sentence_transformers.py --device cuda), for comparison.
#
# Exit 0 when every check passed; 1 when one failed or could not run; 2 without an NVIDIA GPU.
# An AMD GPU is not checked here: the onnx backend's `rocm` provider needs an ONNX Runtime built
# with ROCm and otherwise falls back with a one-line reason; Candle has no ROCm backend.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"

if ! command -v nvidia-smi >/dev/null || ! nvidia-smi -L >/dev/null 2>&1; then
  if command -v rocm-smi >/dev/null; then
    echo "error: no NVIDIA GPU here (an AMD GPU is not checked by this script: see its header)" >&2
  else
    echo "error: no NVIDIA GPU here (nvidia-smi finds none); nothing to check" >&2
  fi
  exit 2
fi
REPORT_DIR="$MOM_CACHE/gpu-check"
mkdir -p "$REPORT_DIR"
REPORT="$REPORT_DIR/report.txt"
exec > >(tee "$REPORT") 2>&1

say "GPU"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
install_encoders
install_datasets
install_cuda_onnxruntime
export CARGO_TARGET_DIR="$(default_target_dir)"

status=0
targets=(candle:cpu onnx:cpu onnx:cuda)
if command -v nvcc >/dev/null; then
  say "building encoder_check with Candle's CUDA backend ($(nvcc --version | tail -1))"
  export CUDA_COMPUTE_CAP="${CUDA_COMPUTE_CAP:-$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d .)}"
  # Candle 0.11.1's cudarc knows CUDA up to 13.4; a newer 13.x toolkit builds as 13.4.
  release=$(nvcc --version | sed -n 's/.*release \([0-9]*\)\.\([0-9]*\).*/\1 \2/p')
  read -r major minor <<<"$release"
  if [ "${major:-0}" = 13 ] && [ "${minor:-0}" -gt 4 ]; then
    export CUDARC_CUDA_VERSION="${CUDARC_CUDA_VERSION:-13040}"
  fi
  cargo build --release --quiet --features cuda --example encoder_check
  targets+=(candle:cuda)
else
  say "building encoder_check without Candle's CUDA backend"
  cargo build --release --quiet --example encoder_check
  echo "candle:cuda: NOT CHECKED: nvcc is not on PATH (Candle compiles its CUDA kernels with it)"
  status=1
fi

say "mom-router's encoders: ${targets[*]}"
"$CARGO_TARGET_DIR/release/examples/encoder_check" --runtime "$MOM_ORT_GPU" --rounds "${ROUNDS:-20}" \
  "${targets[@]}" || status=1

if python3 -c 'import sentence_transformers, torch; assert torch.cuda.is_available()' 2>/dev/null; then
  say "PyTorch sentence-transformers on the GPU, for comparison"
  python3 benches/reference_sentence_transformers.py "$MOM_CACHE/models/all-MiniLM-L6-v2" --device cuda || status=1
else
  say "no PyTorch with CUDA and sentence-transformers in python3: no PyTorch comparison"
fi

say "report: $REPORT (exit $status)"
exit "$status"
