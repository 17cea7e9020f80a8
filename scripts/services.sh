#!/usr/bin/env bash
# The real services the integration tests talk to: MariaDB, etcd, Redis, RabbitMQ, NATS with JetStream
# (and the Prometheus package).
#
#   scripts/services.sh up      install missing Debian packages, start what does not answer yet, write .services/env
#   scripts/services.sh status  what answers where, and which processes this script started
#   scripts/services.sh down    stop ONLY the processes this script started (PIDs in .services/*.pid)
#
# No systemd, no Docker: daemons are started detached with `setsid -f` and their PIDs recorded.
# A server that already answers on a port is reused and never stopped. MariaDB is reused only if it
# accepts root with an empty password over TCP, RabbitMQ if it speaks AMQP 0-9-1 (the tests log in as
# guest/guest), NATS if it has JetStream; if something else holds its port, our own instance goes to the
# next free port and .services/env says which. Our RabbitMQ node (tjobs-services@localhost) registers
# with the machine's epmd and starts one if none runs (epmd outlives `down`, as it does for any node).
#
# Environment overrides (all optional):
#   TJOBS_SERVICES_DIR             state dir (default <repo>/.services): data, logs, pids, env
#   TJOBS_SERVICES_MYSQL_PORT      default 3306
#   TJOBS_SERVICES_ETCD_PORT       default 2379
#   TJOBS_SERVICES_ETCD_PEER_PORT  default ETCD_PORT + 1
#   TJOBS_SERVICES_REDIS_PORT      default 6379
#   TJOBS_SERVICES_AMQP_PORT       default 5672 (our own node's Erlang distribution port: AMQP_PORT + 20000)
#   TJOBS_SERVICES_NATS_PORT       default 4222
#   TJOBS_SERVICES_TIMEOUT_S       how long to wait for each service to answer (default 60)
#   TJOBS_SERVICES_NO_INSTALL=1    never call apt-get (the binaries must already be there)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# mariadbd lives in /usr/sbin, which a non-login environment (CI) may leave off PATH.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
DIR="${TJOBS_SERVICES_DIR:-$ROOT/.services}"
case "$DIR" in /*) ;; *) DIR="$PWD/$DIR" ;; esac
HOST=127.0.0.1
MYSQL_PORT="${TJOBS_SERVICES_MYSQL_PORT:-3306}"
ETCD_PORT="${TJOBS_SERVICES_ETCD_PORT:-2379}"
ETCD_PEER_PORT="${TJOBS_SERVICES_ETCD_PEER_PORT:-}"
REDIS_PORT="${TJOBS_SERVICES_REDIS_PORT:-6379}"
AMQP_PORT="${TJOBS_SERVICES_AMQP_PORT:-5672}"
NATS_PORT="${TJOBS_SERVICES_NATS_PORT:-4222}"
TIMEOUT_S="${TJOBS_SERVICES_TIMEOUT_S:-60}"
# libfaketime: the clock-skew tests start node processes with a shifted clock (tests/cluster/test_clock_skew_processes.py)
PACKAGES=(mariadb-server mariadb-client etcd-server etcd-client redis-server rabbitmq-server nats-server prometheus libfaketime)
SERVICES=(mariadb etcd redis rabbitmq nats)

log() { printf '[services] %s\n' "$*" >&2; }
die() { printf '[services] error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
    else die "need root (or passwordless sudo) to run: $*"
    fi
}

# ---------------------------------------------------------------------------------------------- probes

tcp_open() { timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null; }

mariadb_answers() {
    command -v mariadb >/dev/null 2>&1 || return 1
    timeout 5 mariadb --no-defaults --protocol=TCP -h "$HOST" -P "$1" -u root --connect-timeout=3 \
        -Nse 'SELECT 1' >/dev/null 2>&1
}

# 512 shards are 1,024 tables per server: below that table cache, MariaDB reopens table definitions on
# every fire batch. And the default test run's four workers open up to ~150 connections at once, which is
# Debian's default max_connections (151): past it a create answers 503 ('Too many connections'). Raise
# these (dynamic) settings of a server we reuse, never lower them; ours start with them set.
tune_mariadb() {
    timeout 5 mariadb --no-defaults --protocol=TCP -h "$HOST" -P "$1" -u root --connect-timeout=3 -Nse \
        "SET GLOBAL table_definition_cache = GREATEST(@@table_definition_cache, 4096);
         SET GLOBAL table_open_cache = GREATEST(@@table_open_cache, 4096);
         SET GLOBAL max_connections = GREATEST(@@max_connections, 1000)" >/dev/null 2>&1 \
        || log "mariadb: could not raise table caches and max_connections on $HOST:$1 (fires over 512 shards will be slower; a parallel test run may meet 'Too many connections')"
}

etcd_answers() {
    # GET /version over plain bash TCP: no curl, no venv needed.
    local reply
    reply="$(timeout 3 bash -c "exec 3<>/dev/tcp/$HOST/$1 && printf 'GET /version HTTP/1.0\r\nHost: $HOST\r\n\r\n' >&3 && cat <&3" 2>/dev/null)" \
        || return 1
    [[ "$reply" == *'"etcdserver"'* ]]
}

redis_answers() {
    command -v redis-cli >/dev/null 2>&1 || return 1
    [ "$(timeout 3 redis-cli -h "$HOST" -p "$1" ping 2>/dev/null)" = PONG ]
}

# The AMQP 0-9-1 protocol header is answered by a Connection.Start method frame (type 1, channel 0).
rabbitmq_answers() {
    local reply
    reply="$(timeout 3 bash -c "exec 3<>/dev/tcp/$HOST/$1 && printf 'AMQP\\x00\\x00\\x09\\x01' >&3 && head -c 3 <&3 | od -An -tx1" \
        2>/dev/null)" || return 1
    [ "$(echo $reply)" = "01 00 00" ]
}

# A NATS server greets with INFO {...}; ours must have JetStream on.
nats_answers() {
    local line
    line="$(timeout 3 bash -c "exec 3<>/dev/tcp/$HOST/$1 && read -r -t 2 line <&3 && echo \"\$line\"" 2>/dev/null)" \
        || return 1
    [[ "$line" == INFO* && "$line" == *'"jetstream":true'* ]]
}

answers() { "${1}_answers" "$2"; }

# ------------------------------------------------------------------------------------------ bookkeeping

pidfile() { echo "$DIR/$1.pid"; }
portfile() { echo "$DIR/$1.port"; }
logfile() { echo "$DIR/$1.log"; }

binary_of() {
    case "$1" in
        mariadb) echo mariadbd ;;
        etcd) echo etcd ;;
        redis) echo redis-server ;;
        rabbitmq) echo beam.smp ;;
        nats) echo nats-server ;;
    esac
}

# The PID we recorded for a service, if that process is still alive AND is still our daemon (same
# process name, working directory inside our state dir): guards against PID reuse. The command line
# is no proof: redis-server rewrites it.
our_pid() {
    local svc="$1" pid
    [ -f "$(pidfile "$svc")" ] || return 1
    pid="$(cat "$(pidfile "$svc")")"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$(binary_of "$svc")" ] || return 1
    [[ "$(readlink "/proc/$pid/cwd" 2>/dev/null)/" == "$DIR"/* ]] || return 1
    echo "$pid"
}

free_port_from() {
    local port="$1" need_next="${2:-0}"
    while [ "$port" -lt $(($1 + 50)) ]; do
        if ! tcp_open "$port" && { [ "$need_next" = 0 ] || ! tcp_open $((port + 1)); }; then
            echo "$port"
            return 0
        fi
        port=$((port + 1))
    done
    return 1
}

# Start "$@" detached in its own session, working in $DIR/<svc>; the PID (kept across exec) goes to
# the service's pidfile.
spawn() {
    local svc="$1"
    shift
    local pf
    pf="$(pidfile "$svc")"
    rm -f "$pf"
    mkdir -p "$DIR/$svc"
    printf '\n=== %s starting %s\n' "$(date -u +%FT%TZ)" "$*" >>"$(logfile "$svc")"
    bash "$ROOT/scripts/detach.sh" "$pf" "$DIR/$svc" "$@" >>"$(logfile "$svc")" 2>&1
    local i
    for i in $(seq 50); do
        [ -s "$pf" ] && return 0
        sleep 0.1
    done
    die "$svc did not start (no pid after 5 s); see $(logfile "$svc")"
}

wait_answering() {
    local svc="$1" port="$2" deadline=$((SECONDS + TIMEOUT_S))
    until answers "$svc" "$port"; do
        if ! our_pid "$svc" >/dev/null; then
            tail -n 20 "$(logfile "$svc")" >&2 || true
            die "$svc exited before answering on $HOST:$port; log: $(logfile "$svc")"
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            tail -n 20 "$(logfile "$svc")" >&2 || true
            die "$svc did not answer on $HOST:$port within ${TIMEOUT_S}s; log: $(logfile "$svc")"
        fi
        sleep 0.2
    done
}

# ------------------------------------------------------------------------------------------- install

ensure_packages() {
    if [ "${TJOBS_SERVICES_NO_INSTALL:-0}" = 1 ]; then
        return 0
    fi
    if ! command -v dpkg-query >/dev/null 2>&1; then
        log "not a Debian system: skipping package installation; mariadbd, etcd, redis-server, rabbitmq-server and nats-server must be on PATH"
        return 0
    fi
    local missing=() pkg
    for pkg in "${PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
    done
    [ "${#missing[@]}" -eq 0 ] && return 0
    log "installing Debian packages: ${missing[*]}"
    local start=$SECONDS
    local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -q)
    local apt_log="$DIR/apt.log"
    if ! { as_root "${apt[@]}" update && as_root "${apt[@]}" install -y --no-install-recommends "${missing[@]}"; } \
        >"$apt_log" 2>&1; then
        tail -n 30 "$apt_log" >&2
        die "apt-get failed to install ${missing[*]}; full log: $apt_log"
    fi
    log "packages installed in $((SECONDS - start)) s"
}

# ---------------------------------------------------------------------------------- per-service start

start_mariadb() {
    local port="$1" data="$DIR/mariadb"
    command -v mariadbd >/dev/null 2>&1 || die "mariadbd not found (package mariadb-server)"
    local tmp="$DIR/mariadb.tmp"  # its own: a starting mariadbd deletes every #sql* file in its tmpdir
    mkdir -p "$tmp"
    if [ ! -d "$data/mysql" ]; then
        log "initialising MariaDB datadir $data"
        mkdir -p "$data"
        mariadb-install-db --no-defaults --user=root --datadir="$data" --tmpdir="$tmp" \
            --auth-root-authentication-method=normal --skip-test-db >>"$(logfile mariadb)" 2>&1 \
            || die "mariadb-install-db failed; log: $(logfile mariadb)"
    fi
    spawn mariadb mariadbd --no-defaults --user=root --datadir="$data" --tmpdir="$tmp" --socket="$DIR/mariadb.sock" \
        --port="$port" --bind-address="$HOST" --skip-name-resolve \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
        --table-definition-cache=4096 --table-open-cache=4096 --max-connections=1000 \
        --pid-file="$DIR/mariadbd.pid"
}

start_etcd() {
    local port="$1" peer="$2"
    command -v etcd >/dev/null 2>&1 || die "etcd not found (package etcd-server)"
    mkdir -p "$DIR/etcd"
    spawn etcd etcd --name tjobs-services --data-dir "$DIR/etcd" \
        --listen-client-urls "http://$HOST:$port" --advertise-client-urls "http://$HOST:$port" \
        --listen-peer-urls "http://$HOST:$peer" --initial-advertise-peer-urls "http://$HOST:$peer" \
        --initial-cluster "tjobs-services=http://$HOST:$peer" --logger zap --log-outputs stderr
}

start_redis() {
    local port="$1"
    command -v redis-server >/dev/null 2>&1 || die "redis-server not found (package redis-server)"
    mkdir -p "$DIR/redis"
    spawn redis redis-server --port "$port" --bind "$HOST" --save '' --appendonly no \
        --dir "$DIR/redis" --daemonize no
}

# Our own RabbitMQ node: its config, node name, data and logs under $DIR/rabbitmq, nothing read from
# /etc/rabbitmq. RUNNING_UNDER_SYSTEMD makes the start script exec the VM, so the recorded PID is the
# broker's own (beam.smp), which stops cleanly on SIGTERM.
start_rabbitmq() {
    local port="$1" data="$DIR/rabbitmq" server=/usr/lib/rabbitmq/bin/rabbitmq-server
    [ -x "$server" ] || server="$(command -v rabbitmq-server)" || die "rabbitmq-server not found (package rabbitmq-server)"
    local dist=$((port + 20000))
    tcp_open "$dist" && die "rabbitmq: the Erlang distribution port $dist (AMQP port + 20000) is taken"
    mkdir -p "$data"
    printf 'listeners.tcp.default = %s:%s\nloopback_users.guest = true\n' "$HOST" "$port" >"$data/rabbitmq.conf"
    : >"$data/rabbitmq-env.conf"
    echo '[].' >"$data/enabled_plugins"
    spawn rabbitmq env HOME="$data" RUNNING_UNDER_SYSTEMD=1 \
        RABBITMQ_CONF_ENV_FILE="$data/rabbitmq-env.conf" RABBITMQ_CONFIG_FILE="$data/rabbitmq.conf" \
        RABBITMQ_ENABLED_PLUGINS_FILE="$data/enabled_plugins" RABBITMQ_NODENAME=tjobs-services@localhost \
        RABBITMQ_NODE_PORT="$port" RABBITMQ_DIST_PORT="$dist" RABBITMQ_MNESIA_BASE="$data/mnesia" \
        RABBITMQ_LOG_BASE="$data/log" ERL_EPMD_ADDRESS="$HOST" \
        RABBITMQ_SERVER_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}" "$server"
}

start_nats() {
    local port="$1"
    command -v nats-server >/dev/null 2>&1 || die "nats-server not found (package nats-server)"
    mkdir -p "$DIR/nats/jetstream"
    spawn nats nats-server -a "$HOST" -p "$port" -js -sd "$DIR/nats/jetstream"
}

# Bring one service up; print the port it answers on.
up_one() {
    local svc="$1" port="$2" pid
    if pid="$(our_pid "$svc")"; then
        port="$(cat "$(portfile "$svc")")"
        wait_answering "$svc" "$port"
        log "$svc: ours (pid $pid) answers on $HOST:$port"
        echo "$port"
        return 0
    fi
    if answers "$svc" "$port"; then
        log "$svc: reusing the server that answers on $HOST:$port"
        rm -f "$(pidfile "$svc")" "$(portfile "$svc")"
        if [ "$svc" = mariadb ]; then tune_mariadb "$port"; fi
        echo "$port"
        return 0
    fi
    local peer=""
    if [ "$svc" = etcd ]; then peer="${ETCD_PEER_PORT:-$((port + 1))}"; fi
    if tcp_open "$port" || { [ -n "$peer" ] && tcp_open "$peer"; }; then
        local busy="$port"
        if [ "$svc" = etcd ]; then
            port="$(free_port_from $((port + 2)) 1)" || die "etcd: no free port pair near $busy"
            peer=$((port + 1))
        else
            port="$(free_port_from $((port + 1)))" || die "$svc: no free port near $busy"
        fi
        log "$svc: $HOST:$busy is taken by something that is not a usable $svc; starting our own on $port"
    fi
    log "$svc: starting our own on $HOST:$port (log: $(logfile "$svc"))"
    case "$svc" in
        mariadb) start_mariadb "$port" ;;
        etcd) start_etcd "$port" "$peer" ;;
        redis) start_redis "$port" ;;
        rabbitmq) start_rabbitmq "$port" ;;
        nats) start_nats "$port" ;;
    esac
    echo "$port" >"$(portfile "$svc")"
    wait_answering "$svc" "$port"
    log "$svc: ours (pid $(cat "$(pidfile "$svc")")) answers on $HOST:$port"
    echo "$port"
}

url_of() {
    case "$1" in
        mariadb) echo "mysql+asyncmy://root@$HOST:$2" ;;
        etcd) echo "http://$HOST:$2" ;;
        redis) echo "redis://$HOST:$2/0" ;;
        rabbitmq) echo "amqp://guest:guest@$HOST:$2/" ;;
        nats) echo "nats://$HOST:$2" ;;
    esac
}

# -------------------------------------------------------------------------------------------- commands

cmd_up() {
    local start=$SECONDS
    mkdir -p "$DIR"
    exec 8>"$DIR/.lock"
    flock 8
    ensure_packages
    local mysql_port etcd_port redis_port amqp_port nats_port
    mysql_port="$(up_one mariadb "$MYSQL_PORT")"
    etcd_port="$(up_one etcd "$ETCD_PORT")"
    redis_port="$(up_one redis "$REDIS_PORT")"
    amqp_port="$(up_one rabbitmq "$AMQP_PORT")"
    nats_port="$(up_one nats "$NATS_PORT")"
    {
        echo "# written by scripts/services.sh up at $(date -u +%FT%TZ)"
        echo "TJOBS_TEST_MYSQL_URL=$(url_of mariadb "$mysql_port")"
        echo "TJOBS_TEST_ETCD_URL=$(url_of etcd "$etcd_port")"
        echo "TJOBS_TEST_REDIS_URL=$(url_of redis "$redis_port")"
        echo "TJOBS_TEST_AMQP_URL=$(url_of rabbitmq "$amqp_port")"
        echo "TJOBS_TEST_NATS_URL=$(url_of nats "$nats_port")"
    } >"$DIR/env.tmp"
    mv "$DIR/env.tmp" "$DIR/env"
    log "ready in $((SECONDS - start)) s; wrote $DIR/env:"
    grep -v '^#' "$DIR/env" | sed 's/^/    /' >&2
}

cmd_status() {
    local svc default port pid state rc=0
    for svc in "${SERVICES[@]}"; do
        case "$svc" in
            mariadb) default="$MYSQL_PORT" ;;
            etcd) default="$ETCD_PORT" ;;
            redis) default="$REDIS_PORT" ;;
            rabbitmq) default="$AMQP_PORT" ;;
            nats) default="$NATS_PORT" ;;
        esac
        if pid="$(our_pid "$svc")"; then
            port="$(cat "$(portfile "$svc")" 2>/dev/null || echo "$default")"
            owner="ours, pid $pid, log $(logfile "$svc")"
        else
            port="$default"
            owner="not started by this script"
        fi
        if answers "$svc" "$port"; then state=answering; else state="NOT ANSWERING"; rc=3; fi
        printf '%-8s %-40s %-14s (%s)\n' "$svc" "$(url_of "$svc" "$port")" "$state" "$owner"
    done
    if command -v prometheus >/dev/null 2>&1; then
        printf '%-8s %-40s %s\n' prometheus "$(command -v prometheus)" "installed (not started by up)"
    else
        printf '%-8s %-40s %s\n' prometheus "-" "not installed"
    fi
    [ -f "$DIR/env" ] && printf 'env file: %s\n' "$DIR/env"
    return "$rc"
}

cmd_down() {
    [ -d "$DIR" ] || { log "nothing to stop ($DIR does not exist)"; return 0; }
    exec 8>"$DIR/.lock"
    flock 8
    local svc pid i
    for svc in "${SERVICES[@]}"; do
        if pid="$(our_pid "$svc")"; then
            log "stopping $svc (pid $pid)"
            kill -TERM "$pid" 2>/dev/null || true
            for i in $(seq 150); do
                kill -0 "$pid" 2>/dev/null || break
                sleep 0.2
            done
            if kill -0 "$pid" 2>/dev/null; then
                log "$svc (pid $pid) ignored SIGTERM for 30 s; sending SIGKILL"
                kill -KILL "$pid" 2>/dev/null || true
            fi
        elif [ -f "$(pidfile "$svc")" ]; then
            log "$svc: recorded pid $(cat "$(pidfile "$svc")") is gone or no longer ours; nothing to stop"
        fi
        rm -f "$(pidfile "$svc")" "$(portfile "$svc")"
    done
    rm -f "$DIR/env"
}

case "${1:-}" in
    up) cmd_up ;;
    status) cmd_status ;;
    down) cmd_down ;;
    *)
        echo "usage: $0 up|status|down" >&2
        exit 2
        ;;
esac
