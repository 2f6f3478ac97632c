#!/usr/bin/env bash
# Start the course's JupyterHub on this machine (`sudo make hub-up`): the hub, its proxy and formgrader,
# with students' servers as Slurm jobs (or local processes where there is no Slurm). Its settings are the
# COURSE_HUB_* values of slurm/site.sh or the environment (docs/jupyterhub.md).
#
# Root only, once per machine: it creates the course's Unix groups (nbgrader-<course>: students,
# formgrade-<course>: instructors) and the grader account formgrader runs as, makes the exchange folder,
# hands grading/ to the grader and closes solutions/ and the hidden checks to everyone else.
# Running it again while the hub is up does nothing. `slurm/hub/stop.sh` (make hub-down) stops it.
set -euo pipefail

HUB_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
COURSE_DIR="$(cd "$HUB_DIR/../.." && pwd)"
VENV_BIN="$COURSE_DIR/.venv/bin"
STARTUP_TIMEOUT_S="${COURSE_HUB_STARTUP_TIMEOUT:-120}"
# Parts of the course only instructors may read: what the grading sandbox also hides from the code it
# grades (course_lib/grading/autograder/class_run.py). The hidden checks stay readable: graded code runs them, as
# its own unprivileged uid, inside its sandbox (docs/jupyterhub.md says what that means for a class).
INSTRUCTOR_ONLY=(solutions .git autograde_tests/fixtures)

# shellcheck source=slurm/hub/common.sh
source "$HUB_DIR/common.sh"

require_prerequisites() {
    [[ -x "$VENV_BIN/python" ]] ||
        die "no course environment at $COURSE_DIR/.venv: run 'make setup' (or docs/hpc-admins.md's install) first"
    "$VENV_BIN/python" -c 'import jupyterhub, batchspawner' 2>/dev/null ||
        die "the hub's packages are missing: $VENV_BIN/python -m pip install -e '${COURSE_DIR}[hub]'"
    command -v configurable-http-proxy >/dev/null 2>&1 ||
        die "configurable-http-proxy not found; install it with: apt-get install nodejs npm &&" \
            "npm install -g configurable-http-proxy@5.1.0"
}

ensure_group() {
    getent group "$1" >/dev/null || groupadd "$1"
}

# The account formgrader runs as (nbgrader's grader-<course>), in the instructors' group.
ensure_grader() {
    if ! id -u "$GRADER" >/dev/null 2>&1; then
        useradd --system --user-group --create-home --shell /bin/bash "$GRADER"
    fi
    usermod -a -G "$INSTRUCTORS_GROUP" "$GRADER"
}

# nbgrader's exchange: everyone writes (nbgrader's documented ugo+rw), and the sticky bit keeps a student
# from renaming or removing what others put there (the course's folder in it included).
ensure_exchange() {
    mkdir -p "$HUB_EXCHANGE"
    chmod 1777 "$HUB_EXCHANGE"
}

# grading/ (submissions, gradebook, feedback) belongs to the grader; the solutions, the repository's
# history and the wrong-answer fixtures are the instructors' group's. Students keep reading what the
# course's Python needs (course_lib, .venv, notebooks/).
restrict_instructor_files() {
    mkdir -p "$COURSE_DIR/grading"
    chown -R "$GRADER:$INSTRUCTORS_GROUP" "$COURSE_DIR/grading"
    chmod 700 "$COURSE_DIR/grading"
    local part
    for part in "${INSTRUCTOR_ONLY[@]}"; do
        [[ -e "$COURSE_DIR/$part" ]] || continue
        chgrp -R "$INSTRUCTORS_GROUP" "$COURSE_DIR/$part"
        chmod -R g+rX,o-rwx "$COURSE_DIR/$part"
    done
}

# A student's server runs the course's Python as the student: make sure an ordinary account can (runuser
# starts it as the hub does, checking every folder on the way).
check_students_reach_the_course() {
    local error
    if ! error="$(cd / && runuser -u nobody -- "$VENV_BIN/python" -c \
        'import course_lib, jupyterhub.singleuser, nbgrader' 2>&1)"; then
        die "other users cannot run this course's Python ($VENV_BIN/python), so no student's server could" \
            "start: ${error##*$'\n'}. Install the course, and the Python its environment was made from," \
            "where every user can read them (e.g. /opt/distributed-course, docs/hpc-admins.md)"
    fi
}

prepare_state() {
    mkdir -p "$HUB_STATE_DIR"
    chmod 700 "$HUB_STATE_DIR"
    if [[ ! -s "$HUB_STATE_DIR/admin-token" ]]; then
        (umask 077 && "$VENV_BIN/python" -c 'import secrets; print(secrets.token_hex(32))' \
            >"$HUB_STATE_DIR/admin-token")
    fi
}

# Stop whatever a failed start left (a proxy, a hub that never answered), then say why.
give_up() {
    "$HUB_DIR/stop.sh" --quiet --keep-servers || true
    die "$@"
}

start_hub() {
    local deadline=$((SECONDS + STARTUP_TIMEOUT_S)) launcher
    # `python -m`, not the jupyterhub script: the environment's own Python, wherever the course was copied.
    (cd "$HUB_STATE_DIR" && exec setsid "$VENV_BIN/python" -m jupyterhub -f "$HUB_DIR/jupyterhub_config.py" \
        >>"$HUB_STATE_DIR/hub.log" 2>&1 </dev/null) &
    launcher=$!
    until hub_answers; do
        kill -0 "$launcher" 2>/dev/null ||
            give_up "the hub exited while starting; the end of $HUB_STATE_DIR/hub.log:" \
                "$(printf '\n')$(tail -n 25 "$HUB_STATE_DIR/hub.log")"
        ((SECONDS < deadline)) ||
            give_up "the hub did not answer within ${STARTUP_TIMEOUT_S}s; see $HUB_STATE_DIR/hub.log"
        sleep 0.5
    done
}

main() {
    require_root
    require_prerequisites
    read_settings
    if hub_answers; then
        echo "course hub already running at $(hub_url) (state in $HUB_STATE_DIR)"
        return 0
    fi
    # Something half-started or left from a crash: clear it so the start below is clean.
    if [[ -d "$HUB_STATE_DIR" ]]; then
        "$HUB_DIR/stop.sh" --quiet --keep-servers
    fi
    check_students_reach_the_course
    ensure_group "$STUDENTS_GROUP"
    ensure_group "$INSTRUCTORS_GROUP"
    ensure_grader
    ensure_exchange
    restrict_instructor_files
    prepare_state
    start_hub
    echo "course hub running at $(hub_url) ($(grep -o 'servers run as .*' "$HUB_STATE_DIR/hub.log" | tail -n 1))"
    echo "students: members of $STUDENTS_GROUP; instructors: $INSTRUCTORS_GROUP (formgrader at"
    echo "  $(hub_url)services/$COURSE_ID/formgrader); state and log in $HUB_STATE_DIR"
}

main "$@"
