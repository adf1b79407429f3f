#!/usr/bin/env bash
# Side by side: envoyproxy/ratelimit, gubernator and Sluice's decider under
# the same load, in one run (docs/benchmarks.md, "Side by side").
#
# Each server runs at its defaults, with a Redis of its own (gubernator
# keeps its counts in memory and needs none). One rule per client_id,
# 10^6 a second, strict counting, 10,000 client ids, so that every check
# is admitted. sluice bench loads each with raw HTTP/2 frames (-raw), a
# fraction of a gRPC client's CPU per call: envoyproxy/ratelimit and the
# decider over the Envoy RLS, gubernator over its own GetRateLimits.
# Rounds at each concurrency run in turn, server after server. Each line
# is one round: decisions/s, p50, p99, the server's and its Redis's CPU
# per decision; each block ends with every server's peak RSS so far.
#
#   make build
#   RATELIMIT=/path/to/ratelimit GUBERNATOR=/path/to/gubernator deploy/bench/side-by-side.sh
#
# Build envoyproxy/ratelimit and gubernator from their sources:
#   go mod download -json github.com/envoyproxy/ratelimit@latest   # its Dir
#   (cd DIR && go build -o /tmp/ratelimit ./src/service_cmd)
#   go mod download -json github.com/gubernator-io/gubernator/v2@v2.13.0   # copy its Dir, chmod -R u+w
#   (cd COPY && GOFLAGS=-mod=mod go build -o /tmp/gubernator ./cmd/gubernator)
#
# Each server first answers WARMUP checks unmeasured, as a server in service
# has: connections open, goroutines made, heaps grown.
#
# Settings: CALLERS ("64 256"), ROUNDS (3), N (checks a round, 200000),
# WARMUP (checks, 20000),
# BIN (bin), DATABASE_URL (a PostgreSQL database for Sluice's control
# plane, emptied first; default postgres://postgres@127.0.0.1:5432/sluice_sidebyside).
set -euo pipefail

: "${RATELIMIT:?the path of the envoyproxy/ratelimit binary}"
: "${GUBERNATOR:?the path of the gubernator binary}"
CALLERS=${CALLERS:-"64 256"}
ROUNDS=${ROUNDS:-3}
N=${N:-200000}
WARMUP=${WARMUP:-20000}
BIN=${BIN:-bin}
DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/sluice_sidebyside?sslmode=disable}
WORK=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT

