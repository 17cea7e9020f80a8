#!/usr/bin/env bash
# A whole tjobs cluster on one machine, no Docker: 2 MariaDB servers, etcd, Redis and N node processes.
#
#   scripts/cluster.sh up [N]     start the services (if not answering) and N nodes (default 3)
#   scripts/cluster.sh infra      start only the services; writes $DIR/env (URLs) for tests and tools
#   scripts/cluster.sh status     what answers, with PIDs, and GET /v1/cluster of node 1
#   scripts/cluster.sh down       stop ONLY the processes this script started (PIDs in $DIR/*.pid)
#
# Environment (all optional):
#   TJOBS_CLUSTER_DIR        state dir (default <repo>/.cluster): data, logs, pids, node configs, env
#   TJOBS_CLUSTER_MYSQL_PORTS   default "3307 3308" (one mariadbd each; the 8 instances map onto them)
#   TJOBS_CLUSTER_ETCD_PORT     default 23791 (peer port +1); never the shared etcd on 2379
#   TJOBS_CLUSTER_REDIS_PORT    default 6390
#   TJOBS_CLUSTER_API_PORT      first node's API port (default 18081; node i gets +i-1)
#   TJOBS_CLUSTER_TOPOLOGY      default 8x4x16
#   TJOBS_CLUSTER_HOT_TIER      auto | redis | dbpoll (default auto: Redis)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
DIR="${TJOBS_CLUSTER_DIR:-$ROOT/.cluster}"
case "$DIR" in /*) ;; *) DIR="$PWD/$DIR" ;; esac
HOST=127.0.0.1
read -r -a MYSQL_PORTS <<<"${TJOBS_CLUSTER_MYSQL_PORTS:-3307 3308}"
ETCD_PORT="${TJOBS_CLUSTER_ETCD_PORT:-23791}"
REDIS_PORT="${TJOBS_CLUSTER_REDIS_PORT:-6390}"
API_PORT="${TJOBS_CLUSTER_API_PORT:-18081}"
TOPOLOGY="${TJOBS_CLUSTER_TOPOLOGY:-8x4x16}"
HOT_TIER="${TJOBS_CLUSTER_HOT_TIER:-auto}"
PYTHON="${TJOBS_PYTHON:-$ROOT/.venv/bin/python}"

log() { printf '[cluster] %s\n' "$*" >&2; }
die() { printf '[cluster] error: %s\n' "$*" >&2; exit 1; }

# The PID recorded for NAME if that process is alive and still runs BINARY (guards against PID reuse).
alive_pid() {
    local name="$1" binary="$2" pid
    [ -f "$DIR/$name.pid" ] || return 1
    pid="$(cat "$DIR/$name.pid")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$binary"* ]] || return 1
    # A killed server not yet reaped is a zombie: gone, whatever its comm says (so `infra` restarts it).
    [[ "$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)" != Z ]] || return 1
    echo "$pid"
}

spawn() {  # spawn NAME CMD...: detached, its own session, PID recorded
    local name="$1"
    shift
    rm -f "$DIR/$name.pid"
    bash "$ROOT/scripts/detach.sh" "$DIR/$name.pid" "$PWD" "$@" >>"$DIR/$name.log" 2>&1
    local i
    for i in $(seq 50); do [ -s "$DIR/$name.pid" ] && return 0; sleep 0.1; done
    die "$name did not start; see $DIR/$name.log"
}

wait_until() {  # wait_until SECONDS DESCRIPTION CMD...
    local limit="$1" what="$2" deadline
    shift 2
    deadline=$((SECONDS + limit))
    until "$@" >/dev/null 2>&1; do
        [ "$SECONDS" -ge "$deadline" ] && die "$what did not answer within ${limit}s (logs in $DIR)"
        sleep 0.2
    done
}

mariadb_answers() { mariadb --no-defaults --protocol=TCP -h "$HOST" -P "$1" -u root --connect-timeout=2 -Nse 'SELECT 1'; }
etcd_answers() { timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1 && printf 'GET /version HTTP/1.0\r\n\r\n' >&3 && grep -q etcdserver <&3"; }
redis_answers() { [ "$(timeout 2 redis-cli -h "$HOST" -p "$1" ping 2>/dev/null)" = PONG ]; }

start_mariadb() {
    local index="$1" port="$2" name="mariadb$1" data="$DIR/mariadb$1"
    if alive_pid "$name" mariadbd >/dev/null || mariadb_answers "$port" >/dev/null 2>&1; then return 0; fi
    # A temporary directory of its own: a starting mariadbd deletes every #sql* file in its tmpdir, and in
    # the shared /tmp those include the temporary tables of another rig's mariadb-install-db at work.
    local tmp="$DIR/$name.tmp"
    mkdir -p "$tmp"
    if [ ! -d "$data/mysql" ]; then
        mkdir -p "$data"
        mariadb-install-db --no-defaults --user=root --datadir="$data" --auth-root-authentication-method=normal \
            --skip-test-db --tmpdir="$tmp" >>"$DIR/$name.log" 2>&1 \
            || { rm -rf "$data"; die "mariadb-install-db failed (its half-made datadir removed); see $DIR/$name.log"; }
    fi
    log "mariadb $index: starting on $HOST:$port"
    spawn "$name" mariadbd --no-defaults --user=root --datadir="$data" --tmpdir="$tmp" --socket="$DIR/$name.sock" --port="$port" \
        --bind-address="$HOST" --skip-name-resolve --character-set-server=utf8mb4 \
        --collation-server=utf8mb4_general_ci --pid-file="$DIR/$name.mariadbd.pid" --max-connections=1000 --table-definition-cache=4096 --table-open-cache=4096 \
        --innodb-lock-wait-timeout=10
    wait_until 60 "mariadb $index" mariadb_answers "$port"
}

start_etcd() {
    if alive_pid etcd etcd >/dev/null || etcd_answers "$ETCD_PORT"; then return 0; fi
    local peer=$((ETCD_PORT + 1))
    log "etcd: starting on $HOST:$ETCD_PORT"
    mkdir -p "$DIR/etcd"
    spawn etcd etcd --name tjobs-cluster --data-dir "$DIR/etcd" \
        --listen-client-urls "http://$HOST:$ETCD_PORT" --advertise-client-urls "http://$HOST:$ETCD_PORT" \
        --listen-peer-urls "http://$HOST:$peer" --initial-advertise-peer-urls "http://$HOST:$peer" \
        --initial-cluster "tjobs-cluster=http://$HOST:$peer" --logger zap --log-outputs stderr
    wait_until 30 etcd etcd_answers "$ETCD_PORT"
}

start_redis() {
    if alive_pid redis redis-server >/dev/null || redis_answers "$REDIS_PORT"; then return 0; fi
    log "redis: starting on $HOST:$REDIS_PORT"
    spawn redis redis-server --port "$REDIS_PORT" --bind "$HOST" --save '' --appendonly no --daemonize no
    wait_until 30 redis redis_answers "$REDIS_PORT"
}

storage_urls_toml() {
    local urls=() port
    for port in "${MYSQL_PORTS[@]}"; do urls+=("\"mysql+asyncmy://root@$HOST:$port\""); done
    local IFS=,
    echo "[${urls[*]}]"
}

cmd_infra() {
    mkdir -p "$DIR"
    local i=0 port
    for port in "${MYSQL_PORTS[@]}"; do i=$((i + 1)); start_mariadb "$i" "$port"; done
    start_etcd
    start_redis
    {
        echo "TJOBS_CLUSTER_STORAGE_URLS=$(storage_urls_toml)"
        echo "TJOBS_CLUSTER_ETCD_URL=http://$HOST:$ETCD_PORT"
        echo "TJOBS_CLUSTER_REDIS_URL=redis://$HOST:$REDIS_PORT/0"
    } >"$DIR/env"
    log "services ready; $DIR/env:"
    sed 's/^/    /' "$DIR/env" >&2
}

node_config() {  # node_config I -> path of node I's TOML
    local i="$1" port=$((API_PORT + $1 - 1)) zone
    zone=$(printf "\\x$(printf %x $((97 + (i - 1) % 3)))")  # a, b, c, a, ...
    local path="$DIR/node$i.toml"
    cat >"$path" <<EOF
node_id = "node$i"
allow_loopback_callbacks = true

[storage]
urls = $(storage_urls_toml)
topology = "$TOPOLOGY"

[api]
host = "$HOST"
port = $port
admin_key = "tja_cluster_local_admin"

[metrics]
scrape_token = "tjm_cluster_local_scrape"

[cluster]
etcd_endpoints = ["http://$HOST:$ETCD_PORT"]
redis_url = "redis://$HOST:$REDIS_PORT/0"
hot_tier = "$HOT_TIER"
zone = "$zone"
EOF
    echo "$path"
}

cmd_up() {
    local count="${1:-3}" i config
    cmd_infra
    config="$(node_config 1)"
    log "migrating ($TOPOLOGY over ${#MYSQL_PORTS[@]} MariaDB servers)"
    "$PYTHON" -m tjobs.cli.main migrate --config "$config" >>"$DIR/migrate.log" 2>&1 || die "migrate failed; see $DIR/migrate.log"
    for i in $(seq "$count"); do
        if alive_pid "node$i" python >/dev/null; then continue; fi
        config="$(node_config "$i")"
        log "node$i: http://$HOST:$((API_PORT + i - 1)) (log $DIR/node$i.log)"
        (cd "$ROOT" && spawn "node$i" "$PYTHON" -m tjobs.cli.main serve --config "$config")
    done
    for i in $(seq "$count"); do
        wait_until 60 "node$i" curl -sf "http://$HOST:$((API_PORT + i - 1))/healthz"
    done
    log "cluster up: $count nodes; try: curl -s -H 'authorization: Bearer tja_cluster_local_admin' http://$HOST:$API_PORT/v1/cluster"
}

stop_pid() {
    local name="$1" pid="$2" i
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 100); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.2; done
    kill -KILL "$pid" 2>/dev/null || true
}

cmd_down() {
    [ -d "$DIR" ] || return 0
    local f name pid binary
    for f in "$DIR"/node*.pid "$DIR"/redis.pid "$DIR"/etcd.pid "$DIR"/mariadb?.pid; do
        [ -f "$f" ] || continue
        name="$(basename "$f" .pid)"
        case "$name" in node*) binary=python ;; redis) binary=redis-server ;; etcd) binary=etcd ;; *) binary=mariadbd ;; esac
        if pid="$(alive_pid "$name" "$binary")"; then stop_pid "$name" "$pid"; fi
        rm -f "$f"
    done
}

cmd_status() {
    local f name pid
    for f in "$DIR"/*.pid; do
        [ -f "$f" ] || continue
        name="$(basename "$f" .pid)"
        case "$name" in *.mariadbd) continue ;; esac
        pid="$(cat "$f")"
        if kill -0 "$pid" 2>/dev/null; then echo "$name: running (pid $pid)"; else echo "$name: gone (pid $pid)"; fi
    done
    curl -s -H "authorization: Bearer tja_cluster_local_admin" "http://$HOST:$API_PORT/v1/cluster" 2>/dev/null && echo || true
}

case "${1:-}" in
    up) cmd_up "${2:-3}" ;;
    infra) cmd_infra ;;
    down) cmd_down ;;
    status) cmd_status ;;
    *) echo "usage: $0 up [N] | infra | status | down" >&2; exit 2 ;;
esac
