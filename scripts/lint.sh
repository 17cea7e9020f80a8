#!/usr/bin/env bash
# `make lint`: .venv, then the formatter check, the linter and mypy --strict. Every step runs; the
# script fails if any failed, so one run shows every complaint.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/venv.sh || exit 1
rc=0
echo "[lint] ruff format --check" >&2
.venv/bin/ruff format --check . || rc=1
echo "[lint] ruff check" >&2
.venv/bin/ruff check . || rc=1
echo "[lint] mypy --strict (packages from pyproject.toml: tjobs, sharding, benchmarks, testkit, tests)" >&2
.venv/bin/mypy || rc=1
[ "$rc" = 0 ] && echo "[lint] clean" >&2
exit "$rc"
