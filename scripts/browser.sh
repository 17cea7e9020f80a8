#!/usr/bin/env bash
# The browser the console's browser tests drive (tests/console/): Debian's `chromium`, headless, through
# Playwright (Python). Playwright's own browser builds are never downloaded.
#
#   scripts/browser.sh          install chromium with apt-get where /usr/bin/chromium is missing
#
# Called by scripts/test.sh, so CI has it. Without chromium the browser tests FAIL (never skip).
#   TJOBS_BROWSER_NO_INSTALL=1  never call apt-get (chromium must already be there)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CHROMIUM=/usr/bin/chromium

log() { printf '[browser] %s\n' "$*" >&2; }
die() { printf '[browser] error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
    else die "need root (or passwordless sudo) to run: $*"
    fi
}

if [ -x "$CHROMIUM" ]; then
    exit 0
fi
if [ "${TJOBS_BROWSER_NO_INSTALL:-0}" = 1 ]; then
    die "$CHROMIUM is missing and TJOBS_BROWSER_NO_INSTALL=1"
fi
command -v apt-get >/dev/null 2>&1 || die "$CHROMIUM is missing and this is not a Debian system: install chromium"

log "installing Debian package chromium"
start=$SECONDS
mkdir -p "$ROOT/.services"
apt_log="$ROOT/.services/apt-chromium.log"
apt=(env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300 -q)
if ! { as_root "${apt[@]}" update && as_root "${apt[@]}" install -y --no-install-recommends chromium fonts-dejavu-core; } \
    >"$apt_log" 2>&1; then
    tail -n 30 "$apt_log" >&2
    die "apt-get failed to install chromium; full log: $apt_log"
fi
[ -x "$CHROMIUM" ] || die "chromium installed but $CHROMIUM is missing"
log "chromium installed in $((SECONDS - start)) s"
