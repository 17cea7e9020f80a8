#!/usr/bin/env bash
# Make sure .venv exists and holds an editable install of tjobs[dev].
#
# Idempotent and cheap when nothing changed: the install is skipped while the hash of pyproject.toml and constraints.txt
# (and the interpreter version) matches the stamp written after the last successful install.
#
#   scripts/venv.sh            # create/refresh .venv, with the versions pinned in constraints.txt
#   scripts/venv.sh --upgrade  # install the newest versions pyproject.toml allows and rewrite constraints.txt
#   PYTHON=python3.12 scripts/venv.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VENV="$ROOT/.venv"
CONSTRAINTS="$ROOT/constraints.txt"
upgrade=0
case "${1:-}" in
    --upgrade) upgrade=1 ;;
    '') ;;
    *) printf '[venv] error: unknown argument %s (only --upgrade)\n' "$1" >&2; exit 2 ;;
esac
STAMP="$VENV/.tjobs-install-stamp"

log() { printf '[venv] %s\n' "$*" >&2; }
die() { printf '[venv] error: %s\n' "$*" >&2; exit 1; }

as_root() {
    if [ "$(id -u)" = 0 ]; then "$@"
    elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"
    else return 1
    fi
}

pick_python() {
    local candidate
    for candidate in "${PYTHON:-}" python3 python3.13 python3.12 python3.11; do
        [ -n "$candidate" ] || continue
        command -v "$candidate" >/dev/null 2>&1 || continue
        if "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

create_venv() {
    local py="$1"
    log "creating .venv with $("$py" --version 2>&1)"
    if "$py" -m venv "$VENV" 2>/tmp/tjobs-venv-err.$$; then
        rm -f /tmp/tjobs-venv-err.$$
        return 0
    fi
    # Debian/Ubuntu ship venv's ensurepip separately (python3-venv / python3.X-venv).
    rm -rf "$VENV"
    local pkg
    pkg="python$("$py" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv"
    if command -v apt-get >/dev/null 2>&1; then
        log "python -m venv failed; installing $pkg with apt-get"
        as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq \
            && as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$pkg" python3-venv \
            || { cat /tmp/tjobs-venv-err.$$ >&2; die "could not install $pkg (need root or sudo)"; }
        rm -f /tmp/tjobs-venv-err.$$
        "$py" -m venv "$VENV" || die "python -m venv still fails after installing $pkg"
    else
        cat /tmp/tjobs-venv-err.$$ >&2
        rm -f /tmp/tjobs-venv-err.$$
        die "'$py -m venv' failed; install your distribution's venv package for $py"
    fi
}

PY="$(pick_python)" || die "Python >= 3.11 not found (set PYTHON=/path/to/python3.11)"

if [ ! -x "$VENV/bin/python" ]; then
    create_venv "$PY"
fi

want="$(cat pyproject.toml "$CONSTRAINTS" | sha256sum | cut -d' ' -f1) $("$VENV/bin/python" -c 'import sys; print(sys.version.split()[0])')"

if [ "$upgrade" = 0 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/tjobs" ]; then
    exit 0
fi

# Several shells (make dev + make test) may race here: serialise the install.
exec 9>"$VENV/.install.lock"
flock 9
if [ "$upgrade" = 0 ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && [ -x "$VENV/bin/tjobs" ]; then
    exit 0
fi

start=$SECONDS
pins=(-c "$CONSTRAINTS")
if [ "$upgrade" = 1 ]; then
    log "installing tjobs[dev] into .venv with the newest versions pyproject.toml allows"
    pins=(--upgrade --upgrade-strategy eager)
else
    log "installing tjobs[dev] into .venv (editable; versions from constraints.txt; the first run takes a minute)"
fi
# Build-backend chatter (deprecation notices) goes to a log; it is shown only if the install fails.
if ! "$VENV/bin/python" -m pip install --disable-pip-version-check --quiet "${pins[@]}" -e '.[dev]' \
    >"$VENV/pip-install.log" 2>&1; then
    tail -n 40 "$VENV/pip-install.log" >&2
    die "pip install -e '.[dev]' failed; full log: $VENV/pip-install.log"
fi
if [ "$upgrade" = 1 ]; then
    { sed -n '/^#/p' "$CONSTRAINTS"
      "$VENV/bin/python" -m pip freeze --disable-pip-version-check --exclude-editable | grep -v '^-e '
    } >"$CONSTRAINTS.new"
    mv "$CONSTRAINTS.new" "$CONSTRAINTS"
    log "constraints.txt rewritten: run make test before committing it"
    want="$(cat pyproject.toml "$CONSTRAINTS" | sha256sum | cut -d' ' -f1) $("$VENV/bin/python" -c 'import sys; print(sys.version.split()[0])')"
fi
echo "$want" >"$STAMP"
log "installed in $((SECONDS - start)) s"
