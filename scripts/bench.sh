#!/usr/bin/env bash
# `make bench`: run benchmarks from the repository root (`python -m benchmarks`).
#
#   scripts/bench.sh                       # list the benchmarks
#   scripts/bench.sh fire --embedded       # one benchmark, arguments passed through
#   scripts/bench.sh api_isolation --help
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/venv.sh
exec .venv/bin/python -m benchmarks "$@"
