#!/usr/bin/env bash
# `make dev`: set up .venv if needed, then run the embedded node (SQLite shards, in-process coordination)
# with the demo app, the built-in echo receiver and demo tasks. Extra arguments go to `tjobs dev`
# (e.g. scripts/dev.sh --port 9090).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/venv.sh
exec .venv/bin/tjobs dev "$@"
