#!/usr/bin/env bash
# `make check`: the inner loop, no services. The formatter check, the linter, mypy --strict (tests
# included), and beside them every test of tests/unit, tests/contract, tests/api, tests/fuzz and
# tests/security that needs no service (the contract suites on the twins and SQLite, the API on the embedded
# store, the bad-input table, the URL model) over TJOBS_CHECK_WORKERS xdist workers (default 4: many tests
# wait on real time, so four workers overlap those waits on two cores), a test module per worker. Every
# step runs; the script fails if any failed. Extra arguments go to pytest (a path among them replaces the
# default folders).
#
# Cheaper, not fewer: the one-request tables (the bad-input table, the SSRF matrices) check their cases inside
# one test each (tests/case_table.py names every failing case), and the API tests whose every request is refused
# before any store run on the in-memory twin only (refused_before_storage, tests/api/conftest.py, checks that
# per test); every case still runs here.
#
# Left out: tests marked mariadb, etcd, redis, rabbitmq, nats or browser (tests/conftest.py marks every test
# taking one of those fixtures), `slow`, `timing` and `chaos`, and the end-to-end folders (tests/e2e, tests/ops,
# tests/cluster, tests/chaos, tests/integration, tests/console, benchmarks/tests: node processes, real
# servers, real time). `make test` runs them all.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
start=$SECONDS
bash scripts/venv.sh || exit 1
rc=0
step() {  # step LABEL COMMAND...: run it, note the time, remember a failure
    local label="$1" step_start=$SECONDS code=0
    shift
    "$@" || code=$?
    echo "[check] ${label}: $((SECONDS - step_start)) s, exit code ${code}" >&2
    [ "$code" -eq 0 ] || rc=1
}
# The formatter check, the linter and mypy run beside the tests (their output follows the tests'): they need
# ~10 s of CPU, which the tests' waits on real time leave free, instead of ~12 s of wall before the tests.
lint_out="$(mktemp)"
trap 'rm -f "$lint_out"' EXIT
(
    rc=0
    step "ruff format --check" .venv/bin/ruff format --check --quiet .
    step "ruff check" .venv/bin/ruff check --quiet .
    step "mypy --strict" .venv/bin/mypy
    exit "$rc"
) >"$lint_out" 2>&1 &
lint_pid=$!
export TJOBS_TEST_NO_SERVICES=1
# pytest keeps the assertion-rewritten test modules, and Python the compiled tjobs modules, only where
# bytecode may be written: with PYTHONDONTWRITEBYTECODE (set in this machine's shells) every worker
# rewrote and compiled everything again on every run (a collection took 10.2 s instead of 4.4 s).
unset PYTHONDONTWRITEBYTECODE
folders=(tests/unit tests/contract tests/api tests/fuzz tests/security)
for arg in "$@"; do [ -e "${arg%%::*}" ] && folders=() && break; done
markers="not (mariadb or etcd or redis or rabbitmq or nats or browser or slow or timing or chaos)"
# A clean clone has no bytecode yet: each xdist worker collects every module, so all four would rewrite the test
# modules and compile tjobs at once, each (a collection: ~13 s of CPU cold, ~5 s with the bytecode kept). One
# collection first, beside mypy, writes it for them; later runs find it and skip this.
if [ "${#folders[@]}" -gt 0 ] && ! compgen -G "tests/__pycache__/conftest.*-pytest-*.pyc" >/dev/null; then
    step "bytecode (first run)" .venv/bin/pytest -p no:cacheprovider -q --collect-only -m "$markers" "${folders[@]}" \
        >/dev/null
fi
# --dist loadfile: a module's tests run on one worker, so its module-scoped fixtures (the bad-input table's
# nodes, the SSRF listeners, an API module's own node where it needs one; the other API modules share one
# node per storage per worker: tests/api/conftest.py) start once (the modules with the most tests go first). With the default `load` a module could be dealt to several workers, each starting its nodes (and
# one going from a [memory] test to a [sqlite] one and back restarted them): five API modules alone took
# 57.7 s of CPU, 39.2 s by module; in a whole run (2026-12-03) the bad-input table ran on 4 workers and the
# workers' test time ranged 86-120 s, against 110-112 s each by module.
step "tests without services" .venv/bin/pytest -p no:cacheprovider -q -n "${TJOBS_CHECK_WORKERS:-4}" --dist loadfile \
    -m "$markers" --timeout=300 "${folders[@]}" "$@"
wait "$lint_pid" || rc=1
cat "$lint_out" >&2
echo "[check] finished in $((SECONDS - start)) s with exit code ${rc}" >&2
exit "$rc"
