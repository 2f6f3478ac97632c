# shellcheck shell=bash
# Shared by start.sh and stop.sh of the course hub. Sourced, not run: it only defines functions.
# Expects HUB_DIR, COURSE_DIR and VENV_BIN to be set.

die() {
    echo "error: $*" >&2
    exit 1
}

require_root() {
    if [[ "$(id -u)" -ne 0 ]]; then
        die "the course hub logs students in with their Unix passwords and starts servers as them, so it" \
            "runs as root; run: sudo $0"
    fi
}

# What read_settings sets, from slurm/site.sh and the environment (hub_settings.py), or it stops with a
# message naming the setting that is wrong.
# shellcheck disable=SC2034  # used by start.sh and stop.sh
HUB_STATE_DIR="" HUB_EXCHANGE="" HUB_IP="" HUB_PORT="" HUB_SCHEME=""
# shellcheck disable=SC2034
COURSE_ID="" STUDENTS_GROUP="" INSTRUCTORS_GROUP="" GRADER=""
read_settings() {
    local assignments
    # shellcheck disable=SC2153  # COURSE_DIR is set by the script that sources this file
    assignments="$("$VENV_BIN/python" "$HUB_DIR/hub_settings.py" "$COURSE_DIR")" || exit 1
    eval "$assignments"
}

hub_url() {
    local host="$HUB_IP"
    [[ -z "$host" || "$host" == 0.0.0.0 ]] && host=127.0.0.1
    echo "$HUB_SCHEME://$host:$HUB_PORT/"
}

# Whether the hub answers its health check through the proxy (within 5 s).
hub_answers() {
    "$VENV_BIN/python" - "$(hub_url)hub/health" <<'PYTHON' >/dev/null 2>&1
import ssl
import sys
import urllib.request

unverified = ssl._create_unverified_context()  # a probe of our own hub, whatever its certificate
with urllib.request.urlopen(sys.argv[1], timeout=5, context=unverified) as answer:
    sys.exit(0 if answer.status == 200 else 1)
PYTHON
}

# The pid recorded in $1 if that process is alive, else nothing.
live_pid() {
    local pid
    [[ -s "$1" ]] || return 1
    pid="$(<"$1")"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}
