#!/usr/bin/env bash
# Stop the local single-node Slurm started by start.sh: cancel its jobs, stop slurmd, slurmctld and
# munged, and leave no job step behind. Safe to run when nothing is running.
#
#   sudo slurm/local/stop.sh [--quiet] [--purge]     # --purge also deletes $COURSE_SLURM_DIR
set -euo pipefail

# shellcheck source=slurm/local/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

QUIET=0
PURGE=0
for argument in "$@"; do
    case "$argument" in
        --quiet) QUIET=1 ;;
        --purge) PURGE=1 ;;
        *) die "unknown option '$argument' (use --quiet and/or --purge)" ;;
    esac
done

say() {
    ((QUIET)) || echo "$@"
}

# Send TERM, wait up to $2 seconds, then KILL.
stop_pid() {
    local pid="$1" grace_s="$2" waited=0
    kill -TERM "$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null && ((waited < grace_s * 10)); do
        sleep 0.1
        waited=$((waited + 1))
    done
    kill -KILL "$pid" 2>/dev/null || true
}

stop_daemon() {
    local name="$1" pid_file="$2" pid
    if pid="$(live_pid "$pid_file")"; then
        stop_pid "$pid" 10
        say "stopped $name (pid $pid)"
    fi
    rm -f "$pid_file"
}

cancel_jobs() {
    [[ -f "$COURSE_SLURM_CONF" ]] || return 0
    live_pid "$COURSE_SLURM_DIR/run/slurmctld.pid" >/dev/null || return 0
    local jobs deadline=$((SECONDS + 20))
    jobs="$(squeue --noheader --format=%i 2>/dev/null || true)"
    [[ -n "$jobs" ]] || return 0
    # shellcheck disable=SC2086  # one job id per word
    scancel $jobs 2>/dev/null || true
    while [[ -n "$(squeue --noheader --format=%i 2>/dev/null || true)" ]] && ((SECONDS < deadline)); do
        sleep 0.5
    done
    say "cancelled jobs: $(echo "$jobs" | tr '\n' ' ')"
}

# Every process below $1 (children first found, then theirs).
descendants() {
    local children child
    children="$(ps -o pid= --ppid "$1" 2>/dev/null || true)"
    for child in $children; do
        echo "$child"
        descendants "$child"
    done
}

holds_our_files() {
    local fd
    for fd in "$1"/fd/*; do
        [[ "$(readlink "$fd" 2>/dev/null)" == "$COURSE_SLURM_DIR/"* ]] && return 0
    done
    return 1
}

# Job steps (slurmstepd) outlive slurmd; ours are the ones holding files in our spool folder.
stop_orphan_steps() {
    local proc pid
    for proc in /proc/[0-9]*; do
        pid="${proc#/proc/}"
        [[ "$(cat "$proc/comm" 2>/dev/null)" == slurmstepd ]] || continue
        holds_our_files "$proc" || continue
        # shellcheck disable=SC2046  # one pid per word
        kill -KILL $(descendants "$pid") 2>/dev/null || true
        stop_pid "$pid" 3
        say "stopped leftover job step (pid $pid)"
    done
}

unlink_system_config() {
    if [[ -L "$SYSTEM_SLURM_CONF" && "$(readlink "$SYSTEM_SLURM_CONF")" == "$COURSE_SLURM_CONF" ]]; then
        rm -f "$SYSTEM_SLURM_CONF"
    fi
}

main() {
    require_root
    cancel_jobs
    stop_daemon slurmd "$COURSE_SLURM_DIR/run/slurmd.pid"
    stop_daemon slurmctld "$COURSE_SLURM_DIR/run/slurmctld.pid"
    stop_orphan_steps
    stop_daemon munged "$COURSE_SLURM_DIR/munge/munged.pid"
    unlink_system_config
    if ((PURGE)); then
        rm -rf "$COURSE_SLURM_DIR"
        say "removed $COURSE_SLURM_DIR"
    fi
    say "local Slurm stopped"
}

main
