#!/usr/bin/env bash
# detach.sh PIDFILE DIR CMD...: run CMD as a daemon: its own session (setsid -f), working in DIR, stdin
# from /dev/null, its PID (kept across exec) written to PIDFILE, and no file descriptor above 2
# inherited: a server must not keep a lock its starter held (`flock /tmp/x.lock make test` started
# etcd, and etcd held the lock until it was stopped, blocking every later `flock` on it).
# stdout and stderr are the caller's: redirect them to the server's log.
set -euo pipefail
pidfile="$1" dir="$2"
shift 2
# shellcheck disable=SC2016  # expanded by the daemon's own shell
exec setsid -f bash -c '
    for fd in /proc/$$/fd/*; do
        fd="${fd##*/}"
        if [ "$fd" -gt 2 ]; then eval "exec $fd>&-"; fi
    done
    cd "$1" && echo $$ >"$0" && shift && exec "$@"' "$pidfile" "$dir" "$@" </dev/null
