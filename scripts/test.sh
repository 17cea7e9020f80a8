#!/usr/bin/env bash
# `make test`: .venv, the real services (scripts/services.sh up), then pytest on everything except the
# `chaos` suites. Extra arguments go to pytest (a later `-m` replaces the default selection):
#
#   scripts/test.sh                      # the default run (what CI runs)
#   scripts/test.sh tests/unit -k wheel  # a subset
#   scripts/test.sh -m chaos             # the long suites (make chaos)
#
# TJOBS_TEST_TIMEOUT_S   per-test timeout in seconds (default 300)
# TJOBS_TEST_WORKERS     xdist workers (default run: 4; with arguments: none unless set)
# TJOBS_TEST_TIMING_WORKERS  xdist workers of the default run's timing part (default 4)
# TJOBS_TEST_NO_SERVICES=1  don't touch services (service tests then skip, or fail under CI=true)
# TJOBS_TEST_*_URL already set in the environment win over the ones services.sh discovers.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
start=$SECONDS

bash scripts/venv.sh
bash scripts/browser.sh  # Debian chromium for the console browser tests (tests/console)
# Bytecode for tjobs, written once here (the install is editable, so pip compiled none of it): the run starts
# about 60 node processes, and where PYTHONDONTWRITEBYTECODE is set, as in this machine's shells, every one
# of them would compile its ~150 tjobs modules from source again (docs/benchmarks.md, "Node start-up").
.venv/bin/python -m compileall -q -j 0 tjobs sharding >/dev/null
unset PYTHONDONTWRITEBYTECODE  # and pytest keeps its assertion-rewritten test modules (scripts/check.sh)

if [ "${TJOBS_TEST_NO_SERVICES:-0}" != 1 ]; then
    bash scripts/services.sh up
    services_dir="${TJOBS_SERVICES_DIR:-$ROOT/.services}"
    while IFS='=' read -r key value; do
        case "$key" in '' | \#*) continue ;; esac
        if [ -z "${!key:-}" ]; then export "$key=$value"; fi
    done <"$services_dir/env"
fi
# The rigs whose servers the tests kill, freeze and restart (tests/cluster's two, tests/chaos's): a state
# directory and ports of this checkout's own, so that two checkouts' runs on one machine never share them,
# and three rigs, so that the fault suite and the two halves of tests/cluster (tests/cluster/rigs.py says
# which module uses which rig) can run on three workers at once. Ports: a block of fifteen below the
# ephemeral range (32768), picked by the checkout's path: cluster rig 1 at +0..4, rig 2 at +5..9, the
# fault suite's at +10..14 (two MariaDB servers, etcd and its peer port, Redis each); set any of these to
# choose. Leaving TJOBS_TEST_CLUSTER2_DIR empty (and its ports unset) runs tests/cluster on one rig.
block=$((20000 + $(printf '%s' "$ROOT" | cksum | cut -d' ' -f1) % 800 * 15))
export TJOBS_TEST_CLUSTER_DIR="${TJOBS_TEST_CLUSTER_DIR:-$ROOT/.services/cluster-rig}"
export TJOBS_TEST_CLUSTER_MYSQL_PORTS="${TJOBS_TEST_CLUSTER_MYSQL_PORTS:-$block $((block + 1))}"
export TJOBS_TEST_CLUSTER_ETCD_PORT="${TJOBS_TEST_CLUSTER_ETCD_PORT:-$((block + 2))}"  # peer port +1
export TJOBS_TEST_CLUSTER_REDIS_PORT="${TJOBS_TEST_CLUSTER_REDIS_PORT:-$((block + 4))}"
export TJOBS_TEST_CLUSTER2_DIR="${TJOBS_TEST_CLUSTER2_DIR-$ROOT/.services/cluster-rig-2}"
export TJOBS_TEST_CLUSTER2_MYSQL_PORTS="${TJOBS_TEST_CLUSTER2_MYSQL_PORTS:-$((block + 5)) $((block + 6))}"
export TJOBS_TEST_CLUSTER2_ETCD_PORT="${TJOBS_TEST_CLUSTER2_ETCD_PORT:-$((block + 7))}"
export TJOBS_TEST_CLUSTER2_REDIS_PORT="${TJOBS_TEST_CLUSTER2_REDIS_PORT:-$((block + 9))}"
export TJOBS_TEST_CHAOS_DIR="${TJOBS_TEST_CHAOS_DIR:-$ROOT/.services/chaos-rig}"
export TJOBS_TEST_CHAOS_MYSQL_PORTS="${TJOBS_TEST_CHAOS_MYSQL_PORTS:-$((block + 10)) $((block + 11))}"
export TJOBS_TEST_CHAOS_ETCD_PORT="${TJOBS_TEST_CHAOS_ETCD_PORT:-$((block + 12))}"
export TJOBS_TEST_CHAOS_REDIS_PORT="${TJOBS_TEST_CHAOS_REDIS_PORT:-$((block + 14))}"
printf '[test] %s=%s\n' \
    TJOBS_TEST_CLUSTER_DIR "$TJOBS_TEST_CLUSTER_DIR" TJOBS_TEST_CLUSTER_MYSQL_PORTS "$TJOBS_TEST_CLUSTER_MYSQL_PORTS" \
    TJOBS_TEST_CLUSTER2_DIR "${TJOBS_TEST_CLUSTER2_DIR:-<none: one cluster rig>}" \
    TJOBS_TEST_CLUSTER2_MYSQL_PORTS "$TJOBS_TEST_CLUSTER2_MYSQL_PORTS" \
    TJOBS_TEST_CHAOS_DIR "$TJOBS_TEST_CHAOS_DIR" TJOBS_TEST_CHAOS_MYSQL_PORTS "$TJOBS_TEST_CHAOS_MYSQL_PORTS" >&2
