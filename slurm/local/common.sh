# shellcheck shell=bash
# Paths and checks shared by start.sh and stop.sh of the local single-node Slurm.
# Sourced, not run: it only defines variables and functions.

# Everything the local Slurm writes lives here: config, munge key and socket, state, logs.
COURSE_SLURM_DIR="${COURSE_SLURM_DIR:-${TMPDIR:-/tmp}/course-slurm}"
COURSE_SLURM_CONF="$COURSE_SLURM_DIR/etc/slurm.conf"
# Debian's clients read this file when SLURM_CONF is unset; start.sh links it to ours only when absent.
# shellcheck disable=SC2034  # used by start.sh and stop.sh
SYSTEM_SLURM_CONF="${COURSE_SYSTEM_SLURM_CONF:-/etc/slurm/slurm.conf}"
export SLURM_CONF="$COURSE_SLURM_CONF"

REQUIRED_COMMANDS=(munged slurmctld slurmd sbatch srun scontrol squeue scancel sinfo)

die() {
    echo "error: $*" >&2
    exit 1
}

require_root() {
    if [[ "$(id -u)" -ne 0 ]]; then
        die "the local Slurm starts daemons (munged, slurmctld, slurmd) that must run as root; run: sudo $0"
    fi
}

require_packages() {
    local missing=()
    local command
    for command in "${REQUIRED_COMMANDS[@]}"; do
        command -v "$command" >/dev/null 2>&1 || missing+=("$command")
    done
    if ((${#missing[@]} > 0)); then
        die "missing ${missing[*]}; install the distribution's packages first: sudo apt-get install slurm-wlm munge"
    fi
}

# The pid recorded in $1 if that process is alive, else nothing.
live_pid() {
    local pid
    [[ -s "$1" ]] || return 1
    pid="$(<"$1")"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}