# wait_port HOST:PORT waits until something listens there.
wait_port() {
	for _ in $(seq 200); do
		if (exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null; then return 0; fi
		sleep 0.1
	done
	echo "nothing listens on $1" >&2
	exit 1
}

# redis PORT starts a Redis of its own on PORT.
redis() {
	redis-server --port "$1" --bind 127.0.0.1 --save "" --appendonly no --dir "$WORK" \
		--logfile "$WORK/redis-$1.log" --daemonize no &
	PIDS+=($!)
	wait_port "127.0.0.1:$1"
}

# peak PID is the peak resident set of a process, in MB.
peak() { awk '/VmHWM/ {printf "%.0f MB", $2/1024}' "/proc/$1/status"; }

# envoyproxy/ratelimit, on its Redis, with its configuration file.
redis 26380
mkdir -p "$WORK/rt/ratelimit/config"
cat >"$WORK/rt/ratelimit/config/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: client_id
    rate_limit:
      unit: second
      requests_per_unit: 1000000
EOF
USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL=127.0.0.1:26380 \
	RUNTIME_ROOT="$WORK/rt" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
	GRPC_HOST=127.0.0.1 GRPC_PORT=28081 HOST=127.0.0.1 PORT=28080 DEBUG_HOST=127.0.0.1 DEBUG_PORT=28082 "$RATELIMIT" >"$WORK/ratelimit.log" 2>&1 &
RL=$!
PIDS+=($RL)

# gubernator, one node.
GUBER_GRPC_ADDRESS=127.0.0.1:29051 GUBER_HTTP_ADDRESS=127.0.0.1:29050 GUBER_ADVERTISE_ADDRESS=127.0.0.1:29051 \
	GUBER_MEMBERLIST_ADDRESS=127.0.0.1:29052 GUBER_MEMBERLIST_BIND_ADDRESS=127.0.0.1:29052 \
	GUBER_MEMBERLIST_KNOWN_NODES=127.0.0.1:29052 GUBER_LOG_LEVEL=warn "$GUBERNATOR" >"$WORK/gubernator.log" 2>&1 &
GUB=$!
PIDS+=($GUB)

# Sluice: a control plane, the same file imported, a decider on its Redis.
redis 26381
DB=${DATABASE_URL##*/}
DB=${DB%%\?*}
psql "${DATABASE_URL/\/$DB/\/postgres}" -qc "DROP DATABASE IF EXISTS $DB" -c "CREATE DATABASE $DB" >/dev/null
export SLUICE_OPERATOR_KEY=sk_operator_sidebyside SLUICE_DECIDER_KEY=sk_decider_sidebyside
DATABASE_URL=$DATABASE_URL "$BIN/controlplane" -addr 127.0.0.1:28181 -admin-addr off >"$WORK/controlplane.log" 2>&1 &
PIDS+=($!)
wait_port 127.0.0.1:28181
export SLUICE_SERVER=http://127.0.0.1:28181 SLUICE_KEY=$SLUICE_OPERATOR_KEY
"$BIN/sluice" import "$WORK/rt/ratelimit/config/bench.yaml" >/dev/null
export SLUICE_CHECK_KEY
SLUICE_CHECK_KEY=$("$BIN/sluice" keys create -kind check -tenant bench -json | tr ',' '\n' | sed -n 's/.*"secret": *"\([^"]*\)".*/\1/p')
REDIS_URL=redis://127.0.0.1:26381 "$BIN/dataplane" -addr 127.0.0.1:28180 -grpc-addr 127.0.0.1:28189 -admin-addr off \
	-control-plane http://127.0.0.1:28181 -state-file "$WORK/decider.pb" -events-spool off >"$WORK/decider.log" 2>&1 &
SL=$!
PIDS+=($SL)

wait_port 127.0.0.1:28081
wait_port 127.0.0.1:29051
wait_port 127.0.0.1:28189
sleep 2 # the decider's first configuration

first=${CALLERS%% *}
if [ "$WARMUP" -gt 0 ]; then
	"$BIN/sluice-bench" -rls 127.0.0.1:28081 -domain bench -raw -c "$first" -n "$WARMUP" >/dev/null
	"$BIN/sluice-bench" -gubernator 127.0.0.1:29051 -raw -c "$first" -n "$WARMUP" >/dev/null
	"$BIN/sluice-bench" -rls 127.0.0.1:28189 -domain bench -raw -c "$first" -n "$WARMUP" >/dev/null
fi

for c in $CALLERS; do
	echo "== $c callers, $N checks a round"
	for r in $(seq "$ROUNDS"); do
		printf 'envoyproxy/ratelimit %s: ' "$r"
		"$BIN/sluice-bench" -rls 127.0.0.1:28081 -domain bench -raw -c "$c" -n "$N" -pid "$RL" -redis 127.0.0.1:26380 | tail -n +2 | tr '\n' ' '
		echo
		printf 'gubernator %s: ' "$r"
		"$BIN/sluice-bench" -gubernator 127.0.0.1:29051 -raw -c "$c" -n "$N" -pid "$GUB" | tail -n +2 | tr '\n' ' '
		echo
		printf 'sluice %s: ' "$r"
		"$BIN/sluice-bench" -rls 127.0.0.1:28189 -domain bench -raw -c "$c" -n "$N" -pid "$SL" -redis 127.0.0.1:26381 | tail -n +2 | tr '\n' ' '
		echo
	done
	echo "peak RSS: envoyproxy/ratelimit $(peak $RL), gubernator $(peak $GUB), sluice $(peak $SL)"
done
