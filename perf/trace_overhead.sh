#!/usr/bin/env bash
# What tracing costs on the data path: the same Naiad tree serving perf/models/add_sub
# with tracing off and with Triton-mode tracing at trace_rate 1000 (the default rate),
# side by side, perf_analyzer over HTTP at concurrency 8, the order alternating between
# rounds. Prints one line per run: setting, throughput (infer/s), p99 (us).
#   perf/trace_overhead.sh [rounds]      (needs perf_analyzer: source /work/shared/peers/env.sh
#                                         or perf/setup_tools.sh; the machine is shared: noisy)
set -euo pipefail
ROUNDS=${1:-2}
TREE=$(cd "$(dirname "$0")/.." && pwd)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
mkdir -p "$WORK/repo" && cp -rL "$TREE/perf/models/add_sub" "$WORK/repo/"
PA=${PERF_ANALYZER:-perf_analyzer}
run_one() {  # $1: label, then the server's trace flags
  local label=$1; shift
  local port=$((20000 + RANDOM % 20000))
  "$TREE/.venv/bin/naiad" serve --model-repository "$WORK/repo" --host 127.0.0.1 \
    --http-port $port --grpc-port $((port + 1)) --metrics-port $((port + 2)) "$@" \
    > "$WORK/server.log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do
    curl -sf "127.0.0.1:$port/v2/health/ready" > /dev/null && break
    sleep 0.2
  done
  $PA -m add_sub -u "127.0.0.1:$port" --concurrency-range 8 -s 100000 -r 3 \
    --measurement-interval 3000 -f "$WORK/pa.csv" > "$WORK/pa.log" 2>&1 || true
  kill "$pid"; wait "$pid" || true
  python3 - "$label" "$WORK/pa.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[2])))
print(f"{sys.argv[1]:<14} {float(rows[0]['Inferences/Second']):>9.0f} infer/s  p99 {rows[0]['p99 latency']} us")
PY
}
off=()
on=(--trace-config "triton,file=$WORK/trace.json" --trace-config level=TIMESTAMPS --trace-config rate=1000)
for round in $(seq "$ROUNDS"); do
  if (( round % 2 )); then run_one off "${off[@]}"; run_one rate=1000 "${on[@]}"
  else run_one rate=1000 "${on[@]}"; run_one off "${off[@]}"; fi
done
