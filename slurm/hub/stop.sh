#!/usr/bin/env bash
# Stop the course hub started by start.sh (`sudo make hub-down`): every student's server first (their
# Slurm jobs cancelled, their files kept), then the hub, which stops its proxy and formgrader.
#
#   sudo slurm/hub/stop.sh                  # end of class: servers, hub, proxy, formgrader
#   sudo slurm/hub/stop.sh --keep-servers   # a restart mid-class: students' servers keep running, and
#                                           # the hub started again (make hub-up) finds them
set -euo pipefail

HUB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
COURSE_DIR="$(cd "$HUB_DIR/../.." && pwd)"
VENV_BIN="$COURSE_DIR/.venv/bin"
STOP_GRACE_S=20

# shellcheck source=slurm/hub/common.sh
source "$HUB_DIR/common.sh"

KEEP_SERVERS=0
QUIET=0
for argument in "$@"; do
    case "$argument" in
        --keep-servers) KEEP_SERVERS=1 ;;
        --quiet) QUIET=1 ;;
        *) die "unknown option '$argument' (use --keep-servers and/or --quiet)" ;;
    esac
done

say() {
    ((QUIET)) || echo "$@"
}

# Ask the hub (as its course-hub-admin service) to stop every running server and wait until it has.
stop_servers() {
    "$VENV_BIN/python" - "$(hub_url)hub/api" "$HUB_STATE_DIR/admin-token" <<'PYTHON'
import json
import ssl
import sys
import time
import urllib.request

api, token = sys.argv[1], open(sys.argv[2]).read().strip()
unverified = ssl._create_unverified_context()


def call(method, path):
    request = urllib.request.Request(api + path, method=method, headers={"Authorization": f"token {token}"})
    with urllib.request.urlopen(request, timeout=30, context=unverified) as answer:
        body = answer.read()
        return json.loads(body) if body else None


def running():
    return [user["name"] for user in call("GET", "/users?state=active") if user["servers"]]


users = running()
for name in users:
    call("DELETE", f"/users/{name}/server")
deadline = time.monotonic() + 120
while (left := running()) and time.monotonic() < deadline:
    time.sleep(1)
print(f"stopped the servers of: {', '.join(users) or 'nobody'}" + (f"; still stopping: {left}" if left else ""))
PYTHON
}

# TERM, up to STOP_GRACE_S seconds to finish, then KILL.
stop_pid() {
    local pid="$1" waited=0
    kill -TERM "$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null && ((waited < STOP_GRACE_S * 10)); do
        sleep 0.1
        waited=$((waited + 1))
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL "$pid" 2>/dev/null || true
        say "pid $pid did not stop within ${STOP_GRACE_S}s: killed it"
    fi
}

main() {
    require_root
    read_settings
    local pid proxy_pid
    if pid="$(live_pid "$HUB_STATE_DIR/hub.pid")"; then
        if ((KEEP_SERVERS)); then
            say "keeping students' servers running"
        elif hub_answers; then
            say "$(stop_servers)"
        else
            say "the hub does not answer: students' servers (if any) were left running"
        fi
        stop_pid "$pid"
        say "course hub stopped"
    else
        say "course hub not running (state in $HUB_STATE_DIR)"
    fi
    # The hub stops the proxy it started; one left by a hub that died or was killed is stopped here.
    if proxy_pid="$(live_pid "$HUB_STATE_DIR/proxy.pid")"; then
        stop_pid "$proxy_pid"
        say "stopped the proxy a hub had left (pid $proxy_pid)"
    fi
    rm -f "$HUB_STATE_DIR/hub.pid" "$HUB_STATE_DIR/proxy.pid"
}

main "$@"
