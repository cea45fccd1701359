#!/usr/bin/env bash
# Envoy's own CPU per request for what envoy/quickstart.yaml adds around the ext_proc exchange:
# the same mom-router (rule-only policy) and FAKE backends behind four Envoys started from the
# quickstart configuration, each on its own ports: as shipped, without the jwt_authn filter,
# without the x-mom-* response headers read from dynamic metadata, and without the mom_router access
# log object. Interleaved rounds at concurrency 1 and 16, so a busy moment weighs on all alike;
# prints each Envoy's CPU per request and its ratio to the shipped one. Not a test.
#
#   ./scripts/envoy_cost.sh [COUNT]     (default 2000 requests per Envoy, round and concurrency)
#   ROUNDS=n (default 3); SIGNED=1 sends the quickstart demo's signed JWT on every request, so
#   jwt_authn verifies a signature and mom-router reads its claims (without, it finds no token)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
cd "$MOM_ROOT"
COUNT=${1:-2000}
ROUNDS=${ROUNDS:-3}

export CARGO_TARGET_DIR="$(default_target_dir)"
install_envoy
cargo build --release --quiet --bin mom-router --example fake_openai --example loadgen
BIN="$CARGO_TARGET_DIR/release"
RUN="$MOM_CACHE/envoy-cost"
mkdir -p "$RUN"
stop_on_exit

# The variants: listeners moved by 100 per variant, admin by 10; ext_proc stays on 50051.
VARIANTS=(shipped no-jwt_authn no-metadata-headers no-access-log-fields)
python3 - "$RUN" envoy/quickstart.yaml "${VARIANTS[@]}" <<'EOF'
import re, sys
run, source, names = sys.argv[1], open(sys.argv[2]).read(), sys.argv[3:]

def without_jwt(text):
    start = text.index("                  - name: envoy.filters.http.jwt_authn")
    end = text.index("                  - name:", start + 1)
    return text[:start] + text[end:]

def without_headers(text):
    def added(line):
        return "key: x-mom-" in line and "%DYNAMIC_METADATA(mom_router:" in line
    lines, out, i = text.split("\n"), [], 0
    while i < len(lines):
        if lines[i].strip() == "response_headers_to_add:" and added(lines[i + 1]):
            i += 1
            while added(lines[i]):
                i += 1
            continue
        out.append(lines[i])
        i += 1
    return "\n".join(out)

def without_log_fields(text):
    return "\n".join(l for l in text.split("\n") if not re.match(r'\s+mom_\w+: "%DYNAMIC_METADATA', l))

edits = [lambda t: t, without_jwt, without_headers, without_log_fields]
for n, (name, edit) in enumerate(zip(names, edits)):
    text = edit(source)
    moved = {"10000": 10000 + 100 * n, "10001": 10001 + 100 * n, "9901": 9901 + 10 * n}
    text = re.sub(r"port_value: (10000|10001|9901)\b", lambda m: f"port_value: {moved[m.group(1)]}", text)
    open(f"{run}/{name}.yaml", "w").write(text)
EOF

start_fake_backends "$RUN"
"$BIN/mom-router" serve --config examples/rules/config.yaml >"$RUN/mom-router.log" 2>&1 &
PIDS+=($!)
ENVOYS=()
for name in "${VARIANTS[@]}"; do
  "$MOM_ENVOY_BIN" -c "$RUN/$name.yaml" --disable-hot-restart --concurrency 1 -l error \
    >/dev/null 2>"$RUN/$name.log" &
  PIDS+=($!)
  ENVOYS+=($!)
done
for n in "${!VARIANTS[@]}"; do
  for _ in $(seq 1 100); do curl -sf -o /dev/null "http://127.0.0.1:$((9901 + 10 * n))/ready" && break; sleep 0.1; done
done
for _ in $(seq 1 100); do curl -sf -o /dev/null http://127.0.0.1:9190/ready && break; sleep 0.1; done

cpu_ms() { awk -v hz="$(getconf CLK_TCK)" '{ print int(($14 + $15) * 1000 / hz) }' "/proc/$1/stat"; }
HEADER=""
if [ "${SIGNED:-0}" = 1 ]; then
  # The demo reads its two arguments when imported; only its token() is used here.
  BEARER=$(cd scripts && python3 -c 'import sys; sys.argv[1:] = ["-", "-"]; import quickstart_demo as d
print(d.token({"sub": "load", "roles": ["premium"]}))')
  HEADER="|authorization:Bearer $BEARER"
fi

say "$COUNT requests per Envoy, round and concurrency; $ROUNDS rounds; $(nproc) cores${BEARER:+; a signed JWT on every request}"
for concurrency in 1 16; do
  declare -A spent=()
  for _ in $(seq 1 "$ROUNDS"); do
    for n in "${!VARIANTS[@]}"; do
      before=$(cpu_ms "${ENVOYS[$n]}")
      "$BIN/examples/loadgen" "$COUNT" "$concurrency" \
        "${VARIANTS[$n]}=http://127.0.0.1:$((10000 + 100 * n))/v1/chat/completions$HEADER" >/dev/null
      spent[$n]=$(( ${spent[$n]:-0} + $(cpu_ms "${ENVOYS[$n]}") - before ))
    done
  done
  total=$(( ROUNDS * (COUNT + concurrency * 20) ))
  for n in "${!VARIANTS[@]}"; do
    awk -v c="$concurrency" -v name="${VARIANTS[$n]}" -v ms="${spent[$n]}" -v base="${spent[0]}" -v total="$total" \
      'BEGIN { printf "c=%-3d %-22s Envoy CPU %4d µs/request  x%.2f of shipped\n", c, name, ms * 1000 / total, ms / base }'
  done
  unset spent
done
