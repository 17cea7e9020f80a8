#!/usr/bin/env bash
# `make bench`: run `tjobs bench <name>` with each benchmark's own defaults.
#
#   scripts/bench.sh                 # every benchmark registered under `tjobs bench`, one after another
#   scripts/bench.sh fire --help     # one benchmark, arguments passed through
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/venv.sh

if [ "$#" -gt 0 ]; then
    exec .venv/bin/tjobs bench "$@"
fi

mapfile -t names < <(.venv/bin/python -c '
import typer.main
from tjobs.cli.main import app
try:
    bench = typer.main.get_command(app).commands["bench"]
except (RuntimeError, KeyError):  # no benchmark registered yet
    raise SystemExit(0)
for name in getattr(bench, "commands", {}):
    print(name)
')
if [ "${#names[@]}" -eq 0 ]; then
    echo "[bench] no benchmarks are registered under 'tjobs bench' yet" >&2
    exit 1
fi
for name in "${names[@]}"; do
    echo "[bench] tjobs bench $name" >&2
    .venv/bin/tjobs bench "$name"
done
