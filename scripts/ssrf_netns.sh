#!/usr/bin/env bash
# The SSRF matrix (tests/security/test_ssrf_matrix.py) in a fresh loopback-only network namespace (issue 11's
# first figure). Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN) for `unshare -n` and `ip addr add`.
#
#   scripts/ssrf_netns.sh                 # every case x {registration, send, redirect}, every address x rebinding
#   scripts/ssrf_netns.sh -k 'lean'       # extra arguments go to pytest
#
# Inside the namespace only `lo` exists: the private and metadata addresses the matrix names (10.0.0.1,
# 169.254.169.254, 192.168.1.20, 172.16.0.1, 100.64.0.1, fd00::1, fe80::1, ... as listed by the test module's
# addresses_for_the_namespace()) are bound to it; 127.0.0.0/8 and ::1 are there already. The test module then
# listens on every one of them on its port, plus wildcard listeners on that port and on 80 and 443 (any other
# local address, or a URL whose port got lost), and counts every connection accepted. Anything else (the
# "public" address its fake DNS answers) has no route: a connection to it fails at once, nothing leaves.
#
# The matrix runs on both HTTP transports (aiohttp, lean; registration, judged before any transport, once, as
# transport "none") and on both event loops (asyncio, and uvloop, which `tjobs serve` runs on and whose connects
# bypass the socket.connect audit hook the CI run relies on).
# Prints the cases run and the connections counted per address; exits non-zero if pytest failed, if any
# connection reached an address other than the redirector (the one admitted target), or (without pytest
# arguments) if a loop or a transport did not run.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

if [ "${TJOBS_SSRF_IN_NETNS:-}" != 1 ]; then
    exec unshare --net -- env TJOBS_SSRF_IN_NETNS=1 bash "$0" "$@"
fi

ip link set lo up
addresses=$(.venv/bin/python -c '
from tests.security.test_ssrf_matrix import addresses_for_the_namespace
print(" ".join(addresses_for_the_namespace()))')
for address in $addresses; do
    case "$address" in
    *:*) ip -6 addr add "$address/128" dev lo nodad ;;
    *) ip addr add "$address/32" dev lo ;;
    esac
done
if ip -o link | grep -qv ': lo:'; then
    echo "[ssrf-netns] an interface other than lo exists in the namespace" >&2
    exit 2
fi
echo "[ssrf-netns] lo: $(ip -o addr show dev lo | awk '{print $4}' | tr '\n' ' ')" >&2

report="$(mktemp)"
trap 'rm -f "$report"' EXIT
rc=0
TJOBS_TEST_SSRF_NETNS=1 TJOBS_TEST_SSRF_REPORT="$report" \
    .venv/bin/pytest -p no:cacheprovider -q tests/security/test_ssrf_matrix.py "$@" || rc=$?

.venv/bin/python - "$report" "$rc" "$#" <<'EOF'
import json
import sys

path, pytest_rc, selected = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]) > 0
try:
    with open(path) as f:
        report = json.load(f)
except (OSError, ValueError):
    print("[ssrf-netns] no report: the listeners fixture never finished", file=sys.stderr)
    sys.exit(pytest_rc or 1)
runs = report["runs"]
print(f"[ssrf-netns] {report['cases']} URL cases, port {report['port']}")
print(f"[ssrf-netns] listening on {len(report['bound'])} addresses: {' '.join(report['bound'])}")
print(f"[ssrf-netns] wildcard listeners: {', '.join(report['wildcards'])}")
for run in runs:
    print(f"[ssrf-netns]   {run['scenario']:<12} {run['transport']:<8} {run['loop']:<8} {run['cases']} cases")
total = sum(run["cases"] for run in runs)
print(f"[ssrf-netns] {total} scenario runs")
admitted = f"{report['redirector']} {report['port']}"
refused = {key: n for key, n in report["accepted"].items() if key != admitted}
print(f"[ssrf-netns] connections accepted: {report['accepted'] or 'none'}")
print(f"[ssrf-netns] connections to a refused address: {sum(refused.values())} {refused or ''}")
loops = {run["loop"] for run in runs}
transports = {run["transport"] for run in runs if run["transport"] != "none"}  # registration has none
failed = pytest_rc != 0 or bool(refused)
if not selected and (not {"asyncio", "uvloop"} <= loops or len(transports) < 2):
    print(f"[ssrf-netns] loops {sorted(loops)}, transports {sorted(transports)}: not every one ran", file=sys.stderr)
    failed = True
sys.exit(1 if failed else 0)
EOF