printf '[test] %s=%s\n' \
    TJOBS_TEST_MYSQL_URL "${TJOBS_TEST_MYSQL_URL:-<unset>}" \
    TJOBS_TEST_ETCD_URL "${TJOBS_TEST_ETCD_URL:-<unset>}" \
    TJOBS_TEST_REDIS_URL "${TJOBS_TEST_REDIS_URL:-<unset>}" \
    TJOBS_TEST_AMQP_URL "${TJOBS_TEST_AMQP_URL:-<unset>}" \
    TJOBS_TEST_NATS_URL "${TJOBS_TEST_NATS_URL:-<unset>}" >&2

# The rigs' servers are started by the tests that need them and kept for the rest of the run; the run
# stops those it started (a rig already running when it began, someone's own, is left as it was).
rig_running() {  # rig_running DIR: any server recorded in DIR still alive
    local pidfile pid
    for pidfile in "$1"/*.pid; do
        [ -f "$pidfile" ] || continue
        pid="$(cat "$pidfile")"
        [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && return 0
    done
    return 1
}
rigs_started_here=()
for rig in "$TJOBS_TEST_CLUSTER_DIR" "$TJOBS_TEST_CLUSTER2_DIR" "$TJOBS_TEST_CHAOS_DIR"; do
    [ -n "$rig" ] || continue
    rig_running "$rig" || rigs_started_here+=("$rig")
done
stop_rigs_started_here() {
    local rig
    for rig in "${rigs_started_here[@]}"; do
        if rig_running "$rig"; then TJOBS_CLUSTER_DIR="$rig" bash scripts/cluster.sh down >/dev/null 2>&1 || true; fi
    done
}
trap stop_rigs_started_here EXIT

pytest_run() {  # pytest_run LABEL ARGS...: one pytest run; its exit code, 5 (nothing collected) a failure
    local label="$1" phase_start=$SECONDS code=0
    shift
    .venv/bin/pytest -p no:cacheprovider --durations=40 --durations-min=5 \
        --timeout="${TJOBS_TEST_TIMEOUT_S:-300}" "$@" || code=$?
    if [ "$code" -eq 5 ]; then
        echo "[test] ${label}: pytest collected no tests: that is a failure" >&2
    fi
    echo "[test] ${label}: $((SECONDS - phase_start)) s, exit code ${code}" >&2
    return "$code"
}

# The default run is two pytest runs: everything but `chaos` and `timing` spread over
# TJOBS_TEST_WORKERS xdist workers (tests of one killable rig kept on one worker: tests/conftest.py),
# then the `timing` tests (wall-clock lateness bounds) on a machine the first part no longer loads, four at
# a time (TJOBS_TEST_TIMING_WORKERS): they mostly wait on real time (outages, TTLs, restarts), so the two
# cluster rigs' groups on two workers and the rest on the other two leave the two cores far from busy
# (with three, the rest shared the third worker, or a rig's, and that worker set the part's length).
# Extra arguments make it one run of exactly what they select, on TJOBS_TEST_WORKERS workers if set.
workers="${TJOBS_TEST_WORKERS:-}"
rc=0
if [ "$#" -eq 0 ]; then
    pytest_run parallel -n "${workers:-4}" --dist loadgroup -m "not chaos and not timing" || rc=$?
    pytest_run timing -n "${TJOBS_TEST_TIMING_WORKERS:-4}" --dist loadgroup -m "timing and not chaos" ||
        { code=$?; [ "$rc" -ne 0 ] || rc=$code; }
else
    parallel=()
    [ -z "$workers" ] || parallel=(-n "$workers" --dist loadgroup)
    pytest_run selection -m "not chaos" "${parallel[@]}" "$@" || rc=$?
fi
echo "[test] finished in $((SECONDS - start)) s with exit code $rc" >&2
exit "$rc"
