#!/usr/bin/env bash
# The benchmarks' own MariaDB, sized for thousands of fires a second (docs/benchmarks.md, "The machine and
# what a run needs"): the figures there that name port 3391 ran on this server, not on the test services'
# 3306 (Debian's defaults: a 128 MiB buffer pool and a 96 MiB redo log, which 3,000 fires/s fill in seconds).
#
#   scripts/bench_db.sh up       start it (if nothing answers on the port); prints its storage URL
#   scripts/bench_db.sh status   whether it answers, with its sizing
#   scripts/bench_db.sh down     stop it, only if this script started it (its PID in the state directory)
#
# TJOBS_BENCH_DB_PORT   default 3391
# TJOBS_BENCH_DB_DIR    state directory: data, log, PID (default <repo>/.services/bench-db)
# TJOBS_BENCH_DB_POOL   innodb_buffer_pool_size (default 2G: the data of a 5,000/s window stays in memory)
# TJOBS_BENCH_DB_REDO   innodb_log_file_size (default 1G; the 5,000/s rows ran with 4G)
# MariaDB itself comes with `bash scripts/services.sh up` (which installs what is missing).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
PORT="${TJOBS_BENCH_DB_PORT:-3391}"
DIR="${TJOBS_BENCH_DB_DIR:-$ROOT/.services/bench-db}"
POOL="${TJOBS_BENCH_DB_POOL:-2G}"
REDO="${TJOBS_BENCH_DB_REDO:-1G}"
HOST=127.0.0.1

log() { printf '[bench-db] %s\n' "$*" >&2; }
die() { printf '[bench-db] error: %s\n' "$*" >&2; exit 1; }
answers() { mariadb --no-defaults --protocol=TCP -h "$HOST" -P "$PORT" -u root --connect-timeout=2 -Nse "$1" 2>/dev/null; }
recorded_pid() {  # the PID this script started, if it still runs mariadbd
    local pid
    [ -f "$DIR/mariadb.pid" ] || return 1
    pid="$(cat "$DIR/mariadb.pid")"
    [[ "$pid" =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = mariadbd ] && echo "$pid"
}

cmd_up() {
    if answers 'SELECT 1' >/dev/null; then
        log "something already answers on $HOST:$PORT; left as it is"
    else
        command -v mariadbd >/dev/null || die "mariadbd not found: run 'bash scripts/services.sh up' first"
        mkdir -p "$DIR/tmp"
        if [ ! -d "$DIR/data/mysql" ]; then
            mkdir -p "$DIR/data"
            mariadb-install-db --no-defaults --user=root --datadir="$DIR/data" --auth-root-authentication-method=normal \
                --skip-test-db --tmpdir="$DIR/tmp" >>"$DIR/mariadb.log" 2>&1 \
                || { rm -rf "$DIR/data"; die "mariadb-install-db failed; see $DIR/mariadb.log"; }
        fi
        log "starting on $HOST:$PORT (buffer pool $POOL, redo $REDO; log $DIR/mariadb.log)"
        rm -f "$DIR/mariadb.pid"
        bash "$ROOT/scripts/detach.sh" "$DIR/mariadb.pid" "$ROOT" mariadbd --no-defaults --user=root \
            --datadir="$DIR/data" --tmpdir="$DIR/tmp" --socket="$DIR/mariadb.sock" --port="$PORT" \
            --bind-address="$HOST" --skip-name-resolve --character-set-server=utf8mb4 \
            --collation-server=utf8mb4_general_ci --pid-file="$DIR/mariadbd.pid" --max-connections=1000 \
            --table-definition-cache=4096 --table-open-cache=4096 --innodb-lock-wait-timeout=10 \
            --innodb-buffer-pool-size="$POOL" --innodb-log-file-size="$REDO" >>"$DIR/mariadb.log" 2>&1
        local i
        for i in $(seq 120); do answers 'SELECT 1' >/dev/null && break; sleep 0.5; done
        answers 'SELECT 1' >/dev/null || die "it did not answer in 60 s; see $DIR/mariadb.log"
    fi
    cmd_status
    echo "mysql+asyncmy://root@$HOST:$PORT"
}

cmd_status() {
    local sizing
    sizing="$(answers 'SELECT CONCAT(@@innodb_buffer_pool_size DIV 1048576, " MiB pool, ", @@innodb_log_file_size DIV 1048576, " MiB redo")')" \
        || { log "nothing answers on $HOST:$PORT"; return 1; }
    log "$HOST:$PORT answers: $sizing$(recorded_pid >/dev/null && echo ", started by this script (pid $(recorded_pid))")"
}

cmd_down() {
    local pid i
    pid="$(recorded_pid)" || { log "no server of this script's runs; nothing stopped"; return 0; }
    log "stopping pid $pid"
    kill -TERM "$pid"
    for i in $(seq 150); do kill -0 "$pid" 2>/dev/null || { rm -f "$DIR/mariadb.pid"; return 0; }; sleep 0.2; done
    die "pid $pid still runs after 30 s"
}

case "${1:-}" in
    up) cmd_up ;;
    status) cmd_status ;;
    down) cmd_down ;;
    *) echo "usage: $0 up | status | down" >&2; exit 2 ;;
esac
