#!/usr/bin/env bash
# `make test`: .venv, the real services (scripts/services.sh up), then pytest on everything except the
# `chaos` suites. Extra arguments go to pytest (a later `-m` replaces the default selection):
#
#   scripts/test.sh                      # the default run (what CI runs)
#   scripts/test.sh tests/unit -k wheel  # a subset
#   scripts/test.sh -m chaos             # the long suites (make chaos)
#
# TJOBS_TEST_TIMEOUT_S   per-test timeout in seconds (default 300)
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

if [ "${TJOBS_TEST_NO_SERVICES:-0}" != 1 ]; then
    bash scripts/services.sh up
    services_dir="${TJOBS_SERVICES_DIR:-$ROOT/.services}"
    while IFS='=' read -r key value; do
        case "$key" in '' | \#*) continue ;; esac
        if [ -z "${!key:-}" ]; then export "$key=$value"; fi
    done <"$services_dir/env"
fi
printf '[test] %s=%s\n' \
    TJOBS_TEST_MYSQL_URL "${TJOBS_TEST_MYSQL_URL:-<unset>}" \
    TJOBS_TEST_ETCD_URL "${TJOBS_TEST_ETCD_URL:-<unset>}" \
    TJOBS_TEST_REDIS_URL "${TJOBS_TEST_REDIS_URL:-<unset>}" \
    TJOBS_TEST_AMQP_URL "${TJOBS_TEST_AMQP_URL:-<unset>}" \
    TJOBS_TEST_NATS_URL "${TJOBS_TEST_NATS_URL:-<unset>}" >&2

rc=0
.venv/bin/pytest -p no:cacheprovider -m "not chaos" --durations=40 --durations-min=5 --timeout="${TJOBS_TEST_TIMEOUT_S:-300}" "$@" || rc=$?
if [ "$rc" -eq 5 ]; then
    echo "[test] pytest collected no tests: that is a failure" >&2
fi
echo "[test] finished in $((SECONDS - start)) s with exit code $rc" >&2
exit "$rc"
