#!/usr/bin/env bash
# `make soak`: the nemesis soak (python -m tests.chaos.soak; docs/testing.md, "The nemesis soak"): 3 node
# processes on 2 MariaDB servers, etcd and Redis of a state directory of its own, firing steadily while
# faults cycle through them, judged at the end. Extra arguments go to the soak:
#
#   scripts/soak.sh                                    # 2 h at 1,000 fires/s
#   scripts/soak.sh --minutes 10 --rate 200            # a short one
#   scripts/soak.sh --outcome-flush grouped            # with outcome_flush 500 ms / 2,500
#
# TJOBS_SOAK_MINUTES, TJOBS_SOAK_RATE, TJOBS_SOAK_OUTCOME_FLUSH  defaults of --minutes, --rate, --outcome-flush
# TJOBS_SOAK_OUT   where each run's directory (soak.json, soak.txt, node logs) goes (default .services/soak)
# TJOBS_SOAK_DIR, TJOBS_SOAK_MYSQL_PORTS, TJOBS_SOAK_ETCD_PORT, TJOBS_SOAK_REDIS_PORT  the rig's state
#   directory (default .services/soak-rig) and ports (default: a block of five in 18000-19999 picked by the
#   checkout's path, apart from the ports testkit/ports.py hands out and the test rigs' 20000-29999).
#   The run stops the rig's servers at the end if it started them.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
bash scripts/venv.sh
.venv/bin/python -m compileall -q -j 0 tjobs sharding >/dev/null
unset PYTHONDONTWRITEBYTECODE
block=$((18000 + $(printf '%s' "$ROOT" | cksum | cut -d' ' -f1) % 400 * 5))
export TJOBS_SOAK_DIR="${TJOBS_SOAK_DIR:-$ROOT/.services/soak-rig}"
export TJOBS_SOAK_MYSQL_PORTS="${TJOBS_SOAK_MYSQL_PORTS:-$block $((block + 1))}"
export TJOBS_SOAK_ETCD_PORT="${TJOBS_SOAK_ETCD_PORT:-$((block + 2))}"  # peer port +1
export TJOBS_SOAK_REDIS_PORT="${TJOBS_SOAK_REDIS_PORT:-$((block + 4))}"
exec .venv/bin/python -m tests.chaos.soak "$@"
